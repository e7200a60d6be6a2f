import CLinux
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// What the daemon asks of the thumbnail worker: render the content passed along (a
/// descriptor, SCM_RIGHTS) and write the set to `output`.
public struct ThumbnailRequest: Codable, Sendable {
    public enum Kind: String, Codable, Sendable {
        /// Make thumbnails of a document's content.
        case render
        /// Check a PNG a user gives as a thumbnail and make the sizes of it.
        case userImage
    }

    public var job: UInt64
    public var kind: Kind
    /// Where the worker writes the set (a `ThumbnailFile`).
    public var output: String
    /// What the set records it was made from.
    public var stamp: ContentStamp
    /// Where the worker may first write a set of the attribute and normal renditions, answering
    /// with a `partial` reply before it goes on (see `ThumbnailRenderer.render`); nil: one answer.
    public var earlyOutput: String?

    public init(job: UInt64, kind: Kind, output: String, stamp: ContentStamp, earlyOutput: String? = nil) {
        self.job = job
        self.kind = kind
        self.output = output
        self.stamp = stamp
        self.earlyOutput = earlyOutput
    }
}

/// The worker's answer: the set is written (with the size of its largest rendition), or why
/// there is none.
public struct ThumbnailReply: Codable, Sendable {
    public var job: UInt64
    public var made: Bool
    public var width: Int
    public var height: Int
    public var problem: String?
    /// The set at the request's `earlyOutput` is written; the whole set follows in another reply.
    public var partial: Bool = false
}

/// The thumbnail worker (`docfs thumbnail-worker`, started by the daemon): reads requests from
/// its standard input (a SOCK_SEQPACKET socket), renders with libvips, answers on the same
/// socket, and ends when the daemon closes it. It runs with a memory limit; the daemon kills it
/// when a job outlives its time limit, and starts another.
public enum ThumbnailWorker {
    /// Most address space the worker may map (libvips and its decoders included).
    public static let memoryLimit: rlim_t = 3 << 30

    /// Serves requests on `socket` until it closes; the exit status.
    public static func serve(socket: Int32) -> Int32 {
        var limit = rlimit(rlim_cur: memoryLimit, rlim_max: memoryLimit)
        _ = setrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &limit)
        guard ThumbnailRenderer.start() else { return 2 }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            var fd: Int32 = -1
            let n = buffer.withUnsafeMutableBytes { docfs_receive_with_descriptor(socket, $0.baseAddress, $0.count, &fd) }
            guard n > 0 else { return n == 0 ? 0 : 1 }
            guard let request = try? JSONDecoder().decode(ThumbnailRequest.self, from: Data(buffer[0..<n])) else {
                if fd >= 0 { close(fd) }
                continue
            }
            let reply = answer(request, content: fd) { send($0, on: socket) }
            if fd >= 0 { close(fd) }
            if !send(reply, on: socket) { return 1 }
        }
    }

    /// Sends `reply` to the daemon; false when the socket is gone.
    @discardableResult
    private static func send(_ reply: ThumbnailReply, on socket: Int32) -> Bool {
        guard let bytes = try? JSONEncoder().encode(reply) else { return true }
        return bytes.withUnsafeBytes { docfs_send_with_descriptor(socket, $0.baseAddress, $0.count, -1) } >= 0
    }

    /// The answer to `request`; a partial set written on the way is announced through `early`.
    private static func answer(_ request: ThumbnailRequest, content fd: Int32,
                               early: (ThumbnailReply) -> Void) -> ThumbnailReply {
        var reply = ThumbnailReply(job: request.job, made: false, width: 0, height: 0, problem: nil)
        guard fd >= 0 else {
            reply.problem = "no content was passed"
            return reply
        }
        let path = "/proc/self/fd/\(fd)"
        do throws(ThumbnailRenderer.Problem) {
            let renditions: ThumbnailRenderer.Renditions
            let origin: ThumbnailFile.Origin
            switch request.kind {
            case .render:
                renditions = try withoutActuallyEscaping(early) { early throws(ThumbnailRenderer.Problem) in
                    try ThumbnailRenderer.render(path: path, early: request.earlyOutput.map { earlyPath in
                        { (partial: ThumbnailRenderer.Renditions) in
                            let bytes = ThumbnailFile.encode(origin: .generated, stamp: request.stamp, width: partial.width,
                                                             height: partial.height, renditions: partial.pngs)
                            guard write(bytes, to: earlyPath) else { return }
                            early(ThumbnailReply(job: request.job, made: true, width: partial.width, height: partial.height,
                                                 problem: nil, partial: true))
                        }
                    })
                }
                origin = .generated
            case .userImage:
                renditions = try ThumbnailRenderer.renderUserImage(path: path, png: readAll(fd))
                origin = .user
            }
            let bytes = ThumbnailFile.encode(origin: origin, stamp: request.stamp, width: renditions.width,
                                             height: renditions.height, renditions: renditions.pngs)
            guard write(bytes, to: request.output) else {
                reply.problem = "cannot write \(request.output): \(String(cString: strerror(errno)))"
                return reply
            }
            reply.made = true
            reply.width = renditions.width
            reply.height = renditions.height
        } catch {
            reply.problem = error.description
        }
        return reply
    }

    private static func readAll(_ fd: Int32) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var offset: off_t = 0
        while bytes.count <= ThumbnailSize.attributeLimit {
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
            guard n > 0 else { break }
            bytes += chunk[0..<n]
            offset += off_t(n)
        }
        return bytes
    }

    private static func write(_ bytes: [UInt8], to path: String) -> Bool {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var written = 0
        while written < bytes.count {
            let n = bytes[written...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { return false }
            written += n
        }
        return true
    }
}
