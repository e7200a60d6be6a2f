import CLinux
import DocfsChunks
import DocfsCore
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The whole versions waiting for the settler, oldest first.
struct SettleQueue {
    var waiting: [(item: ItemID, version: UInt64, tries: Int)] = []
    var running = false
}

/// Versions kept as chunks (issue 20 §1): a copy is cut into content-defined chunks as it is
/// kept, and a file a safe-save replace linked in (kept at no cost on the replace's path) is
/// cut later by a background settler, so successive versions of a document share every chunk
/// their content has in common and keeping one costs about what changed. Content smaller than
/// a chunk stays a plain file; deltas stay deltas until they become whole.
extension VersionStore {
    func chunksPath(_ item: ItemID, _ version: UInt64) -> String { contentPath(item, version) + ".chunks" }

    /// For a version kept as chunks, the bytes of those no other version uses; nil otherwise.
    func ownChunkBytes(_ item: ItemID, _ version: UInt64) -> Int64? {
        let folder = chunksPath(item, version)
        guard access(folder, F_OK) == 0 else { return nil }
        return ChunkManifest.ownBytes(folder)
    }

    /// The chunks of a version kept as chunks (for the sync engine and `docfs versions`).
    public func chunkList(of item: ItemID, version: UInt64) -> [ChunkReference]? {
        ChunkManifest.read(chunksPath(item, version))
    }

    /// Keeps what `fd` holds as `record.version` of `item`, cut into chunks: only chunks the
    /// store lacks are written.
    func keepChunks(of fd: Int32, item: ItemID, record: VersionRecord) throws(DocfsError) {
        let incoming = try makeIncoming(item)
        let written: (chunks: [ChunkReference], storedBytes: Int64)
        do {
            written = try ChunkManifest.write(from: fd, length: record.size, into: incoming, store: chunks)
        } catch {
            throw failure("cannot keep version \(record.version) of item \(item) (\(error.message))", errno: error.errno ?? EIO)
        }
        var kept = record
        kept.size = written.chunks.last.map { $0.offset + $0.length } ?? 0  // the file may have shrunk meanwhile
        if try publish(incoming, item: item, record: kept, chunked: true) { account(written.storedBytes) }
    }

    /// Has the settler cut whole version `version` of `item` into chunks soon (a linked-in
    /// file, or a delta made whole). Nothing happens to content smaller than a chunk.
    func settleLater(_ item: ItemID, version: UInt64) {
        let start = settling.withLock { queue -> Bool in
            queue.waiting.append((item, version, 0))
            defer { queue.running = true }
            return !queue.running
        }
        if start {
            DetachedThread.start { [self] in runSettler() }
        }
        settleSignal.signal()
    }

    /// The settler: cuts waiting versions into chunks one at a time, a little after they
    /// arrive (a replace links the superseded file in before it moves it away).
    private func runSettler() {
        docfs_make_thread_background()  // out of the way of the writes it follows
        while true {
            settleSignal.wait()
            usleep(100_000)
            while let next = settling.withLock({ $0.waiting.isEmpty ? nil : $0.waiting.removeFirst() }) {
                if !settle(next.item, version: next.version), next.tries < 20 {
                    settling.withLock { $0.waiting.append((next.item, next.version, next.tries + 1)) }
                    settleSignal.signal()
                    usleep(100_000)
                }
            }
        }
    }

    /// Cuts whole version `version` of `item` into chunks, then drops the whole file. Answers
    /// false when it should be tried again later (the file is still a second name of the
    /// current content: the replace has not moved it away yet).
    @discardableResult
    public func settle(_ item: ItemID, version: UInt64) -> Bool {
        guard let record = try? readRecord(item, version), !record.isPrefix, record.size >= Int64(chunks.chunker.minimumSize),
              access(chunksPath(item, version), F_OK) != 0 else { return true }
        let fd = open(contentPath(item, version), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return true }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return true }
        guard st.st_nlink == 1 else { return false }
        guard PromisedContent.promisedNumber(fd) == nil else { return true }  // cut once fetched
        guard Int64(st.st_size) == record.size, let incoming = try? makeIncoming(item),
              let written = try? ChunkManifest.write(from: fd, length: record.size, into: incoming, store: chunks) else { return true }
        guard docfs_renameat2(AT_FDCWD, incoming, AT_FDCWD, chunksPath(item, version), DOCFS_RENAME_NOREPLACE) == 0 else {
            ChunkManifest.remove(incoming, store: chunks)
            return true
        }
        // Removed meanwhile (pruned): the chunks go again.
        guard access(recordPath(item, version), F_OK) == 0, unlink(contentPath(item, version)) == 0 else {
            ChunkManifest.remove(chunksPath(item, version), store: chunks)
            return true
        }
        account(written.storedBytes - record.size)
        return true
    }

    /// The content of whole (not delta) version `version` of `item`: its file, or its chunks.
    func openWhole(_ item: ItemID, version: UInt64) throws(DocfsError) -> VersionContent {
        let what = "version \(version) of item \(item)"
        for _ in 0..<3 {
            let folder = chunksPath(item, version)
            if let chunks = ChunkManifest.read(folder) {
                return VersionContent(parts: chunks.enumerated().map { index, chunk in
                    .path(ChunkManifest.path(folder, index: index, chunk), length: chunk.length)
                }, what: what)
            }
            let fd = open(contentPath(item, version), O_RDONLY | O_CLOEXEC)
            if fd >= 0 {
                do {
                    try fetchIfPromised(fd, item: item, version: version)
                } catch {
                    close(fd)
                    throw error
                }
                var st = stat()
                fstat(fd, &st)
                return VersionContent(parts: [.open(fd: fd, length: Int64(st.st_size))], what: what)
            }
            guard errno == ENOENT else { break }  // else settled meanwhile: read the chunks
        }
        throw DocfsError(.storeUnavailable, "cannot read \(what)", cause: DocfsError.errno("open"))
    }
}
