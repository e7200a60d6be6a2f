import DocfsChunks
import Foundation

/// One way a store differs from its remote (DESIGN §9.0 "Checked"): an item here and not there,
/// there and not here, or at both with a field that differs (the value here and the remote's,
/// in words).
public struct RemoteDifference: Sendable, Equatable, Codable, CustomStringConvertible {
    public enum Field: String, Sendable, Codable {
        case missingHere = "missing here"
        case missingOnRemote = "missing on the remote"
        case place, kind, content, mode, modified, attributes, number
    }

    public var item: UInt64
    /// Where the item is here, or nil (missing here).
    public var path: String?
    public var field: Field
    public var here: String?
    public var remote: String?

    public init(item: UInt64, path: String? = nil, field: Field, here: String? = nil, remote: String? = nil) {
        self.item = item
        self.path = path
        self.field = field
        self.here = here
        self.remote = remote
    }

    public var description: String {
        let shown = path.map { "\($0) (item \(item))" } ?? "item \(item)"
        switch field {
        case .missingHere: return "\(shown): missing here (the remote has \(remote ?? "it"))"
        case .missingOnRemote: return "\(shown): missing on the remote (here: \(here ?? "it"))"
        default: return "\(shown): \(field.rawValue) differs: here \(here ?? "-"), remote \(remote ?? "-")"
        }
    }
}

/// Compares a store with its remote, item by item (`docfs remote check`): each item's place
/// (container, scope, parent, name), kind, content (its chunks' digests, read from the file
/// now), mode, modification time, attributes and current version number, against the remote's
/// current version. The answer is every difference: machines in step have none.
public enum RemoteCheck {
    /// How the item as it is here (`local`, nil: not here; `number`: its version number here)
    /// differs from the remote's current version (`remote`, nil or deleted: not there).
    public static func differences(local: LocalItem?, number: UInt64?, remote: RemoteVersion?) -> [RemoteDifference] {
        let remote = remote.flatMap { $0.deleted ? nil : $0 }
        switch (local, remote) {
        case (nil, nil):
            return []
        case (nil, let remote?):
            return [RemoteDifference(item: remote.item, field: .missingHere, remote: describe(LocalItem(remote)))]
        case (let local?, nil):
            return [RemoteDifference(item: local.item, field: .missingOnRemote, here: describe(local))]
        case (let local?, let remote?):
            let theirs = LocalItem(remote)
            var found: [RemoteDifference] = []
            func differ(_ field: RemoteDifference.Field, _ here: String, _ there: String) {
                if here != there { found.append(RemoteDifference(item: local.item, field: field, here: here, remote: there)) }
            }
            differ(.place, place(local), place(theirs))
            differ(.kind, local.kind.rawValue, theirs.kind.rawValue)
            differ(.content, "\(local.size) bytes \(digest(local.manifest))", "\(theirs.size) bytes \(digest(theirs.manifest))")
            differ(.mode, String(local.mode, radix: 8), String(theirs.mode, radix: 8))
            differ(.modified, String(format: "%.6f", local.modified), String(format: "%.6f", theirs.modified))
            differ(.attributes, attributes(local.attributes), attributes(theirs.attributes))
            if local.kind == .file, let number {
                differ(.number, "v\(number)", "v\(remote.number)")
            }
            return found
        }
    }

    /// Every difference between `store` and `remote`: the remote's items listed a page at a
    /// time, each compared with the item here, then the items here the remote does not list.
    /// `progress` is told how many items were compared so far.
    public static func run(store: any SyncedStore, remote: any Remote, pageSize: Int = 1000,
                           progress: ((Int) -> Void)? = nil) throws(SyncError) -> [RemoteDifference] {
        var found: [RemoteDifference] = []
        var listed = Set<UInt64>()
        var after: UInt64 = 0
        while true {
            let from = after
            let page = try SyncError.remote { () throws(RemoteError) in try remote.listing(after: from, limit: pageSize) }
            for change in page {
                let item = change.version.item
                listed.insert(item)
                found += try compare(item, in: store, with: change.version)
            }
            progress?(listed.count)
            guard let last = page.last?.version.item, page.count == pageSize else { break }
            after = last
        }
        let here = try SyncError.local("list the store's items") { try store.allItems() }
        for item in here where !listed.contains(item) {
            found += try compare(item, in: store, with: nil)
        }
        progress?(listed.union(here).count)
        return found
    }

    private static func compare(_ item: UInt64, in store: any SyncedStore, with version: RemoteVersion?) throws(SyncError) -> [RemoteDifference] {
        let local: LocalItem?
        do {
            local = try store.current(item)
        } catch is LocalItemBeingWritten {
            return [RemoteDifference(item: item, field: .content, here: "being written", remote: version.map { "v\($0.number)" })]
        } catch is LocalItemUnsettled {
            return [RemoteDifference(item: item, field: .place, here: "being moved or removed", remote: version.map(place))]
        } catch {
            throw SyncError(local: "could not read item \(item): \(error)")
        }
        let number = local?.kind == .file ? local?.number ?? store.versionNumber(of: item) : nil
        let path = local == nil ? nil : store.shownPath(of: item)
        return differences(local: local, number: number, remote: version).map { difference in
            var shown = difference
            shown.path = path
            return shown
        }
    }

    private static func place(_ version: RemoteVersion) -> String { place(LocalItem(version)) }

    private static func place(_ item: LocalItem) -> String {
        "\(item.container)/\(item.scope) in \(item.parent) as \(item.name.debugDescription)"
    }

    private static func describe(_ item: LocalItem) -> String {
        "\(item.kind.rawValue) \(place(item)), \(item.size) bytes"
    }

    /// A short digest of a manifest (the content's chunks, in order).
    private static func digest(_ manifest: [ChunkDigest]) -> String {
        let joined = Array(manifest.map(\.hex).joined().utf8)
        return String(joined.withUnsafeBytes { ChunkDigest(of: $0).hex }.prefix(12))
    }

    private static func attributes(_ attributes: [String: [UInt8]]) -> String {
        attributes.keys.sorted().map { key in
            let value = attributes[key] ?? []
            return "\(key)=\(value.count <= 24 ? String(decoding: value, as: UTF8.self).debugDescription : "\(value.count) bytes")"
        }.joined(separator: ", ")
    }
}
