import DocfsChunks
import DocfsCore
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Keeps one machine's store in step with a remote (DESIGN §9, issue 22): what the store's
/// outbox says changed goes up (its chunks first, then a version committed with the remote
/// version it was made from as its base), and what other machines committed comes down from
/// the remote's log, read from a persisted anchor, applied through the store's one coordinated
/// path. Races are settled by the remote's commit order and never lose content (§4):
///
/// - Both machines changed the content from one base: the first commit is current, the other
///   a conflict version, kept on every machine (the loser's machine keeps its content as a
///   conflict version and takes the winner's).
/// - One side changed only what the other did not (a rename against an edit, attributes
///   against content): the changes are merged into one version, both kept.
/// - A deletion against an edit: the edit wins, the item comes back with it.
/// - Two new items under one name: the one whose creation committed later takes a new name
///   (`SyncNames`), the same on every machine.
///
/// Calls block (the remote's calls do); run them on a thread of their own (`SyncLoop`).
public final class SyncEngine: Sendable {
    public let store: any SyncedStore
    public let remote: any Remote
    /// Changes read from the log per page.
    let pageSize: Int
    /// Told how many items went up and came down in the round under way (a first sync's
    /// progress on a terminal).
    private let progress = Callback<(Int, Int)>()
    /// Told what the engine decided for each item (`DOCFS_SYNC_TRACE=1` logs it): for finding
    /// why a machine is not in step.
    private let trace = Callback<String>()
    /// Told what went wrong without ending a round (an earlier version that could not be kept
    /// here), for the daemon's log.
    private let problems = Callback<String>()
    private let tracing = Atomic<Bool>(false)
    /// Set to end a round early (the daemon is stopping): checked between items and chunks, so
    /// an unmount does not wait for a big upload; what was not done is done next time.
    let stopRequested = Atomic<Bool>(false)
    /// How many changes of the log this machine has yet to apply, as of the round under way
    /// or the last (`docfs remote status`: waiting to come down).
    public let incoming = Atomic<Int>(0)
    /// When parked changes were last tried again (a monotonic second): after each round that
    /// applied something or handled a local change (what a writer a change waits for saved),
    /// else at most every `parkedRetryInterval`.
    private let parkedTried = Atomic<Int64>(0)
    static let parkedRetryInterval: Int64 = 30

    /// Items the engine's own check (`audit`) set right and has found different since: each is
    /// set right once, then only reported until it is found in step (a repair that cannot take,
    /// a change parked for its folder, is not tried at every check). Leaf lock.
    let auditTried = Mutex<Set<UInt64>>([])
    /// Items that went up or came down since the engine's last check: what a check of the
    /// changed items only (`SyncAudit.Scope.changed`) reads here. Leaf lock.
    let touchedSinceAudit = Mutex<Set<UInt64>>([])
    /// Items whose first version this engine proposed without hearing whether it committed (a
    /// lost answer). Gone here before it settled, such an item asks the remote whether it knows
    /// it, so its deletion goes up; until a round has run whole since the start, every item
    /// gone here without a sync state asks (a crash forgets this set).
    let unheard = Mutex<Set<UInt64>>([])
    let roundRunWhole = Atomic<Bool>(false)
    /// The digest of the sync states as the last check left it (leaf lock).
    let syncedDigest = Mutex<SyncedDigest?>(nil)

    /// The store's key-value stores, kept in step at the end of each round (issue 24); nil: none.
    let keyValues: (any SyncedKeyValues)?

    public init(store: any SyncedStore, remote: any Remote, pageSize: Int = 500, keyValues: (any SyncedKeyValues)? = nil) {
        self.store = store
        self.remote = remote
        self.pageSize = pageSize
        self.keyValues = keyValues
    }

    /// Calls `report` with the items sent up and applied so far in the round, as they go.
    public func onProgress(_ report: @escaping @Sendable (_ up: Int, _ down: Int) -> Void) {
        progress.set { report($0.0, $0.1) }
    }

    /// Calls `report` with each problem that did not end a round, in words.
    public func onProblem(_ report: @escaping @Sendable (String) -> Void) {
        problems.set(report)
    }

    /// Calls `report` with a line for each decision the engine makes about an item.
    public func onTrace(_ report: @escaping @Sendable (String) -> Void) {
        trace.set(report)
        tracing.store(true, ordering: .relaxed)
    }

    func note(_ line: @autoclosure () -> String) {
        if tracing.load(ordering: .relaxed) { trace(line()) }
    }

    /// What one round did.
    public struct Round: Sendable, Equatable {
        public var uploaded = 0
        public var applied = 0
        public var conflicts = 0
        public var merged = 0
        /// Changes that could not be applied here (kept to try again).
        public var parked = 0
        /// Items to go up again next round (unsettled here now): queued when the round ends,
        /// so the round is not spent on them over and over.
        public var again: Set<UInt64> = []
        /// The round ended with outbox entries still waiting (it sends at most the pages it
        /// was given): the next round is due at once.
        public var moreWaiting = false
        /// Outbox entries the round handled (a local change, a writer that let go): what held
        /// a parked change back may be gone.
        public var handled = 0
        /// Key-value writes sent up, and the keys another machine changed here (by container).
        public var keyValuesSent = 0
        public var keyValuesChanged: [String: [String]] = [:]

        public init() {}
    }

    /// Sends up what is waiting (at most `pages` pages of the outbox, each of `outboxPage`
    /// entries; all of it by default), then applies everything the log holds past the anchor.
    /// A loop gives a round one page, so that a burst of local changes streaming in does not
    /// keep one round sending for as long as it lasts (the loop gives way to bursts between
    /// rounds).
    @discardableResult
    public func syncOnce(pages: Int = .max) throws(SyncError) -> Round {
        var round = Round()
        defer {
            for item in round.again { try? store.requeue(item) }
        }
        try push(&round, pages: pages)
        try pull(&round)
        roundRunWhole.store(true, ordering: .relaxed)
        if let keyValues {
            // The key-value stores' failure is said, not the round's: documents went up and
            // came down, and a round that failed would hold the next back (backoff).
            do throws(SyncError) {
                let outcome = try KeyValueSync(store: keyValues, remote: remote).syncOnce()
                round.keyValuesSent = outcome.sent
                round.keyValuesChanged = outcome.changed
                for problem in outcome.problems { problems(problem) }
            } catch {
                problems("the key-value stores were not kept in step this round (tried again at the next): \(error)")
            }
        }
        return round
    }

    static let outboxPage = 100

    // MARK: Up

    func push(_ round: inout Round, pages: Int = .max) throws(SyncError) {
        precondition(pages > 0, "a round sends at least one page")
        var handled = 0
        for _ in 0..<pages {
            let entries = try SyncError.local("read the outbox") { try store.pendingChanges(limit: Self.outboxPage) }
            if entries.isEmpty { return }
            for entry in try goneFilesFirst(entries) {
                try checkStop()
                touchedSinceAudit.withLock { _ = $0.insert(entry.item) }
                try upload(entry, &round)
                try SyncError.local("acknowledge outbox entry \(entry.sequence)") { try store.acknowledge(entry) }
                handled += 1
                round.handled += 1
            }
        }
        // Every page given was sent: is there more? Not when every entry of them is to go
        // again (items unsettled here): rounds at once would only go round them.
        guard round.again.count < handled else { return }
        round.moreWaiting = try SyncError.local("read the outbox") { try !store.pendingChanges(limit: 1).isEmpty }
    }

    /// The entries of files and links gone here first: a name one of them held may be taken
    /// by an item made here since (`ln -sf`, a file renamed over another), and other machines
    /// must see the name free before the new item claims it, or they would rename it aside.
    /// Folders and containers keep their place: what was moved out of one must go before it goes.
    private func goneFilesFirst(_ entries: [OutboxEntry]) throws(SyncError) -> [OutboxEntry] {
        var gone: [OutboxEntry] = [], rest: [OutboxEntry] = []
        for entry in entries {
            let isGoneFile = try SyncError.local("look for item \(entry.item)") {
                try store.isGone(entry.item) && ![.folder, .container].contains((try store.syncState(of: entry.item))?.version.kind)
            }
            if isGoneFile { gone.append(entry) } else { rest.append(entry) }
        }
        return gone + rest
    }

    private func upload(_ entry: OutboxEntry, _ round: inout Round, depth: Int = 0) throws(SyncError) {
        let item = entry.item
        var state = try syncState(of: item)
        // Open for writing here: it goes up once the writer lets go (not read half written).
        if store.putOffWhileWritten(item) {
            note("up \(item): put off, open for writing")
            return
        }
        let local: LocalItem?
        // The content's chunks go up as the file is read (a large file's first chunks reach
        // the remote at once, not after the whole file was read). Those of the version it was
        // last in step with are checked once, after the read (none at all when it still is).
        var sent = Set<ChunkDigest>()
        let known = Set(state?.version.chunks ?? [])
        do {
            local = try store.current(item) { batch in try sendChunks(batch, skipping: &sent, known: known) }
        } catch let error as SyncError {
            throw error
        } catch is LocalItemBeingWritten {
            // What was read is no state of the file: it goes once the writer lets go, or, when
            // the writer is done already, next round.
            if store.putOffWhileWritten(item) {
                note("up \(item): put off, a writer opened it while it was read")
            } else {
                round.again.insert(item)
                note("up \(item): changed while it was read, again next round")
            }
            return
        } catch is LocalItemUnsettled {
            // Not gone, not readable yet (a rename under way here): a tombstone now would delete
            // it everywhere. It goes again next round.
            round.again.insert(item)
            note("up \(item): unsettled here, again next round")
            return
        } catch {
            throw SyncError(local: "could not read item \(item): \(error)")
        }
        // A folder the remote does not know yet goes up before what is in it, whatever order
        // the outbox holds them in (other machines apply the log in order).
        if let local, local.parent != 0, depth < 64, try syncState(of: local.parent) == nil {
            try upload(OutboxEntry(sequence: entry.sequence, item: local.parent), &round, depth: depth + 1)
        }
        // An item new at a name, or moved to it, that an item gone here held on the remote
        // (`ln -sf`, `mv new old`, a folder renamed over an empty one): the old one's tombstone
        // goes first, or the remote would find the name taken (`TreeProblem.nameTaken`).
        let placeChanged = state.map { known in
            local.map { $0.parent != known.version.parent || $0.name != known.version.name || $0.container != known.version.container
                || $0.scope != known.version.scope } ?? false
        } ?? true
        if placeChanged, let local, local.kind != .container, depth < 64, let previous = try SyncError.local("look up a name", {
            try store.itemInStep(named: local.name, in: local.parent, container: local.container, scope: local.scope, other: item)
        }), try SyncError.local("look for item \(previous)", { try store.isGone(previous) }) {
            try upload(OutboxEntry(sequence: entry.sequence, item: previous), &round, depth: depth + 1)
        }
        let proposal: RemoteVersion
        // A conflict resolved here goes up (as a version that says so) even when nothing else changed.
        let resolving = state?.resolvedHere == true
        // The content's thumbnail, made here: it goes with the version, and when it was made
        // after the content went up, alone (only the machine that saved the content sends it).
        let thumbnail = local?.kind == .file ? store.thumbnailSet(of: item) : nil
        let thumbnailDigest = thumbnail.map { bytes in bytes.withUnsafeBytes { ChunkDigest(of: $0) } }
        // The save's number here: the remote gives it when it can, so numbers agree.
        let number = local.map { $0.kind == .file ? $0.number ?? store.versionNumber(of: item) : 0 } ?? 0
        if let local, local.kind == .file, state != nil { try sendSavesSetAside(of: local, after: state, &round) }
        // Gone here and never settled: its first version may have committed unheard.
        if local == nil && state == nil { state = try firstVersionCommittedUnheard(of: item) }
        var observed = SyncPlanner.Observed(number: number)
        if let state, let thumbnailDigest, state.version.thumbnail != thumbnailDigest.hex, state.version.author == store.author {
            observed.newThumbnail = true
        }
        if let local, let state, local.kind == .file, !resolving, !observed.newThumbnail, LocalItem(state.version) == local {
            observed.savesNotGoneUp = try stranded(of: item, after: state.number, before: number)
        }
        switch SyncPlanner.outgoing(local, observed: observed, synced: state) {
        case .nothing:
            return
        case .inStep(let pending):
            // A save that wrote the content last in step again is that version: its pending
            // key goes, and it holds the number every machine knows it by.
            if let pending, let state {
                try SyncError.local("number the content of item \(item) as v\(state.number)") {
                    try store.takeNumber(item, key: pending, given: state.number)
                }
            }
            note("up \(item): in step already (number \(state?.number ?? 0))")
            return
        case .asideOnly:
            // Deleted everywhere already: saves of this machine's set aside still go up, kept
            // beside by every machine (listed if the item comes back).
            if let known = state, known.version.kind == .file {
                try sendSavesSetAside(of: LocalItem(known.version), after: known, &round)
            }
            return
        case .propose(let savesFirst):
            guard let local else { return }
            if savesFirst {
                state = try sendUnsentSaves(of: local, numbered: number, after: state, &round)
                try sendSavesSetAside(of: local, after: state, &round)  // those that lost their race just now
            }
            try uploadChunks(of: local, except: sent)
            var made = local.proposal(base: state?.number ?? 0, by: store.author)
            made.number = number
            made.resolves = resolving ? true : nil
            if let thumbnail, let thumbnailDigest {
                if try SyncError.remote({ () throws(RemoteError) in try remote.missingChunks([thumbnailDigest]) }) == [thumbnailDigest] {
                    try SyncError.remote { () throws(RemoteError) in try remote.putChunk(thumbnailDigest, bytes: thumbnail) }
                }
                made.thumbnail = thumbnailDigest.hex
            }
            if let container = store.describeContainer(local.container) {
                (made.containerName, made.containerPublic) = (container.name, container.isPublic)
            }
            proposal = made
        case .delete(let savesFirst):
            guard let known = state else { return }
            if savesFirst {
                // Saves made here before the deletion that never went up go first, as versions of
                // their own (at the place it was last in step), so every machine keeps them.
                let last = LocalItem(known.version)
                state = try sendUnsentSaves(of: last, numbered: .max, after: known, &round) ?? known
                try sendSavesSetAside(of: last, after: state, &round)
            }
            guard let state else { return }
            var tombstone = state.version
            tombstone.base = state.number
            tombstone.deleted = true
            tombstone.conflict = false
            tombstone.author = store.author
            proposal = tombstone
        }
        // A writer opened it while the saves before it went up, and some stay unsent (a save is
        // not set aside under a writer): the content would go up past them, and they would stay
        // here alone. It goes once the writer lets go.
        if let local, local.kind == .file, try stranded(of: item, after: state?.number ?? 0, before: proposal.number),
           store.putOffWhileWritten(item) {
            note("up \(item): put off, a writer opened it while its saves went up")
            return
        }
        let proposed = "\(proposal.deleted ? "a deletion" : "\(proposal.name) of \(proposal.size) bytes") on base \(proposal.base)"
        note("up \(item): committing \(proposed)")
        // The operation id is the outbox entry's and what it proposes: a retry of this proposal
        // after a lost answer is applied once, and never answered for another proposal (the
        // item may have changed here since an attempt that committed but did not settle).
        let operation = "\(store.author.machine)/\(item)/\(entry.sequence)/\(Self.digest(of: proposal))"
        let outcome = try commitPlaced(proposal, operation: operation, &round)
        note("up \(item): \(outcome) for \(proposed)")
        switch outcome {
        case .current(let number, let sequence):
            try committed(proposal, number: number, sequence: sequence, after: state, &round)
        case .conflict(let number, _):
            // Our own earlier attempt made it a conflict version (its answer was lost).
            try takeCurrent(over: proposal, keepingOurs: proposal.deleted ? nil : number, after: state, &round)
        case .stale:
            try resolve(proposal, lostFrom: state, operation: operation, &round)
        case .misplaced(let problem):
            try placeAgain(proposal, problem, here: proposal, operation: operation, after: state, &round)
        }
    }

    /// The sync state of `item`, gone here and never settled, when its first version is on the
    /// remote by this machine after all (committed, the answer lost): settled now.
    private func firstVersionCommittedUnheard(of item: UInt64) throws(SyncError) -> ItemSyncState? {
        guard unheard.withLock({ $0.contains(item) }) || !roundRunWhole.load(ordering: .relaxed) else { return nil }
        guard let current = try SyncError.remote({ () throws(RemoteError) in try remote.currentVersion(of: item) }),
              current.author.machine == store.author.machine, !current.deleted else { return nil }
        note("up \(item): its first version committed unheard (v\(current.number)); its deletion goes on it")
        try settle(current, number: current.number, sequence: nil, after: nil)
        return try syncState(of: item)
    }

    /// Whether saves of `item` made here between `number` and `current` have not gone up.
    private func stranded(of item: UInt64, after number: UInt64, before current: UInt64) throws(SyncError) -> Bool {
        try SyncError.local("list the saves of item \(item) not gone up") {
            try !store.unsentSaves(of: item, after: number, before: current).isEmpty
                || !store.unsentSavesBeforeConflicts(of: item, after: number, before: current).isEmpty
        }
    }

    /// Sends the saves made here since `state` that the current content `local` (numbered
    /// `current` here; `.max` when the item is gone here: the saves before its deletion) superseded,
    /// each as a version of its own (its content, `local`'s place and attributes), oldest
    /// first, each on the one before; answers the state they leave the item in. A save whose
    /// base is no longer current (another machine committed first) and those after it are set
    /// aside (`sendSavesSetAside`), and so are saves from before a conflict version kept here:
    /// the current content then goes up, and races, as ever. Each takes the number the remote
    /// gave it here (it was pending, `VersionNumber`).
    private func sendUnsentSaves(of local: LocalItem, numbered current: UInt64, after state: ItemSyncState?,
                                 _ round: inout Round) throws(SyncError) -> ItemSyncState? {
        var state = state
        let item = local.item
        let here = current == .max ? 0 : current  // .max: gone here, nothing numbered
        // Saves before a conflict version kept here go up set aside, never current.
        let early = try SyncError.local("list the saves of item \(item) not gone up") {
            try store.unsentSavesBeforeConflicts(of: item, after: state?.number ?? 0, before: current)
        }
        if !early.isEmpty {
            try SyncError.local("set saves \(early) of item \(item) aside") { try store.setAside(early, of: item, above: here) }
        }
        // Listed again after each: one the remote numbered past others here moves those after
        // it along (when the item is gone here), and one that gave way leaves them where they are.
        var passed = Set<UInt64>()
        func unsent() throws(SyncError) -> [UInt64] {
            try SyncError.local("list the saves of item \(item) not gone up") {
                try store.unsentSaves(of: item, after: state?.number ?? 0, before: current)
            }.filter { !passed.contains($0) }
        }
        while passed.count < 4096, let number = try unsent().first {
            passed.insert(number)
            try checkStop()
            let made: RemoteVersion?
            do {
                // Gone, or the content last in step (numbered past it here: nothing new): nil.
                made = try proposal(forSave: number, of: local, after: state, unlessHolding: state?.version.chunks)
            } catch where error.remote == nil {
                // Not readable (lost, changed behind docfs's back): it stays here; the current
                // content still goes up.
                note("up \(item): save \(number) made here cannot be read (\(error)); it stays here only")
                break
            }
            guard let proposal = made else {
                // A save that wrote the content last in step again adds nothing and never goes
                // up, so no other machine keeps it; when the version it repeats is kept here, it
                // goes here too (every machine lists the same versions).
                if let state, !state.version.deleted, state.version.kind == .file, let chunks = state.version.chunks {
                    let forgot = try SyncError.local("look at save \(number) of item \(item)") {
                        try store.forgetPrevious(number, of: item, holding: chunks, keptAs: state.number)
                    }
                    if forgot { note("up \(item): save \(number) holds v\(state.number)'s content, kept here; no longer kept") }
                }
                continue
            }
            let operation = "\(store.author.machine)/\(item)/save-\(number)/\(Self.digest(of: proposal))"
            let outcome = try commitPlaced(proposal, operation: operation, &round)
            note("up \(item): \(outcome) for save \(number) made here before the current content")
            guard case .current(let given, let sequence) = outcome else {
                // It lost its race before it went up (another machine committed first): it and
                // the saves after it are set aside, to go up beside the current version.
                let rest = [number] + (try unsent())
                try SyncError.local("set saves \(rest) of item \(item) aside") { try store.setAside(rest, of: item, above: here) }
                break
            }
            try settle(proposal, number: given, sequence: sequence, after: state)
            let before = state
            state = try syncState(of: item)
            round.uploaded += 1
            // Pending here: it takes the number the remote gave it.
            if given != number {
                try SyncError.local("number save \(VersionNumber.shown(number)) of item \(item) as the remote did") {
                    try store.takeNumber(item, key: number, given: given)
                }
            }
            keepAsEveryMachineKeeps(proposal, committedAs: given, after: before)
        }
        return state
    }

    /// Sends the item's saves set aside here (they lost their number or their race before they
    /// went up), each as a `previous` version: whatever the current version is, it commits
    /// beside it, and every machine keeps it as a previous version. `local` gives the place and
    /// attributes. One that cannot be read stays here, set aside, and is tried again with the
    /// item's next change.
    private func sendSavesSetAside(of local: LocalItem, after state: ItemSyncState?,
                                   _ round: inout Round) throws(SyncError) {
        let item = local.item
        // Looked for again after each: one sent may move another that held its new number.
        var tried = Set<UInt64>()
        while let number = try SyncError.local("list the saves of item \(item) set aside", { try store.unsentAside(of: item) })
            .first(where: { !tried.contains($0) }), tried.count < 256 {
            tried.insert(number)
            try checkStop()
            let made: RemoteVersion?
            do {
                made = try proposal(forSave: number, of: local, after: state)
            } catch where error.remote == nil {
                note("up \(item): save \(number) set aside here cannot be read (\(error)); it stays here only for now")
                continue
            }
            guard var proposal = made else { continue }
            proposal.previous = true
            // Named by its content only: a retry after a lost answer is the same operation even
            // when the document was renamed or its base moved meanwhile.
            let operation = "\(store.author.machine)/\(item)/aside-\(number)/\(Self.digest(of: proposal.manifest))"
            let outcome = try SyncError.remote { () throws(RemoteError) in
                try remote.commit(proposal, operation: operation, whenStale: .refuse)
            }
            note("up \(item): \(outcome) for save \(number) set aside here")
            guard case .current(let given, _) = outcome else { continue }
            try SyncError.local("number save \(VersionNumber.shown(number)) of item \(item) set aside") {
                try store.takeNumber(item, key: number, given: given)
            }
            round.uploaded += 1
        }
    }

    /// Save `number` of `local`'s item made into a proposal on `state` (its content, `local`'s
    /// place and attributes, its number), its chunks sent up as they are read; nil when it is no
    /// longer kept, or holds `unlessHolding`. Throws a local error when it cannot be read.
    private func proposal(forSave number: UInt64, of local: LocalItem, after state: ItemSyncState?,
                          unlessHolding skipped: [ChunkDigest]? = nil) throws(SyncError) -> RemoteVersion? {
        var sent = Set<ChunkDigest>()
        let known = Set(state?.version.chunks ?? [])
        let content = try SyncError.local("read save \(number) of item \(local.item)") {
            try store.unsentSave(of: local.item, number: number) { batch in try sendChunks(batch, skipping: &sent, known: known) }
        }
        guard let content, content.manifest != skipped else { return nil }
        var save = local
        (save.manifest, save.size, save.modified) = (content.manifest, content.size, content.modified)
        try uploadChunks(of: save, except: sent)
        var proposal = save.proposal(base: state?.number ?? 0, by: store.author)
        proposal.number = number
        return proposal
    }

    /// `proposal` is the item's current version `number` now: in step, under that number here too.
    func committed(_ proposal: RemoteVersion, number: UInt64, sequence: UInt64, after state: ItemSyncState?,
                           _ round: inout Round) throws(SyncError) {
        if proposal.kind == .file && !proposal.deleted && number != proposal.number {
            try SyncError.local("number version \(number) of item \(proposal.item)") {
                try store.takeNumber(proposal.item, key: proposal.number, given: number)
            }
        }
        try settle(proposal, number: number, sequence: sequence, after: state)
        keepAsEveryMachineKeeps(proposal, committedAs: number, after: state)
        round.uploaded += 1
        progress((round.uploaded, round.applied))
    }

    /// After `proposal` of this machine's committed as `number` (settled, on `state`): the
    /// versions kept here of its item become those every machine keeps (`VersionList.kept`).
    func keepAsEveryMachineKeeps(_ proposal: RemoteVersion, committedAs number: UInt64, after state: ItemSyncState?) {
        keepingEarlierVersions(of: proposal.item) { () throws(SyncError) in
            try keepKeptVersionsInStep(proposal, committedAs: number, after: state)
        }
    }

    private func keepKeptVersionsInStep(_ proposal: RemoteVersion, committedAs number: UInt64, after state: ItemSyncState?) throws(SyncError) {
        // A save that wrote the content it started from again (or changed only metadata): other
        // machines keep no version for the one it follows (`keepSkipped` keeps nowhere a version
        // whose next holds its content), and neither does this one, which kept it as a save.
        if proposal.kind == .file, !proposal.deleted, let base = state?.version, base.kind == .file, !base.deleted,
           base.manifest == proposal.manifest, let kept = state?.number {
            let forgot = try SyncError.local("look at version \(kept) of item \(proposal.item)") {
                try store.forgetPrevious(kept, of: proposal.item, holding: proposal.chunks ?? [], keptAs: nil)
            }
            if forgot { note("up \(proposal.item): v\(kept) kept here holds v\(number)'s content; no longer kept") }
        } else if proposal.kind == .file, !proposal.deleted, let base = state?.version, base.kind == .file, !base.deleted,
                  number == base.number + 1, base.size <= store.largestVersionKept {
            // The version it follows holds other content, so every machine keeps it
            // (`VersionList.kept`); here too, though the save that made it was still pending when
            // the next began (and thinned then): fetched from the remote when not kept.
            let kept = try SyncError.local("look for version \(base.number) of item \(proposal.item)") {
                try store.keeps(proposal.item, version: base.number)
            }
            if !kept {
                note("up \(proposal.item): v\(base.number), which v\(number) follows, kept here as every machine keeps it")
                try SyncError.local("keep version \(base.number) of item \(proposal.item)") {
                    try store.keepPrevious(base) { digest in try self.fetch(digest) }
                }
            }
        }
        // Other machines' versions (or saves of ours set aside) came between: the versions kept
        // here become the ones every machine keeps.
        if proposal.kind == .file, number != (state?.number ?? 0) + 1 {
            var applied = proposal
            applied.number = number
            try keepSkipped(of: proposal.item, after: state?.number ?? 0, before: applied)
        }
    }

    /// Up to this many bytes of a batch's chunks go up without asking the remote which it lacks:
    /// the question is a round trip, and a small file's chunks cost less sent again.
    static let sentWithoutAsking = 64 << 10

    /// Puts the chunks of `batch` the remote does not have yet (and neither `sent` nor `known`
    /// holds), and adds them to `sent`.
    private func sendChunks(_ batch: ChunkBatch, skipping sent: inout Set<ChunkDigest>, known: Set<ChunkDigest>) throws(SyncError) {
        try checkStop()
        var distinct: [ChunkDigest] = []
        for (digest, _) in batch.chunks where !known.contains(digest) && sent.insert(digest).inserted { distinct.append(digest) }
        guard !distinct.isEmpty else { return }
        let wanted = Set(distinct)
        var putting = Set<ChunkDigest>()
        var chunks = batch.chunks.filter { wanted.contains($0.digest) && putting.insert($0.digest).inserted }
        if chunks.reduce(0, { $0 + $1.bytes.count }) > Self.sentWithoutAsking {
            let missing = Set(try SyncError.remote { () throws(RemoteError) in try remote.missingChunks(distinct) })
            chunks.removeAll { !missing.contains($0.digest) }
            guard !chunks.isEmpty else { return }
        }
        try SyncError.remote { () throws(RemoteError) in try remote.putChunks(chunks) }
    }

    /// Puts the chunks of `local` the remote does not have and the read did not send already.
    private func uploadChunks(of local: LocalItem, except sent: Set<ChunkDigest>) throws(SyncError) {
        var seen = sent
        let distinct = local.manifest.filter { seen.insert($0).inserted }
        guard !distinct.isEmpty else { return }
        let missing = try SyncError.remote { () throws(RemoteError) in try remote.missingChunks(distinct) }
        var batch = ChunkBatch()
        func put() throws(SyncError) {
            let chunks = batch.chunks
            try SyncError.remote { () throws(RemoteError) in try remote.putChunks(chunks) }
            batch = ChunkBatch()
        }
        for digest in missing {
            try checkStop()
            let bytes = try SyncError.local("read a chunk of item \(local.item)") { try store.chunk(digest, of: local.item) }
            batch.append(digest, bytes)
            if batch.isFull { try put() }
        }
        if !batch.chunks.isEmpty { try put() }
    }

    func syncState(of item: UInt64) throws(SyncError) -> ItemSyncState? {
        try SyncError.local("read the sync state of item \(item)") { try store.syncState(of: item) }
    }

    /// Records that the item is in step with the remote's version `number` of `version`,
    /// committed at `sequence` of the log. After versions this machine did not take in turn
    /// (later than the next, back over a deletion, or `raced`: taken over a change of this
    /// machine's that lost), the state says the versions kept here are to be made the ones every
    /// machine keeps (`keepSkipped` does next; the daemon's check if that fails).
    func settle(_ version: RemoteVersion, number: UInt64, sequence: UInt64?, after state: ItemSyncState?,
                raced: Bool = false) throws(SyncError) {
        var version = version
        version.number = number
        // The item's first version (from no base) says when it was created; its number need
        // not be 1 (saves made here before it first went up took the numbers below).
        let created = version.base == 0 ? (sequence ?? state?.created) : state?.created
        unheard.withLock { _ = $0.remove(version.item) }
        var settled = ItemSyncState(version: version, created: created)
        // Versions between the one in step here before and this one: those kept here become the
        // ones every machine keeps next (`keepSkipped`), a crash before then notwithstanding.
        if SyncPlanner.versionsBehind(after: version, number: number, synced: state, raced: raced) {
            settled.versionsBehind = true
        }
        try SyncError.local("save the sync state of item \(version.item)") {
            try store.setSyncState(settled, of: version.item)
        }
        do {
            try store.takeRemoteNumbers(of: version.item)
        } catch {
            problems("sync: versions of item \(version.item) kept under other numbers than the remote's could not take its numbers (\(error)); they are tried again when the item is next settled")
        }
    }

    /// A short digest of a manifest (for an operation id named by content alone).
    static func digest(of manifest: [String]) -> String {
        String(Array(manifest.joined().utf8).withUnsafeBytes { ChunkDigest(of: $0).hex }.prefix(16))
    }

    /// A short digest of everything a proposal says (for its operation id).
    static func digest(of proposal: RemoteVersion) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let bytes = (try? encoder.encode(proposal)).map(Array.init) ?? Array("\(proposal)".utf8)
        return String(bytes.withUnsafeBytes { ChunkDigest(of: $0).hex }.prefix(16))
    }

    /// Our proposal's base is stale (another machine committed first): merge what can be
    /// merged onto the current version; what cannot (content changed on both sides) is
    /// committed as a conflict version, kept on every machine, and the winner taken here.
    private func resolve(_ ours: RemoteVersion, lostFrom state: ItemSyncState?, operation: String,
                         _ round: inout Round) throws(SyncError) {
        let current = try SyncError.remote({ () throws(RemoteError) in try remote.currentVersion(of: ours.item) })
        if let current, current.author.machine == store.author.machine, !current.conflict, current.base == ours.base {
            // Our own earlier attempt from this base committed but never settled here (its answer
            // was lost, or the round failed after it): no other machine's change; ours goes on top.
            note("up \(ours.item): v\(current.number) is our own unsettled attempt; going on top of it")
            if SyncMerge.same(ours, current) { return try takeCurrent(current, over: ours, keepingOurs: nil, after: state, &round) }
            var proposal = ours
            proposal.base = current.number
            let outcome = try commitPlaced(proposal, operation: operation + "/after-\(current.number)", &round)
            if case .misplaced(let problem) = outcome {
                return try placeAgain(proposal, problem, here: ours, operation: operation + "/after-\(current.number)", after: state, &round)
            }
            guard case .current(let number, let sequence) = outcome else {
                throw SyncError(remote: RemoteError(.unreachable, "item \(ours.item) changed on the remote again while sending it; trying again"))
            }
            return try committed(proposal, number: number, sequence: sequence, after: state, &round)
        }
        guard let current else {
            // The remote no longer has the item at all (deleted, and pruned since): ours is new again.
            guard !ours.deleted else { return }
            var fresh = ours
            fresh.base = 0
            let outcome = try commitPlaced(fresh, operation: operation + "/afresh", &round)
            if case .misplaced(let problem) = outcome {
                return try placeAgain(fresh, problem, here: ours, operation: operation + "/afresh", after: nil, &round)
            }
            guard case .current(let number, let sequence) = outcome else {
                throw SyncError(remote: RemoteError(.unreachable, "item \(ours.item) changed on the remote again while sending it afresh; trying again"))
            }
            return try committed(fresh, number: number, sequence: sequence, after: nil, &round)
        }
        guard let merged = SyncMerge.merge(ours: ours, theirs: current, base: state?.version) else {
            var conflict: UInt64?
            if !ours.deleted {
                // Kept for every machine: in the log as a conflict version, once for this content
                // from this base however often the item is tried again.
                let content = Array(ours.manifest.joined().utf8).withUnsafeBytes { ChunkDigest(of: $0).hex }
                let once = "\(store.author.machine)/\(ours.item)/conflict-from-\(ours.base)/\(content)"
                let outcome = try SyncError.remote { () throws(RemoteError) in try remote.commit(ours, operation: once) }
                switch outcome {
                case .conflict(let number, _):
                    conflict = number
                case .current(let number, let sequence):
                    // The other change went meanwhile (its machine took it back): ours is current.
                    return try committed(ours, number: number, sequence: sequence, after: state, &round)
                case .stale, .misplaced:
                    break
                }
            }
            try takeCurrent(current, over: ours, keepingOurs: conflict, after: state, &round)
            return
        }
        if SyncMerge.same(merged, current) && ours.resolves != true {
            // They made the change we made (the same rename): nothing to send.
            try takeCurrent(current, over: ours, keepingOurs: nil, after: state, &round)
            return
        }
        var proposal = merged
        proposal.base = current.number
        proposal.author = store.author
        proposal.resolves = ours.resolves
        proposal.number = ours.number  // the save's number here, as for any proposal
        let outcome = try commitPlaced(proposal, operation: operation + "/onto-\(current.number)", &round)
        if case .misplaced(let problem) = outcome {
            return try placeAgain(proposal, problem, here: ours, operation: operation + "/onto-\(current.number)", after: state, &round)
        }
        guard case .current(let number, let sequence) = outcome else {
            // Changed again meanwhile (a third machine was quicker): the next round tries again.
            throw SyncError(remote: RemoteError(.unreachable, "item \(ours.item) changed on the remote again while merging; trying again"))
        }
        var applied = proposal
        applied.number = number
        if try apply(applied, expecting: ApplyExpectation(ours), keepingHereAsConflict: nil) == .applied {
            try settle(proposal, number: number, sequence: sequence, after: state)
            keepingEarlierVersions(of: applied.item) { () throws(SyncError) in
                try keepSkipped(of: applied.item, after: state?.number ?? 0, before: applied)
            }
        }
        round.merged += 1
    }

    /// The remote's current version becomes the item here (ours, if asked, kept as a conflict
    /// version under the number the remote gave it), unless the item changed here again
    /// meanwhile: that goes up next, from the old base, and is settled the same way.
    func takeCurrent(_ known: RemoteVersion? = nil, over ours: RemoteVersion, keepingOurs: UInt64?,
                             after state: ItemSyncState?, _ round: inout Round) throws(SyncError) {
        var fetched = known
        if fetched == nil {
            fetched = try SyncError.remote { () throws(RemoteError) in try remote.currentVersion(of: ours.item) }
        }
        guard let current = fetched else { return }
        let outcome: ApplyOutcome
        do {
            outcome = try apply(current, expecting: ApplyExpectation(ours), keepingHereAsConflict: keepingOurs)
        } catch {
            // Not taken now (a writer opened the file meanwhile, say): our content that lost is
            // a conflict version on the remote already, kept here now from there, as when the
            // item changed here again (the next try commits other content, or none).
            if let number = keepingOurs { keepOwnConflict(ours, as: number) }
            throw error
        }
        if outcome == .applied {
            note("up \(ours.item): took the remote's v\(current.number)" + (keepingOurs.map { ", ours kept as conflict v\($0)" } ?? ""))
            try settle(current, number: current.number, sequence: nil, after: state, raced: true)
            // Our deletion lost: the content it removed here is kept, as every machine keeps it.
            let low = ours.deleted ? max(state?.number ?? 1, 1) - 1 : state?.number ?? 0
            keepingEarlierVersions(of: current.item) { () throws(SyncError) in try keepSkipped(of: current.item, after: low, before: current) }
        } else {
            note("up \(ours.item): changed here again, not taking the remote's v\(current.number)")
            // Changed here again meanwhile: tried again next round (the content that lost
            // stays kept as its conflict version, not committed twice). That conflict version is
            // kept here now, from the remote: this machine skips its own conflicts in the log,
            // and the content here is no longer the one that lost, so no later apply keeps it.
            if let number = keepingOurs { keepOwnConflict(ours, as: number) }
            round.again.insert(ours.item)
        }
        round.conflicts += keepingOurs != nil ? 1 : 0
        round.merged += keepingOurs != nil ? 0 : 1
    }

    /// Keeps `ours`, committed as conflict version `number`, here from the remote: this machine
    /// skips its own conflicts in the log.
    private func keepOwnConflict(_ ours: RemoteVersion, as number: UInt64) {
        guard !ours.deleted else { return }
        var lost = ours
        (lost.number, lost.conflict) = (number, true)
        keepingEarlierVersions(of: ours.item) { () throws(SyncError) in
            try SyncError.local("keep conflict version \(number) of item \(ours.item)") {
                // Kept here still as the save it was: it becomes that conflict version.
                if VersionNumber.isPending(ours.number), try store.becameConflict(ours.item, key: ours.number, given: number) { return }
                try store.keepConflict(lost) { digest in try self.fetch(digest) }
            }
        }
    }

    // MARK: Down

    func pull(_ round: inout Round) throws(SyncError) {
        try pullLog(&round)
        let now = Int64(Self.seconds())
        if round.applied > 0 || round.handled > 0 || now - parkedTried.load(ordering: .relaxed) >= Self.parkedRetryInterval {
            parkedTried.store(now, ordering: .relaxed)
            try retryParked(&round)
        }
    }

    /// Applies `change`; one that cannot be applied here for a reason of its own (not the
    /// network) is parked, so the changes after it are not held up behind it.
    func takeOrPark(_ change: RemoteChange, relisting: Bool = false, _ round: inout Round) throws(SyncError) {
        do {
            try take(change, relisting: relisting, &round)
        } catch where !error.isTransient && !stopRequested.load(ordering: .relaxed) {
            note("down \(change.version.item) v\(change.version.number): parked: \(error)")
            try SyncError.local("park change \(change.sequence)") { try store.park(change, problem: error.description) }
            round.parked += 1
        }
    }

    /// The log no longer holds every change since this machine's anchor (it was away longer
    /// than the log's retention): every item's current version is taken instead, each item
    /// this machine knows that the remote no longer lists is gone (its tombstone was pruned),
    /// and the anchor moves to the log's head read before the listing began (a change committed
    /// meanwhile is read again from the log, and skipped if the listing gave it already).
    private func relist(_ round: inout Round) throws(SyncError) {
        let head = try SyncError.remote { () throws(RemoteError) in try remote.head() }
        var listed = Set<UInt64>()
        var after: UInt64 = 0
        while true {
            let from = after
            let page = try SyncError.remote { () throws(RemoteError) in try remote.listing(after: from, limit: pageSize) }
            // Folders first, outer ones before inner ones as far as a page tells.
            for change in page.sorted(by: { ($0.version.kind == .folder ? 0 : 1) < ($1.version.kind == .folder ? 0 : 1) }) {
                try checkStop()
                listed.insert(change.version.item)
                try takeOrPark(change, relisting: true, &round)
            }
            guard let last = page.last?.version.item, page.count == pageSize else { break }
            after = last
        }
        let known = try SyncError.local("read the items in step") { try store.syncedItems() }
        for item in known where !listed.contains(item) {
            try checkStop()
            guard let state = try syncState(of: item), !state.version.deleted else { continue }
            var tombstone = state.version
            tombstone.deleted = true
            if try apply(tombstone, expecting: ApplyExpectation(state.version), keepingHereAsConflict: nil) == .applied {
                try settle(tombstone, number: state.number, sequence: nil, after: state)
                round.applied += 1
            }
        }
        try SyncError.local("save the anchor") { try store.setAnchor(head) }
    }

    /// Tries the parked changes again, oldest first: one that applies now (its folder came)
    /// or is no longer needed (a later version was applied) leaves the list.
    private func retryParked(_ round: inout Round) throws(SyncError) {
        let parked = try SyncError.local("read the parked changes") { try store.parkedChanges() }
        for (change, _) in parked {
            try checkStop()
            do {
                try take(change, &round)
            } catch where !error.isTransient && !stopRequested.load(ordering: .relaxed) {
                try SyncError.local("park change \(change.sequence)") { try store.park(change, problem: error.description) }
                continue
            }
            try SyncError.local("unpark change \(change.sequence)") { try store.unpark(change) }
        }
    }

    /// How often, at most, reading the log saves the anchor while a page is taken (seconds).
    static let anchorInterval = 0.5

    private static func seconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    private func pullLog(_ round: inout Round) throws(SyncError) {
        var anchor = try SyncError.local("read the anchor") { try store.anchor() }
        while true {
            let from = anchor
            let page: (changes: [RemoteChange], next: RemoteAnchor)
            do {
                page = try remote.changes(after: from, limit: pageSize)
            } catch where error.kind == .pastRetention {
                try relist(&round)
                anchor = try SyncError.local("read the anchor") { try store.anchor() }
                continue
            } catch {
                throw SyncError(remote: error)
            }
            // A full page: how many more wait is worth one count (a first sync's progress).
            let waiting = page.changes.count < pageSize ? page.changes.count
                : try SyncError.remote { () throws(RemoteError) in try remote.changeCount(after: from) }
            incoming.store(waiting, ordering: .relaxed)
            // The anchor is saved every `anchorInterval` and when the page ends or fails, not
            // after each change (a write of its own for each item of a first sync): a crash
            // takes again what came after the last save, which changes nothing (each item's
            // sync state says it was taken, kept versions are kept once).
            var unsaved: RemoteAnchor?
            var savedAt = Self.seconds()
            func saveAnchor() throws(SyncError) {
                guard let reached = unsaved else { return }
                try SyncError.local("save the anchor") { try store.setAnchor(reached) }
                unsaved = nil
                savedAt = Self.seconds()
            }
            do {
                for change in page.changes {
                    try checkStop()
                    try takeOrPark(change, &round)
                    incoming.wrappingSubtract(1, ordering: .relaxed)
                    anchor = RemoteAnchor(sequence: change.sequence)
                    unsaved = anchor
                    if Self.seconds() - savedAt >= Self.anchorInterval { try saveAnchor() }
                }
            } catch {
                try? saveAnchor()
                throw error
            }
            try saveAnchor()
            if page.changes.count < pageSize { return }
        }
    }

    /// `relisting`: the change is an item's current version from a full listing (no log), whose
    /// earlier versions, when the item is new here, are not fetched.
    private func take(_ change: RemoteChange, relisting: Bool = false, _ round: inout Round) throws(SyncError) {
        let version = change.version
        touchedSinceAudit.withLock { _ = $0.insert(version.item) }
        let state = try syncState(of: version.item)
        switch SyncPlanner.incoming(version, synced: state, me: store.author.machine) {
        case .nothing(let why):
            note("down \(version.item) v\(version.number): nothing to do (\(why))")
            return
        case .keepAside:
            // A save set aside on another machine: kept here too, beside the content (ours was
            // kept here, numbered as the remote numbered it, when it went up).
            note("down \(version.item) v\(version.number): kept as a previous version (a save \(version.author.machine) set aside)")
            try SyncError.local("keep version \(version.number) of item \(version.item)") {
                try store.keepAside(version) { digest in try self.fetch(digest) }
            }
            return
        case .keepConflict:
            // Kept here as on every machine (even one that holds the same content: what a
            // machine holds when it reads the log differs from machine to machine, the log does
            // not); ours too, which its loss kept here already, unless the document changed here
            // again before it could be (a number kept already is that version).
            note("down \(version.item) v\(version.number): kept as a conflict version")
            try SyncError.local("keep a conflict version of item \(version.item)") {
                try store.keepConflict(version) { digest in try self.fetch(digest) }
            }
            round.conflicts += 1
            return
        case .apply(let resolvingFirst):
            if resolvingFirst {
                // Whatever becomes of the content here, the conflict is over everywhere.
                try SyncError.local("resolve the conflict of item \(version.item)") {
                    try store.resolveConflicts(of: version.item, before: version.number)
                }
            }
        }
        switch try apply(version, committedAt: change.sequence, expecting: ApplyExpectation(state?.version),
                         keepingHereAsConflict: nil) {
        case .applied:
            note("down \(version.item) v\(version.number): applied as \(version.deleted ? "a deletion" : "\(version.name) of \(version.size) bytes")")
            try settle(version, number: version.number, sequence: change.sequence, after: state)
            if let state {
                // Back over a deletion (an edit won over it): from the version it deleted on.
                let low = state.version.deleted && state.version.base > 0 ? state.version.base - 1 : state.number
                keepingEarlierVersions(of: version.item) { () throws(SyncError) in
                    try keepSkipped(of: version.item, after: low, before: version)
                }
            } else if version.number > 1 && !relisting {
                // New here at a later version (its first ones were parked, say, and are no longer
                // needed): the earlier ones are kept, as every machine that applied them keeps them.
                keepingEarlierVersions(of: version.item) { () throws(SyncError) in
                    try keepSkipped(of: version.item, after: 0, before: version)
                }
            }
            round.applied += 1
            progress((round.uploaded, round.applied))
        case .changedHere:
            // What is here is not the synced state: it goes up from that base, and the remote
            // decides. Queued here, whoever saw the change (a change no watcher saw, found by
            // this very comparison, has no outbox entry of its own).
            note("down \(version.item) v\(version.number): changed here, not applied; it goes up")
            round.again.insert(version.item)
        }
    }

    /// Runs `keep`, which keeps earlier versions of `item` here after a version was applied and
    /// settled: a failure (the network, a full disk) costs only those kept versions, reported,
    /// and does not end the round (the change itself is applied and in step).
    func keepingEarlierVersions(of item: UInt64, _ keep: () throws(SyncError) -> Void) {
        do {
            try keep()
        } catch {
            problems("sync: earlier versions of item \(item) could not be kept here (\(error)); the item itself is in step")
        }
    }

    /// Makes the versions kept here of `item`, now in step with `applied`, the ones every
    /// machine keeps (`VersionList`): those missing here come from the remote under their
    /// numbers (promised on a store that downloads on demand), and previous versions kept here
    /// that the list leaves out go, when they hold what the remote's version of that number
    /// holds. Only the last `versionWindow` numbers are looked at: what the version policy
    /// pruned here before stays pruned. Conflict versions resolved here (not gone up yet) are
    /// not fetched again. `low`: the version this machine was in step with before.
    func keepSkipped(of item: UInt64, after low: UInt64, before applied: RemoteVersion) throws(SyncError) {
        let high = applied.number
        guard applied.kind == .file || applied.deleted, high > 1 else { return }
        // In turn (the one before it was in step here): kept here as every machine keeps it.
        let behind = try syncState(of: item)?.versionsBehind == true
        guard high > low + 1 || behind else { return }
        let from = high > Self.versionWindow ? high - Self.versionWindow : 0
        var listed = try SyncError.remote { () throws(RemoteError) in try remote.versions(of: item, after: from, limit: 256) }
            .filter { $0.number <= high || $0.conflict || $0.previous == true }
        if !listed.contains(where: { $0.number == high }) { listed.append(applied) }
        let kept = VersionList.kept(listed, current: high)
        let here = try SyncError.local("list the versions of item \(item) kept here") { try store.keptVersions(of: item) }
        let resolvedHere = try syncState(of: item)?.resolvedHere == true
        for version in listed.sorted(by: { $0.number < $1.number }) where here[version.number] == nil {
            guard let how = kept[version.number], how != .conflict || !resolvedHere else { continue }
            note("down \(item): v\(version.number) kept here as every machine keeps it (\(how))")
            try SyncError.local("keep version \(version.number) of item \(item)") {
                switch how {
                case .previous: try store.keepPrevious(version) { digest in try self.fetch(digest) }
                case .aside: try store.keepAside(version) { digest in try self.fetch(digest) }
                case .conflict: try store.keepConflict(version) { digest in try self.fetch(digest) }
                }
            }
        }
        for (number, isConflict) in here.sorted(by: { $0.key < $1.key }) where !isConflict && number > from && number < high && kept[number] == nil {
            guard let version = listed.first(where: { $0.number == number }), !version.deleted else { continue }
            try SyncError.local("look at version \(number) of item \(item)") {
                if try store.forgetPrevious(number, of: item, holding: version.chunks ?? [], keptAs: nil) {
                    note("down \(item): v\(number) kept here is kept by no machine (its next holds its content); no longer kept")
                }
            }
        }
        if var state = try syncState(of: item), state.number == high, state.versionsBehind == true {
            state.versionsBehind = nil
            try SyncError.local("save the sync state of item \(item)") { try store.setSyncState(state, of: item) }
        }
    }

    /// How many numbers before the version in step `keepSkipped` looks at.
    static let versionWindow: UInt64 = 64

    /// Applies `version` (committed at `sequence` of the log, when known) through the store,
    /// under the name the naming rule gives it here.
    func apply(_ version: RemoteVersion, committedAt sequence: UInt64? = nil, expecting expected: ApplyExpectation,
                       keepingHereAsConflict: UInt64?, depth: Int = 0) throws(SyncError) -> ApplyOutcome {
        let name = try placement(of: version, committedAt: sequence, depth: depth)
        let outcome: ApplyOutcome
        do {
            outcome = try SyncError.local("apply version \(version.number) of item \(version.item)") {
                try store.apply(version, placedAs: name, expecting: expected,
                                keepingHereAsConflict: keepingHereAsConflict) { digest in try self.fetch(digest) }
            }
        } catch where error.remote == nil && !version.deleted && version.parent != 0 && depth < 64
                        && (try? store.isGone(version.parent)) == true {
            // Its folder is not here (removed here, the removal not gone up yet): the folder
            // comes as the remote has it (`SyncEngine+Tree`), then the item.
            try bringFolderHere(version.parent, depth: depth)
            outcome = try SyncError.local("apply version \(version.number) of item \(version.item)") {
                try store.apply(version, placedAs: name, expecting: expected,
                                keepingHereAsConflict: keepingHereAsConflict) { digest in try self.fetch(digest) }
            }
        }
        // Placed under another name (it came later to a name taken here): that rename is a
        // change of this machine's, and goes up; until it has, the item differs here from the
        // version it is in step with, and later versions wait for it.
        if outcome == .applied && name != version.name {
            note("down \(version.item) v\(version.number): placed as \(name); the rename goes up")
            try SyncError.local("queue item \(version.item)") { try store.requeue(version.item) }
        }
        return outcome
    }

    /// The name `version`'s item takes here: its own, unless another item holds it (two
    /// items claimed one name). Then the later of the two (`SyncNames`) takes a new name: the
    /// incoming one (the name it is placed as), or the one here (moved aside first).
    private func placement(of version: RemoteVersion, committedAt sequence: UInt64?, depth: Int) throws(SyncError) -> String {
        guard !version.deleted, version.kind != .container else { return version.name }
        var holder = try SyncError.local("look up a name") {
            try store.item(named: version.name, in: version.parent, container: version.container, scope: version.scope)
        }
        if let held = holder, held != version.item, depth < 8, try leaveEarly(held, depth: depth) {
            holder = try SyncError.local("look up a name") {
                try store.item(named: version.name, in: version.parent, container: version.container, scope: version.scope)
            }
        }
        guard let holder, holder != version.item else { return version.name }
        let freeName = try SyncNames.free(version.name) { candidate throws(SyncError) in
            try SyncError.local("look up a name") {
                try store.item(named: candidate, in: version.parent, container: version.container, scope: version.scope) != nil
            }
        }
        // The remote gives a name in a folder to one item at a time (`TreeProblem.nameTaken`):
        // a holder here that claimed it without the remote (never gone up, or moved here since it
        // was last in step) gives way, and goes up under its new name.
        let holderState = try syncState(of: holder)
        let claimedHere = holderState.map { state in
            state.version.deleted || state.version.parent != version.parent || state.version.name != version.name
                || state.version.container != version.container || state.version.scope != version.scope
        } ?? true
        if !claimedHere {
            // Both hold it on the remote (a remote from before it kept names whole): the item
            // whose creation committed later takes the new name.
            let state = try syncState(of: version.item)
            let incoming = (version.base == 0 ? sequence : state?.created) ?? sequence ?? UInt64.max - 1
            let held = holderState?.created ?? UInt64.max
            if incoming > held || (incoming == held && version.item > holder) { return freeName }
        }
        try SyncError.local("move item \(holder) aside for item \(version.item)") { try store.moveAside(holder, to: freeName) }
        return version.name
    }

    /// The item holding a name here may have left it on the remote already, later in the log
    /// (`ln -sf`, a file renamed over another: the new item went up before the old one's
    /// tombstone): its current version is applied now, out of turn, so the name is free for
    /// the item that took it. Answers whether it was.
    private func leaveEarly(_ holder: UInt64, depth: Int) throws(SyncError) -> Bool {
        guard let state = try syncState(of: holder),
              let current = try SyncError.remote({ () throws(RemoteError) in try remote.currentVersion(of: holder) }),
              current.number > state.number, current.deleted || current.parent != state.version.parent || current.name != state.version.name
                  || current.container != state.version.container || current.scope != state.version.scope else { return false }
        guard try apply(current, expecting: ApplyExpectation(state.version), keepingHereAsConflict: nil, depth: depth + 1) == .applied else {
            return false
        }
        try settle(current, number: current.number, sequence: nil, after: state)
        // The versions it passed over are kept, as when it is taken in turn.
        let low = state.version.deleted && state.version.base > 0 ? state.version.base - 1 : state.number
        keepingEarlierVersions(of: holder) { () throws(SyncError) in try keepSkipped(of: holder, after: low, before: current) }
        return true
    }

    private func fetch(_ digest: ChunkDigest) throws -> [UInt8] {
        try checkStop()
        return try remote.fetchChunk(digest)
    }

    func checkStop() throws(SyncError) {
        if stopRequested.load(ordering: .relaxed) { throw SyncError(local: "stopped before the round was over") }
    }
}

/// Why a round of sync stopped: the remote (worth retrying when unreachable) or the store.
public struct SyncError: Error, CustomStringConvertible, Sendable {
    public var remote: RemoteError?
    public var description: String

    init(remote: RemoteError) {
        self.remote = remote
        self.description = remote.message
    }

    init(local description: String) {
        self.remote = nil
        self.description = description
    }

    /// Whether trying again later may help.
    public var isTransient: Bool { remote?.kind == .unreachable }

    static func remote<Value>(_ body: () throws(RemoteError) -> Value) throws(SyncError) -> Value {
        do { return try body() } catch { throw SyncError(remote: error) }
    }

    static func local<Value>(_ what: String, _ body: () throws -> Value) throws(SyncError) -> Value {
        do { return try body() } catch let error as SyncError { throw error } catch let error as RemoteError {
            throw SyncError(remote: error)
        } catch {
            throw SyncError(local: "could not \(what): \(error)")
        }
    }
}
