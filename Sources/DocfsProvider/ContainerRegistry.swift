import DocfsCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What docfs records of a container (DESIGN §1): the name people see, and whether its
/// documents appear in the user view. Kept as `STORE/containers/<id>/container.json`, beside
/// the container's `Documents/` and `Data/`.
public struct ContainerRecord: Codable, Sendable, Equatable {
    public var id: String
    /// The display name: the container's folder name in the user view.
    public var name: String
    /// Whether the user view shows the container's `Documents/`.
    public var isPublic: Bool
    /// When it was created (seconds since 1970).
    public var created: Double
}

/// The containers of a store: each an app's own named area (`com.example.Notes`, shown as
/// `Notes`), created, listed, renamed and deleted here. Every change happens under the
/// registry's lock (`containers/.lock`, flock), so two processes never interleave, and a
/// record is replaced atomically. The default container (`docfs.default`, the user's own
/// files) is always there and can be neither renamed nor deleted.
public struct ContainerRegistry: Sendable {
    public let layout: StoreLayout

    public init(layout: StoreLayout) {
        self.layout = layout
    }

    /// The default container's record (it has no file: nothing about it can change).
    public static let defaultRecord = ContainerRecord(id: ContainerID.userDefault.rawValue, name: "Documents",
                                                      isPublic: false, created: 0)

    /// Every container, the default one first, then by id.
    public func list() throws(DocfsError) -> [ContainerRecord] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: layout.containersDirectory)
        } catch {
            throw DocfsError(.storeUnavailable, "cannot list \(layout.containersDirectory)", cause: DocfsError(.internalFailure, "\(error)"))
        }
        var records: [ContainerRecord] = []
        for name in names {
            guard let id = try? ContainerID(name), id != .userDefault, let record = try record(of: id) else { continue }
            records.append(record)
        }
        return [Self.defaultRecord] + records.sorted { $0.id < $1.id }
    }

    /// The record of container `id`; nil when there is no such container.
    public func record(of id: ContainerID) throws(DocfsError) -> ContainerRecord? {
        if id == .userDefault { return Self.defaultRecord }
        guard let bytes = try StoreFiles.read(recordPath(id)) else { return nil }
        guard let record = try? JSONDecoder().decode(ContainerRecord.self, from: Data(bytes)), record.id == id.rawValue else {
            throw DocfsError(.storeUnavailable, "\(recordPath(id)) is damaged: write it again as {\"id\": \"\(id)\", \"name\": …, \"isPublic\": …, \"created\": 0}")
        }
        return record
    }

    /// Makes container `id` (its folder, `Documents/` and `Data/`) named `name`.
    @discardableResult
    public func create(_ id: ContainerID, name: String, isPublic: Bool) throws(DocfsError) -> ContainerRecord {
        try Self.checkReverseDNS(id)
        let name = try Self.checkedDisplayName(name)
        return try locked { () throws(DocfsError) -> ContainerRecord in
            if try record(of: id) != nil {
                throw DocfsError(.invalidArgument, "container \(id) exists already (docfs container list)")
            }
            try checkNameIsFree(name, for: id)
            for directory in [layout.containerDirectory(id), layout.documentsDirectory(id), layout.dataDirectory(id)] {
                try LocalStore.makeDirectory(directory)
            }
            let record = ContainerRecord(id: id.rawValue, name: name, isPublic: isPublic, created: Self.now())
            try write(record)
            return record
        }
    }

    /// Gives container `id` the display name `name`.
    public func rename(_ id: ContainerID, to name: String) throws(DocfsError) {
        let name = try Self.checkedDisplayName(name)
        try locked { () throws(DocfsError) in
            var record = try existing(id, changing: "renamed")
            try checkNameIsFree(name, for: id)
            record.name = name
            try write(record)
        }
    }

    /// Shows container `id`'s documents in the user view, or stops showing them.
    public func setPublic(_ id: ContainerID, _ isPublic: Bool) throws(DocfsError) {
        try locked { () throws(DocfsError) in
            var record = try existing(id, changing: "made \(isPublic ? "public" : "private")")
            record.isPublic = isPublic
            try write(record)
        }
    }

    /// Removes container `id` and everything in it; one that holds documents or data is
    /// refused unless `force`.
    public func delete(_ id: ContainerID, force: Bool) throws(DocfsError) {
        try locked { () throws(DocfsError) in
            _ = try existing(id, changing: "deleted")
            if !force {
                for (scope, directory) in [("documents", layout.documentsDirectory(id)), ("data", layout.dataDirectory(id))]
                where try Self.holdsAnything(directory) {
                    throw DocfsError(.invalidArgument, "container \(id) is not empty (its \(scope) scope holds files): pass --force to delete them with it")
                }
            }
            // The record goes first: a deletion cut short leaves a folder, not a half container.
            guard unlink(recordPath(id)) == 0 else {
                throw DocfsError(.storeUnavailable, "cannot delete container \(id)", cause: DocfsError.errno("unlink"))
            }
            try Self.removeTree(layout.containerDirectory(id))
        }
    }

    // MARK: - Checks

    /// Container ids are reverse-DNS names: two or more labels of letters, digits and inner
    /// hyphens, joined by dots (`com.example.Notes`).
    public static func checkReverseDNS(_ id: ContainerID) throws(DocfsError) {
        let labels = id.rawValue.split(separator: ".", omittingEmptySubsequences: false)
        let wellFormed = labels.count >= 2 && labels.allSatisfy { label in
            !label.isEmpty && label.utf8.count <= 63 && label.first != "-" && label.last != "-"
                && label.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
        }
        guard wellFormed else {
            throw DocfsError(.invalidArgument,
                             "'\(id)' is not a reverse-DNS container id: use two or more labels of letters, digits and hyphens joined by dots, like com.example.Notes")
        }
    }

    /// A display name as the user view will show it: one folder name people can type.
    public static func checkedDisplayName(_ name: String) throws(DocfsError) -> String {
        let problem: String? =
            if name.isEmpty { "it is empty" }
            else if name.utf8.count > 255 { "it is longer than 255 bytes" }
            else if name.contains("/") { "it contains '/'" }
            else if name.hasPrefix(".") { "it starts with '.' (such names are hidden, and .docfs is docfs's own)" }
            else if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) { "it contains control characters" }
            else if name != name.trimmingCharacters(in: .whitespaces) { "it starts or ends with a space" }
            else { nil }
        if let problem { throw DocfsError(.invalidArgument, "'\(name)' cannot be a container's name: \(problem)") }
        return name
    }

    // MARK: - Store files

    private func recordPath(_ id: ContainerID) -> String { layout.containerDirectory(id) + "/container.json" }

    private func existing(_ id: ContainerID, changing verb: String) throws(DocfsError) -> ContainerRecord {
        if id == .userDefault { throw DocfsError(.invalidArgument, "the default container (your own files) cannot be \(verb)") }
        guard let record = try record(of: id) else {
            throw DocfsError(.invalidArgument, "there is no container \(id) (docfs container list shows them)")
        }
        return record
    }

    private func checkNameIsFree(_ name: String, for id: ContainerID) throws(DocfsError) {
        if let other = try list().first(where: { $0.name == name && $0.id != id.rawValue }) {
            throw DocfsError(.invalidArgument, "container \(other.id) is named '\(name)' already: choose another name")
        }
    }

    private func write(_ record: ContainerRecord) throws(DocfsError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        guard let json = try? encoder.encode(record) else { throw DocfsError(.internalFailure, "cannot encode \(record)") }
        try StoreFiles.replace(recordPath(try ContainerID(record.id)), with: Array(json) + [10])
    }

    /// Runs `body` holding the registry's lock.
    private func locked<T>(_ body: () throws(DocfsError) -> T) throws(DocfsError) -> T {
        let path = layout.containersDirectory + "/.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw DocfsError(.storeUnavailable, "cannot open \(path)", cause: DocfsError.errno("open")) }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            guard errno == EINTR else { throw DocfsError(.storeUnavailable, "cannot lock \(path)", cause: DocfsError.errno("flock")) }
        }
        return try body()
    }

    private static func holdsAnything(_ directory: String) throws(DocfsError) -> Bool {
        guard FileManager.default.fileExists(atPath: directory) else { return false }
        do {
            return try !FileManager.default.contentsOfDirectory(atPath: directory).isEmpty
        } catch {
            throw DocfsError(.storeUnavailable, "cannot list \(directory)", cause: DocfsError(.internalFailure, "\(error)"))
        }
    }

    /// Removes `path` and all below it (symbolic links themselves, not what they point at).
    private static func removeTree(_ path: String) throws(DocfsError) {
        do {
            try FileManager.default.removeItem(atPath: path)
        } catch {
            throw DocfsError(.storeUnavailable, "cannot remove \(path): remove what is left by hand", cause: DocfsError(.internalFailure, "\(error)"))
        }
    }

    private static func now() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
