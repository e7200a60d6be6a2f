import CFusePassthrough
import DocfsCore
import Logging
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The backing files registered with the kernel for FUSE passthrough, one per node with open
/// files: every open of a file must name the same backing file (the kernel refuses two), so
/// the first open registers it and the last release unregisters it. When the kernel turns
/// passthrough down (old kernel, no CAP_SYS_ADMIN, writeback cache), the registry switches
/// itself off and files are served through docfs as before.
///
/// Lock order: `state` is a leaf lock; it is held across the open and ioctl that register a
/// backing file (so two first opens cannot register two), never across a reply.
final class PassthroughRegistry: Sendable {
    private struct Backing {
        var id: Int32
        var opens: Int
    }

    private struct State {
        var enabled: Bool
        var session: OpaquePointer?
        var byNode: [NodeID: Backing] = [:]
        var announced = false
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

    func disable() { state.withLock { $0.enabled = false } }

    /// The backing id for an open of `node`, registering `openBacking()`'s descriptor on the
    /// first open; nil when passthrough is off (the open is then served through docfs).
    func acquire(_ node: NodeID, openBacking: () throws(DocfsError) -> Int32) -> Int32? {
        state.withLock { state -> Int32? in
            // A node with a registered backing file keeps it for every open until the last
            // release, even after passthrough was switched off: the kernel needs them to agree.
            if var backing = state.byNode[node] {
                backing.opens += 1
                state.byNode[node] = backing
                return backing.id
            }
            guard state.enabled, let session = state.session else { return nil }
            guard let fd = try? openBacking() else { return nil }
            let id = docfs_backing_open(session, fd)
            close(fd)  // the kernel holds its own reference to the file
            guard id > 0 else {
                state.enabled = false
                logger.notice("kernel refused FUSE passthrough (\(-id)): serving reads and writes through docfs")
                return nil
            }
            if !state.announced {
                state.announced = true
                logger.notice("FUSE passthrough in use: the kernel reads and writes open files in the store itself")
            }
            state.byNode[node] = Backing(id: id, opens: 1)
            return id
        }
    }

    /// One open of `node` was released; the last one unregisters its backing file.
    func release(_ node: NodeID) {
        state.withLock { state in
            guard var backing = state.byNode[node], let session = state.session else { return }
            backing.opens -= 1
            if backing.opens > 0 {
                state.byNode[node] = backing
                return
            }
            state.byNode[node] = nil
            _ = docfs_backing_close(session, backing.id)
        }
    }
}

/// Carries a C pointer into a Mutex (the session pointer is only used for thread-safe ioctls).
private struct UnsafeSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
