import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Reads an item's index record (DESIGN §5 S2) off its backing file: attributes from stat and
/// statx, the docfs and freedesktop attributes from its xattrs, the content type from its name
/// and first bytes (a `user.mime_type` set by a user wins).
struct IndexRecordBuilder: Sendable {
    let container: ContainerID
    /// `documents` or `data`.
    let scope: String

    static let tagsAttribute = "user.xdg.tags"
    static let commentAttribute = "user.xdg.comment"
    static let mimeAttribute = "user.mime_type"

    /// The record of `name` in `directoryFD`, whose attributes are `st`, id `item`, at `path`
    /// within the scope (starting with `/`).
    func record(item: ItemID, directoryFD: Int32, name: FileName, path: String, st: stat) -> IndexRecord {
        let type = st.st_mode & S_IFMT
        let full = "/proc/self/fd/\(directoryFD)/\(name.description)"
        let kind: String
        var content: ContentType
        switch type {
        case S_IFDIR: (kind, content) = ("folder", .folder)
        case S_IFLNK: (kind, content) = ("symlink", .symlink)
        case S_IFREG: (kind, content) = ("file", ContentType.ofFile(in: directoryFD, name: name))
        default: (kind, content) = ("other", .other)
        }
        let canCarry = type == S_IFREG || type == S_IFDIR
        if canCarry, let chosen = Self.text(full, Self.mimeAttribute), !chosen.isEmpty { content = ContentType(mime: chosen) }
        var created = Self.seconds(st.st_ctim)
        var birthSeconds: Int64 = 0
        var birthNanoseconds: UInt32 = 0
        if docfs_birth_time(full, &birthSeconds, &birthNanoseconds) == 0 {
            created = Double(birthSeconds) + Double(birthNanoseconds) / 1e9
        }
        // Files docfs has versioned carry user.docfs.version; others are at version 1.
        let stored = Self.text(full, ItemAttributes.version).flatMap { Int64($0) } ?? 1
        let version = type == S_IFREG && !item.isDerived ? max(stored, 1) : 0
        return IndexRecord(
            id: Int64(bitPattern: item.rawValue), name: name.description, path: path, container: container.rawValue,
            containerName: container.displayName, scope: scope, kind: kind, size: type == S_IFREG ? Int64(st.st_size) : 0,
            created: created, modified: Self.seconds(st.st_mtim), contentType: content.mime, uti: content.uti,
            version: version,
            tags: canCarry ? IndexRecord.tags(fromAttribute: Self.text(full, Self.tagsAttribute) ?? "") : [],
            comment: canCarry ? Self.text(full, Self.commentAttribute) ?? "" : "",
            conflict: canCarry && Self.text(full, Filesystem.conflictAttribute) == "1")
    }

    private static func seconds(_ t: timespec) -> Double { Double(t.tv_sec) + Double(t.tv_nsec) / 1e9 }

    /// A user attribute as text (not following a symlink); nil when absent.
    private static func text(_ path: String, _ name: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { docfs_lgetxattr(path, name, $0.baseAddress, $0.count) }
        guard n >= 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }
}
