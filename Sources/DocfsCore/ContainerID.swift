/// A container's identifier, reverse-DNS like `com.example.Notes` (DESIGN §1). It names a
/// directory in the store, so it is checked before use: no path separators, no dot-names.
public struct ContainerID: Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String

    /// The container whose documents scope is the root of the default (user) view.
    public static let userDefault = ContainerID(validated: "docfs.default")

    public init(_ rawValue: String) throws(DocfsError) {
        let allowed = rawValue.unicodeScalars.allSatisfy {
            ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0)
                || $0 == "." || $0 == "-" || $0 == "_"
        }
        guard !rawValue.isEmpty, rawValue.utf8.count <= 200, allowed,
              !rawValue.hasPrefix("."), !rawValue.contains("..")
        else {
            throw DocfsError(.invalidArgument,
                             "'\(rawValue)' is not a container id: use letters, digits, '.', '-' and '_', like com.example.Notes")
        }
        self.rawValue = rawValue
    }

    private init(validated: String) { rawValue = validated }

    public var description: String { rawValue }

    /// The name people see for the container: the default one's is `Documents`, another's the
    /// last part of its id (`com.example.Notes` → `Notes`) until containers carry their own.
    public var displayName: String {
        self == .userDefault ? "Documents" : String(rawValue.split(separator: ".").last ?? Substring(rawValue))
    }
}
