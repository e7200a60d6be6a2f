import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsSync

/// A store's key-value database as the sync sees it (`SyncedKeyValues`): the index module
/// keeps the entries, the sync module knows only this protocol.
public struct StoreKeyValues: SyncedKeyValues {
    public let database: KeyValueDatabase

    public init(database: KeyValueDatabase) { self.database = database }

    public func pendingKeyValues(limit: Int) throws(DocfsError) -> [PendingKeyValue] {
        try database.pending(limit: limit)
    }

    public func sentKeyValue(_ write: PendingKeyValue, sequence: UInt64) throws(DocfsError) {
        try database.sent(write, sequence: sequence)
    }

    public func takeRemoteKeyValue(_ change: KeyValueChange, value: KeyValue?) throws(DocfsError) -> Bool {
        try database.takeRemote(change.key, in: change.container, value: value, sequence: change.sequence)
    }

    public func keyValueAnchor() throws(DocfsError) -> UInt64 { try database.remoteAnchor() }

    public func setKeyValueAnchor(_ sequence: UInt64) throws(DocfsError) { try database.setRemoteAnchor(sequence) }

    public func keyValueJoining() throws(DocfsError) -> KeyValueChangeReason? { try database.joining() }

    public func finishKeyValueJoining() throws(DocfsError) -> Int { try database.finishJoining() }

    public func noteRemoteKeyValues(_ keys: [String], in container: String, reason: KeyValueChangeReason) throws(DocfsError) {
        try database.note(reason, keys: keys, in: container)
    }
}
