import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A read of a promised file waiting for its bytes without holding a thread (issue 23): the
/// bridge answers the kernel from `answer`, called once the bytes are on disk (nil), or with
/// the error that ends the wait: the download failed or made no progress for the wait limit
/// (EIO), or the reader gave up (EINTR). A mount with many readers waiting keeps its threads
/// for everything else.
public final class PendingRead: Sendable {
    /// The bytes the read waits for; nil: the whole file (a write waits for that).
    let range: Range<Int64>?
    /// When it began to wait (monotonic seconds).
    let started = PromisedDownloads.now()
    private let answered = Atomic<Bool>(false)
    private let answer: @Sendable (DocfsError?) -> Void

    /// A read of `length` bytes at `offset`, answered through `answer`.
    public init(offset: Int64, length: Int64, answer: @escaping @Sendable (DocfsError?) -> Void) {
        range = offset..<(offset + max(length, 0))
        self.answer = answer
    }

    /// A wait for the whole file.
    package init(whole answer: @escaping @Sendable (DocfsError?) -> Void) {
        range = nil
        self.answer = answer
    }

    var isAnswered: Bool { answered.load(ordering: .acquiring) }

    /// Answers the read, with no lock held: nil when its bytes are there. Only the first
    /// answer counts (a download's, the wait limit's and an interruption may race).
    func finish(_ error: DocfsError?) {
        guard answered.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        answer(error)
    }

    /// The reader gave up (Ctrl-C): it is answered EINTR; the download goes on for the others.
    public func interrupt() {
        finish(DocfsError.system(EINTR))
    }
}
