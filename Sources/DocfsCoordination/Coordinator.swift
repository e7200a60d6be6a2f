import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What a claim is for (the model's NSFileAccessIntent). Reads and metadata-only changes may
/// share an item; writing, deleting, moving and replacing hold it alone.
public enum ClaimIntent: Sendable, CustomStringConvertible {
    case read, metadata, write, delete, move, replace

    var isShared: Bool { self == .read || self == .metadata }

    public var description: String {
        switch self {
        case .read: "read"
        case .metadata: "metadata"
        case .write: "write"
        case .delete: "delete"
        case .move: "move"
        case .replace: "replace"
        }
    }
}

/// The one arbiter of access to items (C1). Every actor — FUSE operations, version restores,
/// the store watcher, later the indexer and thumbnailer — takes claims on the items it
/// touches for as long as the operation runs, through `withClaims`, so a claim is released
/// however the operation ends (a thrown error included) and is never held across a reply to
/// the kernel. Claims on several items (a move claims both ends and both folders) are taken in
/// item-id order, so two multi-item claimants cannot deadlock. Waiting is first come, first
/// served per item: a steady stream of readers cannot starve a writer. An uncontended claim
/// costs one lock round trip.
///
/// Lock order: `state` is a leaf lock; waiters sleep on their own semaphore, outside it.
public final class Coordinator: Sendable {
    private final class Waiter: Sendable {
        /// Waited on by its owner, signalled by the releaser (a semaphore at a stable address).
        let semaphore = ThreadSemaphore()
        let shared: Bool
        init(shared: Bool) {
            self.shared = shared
        }
    }

    private struct Item {
        var readers = 0
        var writer = false
        var queue: [Waiter] = []
        /// Those waiting for the item to have no claim at all (`waitWhileClaimed`).
        var unclaimedWaiters: [ThreadSemaphore] = []

        func admits(_ shared: Bool) -> Bool { shared ? !writer : !writer && readers == 0 }
    }

    private struct State {
        var items: [ItemID: Item] = [:]
        var granted = 0
        var waited = 0
    }

    private let state = Mutex(State())

    public init() {}

    /// Runs `body` holding `claims`; an item named twice is claimed once, with the stronger intent.
    public func withClaims<T>(_ claims: [(ItemID, ClaimIntent)], _ body: () throws(DocfsError) -> T) throws(DocfsError) -> T {
        if claims.count == 1 {  // most operations: nothing to merge or order
            let (item, intent) = claims[0]
            acquire(item, shared: intent.isShared)
            defer { release(item, shared: intent.isShared) }
            return try body()
        }
        var merged: [ItemID: Bool] = [:]
        for (item, intent) in claims { merged[item] = (merged[item] ?? true) && intent.isShared }
        let ordered = merged.sorted { $0.key < $1.key }
        for (item, shared) in ordered { acquire(item, shared: shared) }
        defer { for (item, shared) in ordered.reversed() { release(item, shared: shared) } }
        return try body()
    }

    /// How many claims were granted, and how many of them had to wait (for tests and status).
    public var statistics: (granted: Int, waited: Int) { state.withLock { ($0.granted, $0.waited) } }

    /// Items with a claim held or awaited right now (none when the daemon is idle).
    public var busyItems: Int { state.withLock { $0.items.count } }

    /// Whether `item` has a claim held or awaited right now.
    public func isClaimed(_ item: ItemID) -> Bool { state.withLock { $0.items[item] != nil } }

    /// Waits until `item` has no claim held or awaited, up to `seconds` (the caller may hold one
    /// itself); answers whether it had one when asked.
    public func waitWhileClaimed(_ item: ItemID, seconds: Double) -> Bool {
        let waiter = state.withLock { state -> ThreadSemaphore? in
            guard state.items[item] != nil else { return nil }
            let semaphore = ThreadSemaphore()
            state.items[item]!.unclaimedWaiters.append(semaphore)
            return semaphore
        }
        guard let waiter else { return false }
        waiter.wait(seconds: seconds)
        return true
    }

    private func acquire(_ item: ItemID, shared: Bool) {
        let waiter: Waiter? = state.withLock { state in
            state.granted += 1
            var entry = state.items[item] ?? Item()
            if entry.queue.isEmpty && entry.admits(shared) {
                if shared { entry.readers += 1 } else { entry.writer = true }
                state.items[item] = entry
                return nil
            }
            state.waited += 1
            let waiter = Waiter(shared: shared)
            entry.queue.append(waiter)
            state.items[item] = entry
            return waiter
        }
        waiter?.semaphore.wait()
    }

    private func release(_ item: ItemID, shared: Bool) {
        let (woken, unclaimed) = state.withLock { state -> ([Waiter], [ThreadSemaphore]) in
            guard var entry = state.items[item] else { return ([], []) }
            if shared { entry.readers -= 1 } else { entry.writer = false }
            // Hand the item to the waiters at the head of the queue that fit together.
            var woken: [Waiter] = []
            while let next = entry.queue.first, entry.admits(next.shared) {
                entry.queue.removeFirst()
                if next.shared { entry.readers += 1 } else { entry.writer = true }
                woken.append(next)
            }
            guard entry.readers == 0 && !entry.writer && entry.queue.isEmpty else {
                state.items[item] = entry
                return (woken, [])
            }
            state.items[item] = nil
            return (woken, entry.unclaimedWaiters)
        }
        for waiter in woken { waiter.semaphore.signal() }
        for waiter in unclaimed { waiter.signal() }
    }
}
