import Foundation

/// What the daemon's own check of a linked store found (DESIGN §9.0 "Checked", issue 49 §4):
/// the cheap form of `docfs remote check`, run between rounds, that sets right what it finds.
/// `remote status` says a store is in step only after such a check found nothing, and nothing
/// moved since.
public struct SyncAudit: Sendable, Equatable, Codable {
    /// When it began (seconds since the epoch) and how long it took (seconds).
    public var checked: Double
    public var duration: Double = 0
    /// Items whose current version on the remote is not the one this machine last agreed on
    /// (a change of the log it never took, or one it believes went up that the remote lacks).
    public var remote: [UInt64] = []
    /// Items here that are not what they were when last in step though nothing waits to go up
    /// (changed where no watcher saw it, an apply left half done), or that are missing here.
    public var here: [UInt64] = []
    /// Files whose version number here is not the remote's (counted, not set right: issue 49 §3).
    public var numbers: [UInt64] = []
    /// How many of the items found were set right (applied again, sent up again).
    public var repaired = 0
    /// A change was made here while it ran: it answers nothing.
    var abandoned = false
    /// How many items it put in the outbox itself.
    var requeued = 0
    /// What the store holds that does not travel (the first few), and how many in all: no
    /// difference (the machines agree on everything that travels), said so nothing is
    /// half-synced silently.
    public var keptHereOnly: [KeptHereOnly] = []
    public var keptHereOnlyCount = 0

    /// Which items a check reads here: every one (`everything`), or those that went up or
    /// came down since the last check (`changed`: the remote's digest is compared whole either way).
    public enum Scope: String, Sendable, Codable {
        case everything, changed
    }

    public var scope: Scope = .everything

    public init(checked: Double, scope: Scope = .everything) {
        self.checked = checked
        self.scope = scope
    }

    /// How many of what does not travel a check keeps to show.
    public static let keptHereOnlyShown = 20

    public var differences: Int { remote.count + here.count + numbers.count }
    public var inStep: Bool { differences == 0 }
}

extension SyncEngine {
    /// Checks the store against the remote cheaply and sets right what differs:
    /// 1. The remote's `InStepDigest` against one made from this machine's sync states: the items
    ///    of each bucket that differs are listed again; a version this machine never took is
    ///    taken now (as a listing's would be), an item the remote lacks goes up again.
    /// 2. Each item here (`scope`: every one, or those that went up or came down since the last
    ///    check), read without its content (`SyncedStore.observed`), against the version last in step: one that differs (confirmed by reading it whole) goes up, one missing
    ///    here is fetched again (its removal was never seen here, so nothing is lost by that).
    /// An item is set right once; while it stays different it is only reported.
    /// Answers nil without checking while changes wait to go up (they are differences the
    /// next round settles, not faults). Runs on the engine's thread, between rounds.
    public func audit(_ scope: SyncAudit.Scope = .everything, buckets: Int = InStepDigest.defaultBuckets) throws(SyncError) -> SyncAudit? {
        guard try isQuiet() else { return nil }
        // Changes of the log past the anchor are the next round's, not differences.
        let anchor = try SyncError.local("read the anchor") { try store.anchor() }
        do {
            guard try remote.changes(after: anchor, limit: 1).changes.isEmpty else { return nil }
        } catch where error.kind == .pastRetention {
            return nil  // the next round lists every item again
        } catch {
            throw SyncError(remote: error)
        }
        let started = Date().timeIntervalSince1970
        var audit = SyncAudit(checked: started, scope: scope)
        var round = Round()
        let tried = auditTried.withLock { $0 }
        let touched = touchedSinceAudit.withLock { touched in
            defer { touched = [] }
            return touched
        }
        // This machine's digest: made again from every sync state, or the last one's with the
        // items that moved since.
        var mine: SyncedDigest
        var synced: [UInt64] = []
        if scope == .changed, let cached = syncedDigest.withLock({ $0 }), cached.digest.buckets.count == buckets {
            mine = cached
            for item in touched {
                try checkStop()
                mine.set(item, try syncState(of: item).flatMap { $0.version.deleted ? nil : $0.number })
            }
        } else {
            synced = try SyncError.local("read the items in step") { try store.syncedItems() }
            mine = SyncedDigest(buckets: buckets)
            for item in synced {
                try checkStop()
                mine.set(item, try syncState(of: item).flatMap { $0.version.deleted ? nil : $0.number })
            }
        }
        syncedDigest.withLock { $0 = mine }
        try auditRemote(mine, anchor: anchor, tried: tried, &audit, &round)
        if !audit.abandoned {
            try auditHere(synced: synced, only: scope == .everything ? nil : Array(touched), tried: tried, &audit, &round)
        }
        // A change made here while it ran: what it found may be that change; the next check says.
        if audit.abandoned {
            touchedSinceAudit.withLock { $0.formUnion(touched) }
            return nil
        }
        // What was set right and is still found is only reported from now on; a check of the
        // changed items keeps what it did not look at.
        let found = Set(audit.remote + audit.here)
        auditTried.withLock { tried in
            tried = scope == .everything ? found : tried.subtracting(touched).union(found)
        }
        // Two queries of the index, whatever the scope (a fifo made here moves nothing).
        (audit.keptHereOnly, audit.keptHereOnlyCount) = try SyncError.local("list what does not travel") {
            try store.keptHereOnly(limit: SyncAudit.keptHereOnlyShown)
        }
        audit.duration = Date().timeIntervalSince1970 - started
        if !audit.inStep {
            note("check: \(audit.remote.count) items differ from the remote, \(audit.here.count) here, \(audit.numbers.count) numbers; \(audit.repaired) set right")
        }
        return audit
    }

    /// Whether nothing waits to go up but the `requeued` entries the check put there itself (a
    /// user's change made since would be taken for a difference).
    private func isQuiet(requeued: Int = 0) throws(SyncError) -> Bool {
        try SyncError.local("read the outbox") { try store.pendingChanges(limit: requeued + 1).count <= requeued }
    }

    private func auditRemote(_ synced: SyncedDigest, anchor: RemoteAnchor, tried: Set<UInt64>, _ audit: inout SyncAudit,
                             _ round: inout Round) throws(SyncError) {
        let mine = synced.digest
        let theirs = try SyncError.remote { () throws(RemoteError) in try remote.inStepDigest(buckets: mine.buckets.count) }
        let differing = mine.differingBuckets(from: theirs)
        guard !differing.isEmpty else { return }
        var listed = Set<UInt64>()
        var after: UInt64 = 0
        while true {
            let from = after
            let page = try SyncError.remote { () throws(RemoteError) in try remote.listing(after: from, limit: pageSize) }
            // Folders first, as a relisting takes them.
            for change in page.sorted(by: { ($0.version.kind == .folder ? 0 : 1) < ($1.version.kind == .folder ? 0 : 1) })
            where differing.contains(mine.bucket(of: change.version.item)) {
                try checkStop()
                let version = change.version, item = version.item
                listed.insert(item)
                let state = try syncState(of: item)
                let agreed = state.map { $0.number == version.number || ($0.version.deleted && version.deleted) } ?? version.deleted
                // Committed after the anchor (since the last round read the log): the next round's.
                guard !agreed, change.sequence <= anchor.sequence else { continue }
                // Ahead of the remote: this machine took a version for in step that the remote
                // does not hold as current; what is here goes up again, the remote's order decides.
                let repair: AuditRepair = state.map { $0.number > version.number } == true ? .sendUp : .take(change)
                let why = repair == .sendUp ? "is v\(state?.number ?? 0) here, v\(version.number) on the remote: sent again"
                    : "v\(version.number) was never taken here (in step with \(state.map { "v\($0.number)" } ?? "nothing")): taken now"
                guard try setRight(item, repair, why, in: \.remote, tried: tried, &audit, &round) else { return }
            }
            guard let last = page.last?.version.item, page.count == pageSize else { break }
            after = last
        }
        for item in synced.numbers.keys.sorted() where differing.contains(mine.bucket(of: item)) && !listed.contains(item) {
            guard let state = try syncState(of: item), !state.version.deleted else { continue }
            // In step with a version the remote no longer lists at all: what is here goes up as
            // new (a remote restored from an older copy loses nothing of this machine's).
            let why = "is in step with v\(state.number), which the remote does not list: sent again"
            guard try setRight(item, .sendAfresh, why, in: \.remote, tried: tried, &audit, &round) else { return }
        }
    }

    /// `only`: the items to read (nil: every item here and every item in step).
    private func auditHere(synced: [UInt64], only: [UInt64]?, tried: Set<UInt64>, _ audit: inout SyncAudit,
                           _ round: inout Round) throws(SyncError) {
        let items: [UInt64]
        if let only {
            items = only
        } else {
            items = try SyncError.local("list the store's items") { try store.allItems() } + synced
        }
        let remoteFound = Set(audit.remote)
        var seen = Set<UInt64>()
        for item in items where seen.insert(item).inserted && !remoteFound.contains(item) {
            try checkStop()
            let state = try syncState(of: item)
            // Versions kept here not yet made the ones every machine keeps (a crash came first).
            if let state, state.versionsBehind == true {
                keepingEarlierVersions(of: item) { () throws(SyncError) in try keepSkipped(of: item, after: 0, before: state.version) }
            }
            let expected = state.flatMap { $0.version.deleted ? nil : LocalItem($0.version) }
            let observed: LocalItem?
            do {
                observed = try store.observed(item)
            } catch is LocalItemUnsettled {
                continue  // being moved or removed: the outbox has it
            } catch {
                throw SyncError(local: "could not read item \(item): \(error)")
            }
            switch (observed, expected) {
            case (nil, nil):
                continue
            case (.some, nil):
                guard try setRight(item, .sendUp, "is here but never went up: sent now", in: \.here, tried: tried, &audit, &round) else { return }
            case (nil, .some):
                let why = "is missing here, in step with v\(state?.number ?? 0): fetched again"
                guard try setRight(item, .fetchAgain, why, in: \.here, tried: tried, &audit, &round) else { return }
            case (let observed?, let expected?):
                if observed.looksLike(expected) {
                    if observed.kind == .file, let state, observed.number ?? store.versionNumber(of: item) != state.number {
                        audit.numbers.append(item)
                    }
                    continue
                }
                // Read whole before it counts: the cheap read may only differ in what it leaves out.
                let whole: LocalItem?
                do {
                    whole = try store.current(item)
                } catch is LocalItemUnsettled {
                    continue
                } catch {
                    throw SyncError(local: "could not read item \(item): \(error)")
                }
                guard whole != expected else { continue }
                let why = "differs here from the version last in step, with nothing waiting to go up: sent now"
                guard try setRight(item, .sendUp, why, in: \.here, tried: tried, &audit, &round) else { return }
            }
        }
    }

    /// How the check sets an item right.
    private enum AuditRepair: Equatable {
        /// What is here goes up (from the version last in step).
        case sendUp
        /// What is here goes up as new (the remote does not list the item).
        case sendAfresh
        /// The remote's current version comes here again (the item is missing here).
        case fetchAgain
        /// A change of the log this machine never took is taken now.
        case take(RemoteChange)
    }

    /// Records `item` as found (in `list`) and sets it right with `repair` (`why` says what was
    /// found), unless it was set right before (`tried`); answers false, ending the check, when
    /// a change was made here meanwhile (what was found may be that change).
    private func setRight(_ item: UInt64, _ repair: AuditRepair, _ why: String, in list: WritableKeyPath<SyncAudit, [UInt64]>,
                          tried: Set<UInt64>, _ audit: inout SyncAudit, _ round: inout Round) throws(SyncError) -> Bool {
        audit[keyPath: list].append(item)
        guard !tried.contains(item) else { return true }
        guard try isQuiet(requeued: audit.requeued) else {
            audit.abandoned = true
            return false
        }
        note("check: item \(item) \(why)")
        switch repair {
        case .sendUp, .sendAfresh:
            try SyncError.local("queue item \(item)") {
                if repair == .sendAfresh { try store.setSyncState(nil, of: item) }
                try store.requeue(item)
            }
            audit.requeued += 1
        case .fetchAgain:
            try fetchAgain(item, &round)
        case .take(let change):
            try takeOrPark(change, relisting: true, &round)
        }
        audit.repaired += 1
        return true
    }

    /// Applies the remote's current version of `item`, missing here, again; its sync state is
    /// only replaced once it is here.
    private func fetchAgain(_ item: UInt64, _ round: inout Round) throws(SyncError) {
        let listed = try SyncError.remote { () throws(RemoteError) in try remote.listing(after: item - 1, limit: 1) }
        guard let current = listed.first, current.version.item == item, !current.version.deleted else { return }
        let state = try syncState(of: item)
        do {
            if try apply(current.version, committedAt: current.sequence, expecting: .absent, keepingHereAsConflict: nil) == .applied {
                try settle(current.version, number: current.version.number, sequence: current.sequence, after: state)
                round.applied += 1
            }
        } catch where !error.isTransient {
            note("check: item \(item) could not be fetched again: \(error)")
        }
    }
}
