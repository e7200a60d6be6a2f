import DocfsCore
import DocfsIndex
import DocfsProvider

/// The index of the store being served: rebuilt or checked on request while operations go on
/// (the walk takes the stitching lock folder by folder, so it never writes over a newer record).
/// Not a filesystem operation: the daemon's control socket asks for it.
public struct IndexMaintenance: Sendable {
    /// The view whose store, stitcher and pending ids the walk uses.
    let view: Filesystem

    public init(view: Filesystem) {
        self.view = view
    }

    /// Walks the store in `mode` (rebuild or check; a reconcile is the daemon's start, before
    /// serving). `progress(done, total)` as in `IndexRebuild.run`.
    public func walk(_ mode: IndexRebuild.Mode, progress: ((Int, Int) -> Void)? = nil) throws(DocfsError) -> IndexRebuild.Summary {
        guard let stitcher = view.stitcher else { throw DocfsError(.invalidArgument, "this mount keeps no index") }
        let pending = view.identity.pending
        return try IndexRebuild.run(store: view.store, index: stitcher.index, mode: mode, serialized: stitcher.serialized,
                                    pendingIDs: { _, st in pending.item(of: BackingKey(st)) }, progress: progress)
    }
}
