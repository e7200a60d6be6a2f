/// One step of a change to the index, as an operation on the store makes it (stitching, S1) or
/// a reconciling walk finds it. `IndexDatabase.apply` writes a list of them in one transaction
/// under one change sequence. Entries are named by where they are: container, scope and path.
public enum IndexChange: Sendable {
    /// The record of the name at `record.path`: a new entry, or the one there updated.
    case put(IndexRecord)
    /// A name came or went in the folder at a place: its modification and status-change times
    /// (nothing else of a folder's record changes with what it holds).
    case touch(IndexLocation, modified: Double, statusChanged: Double)
    /// The name at `path` left, with everything under it; `machine` is the other machine whose
    /// change the sync engine applied (empty for this one's), which watchers say.
    case remove(IndexLocation, machine: String = "")
    /// Entries by number (a reconciling walk did not find them).
    case removeEntries([Int64])
    /// The name at `from` moved to `to` (keeping its entry), with everything under it. Whatever
    /// was at `to` must have been removed first.
    case move(from: IndexLocation, to: IndexLocation)
    /// The names at the two places traded places (RENAME_EXCHANGE), with what is under them.
    case exchange(IndexLocation, IndexLocation)
    /// The item changed here and must go up to the remote (issue 22: the durable outbox, in
    /// the same journal append as the change's records). No record changes.
    case outbox(item: Int64)
}

/// Where an entry is: a path (starting with `/`) in a container's scope.
public struct IndexLocation: Sendable, Hashable {
    public var container: String
    public var scope: String
    public var path: String

    public init(container: String, scope: String, path: String) {
        self.container = container
        self.scope = scope
        self.path = path
    }

    /// The last component of the path.
    public var name: String {
        // By scalars: a name may start with a combining mark.
        guard let slash = path.unicodeScalars.lastIndex(of: "/") else { return path }
        return String(path.unicodeScalars[path.unicodeScalars.index(after: slash)...])
    }

    /// Places are the same when their bytes are, as SQLite's keys are: two names that are
    /// canonically equivalent but spelled differently (NFC and NFD) are two places, as they are
    /// two files on Linux (Swift's `String ==` would call them one).
    public static func == (a: Self, b: Self) -> Bool {
        a.path.hasSameBytes(as: b.path) && a.scope.hasSameBytes(as: b.scope)
            && a.container.hasSameBytes(as: b.container)
    }

    /// The path's bytes and the other two's lengths: places differ by their paths far more
    /// often than by their containers and scopes (a store has a few of those), and hashing
    /// all three was a visible part of every stitch (the overlay and the commit plan look
    /// places up several times a change).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(container.utf8.count &<< 8 | scope.utf8.count)
        Self.hash(path, into: &hasher)
    }

    /// Hashes `text`'s bytes (what `==` compares).
    static func hash(_ text: String, into hasher: inout Hasher) {
        hasher.combine(text.utf8.count)
        let hashed: Void? = text.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil { for byte in text.utf8 { hasher.combine(byte) } }
    }
}

extension IndexRecord {
    public var location: IndexLocation { IndexLocation(container: container, scope: scope, path: path) }
}

/// An entry's removal as watchers read it: when (the change sequence), and the other machine
/// whose change it was (empty for this one's).
struct Removal: Sendable {
    var sequence: Int64
    var entry: Int64
    var machine: String
}
