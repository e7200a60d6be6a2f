import CLinux
import DocfsCore
import DocfsFilesystem
import DocfsProvider
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A request to the daemon serving a store, over `STORE/control.sock` (one JSON line each way).
/// CLI commands that change a served store send these instead of touching it behind the
/// daemon's back (issue 3 §2, C7).
struct ControlRequest: Codable {
    enum Kind: String, Codable {
        case restore, resolve, watch, claims, rebuildIndex, checkIndex
        /// Who made the item's current version (the request's `version`), if the daemon saw it.
        case author
        case createContainer, renameContainer, deleteContainer
        /// Mount one more view of the served store.
        case mount
        /// A picker mode: open, import, move or export a document.
        case pick
        /// Make a bookmark of the item at `place`, or resolve `token` (for a user who cannot
        /// read the store's key: `BookmarkRequests`).
        case bookmark, resolveBookmark

        /// Requests about a container rather than an item.
        var isContainerChange: Bool { self == .createContainer || self == .renameContainer || self == .deleteContainer }

        /// Requests answered by a stream of lines on a thread of their own.
        var isStreamed: Bool { self == .watch || self == .rebuildIndex || self == .checkIndex }
    }

    var kind: Kind
    /// The document, relative to the mount root.
    var path: String
    var item: UInt64?
    /// The version to restore, or to keep when resolving a conflict (none: keep the current).
    var version: UInt64?
    /// The container to create, rename or delete.
    var container: ContainerChange? = nil
    /// The mount to add.
    var mount: MountRequest? = nil
    /// The picker mode to carry out.
    var pick: PickRequest? = nil
    /// Where the document is, when the user view does not show it (`path` then only names it).
    var place: PlaceRequest? = nil
    /// The app whose view a watch's `path` is in; nil for the user view.
    var view: String? = nil
    /// The security scope a bookmark asks for; the token to resolve.
    var bookmarkScope: BookmarkScopeRequest? = nil
    var token: String? = nil
    /// The protocol the sender speaks (`ControlProtocol.version`); nil from a docfs before it had one.
    var protocolVersion: Int? = ControlProtocol.version

    init(kind: Kind, path: String, item: UInt64? = nil, version: UInt64? = nil, container: ContainerChange? = nil,
         mount: MountRequest? = nil, pick: PickRequest? = nil, view: String? = nil) {
        self.view = view
        self.kind = kind
        self.path = path
        self.item = item
        self.version = version
        self.container = container
        self.mount = mount
        self.pick = pick
    }
}

/// A picker mode to carry out on a document (the request's item): into which folder.
struct PickRequest: Codable {
    var mode: DocumentPicker.Mode
    var folder: PlaceRequest
}

/// A place in the store (container, scope, path), as requests carry it.
struct PlaceRequest: Codable {
    var container: String
    var scope: Scope
    var path: String

    init(_ place: StorePlace) {
        container = place.container.rawValue
        scope = place.scope
        path = place.path
    }

    func place() throws(DocfsError) -> StorePlace {
        StorePlace(container: try ContainerID(container), scope: scope, path: path)
    }
}

/// A mount to add to a served store: where, which view (an app's, or the user view), options.
struct MountRequest: Codable {
    var mountPoint: String
    var app: String?
    var options: [String]
}

/// What a container request names: the container, and its (new) display name, visibility,
/// or whether to delete it with what it holds.
struct ContainerChange: Codable {
    var id: String
    var name: String? = nil
    var isPublic: Bool? = nil
    var force: Bool? = nil
}

/// The version of the control socket's requests and replies: a daemon and a `docfs` command
/// that differ (an upgrade while a daemon runs) say so instead of misreading each other.
enum ControlProtocol {
    static let version = 2
    /// How long the daemon waits for a request's line, and for a reply to be taken.
    static let requestTimeout: Int = 10
    /// Requests answered at once; more connections are refused (a client gone wild).
    static let concurrentRequests = 64
}

struct ControlReply: Codable {
    var ok: Bool
    var message: String
    /// The protocol the daemon speaks.
    var protocolVersion: Int? = ControlProtocol.version
    /// The coordinator's state, for a `claims` request.
    var claims: ClaimReport?
    /// Who made a version, for an `author` request (nil: the daemon did not see it made).
    var author: Author? = nil
    /// How far an index rebuild or check is: done, total.
    var progress: [Int]? = nil
    /// The outcome of an index rebuild or check (its last line).
    var index: IndexWalkOutcome? = nil
    /// The bookmark token made, or where a resolved bookmark's item is.
    var token: String? = nil
    var resolution: BookmarkResolution.Report? = nil
}

/// What the daemon's coordinator holds (`docfs status` shows it): whether the item asked about
/// is claimed now, how many items are, and how many claims were granted and had to wait.
struct ClaimReport: Codable {
    var itemClaimed: Bool
    var claimedItems: Int
    var granted: Int
    var waited: Int
    /// Folders of the store past the kernel's inotify limit (rescanned instead of watched).
    var unwatchedFolders: Int?
    /// Whether the daemon watches the store at all.
    var watched: Bool?
}

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
            reply = ControlReply(ok: false, message: "malformed or missing request (none within \(ControlProtocol.requestTimeout) s): "
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

/// The CLI's side.
enum ControlClient {
    static func send(_ request: ControlRequest, to store: StoreLayout) throws(DocfsError) -> ControlReply {
        let fd = try connect(to: store)
        defer { close(fd) }
        return try exchange(request, on: fd, store: store)
    }

    /// A connection to the daemon serving `store`; the caller closes it.
    static func connect(to store: StoreLayout) throws(DocfsError) -> Int32 {
        let address = ControlSocketAddress(store: store)
        defer { address.close() }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw DocfsError.errno("creating a socket") }
        guard address.withSockaddr({ Glibc.connect(fd, $0, $1) }) == 0 else {
            let failure = DocfsError.errno("connect")
            close(fd)
            throw DocfsError(.storeUnavailable,
                             "the daemon serving \(store.root) does not answer on \(store.controlSocket): is it still running (findmnt -t fuse.docfs)?",
                             cause: failure)
        }
        return fd
    }

    /// Sends `request` on `fd` and reads the reply line (through `reader`, when more lines follow).
    static func exchange(_ request: ControlRequest, on fd: Int32, store: StoreLayout,
                         reader: LineReader? = nil) throws(DocfsError) -> ControlReply {
        guard let data = try? JSONEncoder().encode(request) else { throw DocfsError(.internalFailure, "cannot encode the request") }
        ControlLine.write(Array(data), to: fd)
        guard let line = (reader ?? LineReader(fd)).next(), let reply = try? JSONDecoder().decode(ControlReply.self, from: Data(line)) else {
            throw DocfsError(.storeUnavailable, "the daemon serving \(store.root) gave no answer: see \(store.daemonLog)")
        }
        return reply
    }
}

/// Reads a connection line by line, keeping what arrived after a line for the next.
final class LineReader {
    private let fd: Int32
    private var pending: [UInt8] = []

    init(_ fd: Int32) { self.fd = fd }

    /// The next line (at most 1 MiB), nil at the end of the stream.
    func next() -> [UInt8]? {
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
