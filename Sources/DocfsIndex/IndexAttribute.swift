/// The attributes of an index record (DESIGN §5 S2) as the predicate language, `--sort` and
/// the JSON output name them. Each has one kind of value, which decides the operators and
/// literals it takes.
public enum IndexAttribute: String, Sendable, CaseIterable {
    case name
    case path
    case container
    case containerName
    case scope
    case size
    case created
    case modified
    case contentType
    case uti
    case id
    case version
    case tags
    case comment
    case hasThumbnail
    case isExternal
    case originalPath
    case localPath
    case conflict
    case kind
    /// Whether a document's content is here (issue 23): `promised` (listed, its content on
    /// the remote), `pinned` (here, kept here), `local` (here); folders are `local`.
    case status

    /// What values an attribute holds.
    public enum ValueKind: Sendable {
        case text, integer, size, date, bool
        /// A list of words (`user.xdg.tags`): `CONTAINS` tests membership, `==` the whole list.
        case list
    }

    public var valueKind: ValueKind {
        switch self {
        case .name, .path, .container, .containerName, .scope, .contentType, .uti, .comment,
             .originalPath, .localPath, .kind, .status: .text
        case .size: .size
        case .created, .modified: .date
        case .id, .version: .integer
        case .tags: .list
        case .hasThumbnail, .isExternal, .conflict: .bool
        }
    }

    /// Other names people reach for (`mime`, `mtime`), accepted in predicates and `--sort`.
    static let aliases: [String: IndexAttribute] = [
        "mime": .contentType, "mimetype": .contentType, "type": .contentType,
        "mtime": .modified, "birth": .created, "btime": .created,
        "tag": .tags, "item": .id, "itemid": .id, "thumbnail": .hasThumbnail,
        "external": .isExternal, "conflicted": .conflict, "downloadstate": .status,
    ]

    /// The SQL that reads the attribute from a row of `items`: its column, but for `status`,
    /// kept in `downloadState` with the empty string for `local` (records made before it).
    var column: String {
        self == .status ? "(CASE downloadState WHEN '' THEN '\(IndexRecord.localStatus)' ELSE downloadState END)" : rawValue
    }

    /// The attribute `word` names (case does not matter), or nil.
    public static func named(_ word: String) -> IndexAttribute? {
        let lower = word.lowercased()
        if let exact = allCases.first(where: { $0.rawValue.lowercased() == lower }) { return exact }
        return aliases[lower]
    }

    /// How a person would write a value of this attribute, for error messages.
    var example: String {
        switch valueKind {
        case .text: "a string in quotes, like \"report.odt\""
        case .integer: "a whole number, like 42"
        case .size: "a size, like 10MB, 512KiB or 2048"
        case .date: "a date, like 2026-01-01, 2026-01-01T09:30, -7d or today"
        case .bool: "true or false"
        case .list: "a string in quotes, like \"work\""
        }
    }
}
