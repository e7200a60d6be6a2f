import ArgumentParser
import CLinux
import DocfsCore
import DocfsDaemon
import DocfsIndex
import DocfsProvider
import DocfsSync
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `docfs status FILE`: what docfs knows about a document.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show a document's item id, version, size, dates and conflict state.",
        discussion: "FILE may be on a docfs mount or inside a store's folders."
    )

    @Flag(name: .long, help: "Print JSON instead of text.")
    var json = false

    @Argument(help: ArgumentHelp("The document.", valueName: "file"))
    var file: String

    struct Report: Encodable {
        var path: String
        var store: String
        var item: UInt64
        var kind: String
        var version: UInt64?
        /// The content's pending key (`p1`: a save not gone up yet to the remote, which numbers
        /// it when it does); `version` is absent then.
        var pendingVersion: String?
        var size: Int64
        var created: Double?
        var modified: Double
        var keptVersions: Int
        /// Bytes the kept versions take in the store.
        var keptBytes: Int64
        var conflict: Bool
        /// The container that holds the item (its id and display name) and the scope.
        var container: String
        var containerName: String
        var scope: String
        /// For a reference: where its original is now (nil when it was deleted).
        var reference: ReferenceReport?
        /// The serving daemon's claims; nil when no daemon serves the store.
        var claims: ClaimReport?
        /// Where it stands with the remote (`user.docfs.status`); nil when the store is not linked.
        var sync: String?
    }

    func run() throws {
        let document = try reportingErrors { () throws(DocfsError) in try LocatedDocument.locate(file) }
        let st = document.attributes
        let kept = VersionStore(directory: document.store.versionsDirectory, policy: .defaults).versions(of: document.item)
        let place = document.place
        let conflict = kept.contains { $0.kind == .conflict }
        let containerName = ContainerCatalog(registry: ContainerRegistry(layout: document.store)).displayName(of: place.container)
        let report = Report(path: document.path, store: document.store.root, item: document.item.rawValue,
                            kind: st.st_mode & S_IFMT == S_IFDIR ? "folder" : "file",
                            version: document.version.flatMap { VersionNumber.isPending($0) ? nil : $0 },
                            pendingVersion: document.version.flatMap { VersionNumber.isPending($0) ? VersionNumber.shown($0) : nil },
                            size: Int64(st.st_size), created: birthTime(document.backingPath),
                            modified: seconds(st.st_mtim), keptVersions: kept.count,
                            keptBytes: kept.reduce(0) { $0 + $1.storedSize },
                            conflict: conflict, container: place.container.rawValue,
                            containerName: containerName, scope: place.scope.rawValue,
                            reference: ReferenceReport(document), claims: claims(on: document),
                            sync: syncStatus(of: document, conflict: conflict))
        if json { return printJSON(report) }
        var lines = [("path", PlainOutput.name(report.path)), ("item id", String(report.item)), ("kind", report.kind)]
        if let version = report.version { lines.append(("version", String(version))) }
        if let pending = report.pendingVersion { lines.append(("version", "\(pending) (pending: the remote numbers it when it goes up)")) }
        lines.append(("size", "\(report.size) bytes"))
        if let created = report.created { lines.append(("created", formatDate(created))) }
        lines.append(("modified", formatDate(report.modified)))
        lines.append(("versions", "\(report.keptVersions) kept, \(report.keptBytes) bytes (docfs versions \(file))"))
        lines.append(("conflict", report.conflict ? "yes: see docfs versions \(file)" : "none"))
        lines.append(("container", "\(report.containerName) (\(report.container)), \(report.scope) scope"))
        if let sync = report.sync { lines.append(("sync", sync)) }
        if let reference = report.reference {
            lines.append(("reference", reference.original.map { "to \(PlainOutput.name($0)) (in \(reference.originalContainer ?? "?"))" }
                          ?? "its original (item \(report.item)) was deleted: the reference cannot be opened; remove it"))
        }
        lines.append(("store", report.store))
        if let claims = report.claims {
            lines.append(("claims", (claims.itemClaimed ? "held on this item now" : "none on this item")
                          + "; the daemon holds \(claims.claimedItems), granted \(claims.granted) (\(claims.waited) waited)"))
            if claims.watched == false {
                lines.append(("watcher", "none: inotify could not watch the store; changes behind docfs show after the cache timeout"))
            } else if let unwatched = claims.unwatchedFolders, unwatched > 0 {
                lines.append(("watcher", "\(unwatched) folders past the inotify limit are rescanned every \(Int(StoreWatcher.rescanInterval)) s; raise fs.inotify.max_user_watches to have them watched"))
            } else if claims.watched == true {
                lines.append(("watcher", "every folder watched"))
            }
        }
        for (label, value) in lines { PlainOutput.line("\((label + ":").padding(10)) \(value)") }
    }

    /// Where the document stands with the remote: as the mount says (`user.docfs.status`), or,
    /// for a path in the store, from its sync state in the index; nil when not linked.
    private func syncStatus(of document: LocatedDocument, conflict: Bool) -> String? {
        if document.mountPoint != nil {
            var value = [UInt8](repeating: 0, count: 4096)  // a failed download says why
            let n = value.withUnsafeMutableBytes { docfs_getxattr(document.path, ItemAttributes.status, $0.baseAddress, $0.count) }
            return n > 0 ? String(decoding: value[0..<n], as: UTF8.self) : nil
        }
        guard (try? RemoteLink.load(document.store)) != nil else { return nil }
        // In the store's folders: a promised file says so (what a download under way has
        // fetched only its daemon knows).
        let file = open(document.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        if file >= 0 {
            defer { close(file) }
            if PromisedContent.promisedNumber(file) != nil { return "promised" }
        }
        let index = try? IndexDatabase(path: document.store.indexFile, readOnly: true)
        let state = (try? index?.syncState(of: Int64(bitPattern: document.item.rawValue))).flatMap { $0 }
            .flatMap { try? JSONDecoder().decode(ItemSyncState.self, from: Data($0)) }
        return ItemSyncStatus.describe(state: state, versionHere: document.version ?? 0, conflict: conflict, beingWritten: false)
    }

    /// What the daemon serving the document's store holds, when one does.
    private func claims(on document: LocatedDocument) -> ClaimReport? {
        guard StoreLock.holder(of: document.store) != nil else { return nil }
        let request = ControlRequest(kind: .claims, path: "", item: document.item.rawValue)
        return (try? ControlClient.send(request, to: document.store))?.claims
    }
}

/// `docfs versions FILE`: the kept versions of a document.
struct VersionsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "versions",
        abstract: "List the versions docfs keeps of a document.",
        discussion: """
            Each save through a docfs mount makes a new version; the content it replaced is kept \
            as a previous version (how many and for how long: the store's settings.json).

            Without options it lists the versions; --show reads one. --restore and --resolve \
            change the document (one at a time; through the daemon when one serves the store).
            """
    )

    /// Options that only read: the list, or one version's content.
    struct Reading: ParsableArguments {
        @Flag(name: .long, help: "Print JSON instead of a table.")
        var json = false

        @Option(name: .long, help: ArgumentHelp("Write kept version V's content to standard output (V: a number, or pN for a pending save).", valueName: "V"))
        var show: ShownVersion?
    }

    /// Options that change the document (a new version), each alone.
    struct Changing: ParsableArguments {
        @Option(name: .long, help: ArgumentHelp("Make kept version V the current content again (itself a new version).", valueName: "V"))
        var restore: ShownVersion?

        @Flag(name: .long, help: "Resolve a conflict: drop the conflict versions and clear user.docfs.conflict.")
        var resolve = false

        @Option(name: .long, help: ArgumentHelp("With --resolve: make version V current first.", valueName: "V"))
        var keep: ShownVersion?
    }

    @OptionGroup(title: "Reading") var reading: Reading
    @OptionGroup(title: "Changing the document") var changing: Changing

    private var json: Bool { reading.json }
    private var show: UInt64? { reading.show?.number }
    private var restore: UInt64? { changing.restore?.number }
    private var resolve: Bool { changing.resolve }
    private var keep: UInt64? { changing.keep?.number }

    @Argument(help: ArgumentHelp("The document.", valueName: "file"))
    var file: String

    func validate() throws {
        if keep != nil && !resolve { throw ValidationError("--keep goes with --resolve") }
        if restore != nil && resolve { throw ValidationError("--restore and --resolve are separate steps: give one") }
        if show != nil && (restore != nil || resolve) { throw ValidationError("--show only reads: give it alone") }
    }

    struct Row: Encodable {
        /// The remote's number (or this store's, with no remote); absent for a pending save.
        var version: UInt64?
        /// A save not gone up yet (`p1`, `p2`, …): the remote numbers it when it does.
        var pending: String?
        var kind: String
        var modified: Double
        var size: Int64
        /// Bytes the version takes in the store (0 for the current content, and for a version
        /// kept as a prefix of a later one).
        var stored: Int64
        /// The machine that made it and the user there, as every machine linked to the remote
        /// lists them (nil in a store not linked).
        var machine: String?
        var user: String?
        /// The process that made it, on the machine that made it (when docfs saw it write).
        var pid: Int32?
        var uid: UInt32?
        var command: String?
        /// Set for a version whose content is still on the remote (fetched when read).
        var promised: Bool?
    }

    func run() throws {
        let document = try reportingErrors { () throws(DocfsError) in try LocatedDocument.locate(file) }
        guard let current = document.version else {
            printError("docfs: \(file) is a folder; only files have versions\n")
            throw ExitCode.failure
        }
        if let restore {
            print(try reportingErrors { () throws(DocfsError) in try Self.change(.restore, document, version: restore) })
            return
        }
        if resolve {
            print(try reportingErrors { () throws(DocfsError) in try Self.change(.resolve, document, version: keep) })
            return
        }
        let store = VersionStore(directory: document.store.versionsDirectory, policy: .defaults)
        if let show { return try write(version: show, of: document, from: store) }
        let kept = store.versions(of: document.item)
        let link = (try? RemoteLink.load(document.store)) ?? nil
        var rows = kept.map {
            let promised = store.isPromised(document.item, version: $0.version)
            let maker = Self.maker($0.author, link: link)
            return Row(version: Self.number($0.version), pending: Self.pending($0.version), kind: $0.kind.rawValue, modified: $0.modified, size: $0.size, stored: promised ? 0 : $0.storedSize,
                       machine: maker.machine, user: maker.user, pid: $0.author?.pid, uid: $0.author?.uid, command: $0.author?.command,
                       promised: promised ? true : nil)
        }
        let author = currentAuthor(of: document, version: current)
        let maker = Self.maker(author, link: link)
        rows.append(Row(version: Self.number(current), pending: Self.pending(current), kind: "current", modified: seconds(document.attributes.st_mtim),
                        size: Int64(document.attributes.st_size), stored: 0, machine: maker.machine, user: maker.user,
                        pid: author?.pid, uid: author?.uid, command: author?.command))
        rows.sort { ($0.pending.flatMap(VersionNumber.parse) ?? $0.version ?? 0) > ($1.pending.flatMap(VersionNumber.parse) ?? $1.version ?? 0) }
        if json { return printJSON(rows) }
        print("VERSION  KIND      MODIFIED             SIZE        STORED      WHO")
        for row in rows {
            let process = row.pid.map { "pid \($0), uid \(row.uid ?? 0), \(row.command ?? "")" }
            let who = [row.machine.map { "\(row.user ?? "?")@\($0)" }, process.map { row.machine == nil ? $0 : "(\($0))" }]
                .compactMap { $0 }.joined(separator: " ")
            let kind = row.promised == true ? row.kind + "*" : row.kind
            print("\((row.pending ?? row.version.map(String.init) ?? "").padding(8)) \(kind.padding(9)) \(formatDate(row.modified).padding(20)) "
                  + "\(String(row.size).padding(11)) \(String(row.stored).padding(11)) \(who)")
        }
        print("kept versions of this document take \(rows.reduce(0) { $0 + $1.stored }) bytes; of the store, \(store.storedSize()) bytes")
        if rows.contains(where: { $0.promised == true }) { print("* still on the remote: fetched when shown or restored") }
        if rows.contains(where: { $0.pending != nil }) { print("pN: a save not gone up yet; the remote numbers it when it goes up") }
    }

    /// Who made a version, as every machine linked to the remote lists it: the machine and user
    /// the remote named (kept from another machine), else this store's (made here).
    private static func maker(_ author: Author?, link: RemoteLink?) -> (machine: String?, user: String?) {
        if let machine = author?.machine { return (machine, author?.user) }
        guard let link else { return (nil, nil) }
        return (link.machine, link.maker)
    }

    private static func number(_ version: UInt64) -> UInt64? { VersionNumber.isPending(version) ? nil : version }
    private static func pending(_ version: UInt64) -> String? { VersionNumber.isPending(version) ? VersionNumber.shown(version) : nil }

    /// `--restore` and `--resolve`: through the daemon when the store is served (the control
    /// socket), else on the store directly, holding its lock so no daemon starts meanwhile.
    private static func change(_ kind: ControlRequest.Kind, _ document: LocatedDocument, version: UInt64?) throws(DocfsError) -> String {
        // A document the user view does not show (an app's data, a private container) is named
        // by its place.
        let shown = try? document.pathUnderRoot()
        var request = ControlRequest(kind: kind, path: shown ?? document.path, item: document.item.rawValue, version: version)
        if shown == nil {
            let place = document.place
            request.place = PlaceRequest(place)
        }
        return try StoreRequest.perform(request, on: document.store, purpose: "docfs versions")
    }

    /// Who made the current version: as the daemon serving the store knows it, else as the
    /// last daemon saved it (`VersionMakers`).
    private func currentAuthor(of document: LocatedDocument, version: UInt64) -> Author? {
        if StoreLock.holder(of: document.store) != nil {
            let request = ControlRequest(kind: .author, path: "", item: document.item.rawValue, version: version)
            if let author = (try? ControlClient.send(request, to: document.store))?.author { return author }
        }
        return VersionMakers.maker(of: document.item, version: version, in: document.store)
    }

    /// `--show`: kept version `version`'s content on standard output.
    private func write(version: UInt64, of document: LocatedDocument, from store: VersionStore) throws {
        // Kept promised: the daemon serving the store fetches it from the remote first.
        if store.isPromised(document.item, version: version), StoreLock.holder(of: document.store) != nil {
            let request = ControlRequest(kind: .download, path: "", item: document.item.rawValue, version: version)
            let reply = try reportingErrors { () throws(DocfsError) in try ControlClient.send(request, to: document.store) }
            guard reply.ok else {
                printError("docfs: fetching version \(version) failed: \(reply.message)\n")
                throw ExitCode(ExitStatus.failed)
            }
        }
        let content = try reportingErrors { () throws(DocfsError) in
            try store.openContent(document.item, version: version, current: document.backingPath)
        }
        _ = try reportingErrors { () throws(DocfsError) in try content.send(to: STDOUT_FILENO) }
    }
}

/// Runs `body`; a DocfsError becomes a one-line message on stderr and exit status 1.
func reportingErrors<T>(_ body: () throws(DocfsError) -> T) throws -> T {
    do {
        return try body()
    } catch {
        printError("docfs: \(error)\n")
        throw ExitCode(ExitStatus.failed)
    }
}

func printJSON(_ value: some Encodable) {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    guard let data = try? encoder.encode(value) else { return }
    print(NameText.reversibleJSON(String(decoding: data, as: UTF8.self)))
}

/// A value as one line of JSON (for streams of objects). Names in it that are not UTF-8 are
/// written reversibly (`NameText.reversibleJSON`), as in all of docfs's JSON output.
func jsonLine(_ value: some Encodable) -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    guard let data = try? encoder.encode(value) else { return "{}" }
    return NameText.reversibleJSON(String(decoding: data, as: UTF8.self))
}

func seconds(_ t: timespec) -> Double { Double(t.tv_sec) + Double(t.tv_nsec) / 1e9 }

/// Local time, to the second: 2026-11-21 17:05:02.
func formatDate(_ seconds: Double) -> String {
    var time = time_t(seconds.rounded(.down))
    var parts = tm()
    localtime_r(&time, &parts)
    var buffer = [CChar](repeating: 0, count: 32)
    let n = strftime(&buffer, buffer.count, "%Y-%m-%d %H:%M:%S", &parts)
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// When the file was made (statx birth time), when the filesystem records it.
func birthTime(_ path: String) -> Double? {
    var sec: Int64 = 0
    var nsec: UInt32 = 0
    guard docfs_birth_time(FileName(path).cString, &sec, &nsec) == 0 else { return nil }
    return Double(sec) + Double(nsec) / 1e9
}

extension String {
    func padding(_ width: Int) -> String { count >= width ? self : self + String(repeating: " ", count: width - count) }
}

/// What `docfs status` says of a reference (DESIGN §8): where the original is, from the
/// reference's external-document attributes (nil when the original was deleted).
struct ReferenceReport: Encodable {
    var original: String?
    var originalContainer: String?

    /// The report for `document`, nil when it is no reference.
    init?(_ document: LocatedDocument) {
        let read = { (name: String) -> String? in
            var buffer = [UInt8](repeating: 0, count: 4096)
            let n = buffer.withUnsafeMutableBytes { docfs_getxattr(FileName(document.path).cString, name, $0.baseAddress, $0.count) }
            return n < 0 ? nil : String(decoding: buffer[0..<n], as: UTF8.self)
        }
        guard read(ItemAttributes.external) == "1" || read(ReferenceStub.attribute) != nil else { return nil }
        original = read(ItemAttributes.original)
        originalContainer = read(ItemAttributes.container)
    }
}

/// A version as people name it on the command line: its number, or `pN` for a pending save
/// (`VersionNumber`).
struct ShownVersion: ExpressibleByArgument {
    let number: UInt64

    init?(argument: String) {
        guard let number = VersionNumber.parse(argument) else { return nil }
        self.number = number
    }
}
