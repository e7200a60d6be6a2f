import DocfsChunks
import DocfsSync
import Foundation
import NIOCore
import PostgresNIO

/// A page of versions (the log, the listing, an item's versions) asked for as one row of
/// arrays, one array per column. postgres-nio stops the whole process when the server ends a
/// connection while rows of a many-row answer wait for their reader (its row stream's
/// `channelReadComplete` precondition), so no answer that can be long comes as many rows.
/// A column that may be NULL comes as two arrays: whether it is there, and its value or a
/// stand-in (arrays with NULL elements do not decode).
struct VersionPage {
    let entries: [(version: RemoteVersion, sequence: UInt64)]

    /// The entries as changes of the log.
    var changes: [RemoteChange] { entries.map { RemoteChange(sequence: $0.sequence, version: $0.version) } }

    /// The versions of `source` (a FROM clause with its WHERE, naming the versions table
    /// `v`), in the order of `key` (a column of `v`), at most `limit`.
    static func query(from source: String, orderedBy key: String, limit: Int) -> PostgresQuery {
        let columns = Column.allCases.map { "v.\($0.rawValue)" }.joined(separator: ", ")
        var aggregates: [String] = []
        for column in Column.allCases {
            if let standIn = column.standIn {
                aggregates.append("array_agg(p.\(column.rawValue) IS NOT NULL ORDER BY p.\(key))")
                aggregates.append("array_agg(COALESCE(p.\(column.rawValue), \(standIn)) ORDER BY p.\(key))")
            } else {
                aggregates.append("array_agg(p.\(column.rawValue) ORDER BY p.\(key))")
            }
        }
        return PostgresQuery(unsafeSQL: """
            SELECT \(aggregates.joined(separator: ", ")) FROM (
                SELECT \(columns) FROM \(source) ORDER BY v.\(key) LIMIT \(limit)) p
            """)
    }

    /// The versions in the one row `query` answers (none: no row, or arrays of NULL).
    init(_ row: PostgresRow?) throws(RemoteError) {
        guard let row else {
            entries = []
            return
        }
        do {
            var cells = row.makeIterator()
            var count: Int?
            /// The next column's array; every one after the first must be as long.
            func next<T: PostgresDecodable>(_: T.Type) throws -> [T] where T: PostgresArrayDecodable, T == T._DecodableType {
                guard let cell = cells.next() else { throw RemoteError(.refused, "the remote answered too few columns") }
                let values = try cell.decode([T]?.self) ?? []
                guard values.count == (count ?? values.count) else {
                    throw RemoteError(.refused, "the remote answered a page of versions whose columns differ in length")
                }
                count = values.count
                return values
            }
            let items = try next(Int64.self)
            let numbers = try next(Int64.self), bases = try next(Int64.self), containers = try next(String.self)
            let scopes = try next(String.self), parents = try next(Int64.self), names = try next(String.self)
            let kinds = try next(String.self), manifests = try next(String.self), sizes = try next(Int64.self)
            let modes = try next(Int64.self), modifieds = try next(Double.self), attributes = try next(ByteBuffer.self)
            let machines = try next(String.self), users = try next(String.self), conflicts = try next(Bool.self)
            let deleteds = try next(Bool.self), sequences = try next(Int64.self), resolves = try next(Bool.self)
            let hasContainerName = try next(Bool.self), containerNames = try next(String.self)
            let hasContainerPublic = try next(Bool.self), containerPublics = try next(Bool.self)
            let hasThumbnail = try next(Bool.self), thumbnails = try next(String.self)
            let previouses = try next(Bool.self)
            let hasLengths = try next(Bool.self), lengths = try next(ByteBuffer.self)
            var entries: [(version: RemoteVersion, sequence: UInt64)] = []
            entries.reserveCapacity(items.count)
            for i in items.indices {
                let item = items[i], number = numbers[i]
                guard let kind = RemoteItemKind(rawValue: kinds[i]), let mode = UInt32(exactly: modes[i]),
                      let manifest = Self.digests(manifests[i]) else {
                    throw RemoteError(.refused, "the remote's version \(number) of item \(item) is damaged")
                }
                let decoded = try JSONDecoder().decode([String: [UInt8]].self, from: Data(attributes[i].readableBytesView))
                var version = RemoteVersion(item: UInt64(bitPattern: item), container: containers[i], scope: scopes[i],
                                            parent: UInt64(bitPattern: parents[i]), name: names[i], kind: kind,
                                            number: UInt64(bitPattern: number), base: UInt64(bitPattern: bases[i]),
                                            manifest: manifest, size: sizes[i], mode: mode, modified: modifieds[i],
                                            attributes: decoded, author: RemoteAuthor(machine: machines[i], user: users[i]),
                                            conflict: conflicts[i], deleted: deleteds[i])
                version.resolves = resolves[i] ? true : nil
                version.previous = previouses[i] ? true : nil
                version.lengths = hasLengths[i] ? PostgresRemote.decodeLengths(Data(lengths[i].readableBytesView)) : nil
                version.containerName = hasContainerName[i] ? containerNames[i] : nil
                version.containerPublic = hasContainerPublic[i] ? containerPublics[i] : nil
                version.thumbnail = hasThumbnail[i] ? ChunkDigest(hex: thumbnails[i])?.hex : nil
                entries.append((version, UInt64(bitPattern: sequences[i])))
            }
            self.entries = entries
        } catch let error as RemoteError {
            throw error
        } catch {
            throw RemoteError(.refused, "the remote answered versions docfs cannot read: \(error)")
        }
    }

    /// A manifest's digests (its hex run together); nil for one that is not.
    private static func digests(_ manifest: String) -> [ChunkDigest]? {
        guard manifest.utf8.count % 64 == 0 else { return nil }
        var digests: [ChunkDigest] = []
        digests.reserveCapacity(manifest.utf8.count / 64)
        var rest = Substring(manifest)
        while !rest.isEmpty {
            guard let digest = ChunkDigest(hex: rest.prefix(64)) else { return nil }
            digests.append(digest)
            rest = rest.dropFirst(64)
        }
        return digests
    }

    /// The versions table's columns, in the order `init` reads them.
    private enum Column: String, CaseIterable {
        case item, number, base, container, scope, parent, name, kind, manifest, size, mode, modified, attributes
        case authorMachine = "author_machine", authorUser = "author_user", conflict, deleted, sequence, resolves
        case containerName = "container_name", containerPublic = "container_public", thumbnail, previous, lengths

        /// What stands in for NULL, for the columns that may be NULL.
        var standIn: String? {
            switch self {
            case .containerName, .thumbnail: "''"
            case .containerPublic: "false"
            case .lengths: "''::bytea"
            default: nil
            }
        }
    }
}
