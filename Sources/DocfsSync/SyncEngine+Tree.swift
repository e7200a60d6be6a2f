/// How the engine keeps the remote's tree whole (DESIGN §9.0, issue 49 §2): the remote refuses
/// a version that would put an item in a folder it deleted, delete a folder that holds items,
/// or put a folder inside itself (`TreeProblem`), and these say what becomes of the change:
/// - an item made or moved into a folder another machine removed brings the folder back (as an
///   edit wins over a deletion), with what this machine has in it, and then goes up;
/// - a folder removed here while another machine put items in it comes back here (its removal
///   lost), and those items come down into it;
/// - a folder moved here into a folder that another machine moved into it keeps the place the
///   remote has (the later move loses; what else changed of it goes up);
/// - applying an item whose folder is not here (removed here, its removal not gone up yet)
///   brings the folder here first, as the remote has it;
/// - an item whose name another item committed first in its folder takes another name
///   (`SyncNames`); a receiver moves aside a holder of the name that claimed it only here.
extension SyncEngine {
    /// Commits `proposal`; when its folder is deleted on the remote, brings the folder back
    /// first (`restoreFolder`) and commits again.
    func commitPlaced(_ proposal: RemoteVersion, operation: String, _ round: inout Round, depth: Int = 0) throws(SyncError)
        -> RemoteCommitOutcome {
        if proposal.base == 0 { unheard.withLock { _ = $0.insert(proposal.item) } }  // until it settles
        let outcome = try SyncError.remote { () throws(RemoteError) in
            try remote.commit(proposal, operation: operation, whenStale: .refuse)
        }
        guard case .misplaced(.folderGone(let folder)) = outcome, depth < 64, folder != proposal.item,
              try restoreFolder(folder, &round, depth: depth) else { return outcome }
        return try commitPlaced(proposal, operation: operation, &round, depth: depth + 1)
    }

    /// Commits `folder` (or a container's item) as it is here over its deletion on the remote
    /// (its own folder brought back first, the same way); answers whether it is current there now.
    private func restoreFolder(_ folder: UInt64, _ round: inout Round, depth: Int) throws(SyncError) -> Bool {
        let local: LocalItem?
        do {
            local = try store.current(folder)
        } catch is LocalItemUnsettled {
            return false
        } catch {
            throw SyncError(local: "could not read folder \(folder): \(error)")
        }
        guard let local, local.kind == .folder || local.kind == .container else { return false }
        let current = try SyncError.remote { () throws(RemoteError) in try remote.currentVersion(of: folder) }
        let state = try syncState(of: folder)
        var proposal = local.proposal(base: current?.number ?? 0, by: store.author)
        if let container = store.describeContainer(local.container) {
            (proposal.containerName, proposal.containerPublic) = (container.name, container.isPublic)
        }
        note("up \(folder): brought back over its deletion on the remote (an item went into it here)")
        let operation = "\(store.author.machine)/\(folder)/restore-\(current?.number ?? 0)/\(Self.digest(of: proposal))"
        switch try commitPlaced(proposal, operation: operation, &round, depth: depth + 1) {
        case .current(let number, let sequence):
            try committed(proposal, number: number, sequence: sequence, after: state, &round)
            return true
        case .misplaced(.nameTaken):
            // Another item took its name since: it comes back under another.
            return try takeAnotherName(proposal, here: proposal, operation: operation, after: state, &round)
        default:
            return false
        }
    }

    /// `proposal` (made from `here`, the item as this machine has it; last in step at `state`)
    /// cannot be current as it stands (`problem`): see the type's doc.
    func placeAgain(_ proposal: RemoteVersion, _ problem: TreeProblem, here: RemoteVersion, operation: String,
                    after state: ItemSyncState?, _ round: inout Round) throws(SyncError) {
        let item = proposal.item
        switch problem {
        case .folderNotEmpty:
            note("up \(item): its removal lost to items another machine put in it; it comes back here")
            try takeCurrent(over: here, keepingOurs: nil, after: state, &round)
        case .cycle:
            guard let current = try SyncError.remote({ () throws(RemoteError) in try remote.currentVersion(of: item) }),
                  !current.deleted else {
                round.again.insert(item)
                return
            }
            note("up \(item): moving it here would put it inside itself on the remote; it keeps the remote's place")
            var placed = proposal
            (placed.container, placed.scope, placed.parent, placed.name) = (current.container, current.scope, current.parent, current.name)
            // On the base it was refused on: a version committed since comes back stale, and
            // the next round merges with it.
            placed.base = proposal.base
            if SyncMerge.same(placed, current) {
                return try takeCurrent(current, over: here, keepingOurs: nil, after: state, &round)
            }
            let outcome = try commitPlaced(placed, operation: operation + "/in-place", &round)
            guard case .current(let number, let sequence) = outcome else {
                round.again.insert(item)
                return
            }
            var applied = placed
            applied.number = number
            if try apply(applied, expecting: ApplyExpectation(here), keepingHereAsConflict: nil) == .applied {
                try settle(placed, number: number, sequence: sequence, after: state)
                keepAsEveryMachineKeeps(placed, committedAs: number, after: state)
            }
            round.merged += 1
        case .nameTaken:
            if try !takeAnotherName(proposal, here: here, operation: operation, after: state, &round) { round.again.insert(item) }
        case .folderGone(let folder):
            // Its folder could not be brought back (it is no folder here either): tried again.
            note("up \(item): its folder \(folder) is deleted on the remote and cannot be brought back from here; again next round")
            round.again.insert(item)
        }
    }

    /// Another item committed the name first: `proposal`'s item takes the first name free here
    /// and on the remote (`SyncNames`), and is renamed here to it. Answers whether it went up.
    private func takeAnotherName(_ proposal: RemoteVersion, here: RemoteVersion, operation: String, after state: ItemSyncState?,
                                 _ round: inout Round) throws(SyncError) -> Bool {
        let item = proposal.item
        var refused: Set<String> = [proposal.name]
        for _ in 0..<64 {
            let candidate = try SyncNames.free(proposal.name) { (name: String) throws(SyncError) -> Bool in
                if refused.contains(name) { return true }
                return try SyncError.local("look up a name") {
                    try store.item(named: name, in: proposal.parent, container: proposal.container, scope: proposal.scope) != nil
                }
            }
            var renamed = proposal
            renamed.name = candidate
            switch try commitPlaced(renamed, operation: operation + "/as-\(candidate)", &round) {
            case .misplaced(.nameTaken):
                refused.insert(candidate)
            case .current(let number, let sequence):
                note("up \(item): \(proposal.name) is another item's on the remote; it goes as \(candidate)")
                // Made what the remote has here (renamed; a merge's other fields too), as a merge
                // that went up is, with the versions it passed over kept.
                var applied = renamed
                applied.number = number
                if try apply(applied, expecting: ApplyExpectation(here), keepingHereAsConflict: nil) == .applied {
                    try settle(renamed, number: number, sequence: sequence, after: state)
                    keepAsEveryMachineKeeps(renamed, committedAs: number, after: state)
                } else {
                    round.again.insert(item)  // changed here meanwhile: it goes up from where it was
                }
                return true
            default:
                return false
            }
        }
        return false
    }

    /// Brings `folder` here as the remote has it, when it is not here and the remote has it
    /// (an item is about to be applied into it): removed here, its removal not gone up yet, it
    /// comes back (an item another machine put in it wins over the removal, as on the remote).
    func bringFolderHere(_ folder: UInt64, depth: Int) throws(SyncError) {
        guard folder != 0, depth < 64, try SyncError.local("look for item \(folder)", { try store.isGone(folder) }),
              let current = try SyncError.remote({ () throws(RemoteError) in try remote.currentVersion(of: folder) }),
              !current.deleted, current.kind == .folder else { return }
        let state = try syncState(of: folder)
        note("down \(folder) v\(current.number): brought here for an item that goes in it")
        if try apply(current, expecting: .absent, keepingHereAsConflict: nil, depth: depth + 1) == .applied {
            try settle(current, number: current.number, sequence: nil, after: state)
        }
    }
}
