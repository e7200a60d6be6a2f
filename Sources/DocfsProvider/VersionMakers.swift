import DocfsCore
import Foundation

/// Who made the current versions (issue 21 §4). The daemon knows who made each version it saw
/// made (a session's opener, a safe-save's renamer, a file's creator); it keeps that in memory
/// while it serves (`WriteSessions`), writes it here (`versions/makers.json`) every few seconds
/// when it changed and when the last view ends, and reads it back when it starts. So
/// `docfs versions` names the maker of the current version after a restart, or with no daemon
/// at all, and the next save keeps the maker with the version it supersedes. No write path
/// pays for it; a daemon that is killed loses only what it saw since its last save of the file.
public enum VersionMakers {
    public struct Entry: Codable, Sendable, Equatable {
        public var item: UInt64
        public var version: UInt64
        public var author: Author

        public init(item: UInt64, version: UInt64, author: Author) {
            self.item = item
            self.version = version
            self.author = author
        }
    }

    public static func file(of layout: StoreLayout) -> String { layout.versionsDirectory + "/makers.json" }

    /// What was saved; empty when nothing was (or the file is damaged: makers are a courtesy).
    public static func load(_ layout: StoreLayout) -> [Entry] {
        guard let data = FileManager.default.contents(atPath: file(of: layout)),
              let entries = try? JSONDecoder().decode([Entry].self, from: data) else { return [] }
        return entries
    }

    /// Who made `version` of `item`, as saved.
    public static func maker(of item: ItemID, version: UInt64, in layout: StoreLayout) -> Author? {
        load(layout).first { $0.item == item.rawValue && $0.version == version }?.author
    }

    /// Replaces what was saved with `entries` (written beside, then renamed over).
    public static func save(_ entries: [Entry], to layout: StoreLayout) throws(DocfsError) {
        let path = file(of: layout)
        let incoming = path + ".\(getpid()).new"
        do {
            // Made with the first version kept: makers may be known before (a file's creator).
            // Only that folder: a store removed meanwhile is not made again by its last save.
            guard mkdir(layout.versionsDirectory, 0o755) == 0 || errno == EEXIST else {
                throw DocfsError.errno("making \(layout.versionsDirectory)")
            }
            try JSONEncoder().encode(entries).write(to: URL(fileURLWithPath: incoming))
        } catch {
            throw DocfsError(.storeUnavailable, "cannot write \(incoming): \(error)")
        }
        guard rename(incoming, path) == 0 else {
            let cause = DocfsError.errno("rename")
            unlink(incoming)
            throw DocfsError(.storeUnavailable, "cannot put \(path) in place", cause: cause)
        }
    }
}
