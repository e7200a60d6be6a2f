import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// One entry read from a directory stream.
public struct DirectoryEntry: Sendable {
    public var name: FileName
    public var inode: UInt64
    /// DT_* type of the entry, as readdir reports it.
    public var type: UInt8
    /// The offset to continue reading after this entry.
    public var nextOffset: Int64
}

/// An open directory (opendir … releasedir). It keeps the stream and its position, and an entry
/// that did not fit in the kernel's last buffer, so the next readdir starts with it.
final class DirectoryHandle: Sendable {
    private struct Stream: @unchecked Sendable {
        // DIR* is only touched under `stream`'s lock.
        var dir: OpaquePointer
        var offset: Int64 = 0
        var pending: DirectoryEntry?
    }

    let node: Node
    private let stream: Mutex<Stream>

    init(node: Node, dir: OpaquePointer) {
        self.node = node
        self.stream = Mutex(Stream(dir: dir))
    }

    /// Reads entries from `offset` on, handing each to `body` until it answers false (the
    /// entry is then kept for the next call).
    func read(from offset: Int64, _ body: (DirectoryEntry) throws(DocfsError) -> Bool) throws(DocfsError) {
        try stream.withLock { (s: inout Stream) throws(DocfsError) in
            if offset != s.offset {
                seekdir(s.dir, Int(offset))
                s.offset = offset
                s.pending = nil
            }
            while true {
                let entry: DirectoryEntry
                if let pending = s.pending {
                    entry = pending
                    s.pending = nil
                } else {
                    Glibc.errno = 0
                    guard let raw = readdir(s.dir) else {
                        if Glibc.errno != 0 { throw DocfsError.errno("readdir") }
                        return
                    }
                    entry = Self.entry(raw)
                }
                let taken: Bool
                do throws(DocfsError) {
                    taken = try body(entry)
                } catch {
                    s.pending = entry  // not lost: the next read starts with it
                    throw error
                }
                if !taken {
                    s.pending = entry
                    return
                }
                s.offset = entry.nextOffset
            }
        }
    }

    static func entry(_ raw: UnsafeMutablePointer<dirent>) -> DirectoryEntry {
        let name = withUnsafePointer(to: &raw.pointee.d_name) {
            $0.withMemoryRebound(to: CChar.self, capacity: 256) { FileName(cString: $0) }
        }
        return DirectoryEntry(name: name, inode: UInt64(raw.pointee.d_ino), type: raw.pointee.d_type,
                              nextOffset: Int64(raw.pointee.d_off))
    }

    deinit {
        stream.withLock { _ = closedir($0.dir) }
    }
}
