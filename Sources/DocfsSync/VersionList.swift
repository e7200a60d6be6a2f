/// The versions every machine keeps of an item (DESIGN §9.0: machines in step list the same
/// versions): a pure function of the remote's versions of it, so a machine that applied each
/// version in turn, one that took a later one at once, and the one that made them all end with
/// one list, however their changes raced.
///
/// - A version of the item's line (neither a conflict version nor a save set aside) is kept
///   when the next one that is not a deletion holds other content: that one superseded it. One
///   whose next only renamed it (or changed its attributes, or restored the same content after
///   a deletion) is kept nowhere: the next holds its content. The current version is the
///   content itself, not a kept one.
/// - A save set aside (`RemoteVersion.previous`) is kept as a previous version.
/// - A conflict version is kept until a version numbered above it resolves the conflict.
public enum VersionList {
    /// How a version is kept.
    public enum Kept: Equatable, Sendable {
        case previous, aside, conflict
    }

    /// The kept versions (number to how) of an item whose current version is `current`, from
    /// `versions` (the remote's, any order). Versions of the line numbered above `current` are
    /// not taken yet and left out; conflict versions and saves set aside above it are kept
    /// (they never become current).
    public static func kept(_ versions: [RemoteVersion], current: UInt64) -> [UInt64: Kept] {
        let sorted = versions.sorted { $0.number < $1.number }
        let upTo = sorted.filter { $0.number <= current }
        let resolved = upTo.filter { $0.resolves == true }.map(\.number).max() ?? 0
        var kept: [UInt64: Kept] = [:]
        for version in sorted where version.kind == .file && !version.deleted && version.number != current {
            if version.conflict {
                if version.number > resolved { kept[version.number] = .conflict }
            } else if version.previous == true {
                kept[version.number] = .aside
            }
        }
        let line = upTo.filter { !$0.conflict && $0.previous != true }
        for (index, version) in line.enumerated() where version.kind == .file && !version.deleted && version.number != current {
            guard let next = line[(index + 1)...].first(where: { !$0.deleted }) else { continue }
            if next.kind != .file || next.manifest != version.manifest { kept[version.number] = .previous }
        }
        return kept
    }
}
