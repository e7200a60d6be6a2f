import DocfsCore
import DocfsProvider
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
/// that did not fit in the kernel's last buffer, so the next readdir starts with it. A folder of
/// docfs's own (the control area) lists entries made when it was opened instead of a stream.
final class DirectoryHandle: Sendable {
    private struct Stream: @unchecked Sendable {
        // DIR* is only touched under `stream`'s lock.
        var dir: OpaquePointer?
        /// The entries of a listed folder (offsets are their positions).
        var list: [DirectoryEntry]?
        var offset: Int64 = 0
        var pending: DirectoryEntry?
    }

    /// The backing folder listed; nil for a folder of the control area.
    let node: Node?
    /// Whether the entries come from a list made when the folder was opened (their inode
    /// numbers are already the ones to show), rather than from the backing folder's stream.
    let isListed: Bool
    /// The virtual folder this handle lists (a read-only view, a control-area folder), whose
    /// entries are looked up through it; nil for a folder of the store.
    let virtualParent: NodeID?
    private let stream: Mutex<Stream>

    init(node: Node, dir: OpaquePointer, virtualParent: NodeID? = nil) {
        self.node = node
        self.virtualParent = virtualParent
        isListed = false
        self.stream = Mutex(Stream(dir: dir))
    }

    /// A listed folder: `entries` (without `.` and `..`, which are added with `inode`), looked
    /// up through `virtualParent`; `node` is the backing folder, when there is one.
    init(listing entries: [(name: FileName, inode: UInt64, type: UInt8)], inode: UInt64, virtualParent: NodeID,
         node: Node? = nil) {
        self.node = node
        self.virtualParent = virtualParent
        isListed = true
        let all = [(FileName("."), inode, UInt8(DT_DIR)), (FileName(".."), inode, UInt8(DT_DIR))] + entries
        let list = all.enumerated().map { position, entry in
            DirectoryEntry(name: entry.0, inode: entry.1, type: entry.2, nextOffset: Int64(position + 1))
        }
        stream = Mutex(Stream(dir: nil, list: list))
    }

    /// Reads entries from `offset` on, handing each to `body` until it answers false (the
    /// entry is then kept for the next call).
    func read(from offset: Int64, _ body: (DirectoryEntry) throws(DocfsError) -> Bool) throws(DocfsError) {
        try stream.withLock { (s: inout Stream) throws(DocfsError) in
            if offset != s.offset {
                if let dir = s.dir { seekdir(dir, Int(offset)) }
                s.offset = offset
                s.pending = nil
            }
            while true {
                let entry: DirectoryEntry
                if let pending = s.pending {
                    entry = pending
                    s.pending = nil
                } else if let list = s.list {
                    guard s.offset >= 0, s.offset < list.count else { return }
                    entry = list[Int(s.offset)]
                } else {
                    Glibc.errno = 0
                    guard let dir = s.dir, let raw = readdir(dir) else {
                        if Glibc.errno != 0 { throw DocfsError.errno("readdir") }
                        return
                    }
                    entry = Self.entry(raw)
                    // docfs's own working files are nobody's to see (`WorkingFileNames`).
                    if WorkingFileNames.contains(entry.name) {
                        s.offset = entry.nextOffset
                        continue
                    }
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
        stream.withLock { if let dir = $0.dir { _ = closedir(dir) } }
    }
}
