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
    /// Only saves made since the store was linked (its history from before stays here), in
    /// the chain (not one that gave way to another machine's number: it lost a race already,
    /// nor one kept from another machine), and after every conflict version (a save before
    /// one was part of the race it settled).
    public func unsentSaves(of item: UInt64, after number: UInt64, before current: UInt64) throws -> [UInt64] {
        guard current > number + 1 else { return [] }
        let linked = (try? RemoteLink.load(shared.store.layout))??.linked ?? .infinity
        let kept = shared.store.versions.versions(of: ItemID(rawValue: item))
        let floor = max(number, kept.filter { $0.kind == .conflict }.map(\.version).max() ?? 0)
        return kept.filter { $0.isInChain && $0.version > floor && $0.version < current && $0.kept >= linked }.map(\.version)
    }

    public func unsentSave(of item: UInt64, number: UInt64, cut: (_ batch: ChunkBatch) throws -> Void) throws
        -> (manifest: [ChunkDigest], size: Int64, modified: Double)? {
        let id = ItemID(rawValue: item)
        let versions = shared.store.versions
        guard let record = versions.record(of: id, version: number), record.kind == .previous,
              let place = try place(of: item) else { return nil }
        let document = shared.paths.openPlace(place)
        guard document >= 0 else { return nil }
        defer { close(document) }
        // One file (a whole version, or a delta made up from the content here), cut as it is;
        // one kept as chunks is put together in a file of its own first.
        let content = try versions.openContent(id, version: number, current: "/proc/self/fd/\(document)")
        let fd: Int32
        var size: Int64?
        switch content.parts.count == 1 ? content.parts[0] : nil {
        case .open(let open, let length):
            (fd, size) = (dup(open), length)
        case .path(let path, let length):
            (fd, size) = (open(path, O_RDONLY | O_CLOEXEC), length)
        case nil:
            let scratch = versions.directory + "/.unsent-\(item)-\(number)-XXXXXX"
            var template = Array(scratch.utf8CString)
            fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
            if fd >= 0 { _ = template.withUnsafeBufferPointer { unlink($0.baseAddress!) } }
        }
        guard fd >= 0 else { throw StoreSyncError("cannot read save \(number) of item \(item): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let length = try size ?? content.copy(to: fd)
        let (manifest, cutSize) = try withoutActuallyEscaping(cut) { cut in
            try chunks(ofFileAt: fd, item: item, length: length, remembering: false, cut: cut)
        }
        return (manifest, cutSize, record.modified)
    }
}
