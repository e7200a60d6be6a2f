import CLinux
import DocfsCore
import DocfsProvider
import DocfsSync
import Foundation

/// `user.docfs.status` (DESIGN §6, §9.1): where an item of a linked store stands with the
/// remote, read from its sync state in the index (one keyed read) and the file's own version.
extension Filesystem {
    /// Whether `node` has a status: the store is linked, and the item travels under an id of
    /// its own here (a symbolic link's is derived from its inode). What a listing asks, without
    /// reading the status.
    func hasSyncStatus(_ node: Node) -> Bool {
        stitcher?.fillsOutbox.load(ordering: .relaxed) == true && !node.item.isDerived
    }

    /// The status of `node`'s item; nil when it has none (`hasSyncStatus`).
    func syncStatus(of node: Node) -> String? {
        guard hasSyncStatus(node), let stitcher else { return nil }
        if node.type == S_IFREG, let promised = shared.promises.status(of: node.fd) { return promised }
        let state = (try? stitcher.index.syncState(of: Int64(bitPattern: node.item.rawValue)))
            .flatMap { $0 }.flatMap { try? JSONDecoder().decode(ItemSyncState.self, from: Data($0)) }
        var conflict = [UInt8](repeating: 0, count: 2)
        let conflicted = conflict.withUnsafeMutableBytes { docfs_getxattr(node.procPath, Self.conflictAttribute, $0.baseAddress, $0.count) } == 1
            && conflict[0] == UInt8(ascii: "1")
        let status = ItemSyncStatus.describe(state: state, versionHere: node.type == S_IFREG ? ItemAttributes.version(ofDescriptor: node.fd) : 0,
                                             conflict: conflicted, beingWritten: stitcher.isWritten(node.item))
        return status == "current" && node.type == S_IFREG && Self.isPinned(node.fd) ? "pinned" : status
    }
}
