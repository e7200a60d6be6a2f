import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import DocfsRemotePostgres
import DocfsSync
import DocfsSyncStore
import Foundation
import Logging

/// Linking a store to a remote and unlinking it (issue 22 §1), the same in the daemon (a
/// served store) and in `docfs remote link` itself (a store no daemon serves).
public enum RemoteLinking {
    /// Why a served store's link was refused: it must be merged into the remote's items,
    /// which renumbers them, so it must be linked unmounted (`docfs remote link` does that).
    public struct MergeNeedsUnmountedStore: Error, Sendable {}

    /// Links the store `shared` serves to the remote at `uri`: connects (the schema made or
    /// migrated), joins as `machine` (its id space), keeps a password the URI holds in
    /// `~/.pgpass`, records the link and puts every item of the store in the outbox. A store
    /// with documents joining a remote that holds another store's is merged into it first
    /// (`StoreMerge`), when `merging` (no daemon serves it); else refused as `.storeBusy`,
    /// nothing changed. Refuses a store already linked.
    /// Answers the link and the connected remote.
    public static func link(_ shared: ServedStore, uri: String, machine: String?, home: String, merging: Bool,
                            progress: ((String) -> Void)? = nil) throws(DocfsError) -> (RemoteLink, PostgresRemote) {
        let layout = shared.store.layout
        if let existing = try RemoteLink.load(layout) {
            throw DocfsError(.invalidArgument, "the store is linked to \(existing.uri) already: docfs remote unlink first")
        }
        let location: PostgresLocation
        do { location = try PostgresLocation(uri) } catch { throw DocfsError(.invalidArgument, "\(error)") }
        let name = machine ?? RemoteLink.hostName
        guard !name.isEmpty, name.utf8.count <= 64, !name.contains("/") else {
            throw DocfsError(.invalidArgument, "'\(name)' is not a machine name (1 to 64 bytes, no /): give one with --machine")
        }
        let remote: PostgresRemote
        let joined: MachineJoin
        do {
            let key = try StoreInstance.key(layout)
            remote = try PostgresRemote(location, machine: name)
            do { joined = try remote.join(MachineRegistration(store: key, name: name)) } catch {
                remote.close()
                throw error
            }
        } catch let error as DocfsError {
            throw error
        } catch let error as RemoteError {
            throw DocfsError(.invalidArgument, error.message)
        } catch {
            throw DocfsError(.invalidArgument, "\(error)")
        }
        let space = joined.space
        // Ids of a machine's space are `space << 41` up; containers' items live at 2^61.
        guard space < StoreSync.containerItemBit >> 41 else {
            remote.close()
            throw DocfsError(.invalidArgument, "the remote has given ids to \(space) machines, as many as it can: link this store to another database")
        }
        do throws(DocfsError) {
            // The space is entered (past the ids the store has in it) before the store's items
            // are read for the link: an item made here meanwhile (the store may be served) has
            // an id of the space, or is among those read.
            let sync = try StoreSync(serving: shared, author: RemoteAuthor(machine: joined.name, user: RemoteLink.currentUser))
            let ids = MachineJoin.ids(ofSpace: space)
            let own: [UInt64]
            do { own = try sync.ownItemIDs() } catch { throw DocfsError(.internalFailure, "reading the store's items failed: \(error)") }
            try shared.store.itemIDs.enter(space: space, floor: max(joined.nextItem, (own.filter { ids.contains($0) }.max() ?? 0) + 1))
            var items: [UInt64]
            let ownNow: [UInt64]
            do { (items, ownNow) = (try sync.allItems(), try sync.ownItemIDs()) } catch {
                throw DocfsError(.internalFailure, "reading the store's items failed: \(error)")
            }
            // Items whose ids are not of this store's space could be another machine's: they
            // take ids of the space first (none when this store is the first, space 0, and
            // gave every id itself within it). Read after entering the space: an item made
            // meanwhile is among them.
            if ownNow.contains(where: { !ids.contains($0) }) || (space != 0 && !items.isEmpty) {
                guard merging else {
                    throw DocfsError(.storeBusy, "this store holds \(items.count) items and the remote holds another store's: merging them renumbers this store's items, which a mount would not see; docfs unmount the store, then docfs remote link again",
                                     cause: MergeNeedsUnmountedStore())
                }
                let adopted = try merge(shared, sync: sync, remote: remote, progress: progress)
                do { items = try sync.allItems().filter { !adopted.contains($0) } } catch {
                    throw DocfsError(.internalFailure, "reading the store's items after merging failed: \(error)")
                }
            }
            try shareBookmarkKey(shared.store, remote: remote)
            let fromURI = try? PostgresLocation(uri, environment: [:], home: "/nonexistent")
            if fromURI?.password != nil {
                do { _ = try location.rememberPassword(home: home) } catch {
                    throw DocfsError(.invalidArgument, "\(error): put the password in ~/.pgpass yourself and link with a URI without it")
                }
            }
            let link = RemoteLink(uri: location.uri, machine: joined.name, space: space, linked: Date().timeIntervalSince1970)
            try link.save(layout)
            sync.fillOutbox(true)
            do { try sync.enqueue(items) } catch { throw DocfsError(.internalFailure, "queueing the store's items failed: \(error)") }
            return (link, remote)
        } catch {
            remote.close()
            throw error
        }
    }

    /// Merges the store into the remote's items (`StoreMerge`); answers the items adopted (in
    /// step already: not sent up).
    private static func merge(_ shared: ServedStore, sync: StoreSync, remote: PostgresRemote,
                              progress: ((String) -> Void)?) throws(DocfsError) -> Set<UInt64> {
        var listing: [RemoteChange] = []
        do {
            while true {
                let page = try remote.listing(after: listing.last?.version.item ?? 0, limit: 1000)
                listing += page
                progress?("listing the remote: \(listing.count) items")
                if page.count < 1000 { break }
            }
        } catch {
            throw DocfsError(.invalidArgument, "listing the remote's items failed: \(error.message); nothing here changed, link again")
        }
        do {
            let outcome = try StoreMerge(shared: shared, sync: sync).merge(with: listing, progress: progress)
            return Set(outcome.adopted.keys)
        } catch {
            throw DocfsError(.internalFailure, "merging the store into the remote's items failed: \(error); docfs index rebuild, then link again")
        }
    }

    /// Signs bookmarks with the remote's key from now on (this store's own when it is the
    /// first to link): a bookmark made on any linked machine verifies on all. Bookmarks this
    /// store made before joining a remote that had a key are no longer valid (make them again).
    static func shareBookmarkKey(_ store: LocalStore, remote: PostgresRemote) throws(DocfsError) {
        let own = try store.bookmarkKey()
        let shared: [UInt8]
        do { shared = try remote.storeKey(proposing: own.bytes) } catch { throw DocfsError(.invalidArgument, error.message) }
        guard let key = StoreKey(bytes: shared) else {
            throw DocfsError(.invalidArgument, "the remote's bookmark key is not one docfs can use: link to another database")
        }
        try store.adoptBookmarkKey(key)
    }

    /// Runs `body` on the store at `layout` served here, without a mount (no daemon serves it:
    /// this holds its lock meanwhile), its index opened as the daemon opens it.
    public static func servingHere<T>(_ layout: StoreLayout, purpose: String, _ body: (ServedStore) throws(DocfsError) -> T) throws(DocfsError) -> T {
        let store = try LocalStore(path: layout.root)
        let lock = try StoreLock(store: store, mountPoint: "(\(purpose))")
        defer { withExtendedLifetime(lock) {} }
        var quiet = Logger(label: "docfs")
        quiet.logLevel = .warning  // a command's output is its answer, not the index's notices
        let index = try Daemon.openIndex(store: store, logger: quiet)
        let shared = try ServedStore(store: store, index: index)
        let view = try Filesystem(serving: shared, view: .user)
        defer { view.forgetAll() }
        return try body(shared)
    }

    /// Syncs the store with its remote until nothing is left to send or apply, telling
    /// `progress` how many items went up and came down so far.
    public static func syncUntilSettled(_ shared: ServedStore, link: RemoteLink, remote: PostgresRemote,
                                        progress: @escaping @Sendable (_ up: Int, _ down: Int) -> Void) throws(DocfsError) -> SyncEngine.Round {
        let sync = try StoreSync(serving: shared, author: RemoteAuthor(machine: link.machine, user: link.maker))
        sync.fillOutbox(true)
        let engine = SyncEngine(store: sync, remote: remote,
                                keyValues: StoreKeyValues(database: try KeyValueDatabase(path: shared.store.layout.keyValuesFile)))
        engine.onProgress(progress)
        var total = SyncEngine.Round()
        for _ in 0..<100 {
            let round: SyncEngine.Round
            do { round = try engine.syncOnce() } catch { throw DocfsError(.invalidArgument, "\(error.description)") }
            total.uploaded += round.uploaded
            total.applied += round.applied
            total.conflicts += round.conflicts
            total.merged += round.merged
            if round == SyncEngine.Round() { break }
        }
        return total
    }

    /// Prunes the remote's log of versions older than `pruning` seconds, when asked, then
    /// removes the chunks no version names and nobody used for `seconds` (`docfs remote
    /// sweep`; daemons do both once a day, keeping 30 days of versions).
    public static func sweep(_ layout: StoreLayout, unusedFor seconds: Double, pruning: Double?) throws(DocfsError) -> (pruned: Int, swept: ChunkSweep) {
        guard let link = try RemoteLink.load(layout) else {
            throw DocfsError(.invalidArgument, "the store is not linked to a remote: docfs remote link URI links it")
        }
        do {
            let remote = try PostgresRemote(try PostgresLocation(link.uri), machine: link.machine)
            defer { remote.close() }
            let pruned = try pruning.map { age throws(RemoteError) in try remote.prune(olderThan: age) } ?? 0
            return (pruned, try remote.sweepChunks(unusedFor: seconds))
        } catch {
            throw DocfsError(.invalidArgument, "\(error)")
        }
    }

    /// Every difference between the store `sync` serves and `remote` (`docfs remote check`),
    /// telling `progress` how many items it compared so far.
    public static func check(_ sync: StoreSync, remote: any Remote, progress: ((Int) -> Void)? = nil) throws(DocfsError) -> [RemoteDifference] {
        do { return try RemoteCheck.run(store: sync, remote: remote, progress: progress) } catch {
            throw DocfsError(error.isTransient ? .storeUnavailable : .internalFailure,
                             "the check against the remote stopped: \(error.description)" + (error.isTransient ? "; check again once it can be reached" : ""))
        }
    }

    /// What the store `sync` serves holds that does not travel (every one of it).
    public static func keptHereOnly(_ sync: StoreSync) throws(DocfsError) -> [KeptHereOnly] {
        do { return try sync.keptHereOnly(limit: .max).found } catch {
            throw DocfsError(.internalFailure, "listing what does not travel failed: \(error)")
        }
    }

    /// `check` of the store at `layout`, which no daemon serves: its link's remote reached from
    /// here; with what the store holds that does not travel.
    public static func checkHere(_ layout: StoreLayout, progress: ((Int) -> Void)? = nil) throws(DocfsError)
        -> (differences: [RemoteDifference], keptHereOnly: [KeptHereOnly]) {
        try servingHere(layout, purpose: "remote check") { shared throws(DocfsError) in
            guard let link = try RemoteLink.load(layout) else {
                throw DocfsError(.invalidArgument, "the store is not linked to a remote: docfs remote link URI links it")
            }
            let remote: PostgresRemote
            do { remote = try PostgresRemote(PostgresLocation(link.uri), machine: link.machine) } catch let error as RemoteError {
                throw DocfsError(.storeUnavailable, error.message)
            } catch {
                throw DocfsError(.storeUnavailable, "\(error)")
            }
            defer { remote.close() }
            let sync = try StoreSync(serving: shared, author: RemoteAuthor(machine: link.machine, user: link.maker))
            return (try check(sync, remote: remote, progress: progress), try keptHereOnly(sync))
        }
    }

    /// Unlinks the store: the link and every sync record go; documents stay as they are, and
    /// so do the key-value stores' values (carried over to the next remote, `forgetRemote`).
    public static func unlink(_ shared: ServedStore) throws(DocfsError) {
        guard try RemoteLink.load(shared.store.layout) != nil else {
            throw DocfsError(.invalidArgument, "the store is not linked to a remote")
        }
        if let sync = try? StoreSync(serving: shared, author: RemoteAuthor(machine: "", user: "")) {
            sync.fillOutbox(false)
            do { try sync.forget() } catch { throw DocfsError(.internalFailure, "forgetting the sync records failed: \(error)") }
        }
        try KeyValueDatabase(path: shared.store.layout.keyValuesFile).forgetRemote()
        try RemoteLink.remove(shared.store.layout)
    }
}
