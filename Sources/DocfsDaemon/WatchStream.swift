import DocfsCoordination
import DocfsCore
import DocfsFilesystem
import DocfsProvider
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One `docfs watch` connection in the daemon: the changes under a path, as JSON lines, until
/// the client goes away. Presenters post from the operations' own threads; this queue takes
/// them at once and a thread of the connection's own writes them out.
enum WatchStream {
    /// Streams the changes under `path` of a view: the user view, or with `app` that app's view
    /// (paths relative to the view's root).
    /// `references` finds where the app's container holds references to an item: an app view
    /// is told of its originals' changes there.
    static func serve(_ path: String, app: ContainerID?, on connection: Int32, presenters: Presenters, userView: UserView,
                      references: @escaping @Sendable (ItemID, ContainerID) -> [StorePlace]) {
        // Presenters call from the operations' own threads (FUSE requests): the change is only
        // queued there; how the view says it (an index lookup for references) is worked out here.
        let queue = ChangeQueue()
        let token = presenters.subscribe { change in queue.push(change) }
        defer {
            presenters.unsubscribe(token)
            close(connection)
        }
        let ready = ControlReply(ok: true, message: "watching \(path.isEmpty ? "the whole mount" : path)")
        guard let data = try? JSONEncoder().encode(ready), ControlLine.write(Array(data), to: connection) else { return }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        while true {
            let changes = queue.take(waitingUpTo: 1)
            if changes.isEmpty {
                if clientLeft(connection) { return }
                continue
            }
            for change in changes {
                let said = shown(change, app: app, userView: userView).map { [$0] }
                    ?? app.map { shownAtReferences(change, app: $0, references: references) } ?? []
                for shown in said where shown.concerns(path) {
                    guard let line = try? encoder.encode(shown), ControlLine.write(Array(line), to: connection) else { return }
                }
            }
        }
    }

    /// `change` as the view says it (its paths there); nil when the view shows none of it. A
    /// move out of the view is a deletion there, one into it a creation.
    static func shown(_ change: PresentedChange, app: ContainerID?, userView: UserView) -> PresentedChange? {
        func pathInView(_ place: StorePlace) -> String? {
            guard let app else { return userView.path(of: place).map { String($0.dropFirst()) } }
            guard place.container == app, place.scope != .external else { return nil }
            return String(Filesystem.localPath(place).dropFirst())
        }
        guard let place = change.place else { return app == nil ? change : nil }
        var shown = change
        let old = pathInView(place)
        let new = change.newPlace.flatMap(pathInView)
        switch (old, new) {
        case (let old?, let new?):
            shown.path = old
            shown.newPath = new
        case (let old?, nil):
            shown.path = old
            if change.kind == .moved {
                shown.kind = .deleted
                shown.newPath = nil
            }
        case (nil, let new?) where change.kind == .moved:
            shown.kind = .created
            shown.path = new
            shown.newPath = nil
        default:
            return nil
        }
        return shown
    }

    /// A change of a document outside the app's container, as the app's view says it at each
    /// of its references to the document: new content is a new version there, a move or a
    /// deletion of the original a change (the reference stays, pointing where it now is or
    /// saying its original is gone).
    static func shownAtReferences(_ change: PresentedChange, app: ContainerID,
                                  references: (ItemID, ContainerID) -> [StorePlace]) -> [PresentedChange] {
        guard let item = change.item, change.place?.container != app, change.kind != .created else { return [] }
        return references(ItemID(rawValue: item), app).map { place in
            var shown = change
            shown.path = String(Filesystem.localPath(place).dropFirst())
            shown.newPath = nil
            shown.place = place
            shown.newPlace = nil
            if change.kind == .moved || change.kind == .deleted { shown.kind = .changed }
            return shown
        }
    }

    /// Whether the client closed its end (nothing more will be read from it).
    private static func clientLeft(_ connection: Int32) -> Bool {
        var byte: UInt8 = 0
        let n = recv(connection, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }
}

/// Changes waiting to be written to one watcher.
///
/// Lock order: `changes` is a leaf lock.
final class ChangeQueue: Sendable {
    /// Signalled by pushers, waited on by the one writer thread (at a stable address).
    private let signal = ThreadSemaphore()
    private let changes = Mutex<[PresentedChange]>([])

    func push(_ change: PresentedChange) {
        changes.withLock { $0.append(change) }
        signal.signal()
    }

    /// The changes queued so far, waiting up to `seconds` for the first.
    func take(waitingUpTo seconds: Int) -> [PresentedChange] {
        signal.wait(seconds: Double(seconds))
        return changes.withLock { queued in
            defer { queued.removeAll() }
            return queued
        }
    }
}
