import DocfsChunks
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where a version puts its item: its folder and name, in a container's scope.
struct NamePlace: Hashable {
    var container: String, scope: String, parent: UInt64, name: String

    init(_ version: RemoteVersion) {
        (container, scope, parent, name) = (version.container, version.scope, version.parent, version.name)
    }
}

/// A remote held in memory (issue 22 §0): what the PostgreSQL remote keeps, with the same
/// answers, for fast tests of the sync engine without a kernel or a server. Several engines
/// (several "machines") share one instance.
///
/// Lock order: `state` is a leaf lock.
public final class InMemoryRemote: Remote {
    private struct State {
        var chunks: [ChunkDigest: [UInt8]] = [:]
        /// When each chunk was last put or looked for (a sweep spares the recent ones).
        var used: [ChunkDigest: Double] = [:]
        var storeKey: [UInt8]?
        /// When each change was committed (by sequence), and the highest one a prune removed.
        var committed: [UInt64: Double] = [:]
        var horizon: UInt64 = 0
        var log: [RemoteChange] = []
        /// Each item's current version, and the highest number it has given.
        var current: [UInt64: RemoteVersion] = [:]
        /// Which item holds each name (a current version not deleted), and each container's
        /// item, for the tree's checks.
        var names: [NamePlace: UInt64] = [:]
        var containers: [String: UInt64] = [:]
        var numbers: [UInt64: UInt64] = [:]
        var operations: [String: RemoteCommitOutcome] = [:]
        /// Each container's keys: the value (nil once removed) and the sequence of its last change.
        var values: [String: [String: (value: [UInt8]?, sequence: UInt64)]] = [:]
        /// Each registered store's space and name, by its registration key.
        var machines: [String: (space: UInt64, name: String)] = [:]
        var sequence: UInt64 = 0

        /// Makes `version` its item's current one, and keeps `names` with it.
        mutating func setCurrent(_ version: RemoteVersion) {
            if let old = current[version.item], !old.deleted, names[NamePlace(old)] == version.item { names[NamePlace(old)] = nil }
            current[version.item] = version
            if !version.deleted && version.kind != .container { names[NamePlace(version)] = version.item }
            if version.kind == .container { containers[version.container] = version.item }
        }

        /// What keeps `proposal` from being its item's current version (see `TreeProblem`).
        func treeProblem(of proposal: RemoteVersion) -> TreeProblem? {
            if proposal.deleted {
                switch proposal.kind {
                case .folder:
                    return current.values.contains { $0.parent == proposal.item && !$0.deleted } ? .folderNotEmpty : nil
                case .container:
                    let filled = current.values.contains { $0.container == proposal.container && $0.kind != .container && !$0.deleted }
                    return filled ? .folderNotEmpty : nil
                default:
                    return nil
                }
            }
            guard proposal.kind != .container else { return nil }
            if let holder = names[NamePlace(proposal)], holder != proposal.item { return .nameTaken }
            // A container whose item the remote has deleted holds nothing (the default container,
            // and one whose item has not gone up yet, have none).
            if let item = containers[proposal.container], let container = current[item], container.deleted {
                return .folderGone(item)
            }
            guard proposal.parent != 0 else { return nil }
            guard let folder = current[proposal.parent], !folder.deleted, folder.kind == .folder || folder.kind == .container else {
                return .folderGone(proposal.parent)
            }
            guard proposal.kind == .folder else { return nil }
            var above = proposal.parent, steps = 0
            while above != 0, steps < 10_000 {
                if above == proposal.item { return .cycle }
                above = current[above]?.parent ?? 0
                steps += 1
            }
            return nil
        }

        mutating func nextSequence() -> UInt64 {
            sequence += 1
            return sequence
        }
    }

    private let state = Mutex(State())
    /// Who hears of commits (leaf lock; watchers are called with no lock held).
    private let watchers = Mutex<[UInt64: @Sendable () -> Void]>([:])
    private let watcherNumbers = Atomic<UInt64>(0)
    /// Run once, before the next commit (tests: a user saving while the engine is between its
    /// read of an item and its commit).
    private let beforeNextCommit = Mutex<(@Sendable () -> Void)?>(nil)
    private let beforeNextFetch = Mutex<(digest: ChunkDigest, hook: @Sendable () -> Void)?>(nil)
    private let beforeEachFetch = Mutex<(@Sendable ([ChunkDigest]) -> Void)?>(nil)

    public init() {}

    /// Runs `hook` before each call that fetches chunks, with the chunks it asks for (nil:
    /// none); the call waits for it (tests: which chunks each call of a download asks for).
    public func beforeEachFetch(_ hook: (@Sendable ([ChunkDigest]) -> Void)?) {
        beforeEachFetch.withLock { $0 = hook }
    }

    public func fetchChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [[UInt8]] {
        beforeEachFetch.withLock { $0 }?(digests)
        var chunks: [[UInt8]] = []
        for digest in digests { chunks.append(try fetchOne(digest)) }
        return chunks
    }

    /// Runs `hook` once, before the next fetch of the chunk `digest`.
    public func beforeNextFetch(of digest: ChunkDigest, _ hook: @escaping @Sendable () -> Void) {
        beforeNextFetch.withLock { $0 = (digest, hook) }
    }

    /// Runs `hook` once, before the next commit is made.
    public func beforeNextCommit(_ hook: @escaping @Sendable () -> Void) {
        beforeNextCommit.withLock { $0 = hook }
    }

    public func changes(after anchor: RemoteAnchor, limit: Int) throws(RemoteError) -> (changes: [RemoteChange], next: RemoteAnchor) {
        guard limit > 0 else { throw RemoteError(.refused, "a page of changes holds at least one") }
        return try state.withLock { (state: inout State) throws(RemoteError) in
            if anchor.sequence < state.horizon {
                throw RemoteError(.pastRetention, "the remote's log no longer holds the changes after \(anchor.sequence): listing every item")
            }
            // The log is in sequence order: the first change past the anchor, by bisection.
            var low = 0, high = state.log.count
            while low < high {
                let middle = (low + high) / 2
                if state.log[middle].sequence <= anchor.sequence { low = middle + 1 } else { high = middle }
            }
            let page = Array(state.log[low..<min(state.log.count, low + limit)])
            return (page, page.last.map { RemoteAnchor(sequence: $0.sequence) } ?? anchor)
        }
    }

    public func missingChunks(_ digests: [ChunkDigest]) throws(RemoteError) -> [ChunkDigest] {
        let now = Self.now()
        return state.withLock { state in
            digests.filter { digest in
                guard state.chunks[digest] != nil else { return true }
                state.used[digest] = now
                return false
            }
        }
    }

    public func putChunk(_ digest: ChunkDigest, bytes: [UInt8]) throws(RemoteError) {
        guard bytes.withUnsafeBytes({ ChunkDigest(of: $0) }) == digest else {
            throw RemoteError(.refused, "chunk \(digest): its bytes have another digest")
        }
        let now = Self.now()
        state.withLock { state in
            if state.chunks[digest] == nil { state.chunks[digest] = bytes }
            state.used[digest] = now
        }
    }

    public func fetchChunk(_ digest: ChunkDigest) throws(RemoteError) -> [UInt8] {
        beforeEachFetch.withLock { $0 }?([digest])
        return try fetchOne(digest)
    }

    private func fetchOne(_ digest: ChunkDigest) throws(RemoteError) -> [UInt8] {
        beforeNextFetch.withLock { next -> (@Sendable () -> Void)? in
            guard let pending = next, pending.digest == digest else { return nil }
            next = nil
            return pending.hook
        }?()
        guard let bytes = state.withLock({ $0.chunks[digest] }) else {
            throw RemoteError(.notFound, "the remote holds no chunk \(digest)")
        }
        return bytes
    }

    public func chunkLengths(_ digests: [ChunkDigest]) throws(RemoteError) -> [Int64] {
        let found = state.withLock { state in digests.map { state.chunks[$0].map { Int64($0.count) } } }
        guard let missing = found.firstIndex(of: nil) else { return found.map { $0! } }
        throw RemoteError(.notFound, "the remote holds no chunk \(digests[missing])")
    }

    public func commit(_ proposal: RemoteVersion, operation: String, whenStale: StaleBase) throws(RemoteError) -> RemoteCommitOutcome {
        if let problem = proposal.problem { throw RemoteError(.refused, problem) }
        beforeNextCommit.withLock { hook in defer { hook = nil }; return hook }?()
        let digests = proposal.chunks ?? []
        let outcome = try state.withLock { (state: inout State) throws(RemoteError) -> RemoteCommitOutcome in
            if let outcome = state.operations[operation] { return outcome }
            let missing = digests.filter { state.chunks[$0] == nil }
            guard missing.isEmpty else {
                throw RemoteError(.missingChunks(missing), "\(missing.count) chunks of item \(proposal.item) are not on the remote yet")
            }
            var version = proposal
            let current = state.current[proposal.item]?.number ?? 0
            let previous = proposal.previous == true
            if whenStale == .refuse && proposal.base != current && !previous { return .stale(current: current) }
            if proposal.base == current && !previous, let problem = state.treeProblem(of: proposal) { return .misplaced(problem) }
            version.number = max((state.numbers[proposal.item] ?? 0) + 1, proposal.askedNumber)
            state.numbers[proposal.item] = version.number
            version.conflict = proposal.base != current && !previous
            let sequence = state.nextSequence()
            state.committed[sequence] = Self.now()
            if !version.conflict && !previous { state.setCurrent(version) }
            state.log.append(RemoteChange(sequence: sequence, version: version))
            let outcome: RemoteCommitOutcome = version.conflict
                ? .conflict(version: version.number, sequence: sequence) : .current(version: version.number, sequence: sequence)
            state.operations[operation] = outcome
            return outcome
        }
        switch outcome {
        case .stale, .misplaced: break
        case .current, .conflict: for wake in watchers.withLock({ Array($0.values) }) { wake() }
        }
        return outcome
    }

    public func watchChanges(_ wake: @escaping @Sendable () -> Void) -> RemoteWatch {
        let number = watcherNumbers.wrappingAdd(1, ordering: .relaxed).newValue
        watchers.withLock { $0[number] = wake }
        return RemoteWatch { [weak self] in _ = self?.watchers.withLock { $0.removeValue(forKey: number) } }
    }

    public func join(_ machine: MachineRegistration) throws(RemoteError) -> MachineJoin {
        state.withLock { state in
            let registered: (space: UInt64, name: String)
            if let known = state.machines[machine.store] {
                registered = known
            } else {
                let spaces = state.machines.values.map(\.space)
                let space: UInt64 = state.current.isEmpty && !spaces.contains(0) ? 0 : (spaces.max() ?? 0) + 1
                let names = Set(state.machines.values.map(\.name))
                registered = (space, MachineJoin.freeName(machine.name) { names.contains($0) })
                state.machines[machine.store] = registered
            }
            let ids = MachineJoin.ids(ofSpace: registered.space)
            let reached = state.current.keys.filter { ids.contains($0) }.max()
            return MachineJoin(space: registered.space, name: registered.name, nextItem: reached.map { $0 + 1 } ?? ids.lowerBound)
        }
    }

    public func currentVersion(of item: UInt64) throws(RemoteError) -> RemoteVersion? {
        state.withLock { $0.current[item] }
    }

    public func versions(of item: UInt64, after number: UInt64, limit: Int) throws(RemoteError) -> [RemoteVersion] {
        state.withLock { state in
            Array(state.log.map(\.version).filter { $0.item == item && $0.number > number }.sorted { $0.number < $1.number }.prefix(limit))
        }
    }

    public func head() throws(RemoteError) -> RemoteAnchor {
        state.withLock { RemoteAnchor(sequence: $0.sequence) }
    }

    public func listing(after item: UInt64, limit: Int) throws(RemoteError) -> [RemoteChange] {
        state.withLock { state in
            let items = state.current.keys.filter { $0 > item }.sorted().prefix(limit)
            return items.compactMap { id in
                guard let version = state.current[id] else { return nil }
                let sequence = state.log.last { $0.version.item == id && $0.version.number == version.number }?.sequence ?? 0
                return RemoteChange(sequence: sequence, version: version)
            }
        }
    }

    public func inStepDigest(buckets: Int) throws(RemoteError) -> InStepDigest {
        guard buckets > 0 else { throw RemoteError(.refused, "a digest has at least one bucket") }
        return state.withLock { state in
            var digest = InStepDigest(buckets: buckets)
            for (item, version) in state.current where !version.deleted { digest.add(item: item, number: version.number) }
            return digest
        }
    }

    public func prune(olderThan seconds: Double) throws(RemoteError) -> Int {
        let before = Self.now() - seconds
        return state.withLock { state in
            let committed = state.committed
            let old = { (change: RemoteChange) in committed[change.sequence, default: 0] <= before }
            let gone = Set(state.current.values.filter { version in
                version.deleted && state.log.contains { $0.version.item == version.item && $0.version.number == version.number && old($0) }
            }.map(\.item))
            let resolved = Dictionary(state.log.filter { $0.version.resolves == true && old($0) }.map { ($0.version.item, $0.version.number) },
                                      uniquingKeysWith: max)
            let current = state.current
            // The highest number of each item's versions committed before the cutoff (conflict
            // versions aside): a version below it was superseded before the cutoff.
            var supersededBelow: [UInt64: UInt64] = [:]
            for change in state.log where old(change) && !change.version.conflict {
                supersededBelow[change.version.item] = max(supersededBelow[change.version.item] ?? 0, change.version.number)
            }
            var removed = 0
            var horizon = state.horizon
            state.log.removeAll { change in
                let version = change.version
                let isCurrent = current[version.item]?.number == version.number
                let drop = gone.contains(version.item)
                    || (!isCurrent && !version.conflict && (supersededBelow[version.item] ?? 0) > version.number)
                    || (old(change) && !isCurrent && version.conflict && (resolved[version.item] ?? 0) > version.number)
                if drop {
                    horizon = max(horizon, change.sequence)
                    removed += 1
                }
                return drop
            }
            state.horizon = horizon
            for item in gone { state.current[item] = nil }
            return removed
        }
    }

    public func changeCount(after anchor: RemoteAnchor) throws(RemoteError) -> Int {
        state.withLock { state in state.log.count { $0.sequence > anchor.sequence } }
    }

    public func storeKey(proposing key: [UInt8]) throws(RemoteError) -> [UInt8] {
        state.withLock { state in
            if state.storeKey == nil { state.storeKey = key }
            return state.storeKey!
        }
    }

    public func sweepChunks(unusedFor seconds: Double) throws(RemoteError) -> ChunkSweep {
        let before = Self.now() - seconds
        return state.withLock { state in
            let named = Set(state.log.flatMap { ($0.version.chunks ?? []) + [$0.version.thumbnail.flatMap { ChunkDigest(hex: $0) }].compactMap { $0 } })
            var sweep = ChunkSweep(chunks: 0, bytes: 0)
            for (digest, bytes) in state.chunks where !named.contains(digest) && state.used[digest, default: 0] <= before {
                state.chunks[digest] = nil
                state.used[digest] = nil
                sweep.chunks += 1
                sweep.bytes += Int64(bytes.count)
            }
            return sweep
        }
    }

    private static func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    public func value(forKey key: String, in container: String) throws(RemoteError) -> [UInt8]? {
        state.withLock { $0.values[container]?[key]?.value }
    }

    @discardableResult
    public func setValue(_ value: [UInt8]?, forKey key: String, in container: String) throws(RemoteError) -> UInt64 {
        let sequence = state.withLock { state in
            let sequence = state.nextSequence()
            state.values[container, default: [:]][key] = (value, sequence)
            return sequence
        }
        for wake in watchers.withLock({ Array($0.values) }) { wake() }
        return sequence
    }

    public func keys(in container: String) throws(RemoteError) -> [String] {
        state.withLock { ($0.values[container] ?? [:]).filter { $0.value.value != nil }.keys.sorted() }
    }

    public func keyValueChanges(after sequence: UInt64, limit: Int) throws(RemoteError) -> [KeyValueChange] {
        state.withLock { state in
            state.values.flatMap { container, keys in
                keys.filter { $0.value.sequence > sequence }.map {
                    KeyValueChange(container: container, key: $0.key, value: $0.value.value, sequence: $0.value.sequence)
                }
            }.sorted { $0.sequence < $1.sequence }.prefix(limit).map { $0 }
        }
    }
}
