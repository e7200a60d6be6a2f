import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// The stitching journal beside the index database (`index.journal`): the daemon appends each
/// stitched change to it — one `write` — before the operation returns to its caller, and a
/// background commit moves the changes into SQLite in batches. Readers in any process read the
/// journal, then the database, and lay the journal's uncommitted frames over what the database
/// holds (`IndexOverlay`), so a query sees every change whose operation has returned (S1)
/// without the operation waiting for a SQLite transaction.
///
/// The file is a header line, then frames:
///
///     u32 payload length · u32 FNV-1a of the rest · i64 sequence · i64 first entry · payload
///
/// where the payload is `IndexChangeCoding`'s form of the changes. A frame carries the change
/// sequence and the entry numbers its puts take, so whoever applies it (the daemon's commit, or a
/// daemon replaying a journal its killed predecessor left) writes exactly the same rows. A torn
/// last frame (a crash mid-append) fails its checksum and ends the journal.
///
/// Past `IndexDatabase.journalRestartSize` the journal is replaced by one holding only the
/// frames still waiting for their commit, so a reader that opens the journal after a stitch
/// returned finds every frame its snapshot lacks. The database notes where the last committed
/// frame ends (and in which journal, by inode): a reader reads only what follows.
enum IndexJournal {
    static let header: [UInt8] = Array("docfs index journal 1\n".utf8)
    static let frameHeaderLength = 24

    /// A frame as read: its numbers, and its changes still encoded.
    struct Frame {
        var sequence: Int64
        var entryBase: Int64
        var payload: ArraySlice<UInt8>

        func changes() throws(IndexChangeCoding.Malformed) -> [IndexChange] {
            try IndexChangeCoding.decode(payload)
        }
    }

    /// Where the journal of the index at `databasePath` is.
    static func path(forDatabase databasePath: String) -> String {
        let slash = databasePath.lastIndex(of: "/").map { databasePath.index(after: $0) } ?? databasePath.startIndex
        let file = databasePath[slash...]
        let stem = file.lastIndex(of: ".").map { file[..<$0] } ?? file
        return String(databasePath[..<slash]) + stem + ".journal"
    }

    /// The bytes of one frame.
    static func frame(sequence: Int64, entryBase: Int64, changes: [IndexChange]) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 8)
        var w = IndexChangeCoding.Writer(bytes: bytes)
        w.i64(sequence)
        w.i64(entryBase)
        bytes = w.bytes
        IndexChangeCoding.encode(changes, into: &bytes)
        let length = UInt32(bytes.count - frameHeaderLength)
        let sum = checksum(bytes[8...])
        withUnsafeBytes(of: length.littleEndian) { for i in 0..<4 { bytes[i] = $0[i] } }
        withUnsafeBytes(of: sum.littleEndian) { for i in 0..<4 { bytes[4 + i] = $0[i] } }
        return bytes
    }

    /// The frames of the journal at `path` (none when there is none), up to the first that is
    /// torn or damaged.
    static func read(_ path: String) -> [Frame] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        return frames(in: readAll(fd, from: 0))
    }

    /// The frames of the open journal `fd` from byte `offset` (where a frame begins) when the
    /// file is the journal `inode`, else from its start.
    static func read(_ fd: Int32, from offset: Int, ifInode inode: UInt64) -> [Frame] {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return [] }
        guard UInt64(st.st_ino) == inode, offset >= header.count, offset <= Int(st.st_size) else {
            return frames(in: readAll(fd, from: 0))
        }
        return frames(in: readAll(fd, from: offset), startingAt: 0)
    }

    /// The frames in `bytes`, a whole journal (`startingAt` nil: after its header) or frames
    /// from a frame's start.
    static func frames(in bytes: [UInt8], startingAt start: Int? = nil) -> [Frame] {
        if start == nil { guard bytes.starts(with: header) else { return [] } }
        var frames: [Frame] = []
        var at = start ?? header.count
        while bytes.count - at >= frameHeaderLength {
            var r = IndexChangeCoding.Reader(bytes: bytes[at...])
            guard let length = try? r.u32(), let sum = try? r.u32(), let sequence = try? r.i64(),
                  let entryBase = try? r.i64() else { break }
            let end = at + frameHeaderLength + Int(length)
            guard end <= bytes.count, checksum(bytes[(at + 8)..<end]) == sum else { break }
            frames.append(Frame(sequence: sequence, entryBase: entryBase, payload: bytes[(at + frameHeaderLength)..<end]))
            at = end
        }
        return frames
    }

    private static func readAll(_ fd: Int32, from offset: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var st = stat()
        if fstat(fd, &st) == 0 { bytes.reserveCapacity(max(Int(st.st_size) - offset, 0)) }
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var at = offset
        while true {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, off_t(at)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            bytes.append(contentsOf: chunk[0..<n])
            at += n
        }
        return bytes
    }

    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt32 {
        var hash: UInt32 = 0x811c_9dc5
        for byte in bytes {
            hash ^= UInt32(byte)
            hash &*= 0x0100_0193
        }
        return hash
    }

    // MARK: - Writing

    /// The journal the one writing process appends to: held locked (flock) while it is open,
    /// so a second writer is refused rather than replacing the file under the first.
    struct Writer {
        let path: String
        private(set) var fd: Int32
        /// Bytes in the file.
        private(set) var size: Int
        /// The file's inode number (which journal this is).
        private(set) var inode: UInt64 = 0

        /// Opens the journal at `path` for appending, making it when there is none; waits up
        /// to `patience` seconds for another writer to close it.
        static func open(_ path: String, waitingUpTo patience: Double) throws(DocfsError) -> Writer {
            var waited = 0.0
            while true {
                let fd = Glibc.open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0o644)
                guard fd >= 0 else { throw failure("cannot open the index journal at \(path)", errno) }
                if flock(fd, LOCK_EX | LOCK_NB) == 0 {
                    // The writer that had it may have put a new journal in its place meanwhile.
                    var held = stat(), named = stat()
                    if fstat(fd, &held) == 0 && stat(path, &named) == 0 && held.st_ino == named.st_ino && held.st_dev == named.st_dev {
                        var writer = Writer(path: path, fd: fd, size: Int(held.st_size), inode: UInt64(held.st_ino))
                        do {
                            if writer.size == 0 { try writer.append(header) }
                        } catch {
                            writer.close()
                            throw error
                        }
                        return writer
                    }
                    Glibc.close(fd)
                    continue
                }
                let e = errno
                Glibc.close(fd)
                guard e == EWOULDBLOCK && waited < patience else {
                    throw DocfsError(.storeBusy, "the index at \(path) is being written by another process (the daemon serving the store?)",
                                     cause: DocfsError.system(e))
                }
                usleep(20_000)
                waited += 0.02
            }
        }

        /// Appends `bytes` (one frame) with one write.
        mutating func append(_ bytes: [UInt8]) throws(DocfsError) {
            var done = 0
            while done < bytes.count {
                let n = bytes.withUnsafeBytes { write(fd, $0.baseAddress! + done, $0.count - done) }
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Self.failure("cannot append to the index journal at \(path)", errno) }
                done += n
            }
            size += bytes.count
        }

        /// Replaces the journal with one holding only `frames` (those not in the database yet).
        mutating func restart(carrying frames: [[UInt8]]) throws(DocfsError) {
            let fresh = path + ".new"
            let newFD = Glibc.open(fresh, O_RDWR | O_APPEND | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard newFD >= 0 else { throw Self.failure("cannot make a new index journal at \(fresh)", errno) }
            var st = stat()
            _ = fstat(newFD, &st)
            var replacement = Writer(path: path, fd: newFD, size: 0, inode: UInt64(st.st_ino))
            guard flock(newFD, LOCK_EX | LOCK_NB) == 0 else {
                Glibc.close(newFD)
                throw Self.failure("cannot lock the new index journal at \(fresh)", errno)
            }
            do {
                try replacement.append(IndexJournal.header + frames.joined())
            } catch {
                replacement.close()
                throw error
            }
            guard rename(fresh, path) == 0 else {
                let e = errno
                replacement.close()
                throw Self.failure("cannot put the new index journal in place at \(path)", e)
            }
            close()
            self = replacement
        }

        func close() {
            if fd >= 0 { _ = Glibc.close(fd) }
        }

        private static func failure(_ message: String, _ code: Int32) -> DocfsError {
            DocfsError(.internalFailure, message, cause: DocfsError.system(code))
        }
    }
}
