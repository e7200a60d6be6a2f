import DocfsChunks
import DocfsCore
import DocfsProvider
import DocfsSync
#if canImport(Glibc)
import Glibc
#endif

/// Saves made here that never went up on their own (issue 22 §6: every machine lists the same
/// versions): a document saved several times while offline, or faster than its uploads, keeps
/// each superseded save as a previous version here; each goes up as a version of its own,
/// oldest first, before the current content, so every other machine keeps it too.
extension StoreSync {
    /// When the store was linked (saves kept since go up; history from before stays here).
    var linkedSince: Double { (try? RemoteLink.load(shared.store.layout))??.linked ?? .infinity }

    public func unsentSaves(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64] {
        unsent(of: item, after: number, before: current).after
    }

    public func unsentSavesBeforeConflicts(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64] {
        unsent(of: item, after: number, before: current).before
    }

    /// The saves made here since the store was linked (its history from before stays here), in
    /// the chain (not one set aside, nor one kept from another machine), numbered between
    /// `number` and `current`: those after every conflict version, and those before one (part
    /// of the race it settled, perhaps: never current now).
    private func unsent(of item: UInt64, after number: UInt64, before current: UInt64) -> (after: [UInt64], before: [UInt64]) {
        guard current > number + 1 else { return ([], []) }
        let linked = linkedSince
        let kept = shared.store.versions.versions(of: ItemID(rawValue: item))
        let floor = max(number, kept.filter { $0.kind == .conflict }.map(\.version).max() ?? 0)
        let saves = kept.filter { $0.isInChain && $0.version > number && $0.version < current && $0.kept >= linked }.map(\.version)
        return (saves.filter { $0 > floor }, saves.filter { $0 <= floor })
    }

    public func unsentSave(of item: UInt64, number: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws
        -> (manifest: [ChunkDigest], size: Int64, modified: Double)? {
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        guard let record = versions.record(of: id, version: number), record.kind == .previous else { return nil }
        // Gone here (a save made before a deletion): only a whole version can be read.
        let document = try openDocument(item)
        defer { if document >= 0 { close(document) } }
        // One file (a whole version, or a delta made up from the content here), cut as it is;
        // one kept as chunks is put together in a file of its own first.
        let content = try versions.openContent(id, version: number, current: document >= 0 ? "/proc/self/fd/\(document)" : "/nonexistent")
        let fd: Int32
        var size: Int64?
        switch content.parts.count == 1 ? content.parts[0] : nil {
        case .open(let open, let length):
            (fd, size) = (dup(open), length)
        case .path(let path, let length):
            (fd, size) = (open(path, O_RDONLY | O_CLOEXEC), length)
        case nil:
            let scratch = try versions.scratchFile("unsent-\(item)-\(number)")
            unlink(scratch.path)
            fd = scratch.fd
        }
        guard fd >= 0 else { throw StoreSyncError("cannot read save \(number) of item \(item): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let length = try size ?? content.copy(to: fd)
        let (manifest, cutSize, _) = try withoutActuallyEscaping(cut) { cut in
            try chunks(ofFileAt: fd, item: item, length: length, remembering: false, cut: cut)
        }
        return (manifest, cutSize, record.modified)
    }

    public func setAside(_ numbers: [UInt64], of item: UInt64, above current: UInt64) throws {
        let id = ItemID(rawValue: item)
        // Not while a writer has it open (its session may be adding to the newest delta): they
        // stay in the chain, and are set aside when the item next goes up.
        guard !numbers.isEmpty, shared.stitcher?.isWritten(id) != true else { return }
        // Gone here (saves made before a deletion): deltas made up from it cannot be made whole.
        let document = try openDocument(item)
        defer { if document >= 0 { close(document) } }
        let versions = shared.store.versions
        try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) in
            // Oldest first, so they keep their order (each takes the number past every kept one).
            for number in numbers.sorted() where versions.record(of: id, version: number)?.isInChain == true {
                _ = try versions.detach(id, version: number, past: max(number, current),
                                        current: document >= 0 ? "/proc/self/fd/\(document)" : nil, sendFrom: linkedSince)
            }
        }
    }

    public func unsentAside(of item: UInt64) throws -> [UInt64] {
        shared.store.versions.unsentDetached(of: ItemID(rawValue: item))
    }

    public func sentAside(_ number: UInt64, of item: UInt64, as given: UInt64) throws -> UInt64? {
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        let document = try openDocument(item)
        defer { if document >= 0 { close(document) } }
        let written = shared.stitcher?.isWritten(id) == true
        return try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) -> UInt64? in
            var current = Self.versionNumber(of: document)
            var moved: UInt64?
            // The remote numbered it as the content here: that content has not gone up (the
            // remote gives no number twice), so its number matters to no machine yet, and it
            // moves past every kept one (as in `renumberSave`); else the save would keep its
            // own number here, and lose it to the next version kept with that number.
            if given == current, given != number, !written {
                let past = versions.firstFreeNumber(of: id, above: max(given, versions.versions(of: id).last?.version ?? 0))
                try renumberContent(of: item, document: document, to: past)
                (current, moved) = (past, past)
            }
            try versions.sent(id, version: number, as: given, current: current)
            return moved
        }
    }

    public func forgetPrevious(_ number: UInt64, of item: UInt64, holding manifest: [ChunkDigest], keptAs: UInt64?) throws -> Bool {
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        guard let record = versions.record(of: id, version: number), record.kind == .previous else { return false }
        guard let content = try unsentSave(of: item, number: number, cut: { _ in }), content.manifest == manifest else { return false }
        if let keptAs {
            guard let other = try unsentSave(of: item, number: keptAs, cut: { _ in }), other.manifest == manifest else { return false }
        }
        let document = try openDocument(item)
        defer { if document >= 0 { close(document) } }
        try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) in
            // A delta kept below it is made up from it: made whole first.
            if record.isInChain, let below = versions.versions(of: id).filter(\.isInChain).last(where: { $0.version < number }),
               below.isPrefix {
                try versions.makeWhole(id, version: below.version, current: document >= 0 ? "/proc/self/fd/\(document)" : "/nonexistent")
            }
            versions.remove(id, version: number)
        }
        return true
    }

    public func renumberSave(_ number: UInt64, of item: UInt64, as given: UInt64, contentRead read: UInt64) throws -> (moved: Bool, content: UInt64?) {
        let id = ItemID(rawValue: item)
        let document = try openDocument(item)
        defer { if document >= 0 { close(document) } }
        // A save began here since the engine read the content (it puts off an item open for
        // writing): it kept the content read and numbered itself past it. This save, the
        // saves after it (none gone up: they go after it, in order), the content read and the
        // session move up together, keeping their order (`WriteSessions.renumber`, which holds
        // a session still meanwhile); else the later saves would keep numbers the remote gives
        // others, and the content read go up past them, leaving them here alone.
        if read != .max, document >= 0, number < read, Self.versionNumber(of: document) > read {
            guard try renumberHere(item, read: number, given: given) != nil else { return (false, nil) }
            return (true, read + (given - number))
        }
        // Gone here (saves made before a deletion, going up before its tombstone): this save
        // and those after it move up together, keeping their order.
        if document < 0 {
            guard given > number else { return (false, nil) }
            return try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) -> (moved: Bool, content: UInt64?) in
                let versions = shared.store.versions
                let end = (versions.versions(of: id).filter(\.isInChain).map(\.version).max() ?? number) + 1
                return (try versions.shiftChain(id, from: number, below: end, by: given - number), nil)
            }
        }
        guard shared.stitcher?.isWritten(id) != true else { return (false, nil) }  // as `setAside`
        return try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) -> (moved: Bool, content: UInt64?) in
            let versions = shared.store.versions
            var current = Self.versionNumber(of: document)
            var content: UInt64?
            // The remote numbered the save as the content here, or past it: that content has not
            // gone up either (it goes after the saves before it), so its number matters to no
            // machine yet, and it moves past the save's new one; else the save could not take
            // that number, would lose it to the next version kept here, and go up again.
            if number < current, current <= given, !versions.isTaken(id, given),
               !versions.versions(of: id).contains(where: { $0.isInChain && $0.version > number && $0.version <= given }) {
                let moved = versions.firstFreeNumber(of: id, above: given)
                try renumberContent(of: item, document: document, to: moved)
                (current, content) = (moved, moved)
            }
            if try versions.moveUp(id, version: number, to: given, current: current) { return (true, content) }
            // Later saves of the chain lie between (none gone up: the engine sends them in
            // order, after this one): this save, those after it and the content here move up
            // together by the same step, keeping their order, when no other kept version holds
            // a number they take; each then goes up under its number here.
            guard content == nil, given > number, number < current,
                  try versions.shiftChain(id, from: number, below: current, by: given - number) else { return (false, content) }
            let moved = current + (given - number)  // `shiftChain` checked it is free
            try renumberContent(of: item, document: document, to: moved)
            return (true, moved)
        }
    }

    /// Gives the content here (the document `document` of `item`, a save not gone up yet)
    /// the number `number`, and tells the views (its version).
    private func renumberContent(of item: UInt64, document: Int32, to number: UInt64) throws(DocfsError) {
        try ItemAttributes.setVersion(number, onDescriptor: document)
        shared.ownChanges.changedFile(at: document)
        if let view = shared.servedViews().first, let place = try? place(of: item),
           let located = try? Located(place: place, paths: shared.paths) {
            defer { located.close() }
            RemoteApplication.$machine.withValue(RemoteApplication.ownBookkeeping) {
                view.deliverUncached(.name(.attributes, located.name, inFolder: located.folder, item: ItemID(rawValue: item)))
            }
        }
    }

    /// A descriptor of the item's document here (the caller closes it); -1 when it is gone here.
    private func openDocument(_ item: UInt64) throws -> Int32 {
        try place(of: item).map { shared.paths.openPlace($0) } ?? -1
    }

    /// The version number of the document `fd` reaches; 0 for none (-1).
    private static func versionNumber(of fd: Int32) -> UInt64 {
        fd >= 0 ? ItemAttributes.version(ofDescriptor: fd) : 0
    }
}
