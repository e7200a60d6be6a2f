import DocfsCore

/// A store's key-value stores as the sync sees them (issue 24): local writes waiting to go up,
/// other machines' writes to take, and how far the remote's changes were read.
public protocol SyncedKeyValues: Sendable {
    func pendingKeyValues(limit: Int) throws(DocfsError) -> [PendingKeyValue]
    func sentKeyValue(_ write: PendingKeyValue, sequence: UInt64) throws(DocfsError)
    /// Takes another machine's change; answers whether the value here changed.
    func takeRemoteKeyValue(_ change: KeyValueChange, value: KeyValue?) throws(DocfsError) -> Bool
    func keyValueAnchor() throws(DocfsError) -> UInt64
    func setKeyValueAnchor(_ sequence: UInt64) throws(DocfsError)
    /// Why values that come down change while the store joins a remote (its first read of the
    /// log since it was linked: `.initialSync`, or `.accountChange` after another remote);
    /// nil once it has joined.
    func keyValueJoining() throws(DocfsError) -> KeyValueChangeReason?
    /// The whole log was read: values carried over from a remote linked before that this one
    /// did not replace wait to go up. Answers how many.
    func finishKeyValueJoining() throws(DocfsError) -> Int
    /// Tells watchers that `keys` of `container` changed, and why.
    func noteRemoteKeyValues(_ keys: [String], in container: String, reason: KeyValueChangeReason) throws(DocfsError)
}

/// One round of the key-value stores' sync: local writes go up (the server's order decides:
/// last writer wins, never a clock), then every change after the anchor comes down, in order,
/// each taken unless a local write of the key still waits to go up (it comes later in the
/// server's order) or the value here is from a later change. A value from the remote that is
/// not one (another program wrote the table) is skipped and reported, never taken. Joining a
/// remote after another (an account change), the remote's values replace those carried over,
/// and the rest go up once its whole log was read.
public struct KeyValueSync: Sendable {
    public let store: any SyncedKeyValues
    public let remote: any Remote
    /// Writes sent and changes read per call of the remote.
    static let page = 256

    public init(store: any SyncedKeyValues, remote: any Remote) {
        self.store = store
        self.remote = remote
    }

    /// What a round did: writes sent, and the keys whose value here another machine changed
    /// (by container), with what could not be taken.
    public struct Outcome: Sendable, Equatable {
        public var sent = 0
        public var changed: [String: [String]] = [:]
        public var problems: [String] = []
    }

    public func syncOnce() throws(SyncError) -> Outcome {
        var outcome = Outcome()
        try send(&outcome)
        let joining = try SyncError.local("read whether the key-value stores join the remote") { try store.keyValueJoining() }
        var anchor = try SyncError.local("read the key-value anchor") { try store.keyValueAnchor() }
        while true {
            let changes = try SyncError.remote { () throws(RemoteError) in try remote.keyValueChanges(after: anchor, limit: Self.page) }
            for change in changes {
                // A key no docfs would write (another program wrote the table) is not taken:
                // an app's key files could not show it.
                do throws(DocfsError) { _ = try KeyValueLimits.check(key: Array(change.key.utf8)) } catch {
                    outcome.problems.append("key \(change.key.debugDescription) of \(change.container) from the remote is skipped: \(error.message)")
                    anchor = change.sequence
                    continue
                }
                var value: KeyValue?
                if let bytes = change.value {
                    do {
                        value = try KeyValue(portable: bytes)
                    } catch {
                        outcome.problems.append("key \(change.key) of \(change.container) from the remote is skipped: \(error.message)")
                        anchor = change.sequence
                        continue
                    }
                }
                if try SyncError.local("take a key-value change", { try store.takeRemoteKeyValue(change, value: value) }) {
                    outcome.changed[change.container, default: []].append(change.key)
                }
                anchor = change.sequence
            }
            if !changes.isEmpty {
                try SyncError.local("save the key-value anchor") { try store.setKeyValueAnchor(anchor) }
            }
            if changes.count < Self.page { break }
        }
        for (container, keys) in outcome.changed.sorted(by: { $0.key < $1.key }) {
            try SyncError.local("tell watchers of key-value changes") {
                try store.noteRemoteKeyValues(keys, in: container, reason: joining ?? .serverChange)
            }
        }
        if joining != nil, try SyncError.local("finish joining the remote", { try store.finishKeyValueJoining() }) > 0 {
            try send(&outcome)
        }
        return outcome
    }

    /// Sends the local writes waiting to go up, oldest first.
    private func send(_ outcome: inout Outcome) throws(SyncError) {
        while true {
            let waiting = try SyncError.local("list the key-value writes waiting") { try store.pendingKeyValues(limit: Self.page) }
            for write in waiting {
                let sequence = try SyncError.remote { () throws(RemoteError) in
                    try remote.setValue(write.value?.portable, forKey: write.key, in: write.container)
                }
                try SyncError.local("note a key-value write sent") { try store.sentKeyValue(write, sequence: sequence) }
                outcome.sent += 1
            }
            if waiting.count < Self.page { break }
        }
    }
}
