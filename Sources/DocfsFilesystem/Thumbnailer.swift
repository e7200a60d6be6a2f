import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
import DocfsThumbnails
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Makes thumbnails off the write path (issue 5 §2): a write's close only queues its file (one
/// short lock); a thread of its own takes the queue in order, one job at a time, and has the
/// thumbnail worker process render each. A newer version of an item replaces its queued job,
/// and a job whose content changed while it rendered is dropped (the newer one follows), so a
/// set is only ever installed for the content it shows. A job waits until its item has been
/// quiet for `quietPeriod` (a burst of writes to a file — a log appended to, a file saved in
/// pieces — makes one job, not one per close), unless someone asks for the thumbnail: then it
/// goes first at once.
///
/// The job claims its item for reading (C1) twice, briefly: to open the content and take its
/// stamp, and to check the stamp again and install the set. The rendering itself holds no
/// claim, so no writer ever waits for a thumbnail.
///
/// Lock order: `queue` is a leaf lock, never held while a claim is taken or the worker runs.
package final class Thumbnailer: Sendable {
    private struct Queue {
        /// Items in the order their jobs fall due (a job queued again is listed again; the
        /// entry whose time is not the job's is stale and skipped).
        var order: [(item: ItemID, due: Double)] = []
        var jobs: [ItemID: (node: Node, due: Double)] = [:]
        var stopped = false
        /// Items whose job is being done, and whether it was replaced by a newer one meanwhile.
        var running: [ItemID: Bool] = [:]
    }

    package let store: ThumbnailStore
    private let worker: ThumbnailWorkerClient
    private let coordinator: Coordinator
    private let queue = Mutex(Queue())
    private let wakeUp = ThreadSemaphore()
    private let finished = ThreadSemaphore()
    /// Told of each file whose thumbnail set changed, as a change record (its index record is
    /// made again).
    private let changeSink = Callback<ChangeRecord>()
    private let problemSink = Callback<String>()

    init(store: ThumbnailStore, worker: ThumbnailWorkerClient, coordinator: Coordinator) {
        self.store = store
        self.worker = worker
        self.coordinator = coordinator
        DetachedThread.start { [self] in run() }
    }

    /// Where the records of installed thumbnail sets go.
    func onChange(_ sink: @escaping @Sendable (ChangeRecord) -> Void) {
        changeSink.set(sink)
    }

    /// Where problems are reported (a worker that crashed or ran out of time).
    func onProblem(_ sink: @escaping @Sendable (String) -> Void) {
        problemSink.set(sink)
    }

    /// How long an item must go unchanged before its job is done.
    static let quietPeriod = 0.02

    /// Queues a look at `node`'s content (a regular file whose content may have changed), done
    /// once the item has been quiet for `quietPeriod`.
    func enqueue(_ node: Node) {
        guard node.type == S_IFREG, !node.item.isDerived, !node.isSuperseded else { return }
        let item = node.item
        let due = Self.monotonic() + Self.quietPeriod
        let wake = queue.withLock { queue -> Bool in
            guard !queue.stopped else { return false }
            if queue.running[item] != nil { queue.running[item] = true }
            let wasIdle = queue.order.isEmpty
            queue.jobs[item] = (node, due)
            queue.order.append((item, due))
            return wasIdle
        }
        if wake { wakeUp.signal() }
    }

    /// `node`'s new content starts like no image and no set is stored for it (its stitch saw
    /// so): a look would find nothing to make or remove, unless a job for an earlier content is
    /// waiting or running (it must then see this content), so only then is one queued.
    func enqueueUnlessPointless(_ node: Node) {
        let pending = queue.withLock { $0.jobs[node.item] != nil || $0.running[node.item] != nil }
        if pending { enqueue(node) }
    }

    /// Someone asks for the thumbnail of `node`, which has none for its content: its job is
    /// done at once — the queued one, or a new one unless one is running (it will install it).
    func ask(for node: Node) {
        guard node.type == S_IFREG, !node.item.isDerived, !node.isSuperseded else { return }
        let item = node.item
        let wake = queue.withLock { queue -> Bool in
            guard !queue.stopped, queue.running[item] == nil, queue.jobs[item]?.due != 0 else { return false }
            queue.jobs[item] = (queue.jobs[item]?.node ?? node, 0)
            queue.order.insert((item, 0), at: 0)
            return true
        }
        if wake { wakeUp.signal() }
    }

    /// Stops the thread (after the job it is doing) and the worker.
    func stop() {
        let wasRunning = queue.withLock { queue -> Bool in
            defer { queue.stopped = true }
            return !queue.stopped
        }
        guard wasRunning else { return }
        wakeUp.signal()
        finished.wait()
        worker.shutDown()
    }

    private func run() {
        defer { finished.signal() }
        // Thumbnails follow the writes that call for them: under load the writes go first.
        docfs_make_thread_background()
        while true {
            wakeUp.wait()
            while true {
                switch next() {
                case .job(let node):
                    make(node)
                    queue.withLock { _ = $0.running.removeValue(forKey: node.item) }
                    continue
                case .wait(let seconds):
                    wakeUp.wait(seconds: seconds)  // an asked-for job wakes it sooner
                    continue
                case .none:
                    break
                }
                break
            }
            if queue.withLock({ $0.stopped }) { return }
        }
    }

    private enum Next {
        case job(Node)
        /// The first job falls due in this many seconds.
        case wait(Double)
        case none
    }

    private func next() -> Next {
        let now = Self.monotonic()
        return queue.withLock { queue -> Next in
            while !queue.stopped, let first = queue.order.first {
                guard let job = queue.jobs[first.item], job.due == first.due else {
                    queue.order.removeFirst()  // stale: the job was queued again, or done
                    continue
                }
                if job.due > now { return .wait(job.due - now) }
                queue.order.removeFirst()
                queue.jobs[first.item] = nil
                queue.running[first.item] = false
                return .job(job.node)
            }
            return .none
        }
    }

    private static func monotonic() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// One job: the set for the content `node` holds now, unless there is one already.
    private func make(_ node: Node) {
        let item = node.item
        // Opened under a read claim: the content and stamp belong together.
        guard let (content, stamp, signature) = openContent(node) else { return }
        defer { close(content) }
        if store.current(item, stamp: stamp) != nil {
            return  // made already (or set by a user, or found to have none) for this very content
        }
        guard signature != nil else {
            store.remove(item)  // not an image (any more): nothing to show, nothing to keep
            return
        }
        let job = store.newJob()
        let request = ThumbnailRequest(job: job, kind: .render, output: store.workPath(job: job), stamp: stamp,
                                       earlyOutput: store.workPath(job: job) + "-early")
        // A big JPEG's or a PDF's set comes in two steps: a first set with the attribute and
        // normal renditions, installed as soon as it is made, then the whole set.
        var firstSetInstalled = false
        let outcome = worker.run(request, content: content) { _ in
            if queue.withLock({ $0.running[item] == true }) { return }
            firstSetInstalled = install(request.earlyOutput!, for: node, item: item, stamp: stamp)
        }
        unlink(request.earlyOutput!)  // when it was not installed
        if queue.withLock({ $0.running[item] == true }) {  // a newer version is queued
            unlink(request.output)
            return
        }
        switch outcome {
        case .success(let reply) where reply.made:
            install(request.output, for: node, item: item, stamp: stamp)
        case .success:
            unlink(request.output)
            // The content has no thumbnail (not worth a log line), unless the first set is in.
            if !firstSetInstalled { recordNone(for: node, item: item, stamp: stamp, job: job) }
        case .failure(let failure):
            unlink(request.output)
            if !firstSetInstalled { recordNone(for: node, item: item, stamp: stamp, job: job) }
            problemSink("no thumbnail for item \(item): \(failure)")
        }
    }

    /// The content of `node` open for reading, its stamp, and the image format it starts
    /// like (nil: none thumbnails are made of), read under a read claim.
    private func openContent(_ node: Node) -> (Int32, ContentStamp, ImageSignature?)? {
        try? coordinator.withClaims([(node.item, .read)]) { () throws(DocfsError) -> (Int32, ContentStamp, ImageSignature?)? in
            guard !node.isSuperseded else { return nil }
            var fd = Glibc.open(node.procPath, O_RDONLY | O_CLOEXEC | DOCFS_O_NOATIME)
            if fd < 0 && errno == EPERM { fd = Glibc.open(node.procPath, O_RDONLY | O_CLOEXEC) }
            guard fd >= 0 else { return nil }
            // A promised file's thumbnails came with it; its content is not here to look at.
            if PromisedContent.promisedNumber(fd) != nil {
                close(fd)
                return nil
            }
            var st = stat()
            var start = [UInt8](repeating: 0, count: ImageSignature.length)
            let n = start.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            guard fstat(fd, &st) == 0 else {
                close(fd)
                return nil
            }
            return (fd, ContentStamp(st, version: ItemAttributes.version(ofDescriptor: fd)), ImageSignature.of(Array(start[0..<max(n, 0)])))
        }
    }

    /// The content is unchanged since the job opened it: `workPath` becomes the item's set.
    @discardableResult
    private func install(_ workPath: String, for node: Node, item: ItemID, stamp: ContentStamp) -> Bool {
        let installed = (try? coordinator.withClaims([(item, .read)]) { () throws(DocfsError) -> Bool in
            guard node.item == item, !node.isSuperseded, Self.stamp(of: node) == stamp else { return false }
            try store.install(workPath, as: item)
            return true
        }) ?? false
        if installed {
            changeSink(.file(.thumbnailsChanged, node))
        } else {
            unlink(workPath)
        }
        return installed
    }

    /// Remembers that this content has no thumbnail, so it is not tried again.
    private func recordNone(for node: Node, item: ItemID, stamp: ContentStamp, job: UInt64) {
        let bytes = ThumbnailFile.encode(origin: .none, stamp: stamp, width: 0, height: 0, renditions: [:])
        _ = try? coordinator.withClaims([(item, .read)]) { () throws(DocfsError) in
            guard node.item == item, Self.stamp(of: node) == stamp else { return }
            try store.write(bytes, as: item, job: job)
        }
    }

    /// The stamp of the content `node` holds now; nil when it cannot be read or has no name
    /// left (its set went with its last name, and a job still running must not bring it back).
    static func stamp(of node: Node) -> ContentStamp? {
        var st = stat()
        guard fstatat(node.fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0, st.st_nlink > 0 else { return nil }
        return ContentStamp(st, version: ItemAttributes.version(ofDescriptor: node.fd))
    }
}
