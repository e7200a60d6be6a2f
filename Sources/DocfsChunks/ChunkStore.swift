#if canImport(Glibc)
import Glibc
#endif

/// Content-addressed chunks, each stored once (issue 20 §1): `<directory>/<first two hex
/// digits>/<digest>`. Whoever uses a chunk holds a hard link to it (a kept version's manifest
/// folder, see `ChunkManifest`), so a chunk's link count is how many users it has, and the
/// last user to let go removes it: no reference database that a crash could leave out of step,
/// and no sweep. The sync engine uploads and fetches exactly these chunks.
///
/// Chunk files are written whole under a temporary name and linked in, so a chunk is listed
/// only complete; like kept versions they are not flushed to disk one by one. A chunk whose
/// size is wrong (cut short by a crash) is replaced the next time the same bytes are stored.
public final class ChunkStore: Sendable {
    public let directory: String
    public let chunker: ContentChunker

    public init(directory: String, chunker: ContentChunker = .standard) {
        self.directory = directory
        self.chunker = chunker
    }

    public func path(of digest: ChunkDigest) -> String {
        directory + "/" + digest.hex.prefix(2) + "/" + digest.hex
    }

    /// Gives the chunk `bytes` (whose digest is `digest`) the name `link` (a user's), storing
    /// it first unless it is stored already. Answers the bytes newly stored (0 when the chunk
    /// was there).
    public func link(_ bytes: UnsafeRawBufferPointer, digest: ChunkDigest, at link: String) throws(ChunkError) -> Int64 {
        let chunk = path(of: digest)
        var stored: Int64 = 0
        for _ in 0..<8 {
            var st = stat()
            if stat(chunk, &st) == 0 && Int(st.st_size) == bytes.count {
                if Glibc.link(chunk, link) == 0 { return stored }
                if errno != ENOENT { throw ChunkError("cannot link chunk \(digest) as \(link)", errno: errno) }
                continue  // its last user removed it meanwhile: store it again
            }
            stored += try put(bytes, at: chunk)
        }
        throw ChunkError("chunk \(digest) keeps disappearing while it is linked")
    }

    /// Writes `bytes` as the chunk at `chunk` (over one of the wrong size); answers how many.
    private func put(_ bytes: UnsafeRawBufferPointer, at chunk: String) throws(ChunkError) -> Int64 {
        let folder = String(chunk.dropLast(65))
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            guard errno == ENOENT, mkdir(directory, 0o700) == 0 || errno == EEXIST, mkdir(folder, 0o700) == 0 || errno == EEXIST else {
                throw ChunkError("cannot create \(folder)", errno: errno)
            }
        }
        let incoming = folder + "/.incoming-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        let fd = open(incoming, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ChunkError("cannot create \(incoming)", errno: errno) }
        var done = 0
        while done < bytes.count {
            let n = write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                let reason = errno
                close(fd)
                unlink(incoming)
                throw ChunkError("cannot write chunk \(chunk)", errno: reason)
            }
            done += n
        }
        close(fd)
        // Another writer of the same bytes may have won: its chunk is as good as this one.
        defer { unlink(incoming) }
        if Glibc.link(incoming, chunk) == 0 { return Int64(bytes.count) }
        guard errno == EEXIST else { throw ChunkError("cannot store chunk \(chunk)", errno: errno) }
        var st = stat()
        if stat(chunk, &st) == 0 && Int(st.st_size) != bytes.count {
            guard rename(incoming, chunk) == 0 else { throw ChunkError("cannot replace chunk \(chunk)", errno: errno) }
            return Int64(bytes.count)
        }
        return 0
    }

    /// A user lets go of its link `link` to chunk `digest`: the link goes, then the chunk when
    /// no other user links it. Answers the bytes freed.
    @discardableResult
    public func release(_ link: String, digest: ChunkDigest) -> Int64 {
        var mine = stat()
        guard lstat(link, &mine) == 0 else { return 0 }
        unlink(link)
        let chunk = path(of: digest)
        var st = stat()
        // One name left, and it is this chunk (not a newer one stored under the same name):
        // nobody else uses it. A user linking it right now still holds the bytes by its link.
        guard stat(chunk, &st) == 0, st.st_ino == mine.st_ino, st.st_dev == mine.st_dev, st.st_nlink == 1 else { return 0 }
        unlink(chunk)
        return Int64(st.st_size)
    }

    /// The bytes all stored chunks take (walks the store: for a first count).
    public func storedBytes() -> Int64 {
        var total: Int64 = 0
        for folder in Self.names(in: directory) where folder.utf8.count == 2 {
            for name in Self.names(in: directory + "/" + folder) where ChunkDigest(hex: name) != nil {
                var st = stat()
                if stat(directory + "/" + folder + "/" + name, &st) == 0 { total += Int64(st.st_size) }
            }
        }
        return total
    }

    /// Removes what a writer that died left: chunk files half made, and chunks stored but
    /// never linked by a user (it died between storing and linking). Call before anyone uses
    /// the store (nobody may be about to link a chunk); one stat per chunk.
    public func removeLeftovers() {
        for folder in Self.names(in: directory) where folder.utf8.count == 2 {
            for name in Self.names(in: directory + "/" + folder) {
                let path = directory + "/" + folder + "/" + name
                var st = stat()
                if name.hasPrefix(".incoming-") || (ChunkDigest(hex: name) != nil && stat(path, &st) == 0 && st.st_nlink == 1) {
                    unlink(path)
                }
            }
        }
    }

    /// The names in a folder of docfs's own (all ASCII), without "." and ".."; none when it
    /// does not exist.
    public static func names(in path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafePointer(to: &entry.pointee.d_name) {
                $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }
}
