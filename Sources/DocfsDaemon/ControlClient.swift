import DocfsCore
import DocfsProvider
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The CLI's side of the control socket: how a `docfs` command talks to the daemon serving a
/// store, one `ControlRequest` and its `ControlReply` (or, for a stream, the lines after it).
public enum ControlClient {
    /// Sends `request` to the daemon serving `store` and answers its reply.
    public static func send(_ request: ControlRequest, to store: StoreLayout) throws(DocfsError) -> ControlReply {
        let fd = try connect(to: store)
        defer { close(fd) }
        return try exchange(request, on: fd, store: store)
    }

    /// A connection to the daemon serving `store`; the caller closes it. A daemon that has just
    /// mounted may not listen yet (a command run right after `docfs mount`): a missing or
    /// refusing socket is tried again for up to 3 s.
    public static func connect(to store: StoreLayout) throws(DocfsError) -> Int32 {
        let address = ControlSocketAddress(store: store)
        defer { address.close() }
        var attempts = 0
        while true {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { throw DocfsError.errno("creating a socket") }
            if address.withSockaddr({ Glibc.connect(fd, $0, $1) }) == 0 { return fd }
            let reason = errno
            let failure = DocfsError.errno("connect")
            close(fd)
            attempts += 1
            if (reason == ENOENT || reason == ECONNREFUSED) && attempts < 150 {
                usleep(20_000)
                continue
            }
            throw DocfsError(.storeUnavailable,
                             "the daemon serving \(store.root) does not answer on \(store.controlSocket): is it still running (findmnt -t fuse.docfs)?",
                             cause: failure)
        }
    }

    /// Sends `request` on `fd` and reads the reply line (through `reader`, when more lines follow).
    public static func exchange(_ request: ControlRequest, on fd: Int32, store: StoreLayout,
                         reader: LineReader? = nil) throws(DocfsError) -> ControlReply {
        guard let data = try? JSONEncoder().encode(request) else { throw DocfsError(.internalFailure, "cannot encode the request") }
        ControlLine.write(Array(data), to: fd)
        guard let line = (reader ?? LineReader(fd)).next(), let reply = try? JSONDecoder().decode(ControlReply.self, from: Data(line)) else {
            throw DocfsError(.storeUnavailable, "the daemon serving \(store.root) gave no answer: see \(store.daemonLog)")
        }
        return reply
    }
}

/// Reads a connection line by line, keeping what arrived after a line for the next: a
/// streamed reply (a watch, an index rebuild or check) is read on with the reader its first
/// line was read with.
public final class LineReader {
    private let fd: Int32
    private var pending: [UInt8] = []

    public init(_ fd: Int32) { self.fd = fd }

    /// The next line (at most 1 MiB), nil at the end of the stream.
    public func next() -> [UInt8]? {
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            if let end = pending.firstIndex(of: 10) {
                let line = Array(pending[..<end])
                pending.removeSubrange(...end)
                return line
            }
            guard pending.count < 1 << 20 else { return nil }
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                defer { pending.removeAll() }
                return pending.isEmpty ? nil : pending
            }
            pending += chunk[0..<n]
        }
    }
}
