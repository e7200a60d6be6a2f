import DocfsChunks
import DocfsSync

/// Applying remote changes to a served store (issue 22 §3): the coordinated path (write
/// beside under the item's write claim, rename into place, stitch with origin `remote`,
/// invalidate every view) is the next step of the issue; until it lands a linked store's
/// engine sends its changes up and reports each change it cannot yet apply as its last error.
extension StoreSync {
    public func apply(_ version: RemoteVersion, placedAs name: String, expecting expected: ApplyExpectation,
                      keepingHereAsConflict: Bool, fetch: (ChunkDigest) throws -> [UInt8]) throws -> ApplyOutcome {
        throw StoreSyncError("version \(version.number) of item \(version.item) came from machine \(version.author.machine), and applying remote changes to a served store is not built yet (issue 22 §3)")
    }

    public func moveAside(_ item: UInt64, to name: String) throws {
        throw StoreSyncError("renaming item \(item) aside is not built yet (issue 22 §3)")
    }

    public func keepConflict(_ version: RemoteVersion, fetch: (ChunkDigest) throws -> [UInt8]) throws {
        throw StoreSyncError("keeping conflict version \(version.number) of item \(version.item) is not built yet (issue 22 §3)")
    }
}
