import Foundation

/// One item's metadata record in the index (DESIGN §5 S2), at one of its names: an item has a
/// record per name (hard links are several), each an *entry* of the index. Text attributes
/// that an item lacks are empty strings, never missing, so `comment == ""` finds items without
/// a comment and every comparison has one answer in SQL and in Swift.
///
/// Equality compares what the record says of the item (and its fingerprint), not which entry
/// holds it.
public struct IndexRecord: Sendable, Equatable, Codable {
    /// The index entry holding the record (0 until stored): kept when the name is renamed or
    /// the item written, never reused after a removal. `--watch` follows entries.
    public var entry: Int64 = 0
    /// The item id (`user.docfs.id`).
    public var id: Int64
    public var name: String
    /// Where the item is within its scope, starting with `/` (`/notes/todo.md`); the mount
    /// shows the default container's documents scope at its root.
    public var path: String
    public var container: String
    public var containerName: String
    /// `documents`, `data` or `external`.
    public var scope: String
    /// `file`, `folder`, `symlink` or `other`.
    public var kind: String
    /// The kinds of a folder's and a regular file's records.
    public static let folderKind = "folder", fileKind = "file"
    public var size: Int64
    /// Seconds since the epoch.
    public var created: Double
    public var modified: Double
    /// MIME type (`text/markdown`); `inode/directory` for folders.
    public var contentType: String
    /// The matching Uniform Type Identifier where one is well known (`public.plain-text`).
    public var uti: String
    public var version: Int64
    /// `user.xdg.tags`, split at commas.
    public var tags: [String]
    /// `user.xdg.comment`.
    public var comment: String
    public var hasThumbnail: Bool
    public var isExternal: Bool
    /// For references (external documents): where the document lives, and where it shows.
    public var originalPath: String
    public var localPath: String
    /// For a reference: the display name of the container holding the original, where a
    /// query's answer fills it in (not stored).
    public var originalContainerName = ""
    public var conflict: Bool
    /// Whether the content is here (`IndexAttribute.status`): `promised`, `pinned`, or empty
    /// for `local`.
    public var downloadState: String
    /// Reserved for syncing with other machines (DESIGN §9); empty until then.
    public var uploadState: String
    /// The backing file's inode number and status-change time when the record was made: not
    /// attributes of the item, but how a reconciling walk tells which records may be out of
    /// date (any change to an item moves its ctime).
    public var backingInode: UInt64 = 0
    public var statusChanged: Double = 0
    /// The machine whose change the record last took, when the sync engine applied it from
    /// another machine (issue 22 §3: `query --watch` says where a change came from); empty for
    /// a change made here. Not an attribute of the item: equality and a rebuild's walk leave it
    /// out.
    public var remoteMachine = ""

    public init(id: Int64, name: String, path: String, container: String, containerName: String, scope: String,
                kind: String, size: Int64, created: Double, modified: Double, contentType: String, uti: String = "",
                version: Int64, tags: [String] = [], comment: String = "", hasThumbnail: Bool = false,
                isExternal: Bool = false, originalPath: String = "", localPath: String = "", conflict: Bool = false,
                downloadState: String = "", uploadState: String = "") {
        self.id = id
        self.name = name
        self.path = path
        self.container = container
        self.containerName = containerName
        self.scope = scope
        self.kind = kind
        self.size = size
        self.created = created
        self.modified = modified
        self.contentType = contentType
        self.uti = uti
        self.version = version
        self.tags = tags
        self.comment = comment
        self.hasThumbnail = hasThumbnail
        self.isExternal = isExternal
        self.originalPath = originalPath
        self.localPath = localPath
        self.conflict = conflict
        self.downloadState = downloadState
        self.uploadState = uploadState
    }

    public static func == (a: IndexRecord, b: IndexRecord) -> Bool {
        a.differences(from: b).isEmpty && a.downloadState == b.downloadState && a.uploadState == b.uploadState
            && a.backingInode == b.backingInode && a.statusChanged == b.statusChanged
    }

    /// Whether the two records say the same to whoever queries or watches them: only docfs's
    /// own bookkeeping (the backing inode, its status-change time) may differ. A file's status
    /// change alone (a rename's, the times the kernel's writeback cache sends late) is no change
    /// a live query reports.
    public func showsTheSame(as other: IndexRecord) -> Bool {
        differences(from: other).isEmpty && downloadState == other.downloadState && uploadState == other.uploadState
    }

    /// The attributes whose values differ between the two records.
    public func differences(from other: IndexRecord) -> [IndexAttribute] {
        IndexAttribute.allCases.filter { value(of: $0) != other.value(of: $0) }
    }

    /// An attribute's value as text, for messages.
    public func describe(_ attribute: IndexAttribute) -> String {
        switch value(of: attribute) {
        case .text(let text): "\"\(text)\""
        case .integer(let n): String(n)
        case .date(let t): String(t)
        case .bool(let b): String(b)
        case .list(let words): "[" + words.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
        }
    }

    /// `user.xdg.tags` as the freedesktop convention writes it: comma-separated, spaces around
    /// the commas ignored, empty entries dropped.
    public static func tags(fromAttribute value: String) -> [String] {
        value.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// `IndexAttribute.status`'s values: the content is on the remote only, or here and kept
    /// here, or here.
    public static let promisedStatus = "promised", pinnedStatus = "pinned", localStatus = "local"

    /// Whether the content is here (`IndexAttribute.status`).
    public var status: String { downloadState.isEmpty ? Self.localStatus : downloadState }

    /// The value of `attribute`, for comparisons and sorting.
    func value(of attribute: IndexAttribute) -> RecordValue {
        switch attribute {
        case .name: .text(name)
        case .path: .text(path)
        case .container: .text(container)
        case .containerName: .text(containerName)
        case .scope: .text(scope)
        case .kind: .text(kind)
        case .size: .integer(size)
        case .created: .date(created)
        case .modified: .date(modified)
        case .contentType: .text(contentType)
        case .uti: .text(uti)
        case .id: .integer(id)
        case .version: .integer(version)
        case .tags: .list(tags)
        case .comment: .text(comment)
        case .hasThumbnail: .bool(hasThumbnail)
        case .isExternal: .bool(isExternal)
        case .originalPath: .text(originalPath)
        case .localPath: .text(localPath)
        case .conflict: .bool(conflict)
        case .status: .text(status)
        }
    }
}

/// An attribute's value in a record.
enum RecordValue: Equatable {
    case text(String)
    case integer(Int64)
    case date(Double)
    case bool(Bool)
    case list([String])

    /// Text is the same when its bytes are, as SQLite compares (two spellings of one name, NFC
    /// and NFD, differ: a rename from one to the other is a change).
    static func == (a: Self, b: Self) -> Bool {
        switch (a, b) {
        case (.text(let x), .text(let y)): x.hasSameBytes(as: y)
        case (.integer(let x), .integer(let y)): x == y
        case (.date(let x), .date(let y)): x == y
        case (.bool(let x), .bool(let y)): x == y
        case (.list(let x), .list(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.hasSameBytes(as: $1) }
        default: false
        }
    }
}
