import DocfsCore
import Synchronization

/// A change presenters hear about (C6): what happened, to which path (relative to the user
/// view's root; "" where the user view does not show it) and place, and whether docfs made it
/// or found it made behind its back.
public struct PresentedChange: Sendable, Codable, Equatable {
    public enum Kind: String, Sendable, Codable {
        case created, changed, moved, deleted, version, conflict
    }

    public var kind: Kind
    public var path: String
    /// Where it went (`moved`).
    public var newPath: String?
    public var item: UInt64?
    /// The new version number (`version`).
    public var version: UInt64?
    /// Made in the store behind docfs (found by the store watcher).
    public var uncoordinated: Bool
    /// `remote` for a change another machine made (applied by the sync engine), with that
    /// machine's name; nil for this machine's own.
    public var origin: String?
    public var machine: String?
    /// Where it happened in the store (and where a move went), so each view can say it with
    /// paths of its own; not part of what is sent to watchers.
    public var place: StorePlace?
    public var newPlace: StorePlace?

    private enum CodingKeys: String, CodingKey {
        case kind, path, newPath, item, version, pending, uncoordinated, origin, machine
    }

    // A pending save (`VersionNumber`) is told as `"pending": "p1"`, with no `version`, as
    // `docfs versions --json` lists it: the number the remote gives it comes later.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(kind, forKey: .kind)
        try container.encode(path, forKey: .path)
        try container.encodeIfPresent(newPath, forKey: .newPath)
        try container.encodeIfPresent(item, forKey: .item)
        if let version, VersionNumber.isPending(version) {
            try container.encode(VersionNumber.shown(version), forKey: .pending)
        } else {
            try container.encodeIfPresent(version, forKey: .version)
        }
        try container.encode(uncoordinated, forKey: .uncoordinated)
        try container.encodeIfPresent(origin, forKey: .origin)
        try container.encodeIfPresent(machine, forKey: .machine)
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        kind = try container.decode(Kind.self, forKey: .kind)
        path = try container.decode(String.self, forKey: .path)
        newPath = try container.decodeIfPresent(String.self, forKey: .newPath)
        item = try container.decodeIfPresent(UInt64.self, forKey: .item)
        version = try container.decodeIfPresent(UInt64.self, forKey: .version)
            ?? container.decodeIfPresent(String.self, forKey: .pending).flatMap(VersionNumber.parse)
        uncoordinated = try container.decode(Bool.self, forKey: .uncoordinated)
        origin = try container.decodeIfPresent(String.self, forKey: .origin)
        machine = try container.decodeIfPresent(String.self, forKey: .machine)
    }

    public init(_ kind: Kind, path: String, newPath: String? = nil, item: ItemID? = nil, version: UInt64? = nil,
                uncoordinated: Bool = false, place: StorePlace? = nil, newPlace: StorePlace? = nil) {
        self.kind = kind
        self.path = path
        self.newPath = newPath
        self.item = item?.rawValue
        self.version = version
        self.uncoordinated = uncoordinated
        self.place = place
        self.newPlace = newPlace
    }

    /// Whether the change concerns `path` or something under it ("" is everything).
    public func concerns(_ path: String) -> Bool {
        func under(_ candidate: String) -> Bool {
            path.isEmpty || candidate == path || candidate.hasPrefix(path + "/")
        }
        return under(self.path) || newPath.map(under) ?? false
    }
}

/// Whoever wants to hear about changes (the model's NSFilePresenter): `docfs watch`, and later
/// the index, the thumbnailer and sync. Changes are posted by the operation that made them (or
/// by the store watcher), in order, to every subscriber's handler; handlers must return at once
/// (queue the change and deal with it elsewhere). With nobody subscribed, posting costs one
/// atomic load, and callers check `isListened` before working out paths.
///
/// Lock order: `subscribers` is a leaf lock; handlers run outside it.
public final class Presenters: Sendable {
    public typealias Handler = @Sendable (PresentedChange) -> Void

    private let subscribers = Mutex<[UInt64: Handler]>([:])
    private let count = Atomic<Int>(0)
    private let nextToken = Atomic<UInt64>(1)

    public init() {}

    /// Whether anyone listens (so a poster may skip working out what to post).
    public var isListened: Bool { count.load(ordering: .relaxed) > 0 }

    /// Starts delivering changes to `handler`; the token ends it (`unsubscribe`).
    public func subscribe(_ handler: @escaping Handler) -> UInt64 {
        let token = nextToken.add(1, ordering: .relaxed).oldValue
        subscribers.withLock { $0[token] = handler }
        count.add(1, ordering: .relaxed)
        return token
    }

    public func unsubscribe(_ token: UInt64) {
        if subscribers.withLock({ $0.removeValue(forKey: token) }) != nil { count.subtract(1, ordering: .relaxed) }
    }

    public func post(_ change: PresentedChange) {
        guard isListened else { return }
        for handler in subscribers.withLock({ Array($0.values) }) { handler(change) }
    }
}
