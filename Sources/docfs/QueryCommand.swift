import ArgumentParser
import DocfsCore
import DocfsDaemon
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `docfs query PREDICATE`: finds documents through the store's index (DESIGN §5 S3), never
/// through the mount: asked of the daemon when the store is served (it holds the changes not
/// yet committed in memory, `QueryStream`), else read directly. `--watch` reads it directly.
struct QueryCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "query",
        abstract: "Find documents by their metadata.",
        discussion: """
            PREDICATE compares attributes with values: ==, !=, <, <=, >, >=, LIKE (with * and ?), \
            BEGINSWITH, ENDSWITH, CONTAINS ([c] after an operator ignores case), combined with \
            AND, OR, NOT and parentheses. Strings go in quotes; sizes like 10MB or 512KiB; dates \
            like 2026-01-01, 2026-01-01T09:30, -7d, today.

            Attributes: \(IndexAttribute.allCases.map(\.rawValue).joined(separator: ", ")).

            Example:  docfs query 'name LIKE "*.md" AND modified > -7d' --sort modified:desc

            With --watch the query stays live: it prints the results, then a line `gathered N`, \
            then, as the index changes, lines `added PATH`, `changed PATH` (renames and moves \
            included) and `removed PATH`, a batch every --interval seconds, until interrupted.
            """
    )

    @Argument(help: ArgumentHelp("What to find ('' or '*' for everything).", valueName: "predicate"))
    var predicate: String

    @Option(name: .long, help: ArgumentHelp("Where to look.", valueName: "scope"))
    var scope: IndexQuery.Scope = .documents

    @Option(name: .long, help: ArgumentHelp("Order by an attribute, :desc for descending; repeatable.", valueName: "attr[:desc]"))
    var sort: [String] = []

    @Option(name: .long, help: ArgumentHelp("Print at most N results.", valueName: "n"))
    var limit: Int?

    @Flag(name: .long, help: "Print the results as a JSON array of records (with --watch, one JSON object per line).")
    var json = false

    @Flag(name: .long, help: "Keep the query live: print changes to its results until interrupted.")
    var watch = false

    @Option(name: .long, help: ArgumentHelp("With --watch, how long changes are gathered into one batch.", valueName: "seconds"))
    var interval: Double = 0.1

    @Option(name: .long, help: ArgumentHelp("Run the query N times and print its latency (for scripts/bench).", valueName: "n", visibility: .hidden))
    var repeatForTiming: Int?

    @OptionGroup var location: StoreLocation

    func run() throws {
        let parsed: QueryPredicate
        do {
            parsed = try PredicateParser().parse(predicate)
        } catch {
            printError("docfs: bad predicate: \(error.pointed)\n")
            throw ExitCode(ExitStatus.usage)
        }
        let keys = try sort.map { text -> IndexQuery.SortKey in
            guard let key = IndexQuery.SortKey(parsing: text) else {
                printError("docfs: cannot sort by \(text): give an attribute (\(IndexAttribute.allCases.map(\.rawValue).joined(separator: ", "))), optionally followed by :desc\n")
                throw ExitCode(ExitStatus.usage)
            }
            return key
        }
        if watch && limit != nil {
            printError("docfs: --limit cannot be used with --watch (a live query follows every result)\n")
            throw ExitCode(ExitStatus.usage)
        }
        guard interval > 0 && interval <= 60 else {
            printError("docfs: --interval must be more than 0 and at most 60 seconds\n")
            throw ExitCode(ExitStatus.usage)
        }
        let query = IndexQuery(predicate: parsed, scope: scope, sort: keys, limit: limit)
        let (layout, mountPoint) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
        let index = try reportingErrors { () throws(DocfsError) in try IndexAccess.open(layout) }
        let view = UserView(layout: layout, catalog: ContainerCatalog(registry: ContainerRegistry(layout: layout)))
        if watch { return try QueryWatch(query: query, index: index, mountPoint: mountPoint, view: view, json: json, interval: interval).run() }
        let request = QueryRequest(predicate: predicate, scope: scope.rawValue, sort: keys.map(\.text), limit: limit,
                                   now: Date().timeIntervalSince1970, timeZone: TimeZone.current.identifier)
        let served = StoreLock.holder(of: layout) != nil
        @Sendable func records() throws(DocfsError) -> [IndexRecord] {
            if served, let answered = try QueryStream.records(request, from: layout) { return answered }
            return try index.records(matching: query)
        }
        if let runs = repeatForTiming { return try Self.time(runs: runs, records) }
        let records = try reportingErrors { () throws(DocfsError) in try records() }
            .map { Self.withOriginal($0, index: index, view: view) }
        if json { return printJSON(records.map(RecordJSON.init)) }
        for record in records { PlainOutput.line(Self.describe(record, mountPoint: mountPoint, view: view)) }
    }

    /// Runs the query (`records`) `runs` times and prints the latency of one run (median and 99th
    /// percentile, in milliseconds) and how many results it found.
    static func time(runs: Int, _ records: () throws(DocfsError) -> [IndexRecord]) throws {
        var latencies: [Double] = []
        var found = 0
        for _ in 0..<max(runs, 1) {
            let started = Date()
            found = try reportingErrors { () throws(DocfsError) in try records() }.count
            latencies.append(Date().timeIntervalSince(started) * 1000)
        }
        latencies.sort()
        let p99 = latencies[min(latencies.count - 1, Int(Double(latencies.count) * 0.99))]
        print(String(format: "runs=%d p50=%.3f p99=%.3f results=%d", latencies.count, latencies[latencies.count / 2], p99, found))
    }

    /// A record as one line: its path (under the mount point when one was named and the item
    /// shows there), with the container and scope when it is not the mount's own.
    static func describe(_ record: IndexRecord, mountPoint: String?, view: UserView) -> String {
        if record.isExternal {
            let original = record.originalPath.isEmpty ? "(its original was deleted)"
                : "\(PlainOutput.name(record.originalPath)) (in \(record.originalContainerName))"
            return "\(record.container) \(PlainOutput.name(record.localPath)) -> \(original)"
        }
        if let container = try? ContainerID(record.container), let scope = Scope(rawValue: record.scope),
           let path = view.path(of: StorePlace(container: container, scope: scope, path: record.path)) {
            return PlainOutput.name((mountPoint.map { $0 == "/" ? "" : $0 } ?? "") + path)
        }
        return "\(record.container) (\(record.scope)) \(PlainOutput.name(record.path))"
    }
}

extension QueryCommand {
    /// A reference's record with where its original is now (from the original's own record;
    /// the reference's record does not change when the original moves): `originalPath` is the
    /// original's path in the user view, `originalContainerName` its container's display name.
    static func withOriginal(_ record: IndexRecord, index: IndexDatabase, view: UserView) -> IndexRecord {
        guard record.isExternal else { return record }
        var record = record
        record.originalPath = ""
        let originals = (try? index.records(id: record.id)) ?? []
        for original in originals where !original.isExternal {
            guard let container = try? ContainerID(original.container), let scope = Scope(rawValue: original.scope) else { continue }
            let place = StorePlace(container: container, scope: scope, path: original.path)
            record.originalPath = view.path(of: place) ?? "\(original.container) (\(original.scope)) \(original.path)"
            record.originalContainerName = original.containerName
            break
        }
        return record
    }
}

extension IndexQuery.Scope: ExpressibleByArgument {}

/// A record in `--json` output: the attributes by their query names, dates as seconds.
struct RecordJSON: Encodable {
    let id: Int64, name: String, path: String, container: String, containerName: String, scope: String, kind: String
    let size: Int64, created: Double, modified: Double, contentType: String, uti: String
    /// The remote's number (or this store's); absent for a save not gone up yet, which is
    /// `pending` (`p1`), as `docfs versions --json` lists it.
    let version: Int64?, pending: String?
    let tags: [String], comment: String, hasThumbnail: Bool, isExternal: Bool, originalPath: String
    let originalContainerName: String?, localPath: String, conflict: Bool, status: String

    init(_ r: IndexRecord) {
        id = r.id; name = r.name; path = r.path; container = r.container; containerName = r.containerName
        scope = r.scope; kind = r.kind; size = r.size; created = r.created; modified = r.modified
        contentType = r.contentType; uti = r.uti; tags = r.tags; comment = r.comment
        let pending = r.version > 0 && VersionNumber.isPending(UInt64(r.version))
        version = pending ? nil : r.version
        self.pending = pending ? VersionNumber.shown(UInt64(r.version)) : nil
        hasThumbnail = r.hasThumbnail; isExternal = r.isExternal; originalPath = r.originalPath
        originalContainerName = r.isExternal ? r.originalContainerName : nil
        localPath = r.localPath; conflict = r.conflict; status = r.status
    }
}

/// `--store DIR` or a mount point: which store a command works on.
struct StoreLocation: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The store directory (default: $DOCFS_STORE, else the embedded default store).", valueName: "dir"))
    var store: String?

    @Argument(help: ArgumentHelp("A docfs mount point, instead of --store.", valueName: "mountpoint"))
    var mountPoint: String?

    /// The store's layout, and the mount point when one was named.
    func resolve() throws(DocfsError) -> (StoreLayout, String?) {
        if let mountPoint {
            guard store == nil else { throw DocfsError(.invalidArgument, "give either --store or a mount point, not both") }
            let normalized = MountTable.canonical(mountPoint)
            guard MountTable.entry(at: normalized) != nil, let record = MountRegistry.record(for: normalized) else {
                throw DocfsError(.invalidArgument, "\(mountPoint) is not a docfs mount: give its mount point, or the store with --store")
            }
            return (StoreLayout(root: record.store), normalized)
        }
        return (StoreLayout(root: store ?? LocalStore.defaultPath(environment: environmentDictionary())), nil)
    }
}
