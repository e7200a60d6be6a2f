import DocfsCore

/// The names of docfs's own working files (a restore, a raced save, a document picked, a remote
/// change being written in), which live beside documents for a moment before they are renamed
/// over one. Nobody else sees or makes them: the mount neither lists nor looks them up (a node
/// made for one would keep whatever id it was found with after docfs renamed it into place as
/// a document), refuses them as new names, and a restart removes leftovers.
public enum WorkingFileNames {
    public static let prefixes = [".docfs-restore-", ".docfs-conflict-", ".docfs-pick-", ".docfs-sync-"]
    private static let prefixBytes = prefixes.map { Array($0.utf8).map { CChar(bitPattern: $0) } }
    private static let common = Array(".docfs-".utf8).map { CChar(bitPattern: $0) }

    /// Whether `name` is one (a check of a few bytes: it runs for every name listed).
    public static func contains(_ name: FileName) -> Bool {
        let bytes = name.cString
        guard bytes.count > common.count, bytes[0] == common[0], bytes.starts(with: common) else { return false }
        return prefixBytes.contains { bytes.starts(with: $0) }
    }

    /// The same for a name as text.
    public static func contains(_ name: String) -> Bool {
        prefixes.contains { name.hasPrefix($0) }
    }
}
