import CLinux
import DocfsChunks
import DocfsCore
import DocfsProvider
import DocfsSync
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Fetching the content of promised files (DESIGN §9.1, issue 23) as it is read: a read waits
/// only for the chunks of its range, fetched first; the rest follows in the background, on a
/// thread of the download's own. Every reader of one file shares one download. A read that
/// waits past `waitLimit`, or whose download failed, fails (EIO at the bridge) and says why;
/// the next read starts the download again from the chunks already on disk.
///
/// Lock order: `downloads` before a `Download`'s `state`; neither is held across a fetch, a
/// disk write or a wait.
public final class PromisedDownloads: Sendable {
    package let content: PromisedContent
    private let ownChanges: OwnChanges
    private let source = Mutex<(any Remote)?>(nil)
    private let versionInStep = Mutex<(@Sendable (UInt64) -> RemoteVersion?)?>(nil)  // set with `source`
    private let downloads = Mutex<[DownloadKey: Download]>([:])
    /// Seconds a read waits for its range before it fails.
    let waitLimit: Double
    /// Bytes fetched from the remote so far (what a read cost; `docfs status`, the tests).
    public let fetchedBytes = Atomic<Int64>(0)
    /// Whether the store may hold promised files: it makes them (`DownloadPolicy.onDemand`) or
    /// made some once. When not, nothing on the I/O path looks for them.
    private let active: Atomic<Bool>
    package var isActive: Bool { active.load(ordering: .relaxed) }

    /// The change time shown of each file seen promised in this run, until it changes after
    /// its download (`steadyChangeTime`); how many there are, so other files cost no lock.
    private let steadyTimes = Mutex<[BackingKey: SteadyTime]>([:])
    private let steadyCount = Atomic<Int>(0)

    struct SteadyTime {
        var shown: timespec
        /// The file's own change time once its download ended: while it is still that, the
        /// file changed only by the download.
        var downloaded: timespec?
    }

    /// When each document whose content is here was last used (the cache limit's order).
    let use: ContentUse
    /// Told (on the download's thread) of each item whose download finished: its content is
    /// all here now.
    let fulfilled = Callback<UInt64>()
    /// The sizes of the downloads that finished whole, added up: content that came here
    /// (the cache limit looks again when it may have passed the limit).
    public let bytesFulfilled = Atomic<Int64>(0)

    /// The last failure of each item's download, in words, until one succeeds.
    private let failures = Mutex<[UInt64: String]>([:])

    struct DownloadKey: Hashable {
        let item: UInt64
        let number: UInt64
    }

    init(content: PromisedContent, use: ContentUse, ownChanges: OwnChanges, waitLimit: Double, makesPromises: Bool) {
        active = Atomic(makesPromises || access(content.directory, F_OK) == 0)
        self.content = content
        self.use = use
        self.ownChanges = ownChanges
        self.waitLimit = waitLimit
    }

    /// Makes the promise `promise` of the sparse file `fd` (its size set already).
    package func promise(_ promise: Promise, file fd: Int32) throws(DocfsError) {
        active.store(true, ordering: .relaxed)
        try content.promise(promise, file: fd)
    }

    /// Where content comes from: the remote the store is linked to (nil: none now); and
    /// `inStep`, the version an item is in step with (a lost record is made again from it).
    public func connect(_ remote: (any Remote)?, inStep: @escaping @Sendable (UInt64) -> RemoteVersion?) {
        source.withLock { $0 = remote }
        versionInStep.withLock { $0 = inStep }
    }

    /// Why the last download of `item` failed; nil when none did since one succeeded.
    public func failure(of item: UInt64) -> String? { failures.withLock { $0[item] } }

    /// What `user.docfs.status` says of the store file `fd` when it is promised: `downloading
    /// N%` while a download runs, why the last one failed, else `promised`; nil when its
    /// content is here.
    func status(of fd: Int32) -> String? {
        guard isActive, let number = PromisedContent.promisedNumber(fd), let item = ItemAttributes.id(ofDescriptor: fd) else { return nil }
        if let download = downloads.withLock({ $0[DownloadKey(item: item.rawValue, number: number)] }) {
            let percent = download.state.withLock { state -> Int64 in
                guard let promise = state.promise, let lengths = promise.lengths, promise.size > 0 else { return 0 }
                return state.present.reduce(Int64(0)) { $0 + lengths[$1] } * 100 / promise.size
            }
            return "downloading \(percent)%"
        }
        if let failure = failure(of: item.rawValue) { return "download failed: \(failure)" }
        return "promised"
    }

    /// Waits until bytes `offset ..< offset + length` of the file `fd` (any descriptor of a
    /// store file) are on disk; at once when it is not promised.
    func ensure(_ fd: Int32, offset: Int64, length: Int64) throws(DocfsError) {
        try waitHere(fd) { PendingRead(offset: offset, length: length, answer: $0) }
    }

    /// Waits until the whole file `fd` is on disk and no longer promised.
    func ensureWhole(_ fd: Int32) throws(DocfsError) {
        try waitHere(fd) { PendingRead(whole: $0) }
    }

    /// Waits on this thread for the read `make` makes of the file `fd`.
    private func waitHere(_ fd: Int32, _ make: (@escaping @Sendable (DocfsError?) -> Void) -> PendingRead) throws(DocfsError) {
        let done = ThreadSemaphore()
        let outcome = Mutex<DocfsError?>(nil)
        begin(make { error in
            outcome.withLock { $0 = error }
            done.signal()
        }, fd: fd)
        done.wait()  // every read is answered: its bytes, its download's end, or the wait limit
        if let error = outcome.withLock({ $0 }) { throw error }
    }

    /// Starts `read` of the file `fd` (any descriptor of a store file): answered at once when
    /// the file is not promised or its bytes are here, else once they land, its download
    /// fails, or no chunk landed for `waitLimit` (counted from when the read began, or from the
    /// download's last progress before that: a read the kernel retries, readahead then the
    /// page alone, fails at once on a stalled download). The calling thread goes on.
    package func begin(_ read: PendingRead, fd: Int32) {
        guard let number = PromisedContent.promisedNumber(fd), let item = ItemAttributes.id(ofDescriptor: fd) else { return read.finish(nil) }
        let download: Download
        do {
            download = try join(DownloadKey(item: item.rawValue, number: number), fd: fd, adding: read)
        } catch {
            return read.finish(error)
        }
        download.answerReads()  // its bytes may be here already
    }

    /// The download of `key`, started if none runs, with `read` waiting on it.
    private func join(_ key: DownloadKey, fd: Int32, adding read: PendingRead) throws(DocfsError) -> Download {
        let (download, isNew) = downloads.withLock { downloads -> (Download, Bool) in
            if let running = downloads[key] { return (running, false) }
            let started = Download(key)
            downloads[key] = started
            return (started, true)
        }
        download.state.withLock { state in
            if let range = read.range { state.wanted.append(range) } else { state.wantsWhole = true }
            state.reads.append(read)
        }
        guard isNew else {
            // Its chunks are asked for now, not when the background's next run lands (a read
            // in the middle of a file being downloaded from its start waited 128 ms for that).
            download.wake.signal()
            return download
        }
        // Its own descriptor, open before the reader's may close.
        let writer = open("/proc/self/fd/\(fd)", O_WRONLY | O_CLOEXEC)
        guard writer >= 0 else {
            let failure = DocfsError.errno("opening item \(key.item) to download it")
            finish(download, failure: "\(failure)")
            throw failure
        }
        DetachedThread.start { [self] in run(download, writer: writer) }
        DetachedThread.start { [self] in endOverdueReads(of: download) }
        return download
    }

    /// Until `download` ends, fails (EIO) the reads waiting on it for which no chunk landed
    /// for `waitLimit` (the download goes on), looking every `overdueCheck` seconds; answers
    /// any whose bytes came meanwhile.
    private func endOverdueReads(of download: Download) {
        while true {
            let (overdue, finished) = download.state.withLock { state -> ([PendingRead], Bool) in
                let now = Self.now()
                var overdue: [PendingRead] = []
                var reads = state.reads
                reads.removeAll { read in
                    if read.isAnswered { return true }
                    let deadline = (state.progressed > read.started ? state.progressed : min(read.started, state.progressed)) + waitLimit
                    guard now >= deadline, state.answer(for: read.range) == .waiting else { return false }
                    overdue.append(read)
                    return true
                }
                state.reads = reads
                return (overdue, state.finished)
            }
            if !overdue.isEmpty {
                let why = "no answer from the remote within \(Int(waitLimit)) s (the download goes on)"
                failures.withLock { $0[download.key.item] = why }
                for read in overdue { read.finish(DocfsError.errno("reading item \(download.key.item): \(why)", EIO)) }
            }
            download.answerReads()
            if finished { return }
            usleep(UInt32(Self.overdueCheck * 1e6))
        }
    }

    static let overdueCheck = 0.2

    private func run(_ download: Download, writer: Int32) {
        var st = stat()
        fstat(writer, &st)
        let file = BackingKey(st)
        ownChanges.willWrite(file)
        let failure = fetch(download, writer: writer)
        // Closed before its reads are answered: a file downloaded whole is open nowhere then.
        var after = stat()
        let known = fstat(writer, &after) == 0
        close(writer)
        ownChanges.abandon(file, now: known ? after : nil)
        if failure == nil {
            use.used(download.key.item)
            bytesFulfilled.add(known ? Int64(after.st_size) : 0, ordering: .relaxed)
        }
        finish(download, failure: failure)
        if failure == nil { fulfilled(download.key.item) }
    }

    /// Brings the download's chunks down into `writer`; answers why it failed, nil when the
    /// file is whole (no longer promised).
    private func fetch(_ download: Download, writer: Int32) -> String? {
        let key = download.key
        do {
            guard let remote = source.withLock({ $0 }) else {
                throw DocfsError(.storeUnavailable, "the store is not linked to a remote now: link it again (docfs remote link)")
            }
            let recorded: Promise?
            do { recorded = try content.record(of: key.item, number: key.number) } catch { recorded = nil }  // cut short: as lost
            guard var promise = try recorded ?? recovered(key, writer: writer) else { return nil }
            // Another length than the promise's: written behind the mount (a promised file keeps
            // its length until it is whole). What is there is the content now, never torn by
            // chunks written over it.
            var now = stat()
            if fstat(writer, &now) == 0, Int64(now.st_size) != promise.size {
                content.fulfilled(key.item, number: key.number, file: writer)
                return nil
            }
            if promise.offsets == nil {
                var digests: [ChunkDigest] = []
                for hex in promise.manifest { digests.append(try Self.digest(hex)) }
                promise.lengths = try retrying { () throws(RemoteError) in try remote.chunkLengths(digests) }
                guard promise.offsets!.last == promise.size else {
                    throw DocfsError(.storeUnavailable, "the remote's chunks of item \(key.item) add up to another size than its version's")
                }
                try content.update(promise)
            }
            let offsets = promise.offsets!
            let present = try content.present(key.item, number: key.number)
            download.state.withLock { state in
                state.offsets = offsets
                state.promise = promise
                state.present = present
            }
            download.answerReads()
            var times = [Glibc.timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_OMIT), Glibc.timespec(seconds: promise.modified)]
            // Chunks written but not yet noted on disk as present: readers have them at once (the
            // page cache); they are synced and noted a batch at a time, so a crash costs at most
            // fetching them again.
            var unnoted: [Int] = []
            var noted = Self.now()
            func note() throws(DocfsError) {
                guard !unnoted.isEmpty else { return }
                guard fdatasync(writer) == 0 else { throw DocfsError.errno("writing item \(key.item) to disk") }
                try content.markPresent(key.item, number: key.number, chunks: unnoted)
                unnoted.removeAll()
                noted = Self.now()
            }
            defer { try? note() }  // what came down before a failure stays
            // Up to `fetchesAtOnce` runs of chunks come down at once, each on a thread of its own
            // (the remote's connections are a pool), a run in one round trip; this thread writes
            // them as they land. A fetch that takes longer than `fetchPatience` is asked again
            // beside it, chunk by chunk (a connection the server ended may answer nothing until
            // the remote's own limit): the first to land is written, the other ignored.
            let landed = Mutex<[(index: Int, bytes: Result<[UInt8], DocfsError>)]>([])
            let arrival = download.wake
            var asked: [Int: (since: Double, attempts: Int)] = [:]
            func ask(_ indices: [Int]) throws(DocfsError) {
                var wanted: [ChunkDigest] = []
                for index in indices {
                    wanted.append(try Self.digest(promise.manifest[index]))
                    asked[index] = (Self.now(), (asked[index]?.attempts ?? 0) + 1)
                }
                let digests = wanted
                DetachedThread.start { [self] in
                    let answer: Result<[[UInt8]], DocfsError>
                    do throws(DocfsError) {
                        answer = .success(try retrying { () throws(RemoteError) in try remote.fetchChunks(digests) })
                    } catch {
                        answer = .failure(error)
                    }
                    landed.withLock { landed in
                        for (position, index) in indices.enumerated() {
                            landed.append((index, answer.map { $0[position] }))
                        }
                    }
                    arrival.signal()
                }
            }
            let patience = max(1, waitLimit / 2)
            // The background's runs wait for the first chunks a read waits for: fetched alone,
            // they come sooner (a first byte within 100 ms).
            var primed = false
            while true {
                // Chunks a read waits for are asked for at once, beside the background's runs.
                while asked.count < (Self.fetchesAtOnce + 2) * Self.chunksPerFetch {
                    let next = download.state.withLock { $0.nextChunks(upTo: Self.chunksPerFetch, background: primed || asked.isEmpty) }
                    guard !next.run.isEmpty else { break }
                    try ask(next.run)
                    if !next.wanted && asked.count >= Self.fetchesAtOnce * Self.chunksPerFetch { break }
                }
                guard !asked.isEmpty else { break }
                guard arrival.wait(seconds: 0.5) else {
                    for (index, fetch) in asked where Self.now() - fetch.since > patience { try ask([index]) }
                    continue
                }
                let arrived = landed.withLock { landed -> [(index: Int, bytes: Result<[UInt8], DocfsError>)] in
                    let taken = landed
                    landed.removeAll()
                    return taken
                }
                for (index, result) in arrived {
                    guard let fetch = asked[index] else { continue }  // written already: a slower attempt's
                    let bytes: [UInt8]
                    switch result {
                    case .success(let fetched): bytes = fetched
                    case .failure(let error):
                        guard fetch.attempts > 1 else { throw error }
                        asked[index] = (fetch.since, fetch.attempts - 1)  // another attempt is under way
                        continue
                    }
                    asked[index] = nil
                    primed = true
                    // (The remote checks each chunk against its digest.)
                    guard bytes.count == promise.lengths![index] else {
                        throw DocfsError(.storeUnavailable, "chunk \(promise.manifest[index]) of item \(key.item) came from the remote with another length than its version says")
                    }
                    fetchedBytes.add(Int64(bytes.count), ordering: .relaxed)
                    // Written behind the mount meanwhile (the store watcher took the promise
                    // back): what is there is the content; nothing more is written over it.
                    guard PromisedContent.promisedNumber(writer) == key.number else { return nil }
                    try Self.write(bytes, to: writer, at: offsets[index], item: key.item)
                    unnoted.append(index)
                    download.state.withLock { state in
                        state.present.insert(index)
                        state.fetching.remove(index)
                        state.progressed = Self.now()
                    }
                }
                _ = futimens(writer, &times)
                if unnoted.count >= Self.chunksPerNote || Self.now() - noted > 1 { try note() }
                download.answerReads()
            }
            guard Glibc.fsync(writer) == 0 else { throw DocfsError.errno("writing item \(key.item) to disk") }
            _ = futimens(writer, &times)
            unnoted.removeAll()  // all here: the records go
            content.fulfilled(key.item, number: key.number, file: writer)
            var done = stat()
            if fstat(writer, &done) == 0 { downloaded(done) }
            return nil
        } catch {
            return "\(error)"
        }
    }

    /// The promise of a file whose record is lost, made again from the version its item is in
    /// step with when that is what the file stands for (as large): records are written without
    /// a sync of their own (one per document made took 43 % of a first sync of 10,000), so a crash
    /// may lose one or cut it short. Nil when the file was fulfilled meanwhile (what is on disk
    /// is the content); otherwise its empty bytes are never taken for content: it fails.
    private func recovered(_ key: DownloadKey, writer: Int32) throws(DocfsError) -> Promise? {
        guard PromisedContent.promisedNumber(writer) == key.number else { return nil }
        var st = stat()
        guard fstat(writer, &st) == 0, let version = versionInStep.withLock({ $0 })?(key.item), version.kind == .file,
              !version.deleted, version.size == Int64(st.st_size) else {
            throw DocfsError(.storeUnavailable, "the record of what it stands for (\(content.directory)/\(key.item)-\(key.number).json) is missing, and the version it is in step with is not it")
        }
        let promise = Promise(item: key.item, number: key.number, size: version.size, modified: version.modified,
                              manifest: version.manifest, lengths: version.knownLengths)
        try content.update(promise)
        return promise
    }

    /// Shows a promised file's change time as it was when first seen, while it is promised
    /// and after its download until anything else changes it: the download writes the file
    /// (moving its own change time), yet to a reader nothing changed (`tar` would say "file
    /// changed as we read it" of a file it made download). Kept for this run.
    func steadyChangeTime(_ st: inout stat, promised: Bool) {
        guard promised || steadyCount.load(ordering: .relaxed) > 0 else { return }
        let key = BackingKey(st)
        let shown = steadyTimes.withLock { times -> timespec? in
            if promised {
                if let known = times[key] { return known.shown }
                times[key] = SteadyTime(shown: st.st_ctim, downloaded: nil)
                steadyCount.add(1, ordering: .relaxed)
                return nil
            }
            guard let known = times[key] else { return nil }
            guard let downloaded = known.downloaded else { return known.shown }  // finishing: marked done, not noted yet
            if downloaded.tv_sec == st.st_ctim.tv_sec && downloaded.tv_nsec == st.st_ctim.tv_nsec { return known.shown }
            times[key] = nil
            steadyCount.subtract(1, ordering: .relaxed)
            return nil
        }
        if let shown { st.st_ctim = shown }
    }

    /// The download of the file `st` is was ends with its change time `st.st_ctim`.
    private func downloaded(_ st: stat) {
        guard steadyCount.load(ordering: .relaxed) > 0 else { return }
        steadyTimes.withLock { times in times[BackingKey(st)]?.downloaded = st.st_ctim }
    }

    /// Ends `download` (done, or failed with `failure`): its reads are answered, and the next
    /// read starts another.
    private func finish(_ download: Download, failure: String?) {
        downloads.withLock { downloads in
            if downloads[download.key] === download { downloads[download.key] = nil }
        }
        failures.withLock { $0[download.key.item] = failure }
        download.state.withLock { state in
            state.finished = true
            state.failure = failure
        }
        download.answerReads()
    }

    /// How many fetches of one download are under way at once, and how many chunks (a run
    /// that follows the first one wanted) each asks for.
    static let fetchesAtOnce = 4
    static let chunksPerFetch = 16

    /// How many chunks are written before they are synced and noted present.
    static let chunksPerNote = 256

    private static func write(_ bytes: [UInt8], to fd: Int32, at offset: Int64, item: UInt64) throws(DocfsError) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress! + done, $0.count - done, off_t(offset) + off_t(done)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw DocfsError.errno("writing item \(item)'s downloaded content") }
            done += n
        }
    }

    private static func digest(_ hex: String) throws(DocfsError) -> ChunkDigest {
        guard let digest = ChunkDigest(hex: hex) else { throw DocfsError(.storeUnavailable, "a promise names a chunk \(hex) that is no digest") }
        return digest
    }

    /// `call`, tried again for up to `waitLimit` (a reader waits no longer than that anyway)
    /// unless the remote has no such chunk: a connection cut or ended by the server (an
    /// administrator's pg_terminate_backend answers an error, not a broken connection), the
    /// server restarting.
    private func retrying<T>(_ call: () throws(RemoteError) -> T) throws(DocfsError) -> T {
        let deadline = Self.now() + waitLimit
        var pause = 0.05
        while true {
            do {
                return try call()
            } catch where error.kind != .notFound && Self.now() + pause < deadline {
                usleep(UInt32(pause * 1e6))
                pause = min(pause * 2, 1)
            } catch {
                throw DocfsError(.storeUnavailable, "\(error)")
            }
        }
    }

    static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }
}

/// One promised file's download under way: what is on disk, and the reads waiting for it.
final class Download: Sendable {
    let key: PromisedDownloads.DownloadKey
    let state = Mutex(State())
    /// Wakes the downloading thread: chunks landed, or a reader asks for a range.
    let wake = ThreadSemaphore()

    struct State {
        var promise: Promise?
        var offsets: [Int64]?
        var present = Set<Int>()
        /// Byte ranges readers wait for, oldest first: their chunks come down first.
        var wanted: [Range<Int64>] = []
        var wantsWhole = false
        /// Reads waiting for bytes of it (answered by `answerReads`).
        var reads: [PendingRead] = []
        var finished = false
        var failure: String?
        /// No chunk before it is missing.
        var firstMissing = 0
        /// Chunks being fetched now.
        var fetching = Set<Int>()
        /// When a chunk last landed (or the download began), monotonic seconds.
        var progressed = PromisedDownloads.now()

        enum Answer: Equatable { case ready, waiting, failed(String) }

        /// Whether `range` (nil: the whole file) is on disk.
        func answer(for range: Range<Int64>?) -> Answer {
            if finished { return failure.map { .failed($0) } ?? .ready }
            guard let range, let offsets, let promise else { return .waiting }
            let chunks = promise.chunks(covering: range.lowerBound, length: Int64(range.count), offsets: offsets)
            return chunks.allSatisfy { present.contains($0) } ? .ready : .waiting
        }

        /// The chunks to fetch next, each marked being fetched: a read waits for those of a
        /// range asked for (`wanted`: fetched at once, apart, so a read waits for its own bytes
        /// only), else up to `limit` missing ones in a row for the background.
        mutating func nextChunks(upTo limit: Int, background: Bool = true) -> (run: [Int], wanted: Bool) {
            guard let (first, wanted) = nextChunk(background: background), let promise, let offsets else { return ([], false) }
            var run = [first]
            var next = first + 1
            let end = wanted ? self.wanted.map { promise.chunks(covering: $0.lowerBound, length: Int64($0.count), offsets: offsets) }
                .first { $0.contains(first) }?.upperBound ?? next : promise.manifest.count
            while run.count < limit, next < end, !present.contains(next), !fetching.contains(next) {
                fetching.insert(next)
                run.append(next)
                next += 1
            }
            return (run, wanted)
        }

        /// The chunk to fetch next and whether a read waits for it: the first missing one of
        /// the oldest range still waited for, else (when `background`) the first missing one;
        /// nil when every chunk is here or being fetched.
        mutating func nextChunk(background: Bool = true) -> (Int, wanted: Bool)? {
            guard let offsets, let promise else { return nil }
            let wanted = self.wanted
            for (position, range) in wanted.enumerated().reversed() {
                let chunks = promise.chunks(covering: range.lowerBound, length: Int64(range.count), offsets: offsets)
                if chunks.allSatisfy({ present.contains($0) }) { self.wanted.remove(at: position) }
            }
            for range in self.wanted {
                let chunks = promise.chunks(covering: range.lowerBound, length: Int64(range.count), offsets: offsets)
                if let missing = chunks.first(where: { !present.contains($0) && !fetching.contains($0) }) {
                    fetching.insert(missing)
                    return (missing, true)
                }
            }
            guard background else { return nil }
            while firstMissing < promise.manifest.count && present.contains(firstMissing) { firstMissing += 1 }
            var next = firstMissing
            while next < promise.manifest.count && (present.contains(next) || fetching.contains(next)) { next += 1 }
            guard next < promise.manifest.count else { return nil }
            fetching.insert(next)
            return (next, false)
        }
    }

    init(_ key: PromisedDownloads.DownloadKey) { self.key = key }

    /// Answers the reads whose bytes are here, or whose download ended (no lock held then).
    func answerReads() {
        let due = state.withLock { state -> [(PendingRead, State.Answer)] in
            var due: [(PendingRead, State.Answer)] = []
            var reads = state.reads
            reads.removeAll { read in
                if read.isAnswered { return true }
                let answer = state.answer(for: read.range)
                guard answer != .waiting else { return false }
                due.append((read, answer))
                return true
            }
            state.reads = reads
            return due
        }
        for (read, answer) in due {
            if case .failed(let why) = answer {
                read.finish(DocfsError.errno("downloading item \(key.item) failed: \(why)", EIO))
            } else {
                read.finish(nil)
            }
        }
    }
}
