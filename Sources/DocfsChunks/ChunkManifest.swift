#if canImport(Glibc)
import Glibc
#endif

/// One chunk of some content: where it starts, how long it is, and its digest.
public struct ChunkReference: Hashable, Sendable {
    public var offset: Int64
    public var length: Int64
    public var digest: ChunkDigest

    public init(offset: Int64, length: Int64, digest: ChunkDigest) {
        self.offset = offset
        self.length = length
        self.digest = digest
    }
}

/// Content kept as chunks: a folder holding, for each chunk in order, a hard link into the
/// `ChunkStore` named `<8-digit index>-<digest>`. The folder is made under a temporary name
/// and renamed into place when every link is in it, so a manifest folder that exists is
/// complete; the content's length is the sum of its chunks'.
public enum ChunkManifest {
    /// Cuts the first `length` bytes of `fd` into chunks and links each into a new folder at
    /// `folder` (which must not exist). Answers the chunks and the bytes newly stored. On
    /// failure nothing is left: the folder and any chunk only it used go.
    public static func write(from fd: Int32, length: Int64, into folder: String, store: ChunkStore) throws(ChunkError) -> (chunks: [ChunkReference], storedBytes: Int64) {
        guard mkdir(folder, 0o700) == 0 else { throw ChunkError("cannot create \(folder)", errno: errno) }
        var chunks: [ChunkReference] = []
        var stored: Int64 = 0
        do throws(ChunkError) {
            try store.chunker.forEachChunk(of: fd, length: length) { (offset, bytes) throws(ChunkError) in
                let digest = ChunkDigest(of: bytes)
                stored += try store.link(bytes, digest: digest, at: folder + "/" + name(chunks.count, digest))
                chunks.append(ChunkReference(offset: offset, length: Int64(bytes.count), digest: digest))
            }
        } catch {
            remove(folder, store: store)
            throw error
        }
        return (chunks, stored)
    }

    /// The chunks of the manifest folder `folder`, in order; nil when it does not exist.
    public static func read(_ folder: String) -> [ChunkReference]? {
        guard access(folder, F_OK) == 0 else { return nil }
        var chunks: [ChunkReference] = []
        var offset: Int64 = 0
        for name in ChunkStore.names(in: folder).filter({ $0.utf8.count == 73 }).sorted() {
            guard let digest = ChunkDigest(hex: name.dropFirst(9)) else { continue }
            var st = stat()
            guard stat(folder + "/" + name, &st) == 0 else { continue }
            chunks.append(ChunkReference(offset: offset, length: Int64(st.st_size), digest: digest))
            offset += Int64(st.st_size)
        }
        return chunks
    }

    /// The path of chunk `chunk` (at `index`) within manifest folder `folder`.
    public static func path(_ folder: String, index: Int, _ chunk: ChunkReference) -> String {
        folder + "/" + name(index, chunk.digest)
    }

    /// Removes the manifest folder `folder`, letting go of each chunk; answers the bytes freed.
    @discardableResult
    public static func remove(_ folder: String, store: ChunkStore) -> Int64 {
        var freed: Int64 = 0
        for name in ChunkStore.names(in: folder) {
            if name.utf8.count == 73, let digest = ChunkDigest(hex: name.dropFirst(9)) {
                freed += store.release(folder + "/" + name, digest: digest)
            } else {
                unlink(folder + "/" + name)
            }
        }
        rmdir(folder)
        return freed
    }

    /// The bytes of the manifest's chunks no other user links: what removing it would free.
    public static func ownBytes(_ folder: String) -> Int64 {
        var own: Int64 = 0
        for name in ChunkStore.names(in: folder) where name.utf8.count == 73 {
            var st = stat()
            if stat(folder + "/" + name, &st) == 0 && st.st_nlink <= 2 { own += Int64(st.st_size) }
        }
        return own
    }

    /// Whether the first `length` bytes of `fd` cut into exactly the manifest's chunks (the
    /// same content, read once and hashed).
    public static func matches(_ folder: String, fd: Int32, length: Int64, chunker: ContentChunker) -> Bool {
        guard let chunks = read(folder), (chunks.last.map { $0.offset + $0.length } ?? 0) == length else { return false }
        var index = 0
        do throws(ChunkError) {
            try chunker.forEachChunk(of: fd, length: length) { (_, bytes) throws(ChunkError) in
                guard index < chunks.count, chunks[index].length == Int64(bytes.count),
                      chunks[index].digest == ChunkDigest(of: bytes) else { throw ChunkError("differs") }
                index += 1
            }
        } catch {
            return false
        }
        return index == chunks.count
    }

    private static func name(_ index: Int, _ digest: ChunkDigest) -> String {
        let number = String(index)
        return String(repeating: "0", count: max(0, 8 - number.count)) + number + "-" + digest.hex
    }
}
