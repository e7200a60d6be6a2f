import CFuse
import Glibc
import DocfsCore
import Synchronization

/// Tells the kernel to forget what it caches about nodes that changed without its knowing:
/// a safe-save hands the document's id (and attributes) on to the new content, whose attributes
/// the kernel cached before. Notifications go out before the reply of the request that caused them,
/// so the caller's next stat already sees the change; they take no inode locks (attributes only).
///
/// Lock order: `state` is a leaf lock, held only to take or give back the pointer, never
/// across a notification (the kernel may wait on a folder's lock a request holds).
final class KernelNotifier: Sendable {
    private struct State {
        var session: SessionPointer?
        /// Notifications under way: the session must outlive them.
        var users = 0
    }

    private let state = Mutex(State())

    func attach(_ pointer: OpaquePointer) {
        state.withLock { $0.session = SessionPointer(value: pointer) }
    }

    /// Stops notifications before the session is unmounted and freed: later ones are dropped,
    /// and this waits until those under way have returned. Threads outside libfuse's loop (the
    /// store watcher, a delayed forgetting) may still try to notify after the mount ended.
    func detach() {
        state.withLock { $0.session = nil }
        while state.withLock({ $0.users }) > 0 { usleep(1_000) }
    }

    /// Runs `notify` with the session, unless it is detached.
    private func withSession(_ notify: (OpaquePointer) -> Void) {
        guard let pointer = state.withLock({ state -> OpaquePointer? in
            guard let session = state.session else { return nil }
            state.users += 1
            return session.value
        }) else { return }
        defer { state.withLock { $0.users -= 1 } }
        notify(pointer)
    }

    func forgetAttributes(of nodes: [NodeID]) {
        guard !nodes.isEmpty else { return }
        withSession { pointer in
            for node in nodes {
                _ = fuse_lowlevel_notify_inval_inode(pointer, fuse_ino_t(node), -1, 0)
            }
        }
    }

    /// Names whose entries changed behind the kernel (a restore): it looks them up again.
    /// Never call this while answering a request on the same folder (the kernel holds its lock).
    func forgetEntries(_ entries: [(parent: NodeID, name: FileName)]) {
        guard !entries.isEmpty else { return }
        withSession { pointer in
            for (parent, name) in entries {
                _ = fuse_lowlevel_notify_inval_entry(pointer, fuse_ino_t(parent), name.cString, name.cString.count - 1)
            }
        }
    }

    /// Files changed behind the kernel: it drops their attributes and cached pages.
    func forgetContent(of nodes: [NodeID]) {
        guard !nodes.isEmpty else { return }
        withSession { pointer in
            for node in nodes {
                _ = fuse_lowlevel_notify_inval_inode(pointer, fuse_ino_t(node), 0, 0)
            }
        }
    }

    private struct SessionPointer: @unchecked Sendable {
        // libfuse's notify calls are thread-safe on a mounted session.
        let value: OpaquePointer
    }
}
