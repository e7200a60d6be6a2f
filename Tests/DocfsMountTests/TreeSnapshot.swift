import CLinux
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A comparable description of a directory tree: per entry its relative path, type, permission
/// bits, size, link count, content digest, symlink target and user.* xattrs. Times and inode
/// numbers are left out (they differ between any two trees), and so are docfs's own attributes
/// (`user.docfs.*`), which a plain directory does not have.
enum TreeSnapshot {
    static func take(_ root: String, excluding: Set<String> = []) -> [String] {
        var lines: [String] = []
        walk(root, relative: "", excluding: excluding, into: &lines)
        return lines.sorted()
    }

    private static func walk(_ root: String, relative: String, excluding: Set<String>, into lines: inout [String]) {
        let directory = relative.isEmpty ? root : root + "/" + relative
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names.sorted() {
            let rel = relative.isEmpty ? name : relative + "/" + name
            if excluding.contains(rel) { continue }
            let path = root + "/" + rel
            var st = stat()
            guard lstat(path, &st) == 0 else { lines.append("\(rel) lstat-failed \(errno)"); continue }
            let type = st.st_mode & S_IFMT
            var line = "\(rel) mode=\(String(st.st_mode, radix: 8)) uid=\(st.st_uid) gid=\(st.st_gid)"
            switch type {
            case S_IFREG:
                line += " size=\(st.st_size) links=\(st.st_nlink) sum=\(digest(path))"
            case S_IFLNK:
                line += " -> \((try? FileManager.default.destinationOfSymbolicLink(atPath: path)) ?? "?")"
            case S_IFDIR:
                break
            default:
                line += " special"
            }
            if type != S_IFLNK { line += " xattrs=\(xattrs(path))" }
            lines.append(line)
            if type == S_IFDIR { walk(root, relative: rel, excluding: excluding, into: &lines) }
        }
    }

    /// FNV-1a of the content: enough to tell two files apart in a test.
    static func digest(_ path: String) -> String {
        guard let data = FileManager.default.contents(atPath: path) else { return "unreadable" }
        var hash: UInt64 = 0xcbf29ce484222325
        for byte in data {
            hash ^= UInt64(byte)
            hash = hash &* 0x100000001b3
        }
        return String(hash, radix: 16)
    }

    static func xattrs(_ path: String) -> String {
        var names = [CChar](repeating: 0, count: 65536)
        let n = docfs_llistxattr(path, &names, names.count)
        guard n > 0 else { return "" }
        let list = names[0..<n].split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) }
        return list.filter { $0.hasPrefix("user.") && !$0.hasPrefix(docfsAttributePrefix) }.sorted().map { name -> String in
            var value = [UInt8](repeating: 0, count: 65536)
            let m = docfs_lgetxattr(path, name, &value, value.count)
            return "\(name)=\(m >= 0 ? String(decoding: value[0..<m], as: UTF8.self) : "?")"
        }.joined(separator: ",")
    }

    /// The lines that differ, for a readable failure message.
    static func difference(_ a: [String], _ b: [String]) -> String {
        let left = Set(a), right = Set(b)
        let onlyA = a.filter { !right.contains($0) }.prefix(20).map { "  plain only: \($0)" }
        let onlyB = b.filter { !left.contains($0) }.prefix(20).map { "  docfs only: \($0)" }
        return (onlyA + onlyB).joined(separator: "\n")
    }
}

/// The attributes docfs keeps on every item (DESIGN §6).
let docfsAttributePrefix = "user.docfs."
