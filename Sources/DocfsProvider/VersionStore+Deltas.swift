import CLinux
import DocfsCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// Versions kept as deltas (issue 20 §1): a record saying the content is the next newer
/// state's, cut to its size, with the bytes a session saved before overwriting them laid over
/// it. The saved bytes sit at their own offsets in the version's content file (sparse), and
/// `<version>.saved` lists their ranges (16 bytes each: start and end, little-endian), appended
/// only once the bytes are in place, so a range listed is a range kept.
///
/// Between a delta and the next newer previous version (or the current file) every change of
/// the content was either saved first (`save`), an append past the delta's size, or preceded
/// by `materializeNewestPrefix`, which fills in the rest and makes the delta a whole copy.
extension VersionStore {
    func savedPath(_ item: ItemID, _ version: UInt64) -> String { contentPath(item, version) + ".saved" }

    /// The ranges a delta has saved.
    public func savedRanges(of item: ItemID, version: UInt64) -> ByteRanges {
        guard let bytes = try? StoreFiles.read(savedPath(item, version)) else { return ByteRanges() }
        var ranges = ByteRanges()
        var offset = 0
        while offset + 16 <= bytes.count {
            let start = Self.int64(bytes, offset), end = Self.int64(bytes, offset + 8)
            if start >= 0 && end > start { ranges.insert(start..<end) }
            offset += 16
        }
        return ranges
    }

    /// Saves `ranges` of the current content (`current`, open for reading) into delta
    /// `version` of `item` before they are overwritten. Throws (ENOSPC on a full disk) with
    /// nothing listed that is not in place.
    public func save(_ ranges: [Range<Int64>], of item: ItemID, version: UInt64, from current: Int32) throws(DocfsError) {
        // A delta pruned meanwhile (the policy keeps fewer) needs nothing: no file is left behind.
        // One made whole and cut into chunks is no delta any more: nothing is saved into it.
        guard !ranges.isEmpty, access(recordPath(item, version), F_OK) == 0, access(chunksPath(item, version), F_OK) != 0 else { return }
        let content = open(contentPath(item, version), O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard content >= 0 else { throw failure("cannot save what version \(version) of item \(item) held") }
        defer { close(content) }
        var listed: [UInt8] = []
        var bytes: Int64 = 0
        for range in ranges {
            // Past the end of the file there is nothing to save.
            let end = try copyRange(range, from: current, to: content, failing: "cannot save what version \(version) of item \(item) held")
            guard end > range.lowerBound else { continue }
            listed += Self.bytes(range.lowerBound) + Self.bytes(end)
            bytes += end - range.lowerBound
        }
        guard !listed.isEmpty else { return }
        let list = open(savedPath(item, version), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard list >= 0 else { throw failure("cannot list what version \(version) of item \(item) saved") }
        defer { close(list) }
        let written = listed.withUnsafeBytes { write(list, $0.baseAddress, $0.count) }
        guard written == listed.count else {
            if written > 0 { ftruncate(list, lseek(list, 0, SEEK_END) - off_t(written)) }  // no torn entry
            throw failure("cannot list what version \(version) of item \(item) saved")
        }
        account(bytes)
    }

    /// Before the current content of `item` (open for reading as `current`) changes in a way
    /// no delta sees: the newest previous version, if it is a delta, gets the rest of its bytes
    /// from the current file and becomes a whole copy, so it (and the older deltas that lead to
    /// it) no longer depend on the current file. Answers the bytes copied.
    @discardableResult
    public func materializeNewestPrefix(of item: ItemID, from current: Int32) throws(DocfsError) -> Int64 {
        guard var newest = versions(of: item).last(where: \.isInChain), newest.isPrefix else { return 0 }
        let saved = savedRanges(of: item, version: newest.version)
        let content = open(contentPath(item, newest.version), O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard content >= 0 else { throw failure("cannot keep version \(newest.version) of item \(item)") }
        defer { close(content) }
        var copied: Int64 = 0
        for gap in saved.missing(in: 0..<newest.size) {
            let end = try copyRange(gap, from: current, to: content, failing: "cannot keep version \(newest.version) of item \(item)")
            guard end == gap.upperBound else {
                throw DocfsError(.storeUnavailable, "version \(newest.version) of item \(item) relied on \(newest.size) bytes of a "
                                 + "file now \(end) bytes long (changed behind docfs's back)")
            }
            copied += gap.upperBound - gap.lowerBound
        }
        guard ftruncate(content, off_t(newest.size)) == 0 else { throw failure("cannot keep version \(newest.version) of item \(item)") }
        newest.prefix = nil
        newest.savedBytes = nil
        try writeRecord(newest, of: item)
        unlink(savedPath(item, newest.version))
        account(copied)
        settleLater(item, version: newest.version)
        return copied
    }

    /// Makes delta `version` of `item` a whole copy of what it stands for (made up as
    /// `openContent` does, `current` the current content's path), in place.
    public func makeWhole(_ item: ItemID, version: UInt64, current: String) throws(DocfsError) {
        guard var record = try? readRecord(item, version), record.isPrefix else { return }
        let content = try openContent(item, version: version, current: current)
        let incoming = try makeIncoming(item)
        let fd = open(incoming, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("cannot make version \(version) of item \(item) whole") }
        do throws(DocfsError) {
            defer { close(fd) }
            _ = try content.copy(to: fd)
        } catch {
            unlink(incoming)
            throw error
        }
        guard rename(incoming, contentPath(item, version)) == 0 else {
            unlink(incoming)
            throw failure("cannot make version \(version) of item \(item) whole")
        }
        record.prefix = nil
        record.savedBytes = nil
        try writeRecord(record, of: item)
        unlink(savedPath(item, version))
        settleLater(item, version: version)
    }

    /// The content of kept version `version` of `item`. A delta is made up in a file of its own
    /// (unlinked), from the next newer whole version or the current file (`current`, a path)
    /// and the saved bytes of every delta in between.
    public func openContent(_ item: ItemID, version: UInt64, current: String) throws(DocfsError) -> VersionContent {
        let all = versions(of: item).filter { $0.isInChain || $0.version == version }
        guard let index = all.firstIndex(where: { $0.version == version }) else {
            throw DocfsError(.invalidArgument, "version \(version) is not kept: see docfs versions for the ones that are")
        }
        guard all[index].isPrefix else { return try openWhole(item, version: version) }
        // The deltas from this one up to the next whole state, and that state.
        var chain = [all[index]]
        var next = index + 1
        while next < all.count && all[next].isPrefix {
            chain.append(all[next])
            next += 1
        }
        let made = try makeIncoming(item)
        let fd = open(made, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("cannot make up version \(version) of item \(item)") }
        unlink(made)
        do throws(DocfsError) {
            let newest = chain.last!
            let baseLength: Int64
            if next < all.count {  // a whole version: its content goes in as it is, then is cut
                baseLength = try openWhole(item, version: all[next].version).copy(to: fd)
            } else {
                let source = open(current, O_RDONLY | O_CLOEXEC)
                guard source >= 0 else { throw DocfsError(.storeUnavailable, "cannot read version \(version) of item \(item)", cause: DocfsError.errno(current)) }
                defer { close(source) }
                var st = stat()
                _ = fstat(source, &st)
                baseLength = min(Int64(st.st_size), newest.size)
                try copyWhole(0..<baseLength, from: source, to: fd, what: "version \(version) of item \(item)")
            }
            let lacking = savedRanges(of: item, version: newest.version).missing(in: min(baseLength, newest.size)..<newest.size)
            guard lacking.isEmpty else {
                throw DocfsError(.storeUnavailable, "version \(version) of item \(item) is lost: it relied on \(newest.size) bytes of a file "
                                 + "that is shorter now (changed behind docfs's back)")
            }
            for delta in chain.reversed() {
                guard ftruncate(fd, off_t(delta.size)) == 0 else { throw failure("cannot make up version \(version) of item \(item)") }
                let saved = savedRanges(of: item, version: delta.version)
                guard !saved.isEmpty else { continue }
                let bytes = open(contentPath(item, delta.version), O_RDONLY | O_CLOEXEC)
                guard bytes >= 0 else { throw failure("cannot read what version \(delta.version) of item \(item) saved") }
                defer { close(bytes) }
                for range in saved.ranges where range.lowerBound < delta.size {
                    try copyWhole(range.lowerBound..<min(range.upperBound, delta.size), from: bytes, to: fd, what: "version \(version) of item \(item)")
                }
            }
        } catch {
            close(fd)
            throw error
        }
        return VersionContent(parts: [.open(fd: fd, length: all[index].size)], what: "version \(version) of item \(item)")
    }

    /// Copies all of `range` of `source` to the same offsets of `target` (a version made up).
    private func copyWhole(_ range: Range<Int64>, from source: Int32, to target: Int32, what: String) throws(DocfsError) {
        guard try copyRange(range, from: source, to: target, failing: "cannot make up \(what)") == range.upperBound else {
            throw DocfsError(.storeUnavailable, "\(what) is lost: what it was made from ended early")
        }
    }

    private static func int64(_ bytes: [UInt8], _ offset: Int) -> Int64 {
        var value: UInt64 = 0
        for i in 0..<8 { value |= UInt64(bytes[offset + i]) << (8 * UInt64(i)) }
        return Int64(bitPattern: value)
    }

    private static func bytes(_ value: Int64) -> [UInt8] {
        let bits = UInt64(bitPattern: value)
        return (0..<8).map { UInt8(truncatingIfNeeded: bits >> (8 * UInt64($0))) }
    }
}
