import CFuse
import DocfsCore
import Synchronization

/// Tells the kernel to forget what it caches about nodes that changed without its knowing:
/// a safe-save hands the document's id (and attributes) on to the new content, whose attributes
/// the kernel cached before. Notifications go out before the reply of the request that caused them,
/// so the caller's next stat already sees the change; they take no inode locks (attributes only).
///
/// Lock order: `session` is a leaf lock, held only to read the pointer.
final class KernelNotifier: Sendable {
    private let session = Mutex<SessionPointer?>(nil)

    func attach(_ pointer: OpaquePointer) {
        session.withLock { $0 = SessionPointer(value: pointer) }
    }

    func forgetAttributes(of nodes: [NodeID]) {
        guard !nodes.isEmpty, let pointer = session.withLock({ $0 })?.value else { return }
        for node in nodes {
            _ = fuse_lowlevel_notify_inval_inode(pointer, fuse_ino_t(node), -1, 0)
        }
    }

    /// Names whose entries changed behind the kernel (a restore): it looks them up again.
    /// Never call this while answering a request on the same folder (the kernel holds its lock).
    func forgetEntries(_ entries: [(parent: NodeID, name: FileName)]) {
        guard !entries.isEmpty, let pointer = session.withLock({ $0 })?.value else { return }
        for (parent, name) in entries {
            _ = fuse_lowlevel_notify_inval_entry(pointer, fuse_ino_t(parent), name.cString, name.cString.count - 1)
        }
    }

    /// Files changed behind the kernel: it drops their attributes and cached pages.
    func forgetContent(of nodes: [NodeID]) {
        guard !nodes.isEmpty, let pointer = session.withLock({ $0 })?.value else { return }
        for node in nodes {
            _ = fuse_lowlevel_notify_inval_inode(pointer, fuse_ino_t(node), 0, 0)
        }
    }

    private struct SessionPointer: @unchecked Sendable {
        // libfuse's notify calls are thread-safe on a mounted session.
        let value: OpaquePointer
    }
}
