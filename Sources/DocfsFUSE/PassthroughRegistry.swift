import CFusePassthrough
import DocfsCore
import Logging
import Synchronization
import SystemPackage
#if canImport(Glibc)
import Glibc
#endif

/// The backing files registered with the kernel for FUSE passthrough, one per node with open
/// files: every open of a file must name the same backing file (the kernel refuses two), so
/// the first open registers it and the last release unregisters it. A node whose first open is
/// not eligible (a file with set-id bits) is served through docfs until its last release, since
/// the kernel also refuses to mix the two on one file. When the kernel turns passthrough down
/// (old kernel, no CAP_SYS_ADMIN, writeback cache), the registry switches itself off and files
/// are served through docfs as before.
///
/// Lock order: `state` is a leaf lock; it is held across the open and ioctl that register a
/// backing file (so two first opens cannot register two), never across a reply.
final class PassthroughRegistry: Sendable {
    /// The open files of a node: by passthrough (a backing id) or served through docfs (nil).
    private struct OpenNode {
        var backing: Int32?
        var handles: Set<UInt64>
        /// Those of `handles` closed once at least (FLUSH): their releases may be on the way.
        var flushed: Set<UInt64> = []
    }

    private struct State {
        var enabled: Bool
        var session: OpaquePointer?
        var byNode: [NodeID: OpenNode] = [:]
        /// The open files counted in `byNode`, by handle: only their releases count.
        var handles: [UInt64: NodeID] = [:]
        var announced = false
        /// Whether the kernel registers a file named by an O_PATH descriptor (until it refuses one).
        var takesPathDescriptors = true
    }

    private let state: Mutex<State>
    private let logger: Logger

    init(enabled: Bool, logger: Logger) {
        state = Mutex(State(enabled: enabled, session: nil))
        self.logger = logger
    }

    var isEnabled: Bool { state.withLock { $0.enabled && $0.session != nil } }

    /// The session whose device the ioctls go to, once it is mounted.
    func attach(session: OpaquePointer) {
        state.withLock { $0.session = UnsafeSendable(session).value }
    }

    /// Forgets the session before it is unmounted and freed (ioctls take the lock too).
    func detach() {
        state.withLock { $0.session = nil }
    }

    /// The backing id for the open `handle` of `node`, registering its backing file on the
    /// node's first open if it is `eligible`; nil when the open is served through docfs
    /// (passthrough off, or the node's first open was not eligible). The file is named by the
    /// node's own O_PATH descriptor (`withPathDescriptor`) on kernels that take one, else by
    /// `openBacking()`'s. Throws when the backing file cannot be had for a passing reason, so
    /// no open of a passthrough node is ever served another way (the kernel would refuse it).
    func acquire(_ node: NodeID, handle: UInt64, eligible: Bool,
                 withPathDescriptor: ((Int32) -> Int32) throws(DocfsError) -> Int32,
                 openBacking: () throws(DocfsError) -> Int32) throws(DocfsError) -> Int32? {
        try state.withLock { (state: inout State) throws(DocfsError) -> Int32? in
            // A node keeps how its first open was served for every open until the last release,
            // even after passthrough was switched off: the kernel needs them to agree.
            if var open = state.byNode[node] {
                open.handles.insert(handle)
                state.byNode[node] = open
                state.handles[handle] = node
                return open.backing
            }
            guard state.enabled, let session = state.session else { return nil }
            guard eligible else {
                state.byNode[node] = OpenNode(backing: nil, handles: [handle])
                state.handles[handle] = node
                return nil
            }
            var id = -EBADF
            if state.takesPathDescriptors {
                id = try withPathDescriptor { docfs_backing_open(session, $0) }
                if id == -EBADF { state.takesPathDescriptors = false }  // an older kernel: fget, not fget_raw
            }
            if id == -EBADF {
                let fd = try openBacking()
                id = docfs_backing_open(session, fd)
                close(fd)  // the kernel holds its own reference to the file
            }
            if id < 0 {
                let reason = -id
                guard [EPERM, EOPNOTSUPP, ENOTTY, EINVAL].contains(reason) else {
                    throw DocfsError(.system(Errno(rawValue: reason)), "registering a backing file")
                }
                state.enabled = false
                logger.notice("kernel refused FUSE passthrough (\(reason)): serving reads and writes through docfs")
                return nil
            }
            if !state.announced {
                state.announced = true
                logger.notice("FUSE passthrough in use: the kernel reads and writes open files in the store itself")
            }
            state.byNode[node] = OpenNode(backing: id, handles: [handle])
            state.handles[handle] = node
            return id
        }
    }

    /// Whether `node`'s open files are passed through and were all closed once at least (a
    /// writer's close sends FLUSH, which close(2) waits for): their releases, which the kernel
    /// sends after close(2) returns, are likely on the way.
    func awaitsOnlyReleases(_ node: NodeID) -> Bool {
        state.withLock { state in
            guard let open = state.byNode[node], open.backing != nil else { return false }
            return open.handles.isSubset(of: open.flushed)
        }
    }

    /// A descriptor of the open `handle` was closed (FLUSH).
    func flushed(_ handle: UInt64) {
        state.withLock { state in
            guard let node = state.handles[handle] else { return }
            state.byNode[node]?.flushed.insert(handle)
        }
    }

    /// Waits until `node` has no open files, for at most `timeout`; whether it has none.
    func awaitLastRelease(of node: NodeID, timeout: Duration) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        while state.withLock({ $0.byNode[node] != nil }) {
            guard clock.now < deadline else { return false }
            usleep(500)
        }
        return true
    }

    /// The open `handle` is being released; the last backed open of its node unregisters the
    /// backing file. Call before the handle's descriptor is closed (its number is the key).
    func release(_ handle: UInt64) {
        state.withLock { state in
            guard let node = state.handles.removeValue(forKey: handle), var open = state.byNode[node] else { return }
            open.handles.remove(handle)
            open.flushed.remove(handle)
            if !open.handles.isEmpty {
                state.byNode[node] = open
                return
            }
            state.byNode[node] = nil
            if let id = open.backing, let session = state.session { _ = docfs_backing_close(session, id) }
        }
    }
}

/// Carries a C pointer into a Mutex (the session pointer is only used for thread-safe ioctls).
private struct UnsafeSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
