import DocfsChunks
import DocfsCore
import DocfsFilesystem
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
        let saves = kept.filter { $0.isInChain && $0.version > number && $0.version < current
            && (VersionNumber.isPending($0.version) || $0.kept >= linked) }.map(\.version)
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
            // Oldest first; pending saves keep their keys (`VersionStore.detach`).
            for number in numbers.sorted() where versions.record(of: id, version: number)?.isInChain == true {
                _ = try versions.detach(id, version: number, past: max(number, current),
                                        current: document >= 0 ? "/proc/self/fd/\(document)" : nil, sendFrom: linkedSince)
            }
        }
    }

    public func keptVersions(of item: UInt64) throws -> [UInt64: Bool] {
        var kept: [UInt64: Bool] = [:]
        for record in shared.store.versions.versions(of: ItemID(rawValue: item)) where !VersionNumber.isPending(record.version) {
            kept[record.version] = record.kind == .conflict
        }
        return kept
    }

    public func keeps(_ item: UInt64, version number: UInt64) throws -> Bool {
        shared.store.versions.isTaken(ItemID(rawValue: item), number)
    }

    public var largestVersionKept: Int64 {
        let policy = shared.store.versions.policy
        // A policy that keeps nothing (or less than the file) would prune it again at once.
        guard policy.maximumCount > 0 else { return -1 }
        return min(policy.maximumFileSize, policy.maximumTotalSize)
    }

    public func unsentAside(of item: UInt64) throws -> [UInt64] {
        shared.store.versions.unsentDetached(of: ItemID(rawValue: item))
    }

    public func forgetPrevious(_ number: UInt64, of item: UInt64, holding manifest: [ChunkDigest], keptAs: UInt64?) throws -> Bool {
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        guard versions.record(of: id, version: number)?.kind == .previous else { return false }
        guard let content = try unsentSave(of: item, number: number, cut: { _ in }), content.manifest == manifest else { return false }
        if let keptAs {
            guard let other = try unsentSave(of: item, number: keptAs, cut: { _ in }), other.manifest == manifest else { return false }
        }
        let document = try openDocument(item)
        defer { if document >= 0 { close(document) } }
        try shared.coordinator.withClaims([(id, .metadata)]) { () throws(DocfsError) in
            try versions.removeRepeated(id, version: number, current: document >= 0 ? "/proc/self/fd/\(document)" : "/nonexistent")
        }
        return true
    }

    /// A descriptor of the item's document here (the caller closes it); -1 when it is gone here.
    private func openDocument(_ item: UInt64) throws -> Int32 {
        try place(of: item).map { shared.paths.openPlace($0) } ?? -1
    }

}
