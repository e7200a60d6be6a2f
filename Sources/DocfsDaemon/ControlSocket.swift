import CLinux
import DocfsCore
import DocfsProvider
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The unix socket's address: its path in the store, or, when that is too long for a socket
/// address, the same path reached through the store folder's descriptor in /proc.
struct ControlSocketAddress {
    let path: String
    private let folder: Int32?

    init(store: StoreLayout) {
        let direct = store.controlSocket
        if direct.utf8.count < 100 {
            path = direct
            folder = nil
        } else {
            let fd = open(store.root, DOCFS_O_PATH | O_DIRECTORY | O_CLOEXEC)
            folder = fd >= 0 ? fd : nil
            path = "/proc/self/fd/\(fd)/control.sock"
        }
    }

    func close() {
        if let folder { _ = Glibc.close(folder) }
    }

    func withSockaddr<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8.prefix(107)) + [0]
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }
}

/// The daemon's side: accepts connections on a thread of its own and answers each request on
/// a thread of its own (one stuck or slow client holds up no other), with `handle`, which runs
/// with the peer's credentials for the record. A request line must arrive within
/// `ControlProtocol.requestTimeout` seconds, and the reply be taken as fast. A streamed request
/// (watch, index rebuild or check) keeps its connection: `stream` gets it and closes it when done.
final class ControlServer: @unchecked Sendable {
    // Only the accept thread touches `listener` after start.
    private let listener: Int32
    /// Requests being answered now (not streams).
    private let inFlight = Atomic<Int>(0)
    private let handle: @Sendable (ControlRequest, Caller) -> ControlReply
    private let stream: @Sendable (ControlRequest, Int32) -> Void

    init(store: StoreLayout, handle: @escaping @Sendable (ControlRequest, Caller) -> ControlReply,
         stream: @escaping @Sendable (ControlRequest, Int32) -> Void) throws(DocfsError) {
        self.handle = handle
        self.stream = stream
        let address = ControlSocketAddress(store: store)
        defer { address.close() }
        unlink(store.controlSocket)  // a dead daemon's: the store lock says none is running
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DocfsError.errno("creating the control socket") }
        let previous = umask(0o077)
        let bound = address.withSockaddr { bind(fd, $0, $1) }
        umask(previous)
        guard bound == 0, listen(fd, 16) == 0 else {
            let error = DocfsError(.storeUnavailable, "cannot listen on \(store.controlSocket)", cause: DocfsError.errno("bind"))
            Glibc.close(fd)
            throw error
        }
        // Root serving another user's store: the store's owner may talk to the daemon too
        // (bookmarks made with a key only root reads, `docfs status`); the socket stays 0600.
        var owner = stat()
        if getuid() == 0, stat(store.root, &owner) == 0, owner.st_uid != 0 {
            _ = address.path.withCString { chown($0, owner.st_uid, owner.st_gid) }
        }
        listener = fd
    }

    func start() {
        DetachedThread.start { [self] in acceptLoop() }
    }

    private func acceptLoop() {
        while true {
            let connection = docfs_accept_cloexec(listener)
            if connection < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            Self.limitWaits(on: connection, seconds: ControlProtocol.requestTimeout)
            guard inFlight.add(1, ordering: .relaxed).newValue <= ControlProtocol.concurrentRequests else {
                inFlight.subtract(1, ordering: .relaxed)
                Self.reply(ControlReply(ok: false, message: "the daemon is answering \(ControlProtocol.concurrentRequests) requests already: try again"),
                           on: connection)
                Glibc.close(connection)
                continue
            }
            DetachedThread.start { [self] in
                let streamed = serve(connection)
                inFlight.subtract(1, ordering: .relaxed)  // a stream may last: it is not counted
                guard let streamed else {
                    Glibc.close(connection)
                    return
                }
                Self.limitWaits(on: connection, seconds: 0)  // a watch may wait for changes as long as it likes
                stream(streamed, connection)
            }
        }
    }

    /// Answers one request; the request when it is to be answered by a stream on the connection.
    private func serve(_ connection: Int32) -> ControlRequest? {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
        guard docfs_peer_credentials(connection, &pid, &uid, &gid) == 0 else { return nil }
        let caller = Caller(uid: uid, gid: gid, pid: pid)
        let reply: ControlReply
        if let line = ControlLine.read(connection), let request = try? JSONDecoder().decode(ControlRequest.self, from: Data(line)) {
            if request.protocolVersion != ControlProtocol.version {
                reply = ControlReply(ok: false, message: "this docfs command speaks protocol \(request.protocolVersion ?? 1) and the daemon "
                                     + "serving the store \(ControlProtocol.version): unmount and mount again to run the installed docfs")
            } else if request.kind.isStreamed {
                return request
            } else {
                reply = handle(request, caller)
            }
        } else {
            reply = ControlReply(ok: false, message: ControlProtocol.unreadableRequest + " (none within \(ControlProtocol.requestTimeout) s): "
                                 + "this daemon and the docfs command may differ in version")
        }
        Self.reply(reply, on: connection)
        return nil
    }

    private static func reply(_ reply: ControlReply, on connection: Int32) {
        if let data = try? JSONEncoder().encode(reply) { ControlLine.write(Array(data), to: connection) }
    }

    /// Bounds how long a read or write on `connection` may wait (0: no bound).
    private static func limitWaits(on connection: Int32, seconds: Int) {
        var limit = timeval(tv_sec: seconds, tv_usec: 0)
        _ = setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(connection, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
    }
}

/// One JSON document per line.
enum ControlLine {
    /// One line from a connection that carries only one (a request, a reply).
    static func read(_ fd: Int32) -> [UInt8]? { LineReader(fd).next() }

    /// False when the other end went away.
    @discardableResult
    static func write(_ bytes: [UInt8], to fd: Int32) -> Bool {
        let line = bytes + [10]
        var offset = 0
        while offset < line.count {
            let n = line.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, line.count - offset) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            offset += n
        }
        return true
    }
}
