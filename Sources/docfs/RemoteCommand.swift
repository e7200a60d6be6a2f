import ArgumentParser
import DocfsCore
import DocfsDaemon
import DocfsIndex
import DocfsProvider
import DocfsSync
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `docfs remote …`: linking a store to a PostgreSQL remote so that several machines' stores
/// keep in step (DESIGN §9, issue 22 §1).
struct RemoteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remote",
        abstract: "Link a store to a PostgreSQL database, say how its sync goes, unlink it.",
        discussion: """
            Stores on several machines linked to one PostgreSQL database keep in step: what is \
            saved on one is on the others within a second, conflicts are kept as versions. The \
            URI, password and TLS are as libpq takes them (postgresql://user@host:port/db?sslmode=…, \
            ~/.pgpass, PGPASSWORD, PGHOST…); a password given in the URI is kept in ~/.pgpass, \
            never in the store.
            """,
        subcommands: [Link.self, Status.self, Check.self, Unlink.self, Sweep.self]
    )

    struct Link: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Link the store to a remote.",
            discussion: """
                A served store starts syncing at once; a store no daemon serves is brought in step \
                now (its documents sent up, the remote's brought down), and syncs whenever it is mounted.
                """)

        @Argument(help: ArgumentHelp("The database's connection URI, as libpq takes it.", valueName: "uri"))
        var uri: String

        @Option(name: .long, help: ArgumentHelp("The name this machine's changes carry (default: the host name).", valueName: "name"))
        var machine: String?

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            let home = ProcessInfo.processInfo.environment["HOME"] ?? NSHomeDirectory()
            if StoreLock.holder(of: layout) != nil {
                var request = ControlRequest(kind: .remoteLink, path: "")
                request.remote = RemoteLinkRequest(uri: uri, machine: machine, home: home)
                let reply = try reportingErrors { () throws(DocfsError) in try ControlClient.send(request, to: layout) }
                if reply.mergeNeedsUnmountedStore == true {
                    // Merging renumbers the store's items: linked (merged) unmounted, mounted
                    // again at once; the daemon then brings it in step.
                    let (summary, notBack) = try reportingErrors { () throws(DocfsError) -> (String, notBack: [String]) in
                        try UnmountedForAMoment(layout: layout).run { () throws(DocfsError) -> String in
                            try linkHere(layout, home: home, settling: false)
                        }
                    }
                    guard notBack.isEmpty else {
                        printError("docfs: \(summary), but \(notBack.joined(separator: ", ")) could not be mounted again: docfs mount it\n")
                        throw ExitCode(ExitStatus.failed)
                    }
                    print("\(summary); mounted again, the daemon brings it in step (docfs remote status shows how far)")
                    return
                }
                guard reply.ok else {
                    printError("docfs: \(reply.message)\n")
                    throw ExitCode(ExitStatus.failed)
                }
                print("\(reply.message); the daemon syncs in the background (docfs remote status shows how far)")
                return
            }
            let summary = try reportingErrors { () throws(DocfsError) -> String in try linkHere(layout, home: home, settling: true) }
            print("\(summary); mount the store (docfs mount) to keep it in step")
        }

        /// Links the store no daemon serves (merging it into the remote's items when it must)
        /// and, when `settling`, brings it in step, showing progress on a terminal; answers what
        /// it did.
        private func linkHere(_ layout: StoreLayout, home: String, settling: Bool) throws(DocfsError) -> String {
            let onTerminal = isatty(STDERR_FILENO) == 1
            return try RemoteLinking.servingHere(layout, purpose: "docfs remote link") { shared throws(DocfsError) -> String in
                let (link, remote) = try RemoteLinking.link(shared, uri: uri, machine: machine, home: home, merging: true) { step in
                    if onTerminal { printError("\r\u{1B}[Kdocfs: \(step)…") }
                }
                defer { remote.close() }
                guard settling else {
                    if onTerminal { printError("\r\u{1B}[K") }
                    return "linked to \(link.uri) as \(link.machine), merged"
                }
                let round = try RemoteLinking.syncUntilSettled(shared, link: link, remote: remote) { up, down in
                    if onTerminal { printError("\rdocfs: \(up) items sent, \(down) received…") }
                }
                if onTerminal { printError("\r\u{1B}[K") }
                return "linked to \(link.uri) as \(link.machine): \(round.uploaded) items sent, \(round.applied) received"
            }
        }
    }

    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compare the store with its remote, item by item.",
            discussion: """
                Every item's place, kind, content (read from the file now), mode, modification \
                time, attributes and version number against the remote's current version: one line \
                per difference. Run it when no change is under way: one still travelling is a \
                difference until it arrives. What does not travel (special files, a hard-linked \
                file's other names) is listed as a note, not a difference. Exit status 0 when they \
                agree, 3 when there are differences, 1 when the check could not be made.
                """)

        @Flag(name: .long, help: "Print JSON instead of text.")
        var json = false

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            let onTerminal = isatty(STDERR_FILENO) == 1 && !json
            let (differences, keptHereOnly) = try reportingErrors { () throws(DocfsError) -> ([RemoteDifference], [KeptHereOnly]) in
                if StoreLock.holder(of: layout) != nil {
                    let reply = try ControlClient.send(ControlRequest(kind: .remoteCheck, path: ""), to: layout)
                    guard reply.ok, let differences = reply.differences else { throw DocfsError(.invalidArgument, reply.message) }
                    return (differences, reply.keptHereOnly ?? [])
                }
                return try RemoteLinking.checkHere(layout) { compared in
                    if onTerminal { printError("\rdocfs: \(compared) items compared…") }
                }
            }
            if onTerminal { printError("\r\u{1B}[K") }
            if json {
                printJSON(differences)
            } else {
                for difference in differences { print(difference.description) }
                if differences.isEmpty { print("in step: the store and the remote agree on every item that travels") }
                for kept in keptHereOnly { print("note: \(kept.description)") }
            }
            if !differences.isEmpty { throw ExitCode(ExitStatus.differences) }
        }
    }

    struct Status: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Say what the store is linked to and how its sync goes.")

        @Flag(name: .long, help: "Print JSON instead of text.")
        var json = false

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            let report = try reportingErrors { () throws(DocfsError) -> RemoteStatusReport in
                if StoreLock.holder(of: layout) != nil {
                    let reply = try ControlClient.send(ControlRequest(kind: .remoteStatus, path: ""), to: layout)
                    guard reply.ok, let report = reply.remote else { throw DocfsError(.invalidArgument, reply.message) }
                    return report
                }
                guard let link = try RemoteLink.load(layout) else {
                    throw DocfsError(.invalidArgument, "the store is not linked to a remote: docfs remote link URI links it")
                }
                let waiting = (try? IndexDatabase(path: layout.indexFile, readOnly: true).outboxCount()) ?? 0
                return RemoteStatusReport(uri: link.uri, machine: link.machine, space: link.space, linked: link.linked,
                                          waiting: waiting, incoming: nil, lastContact: nil, lastError: nil, nextTry: nil, rounds: 0, served: false)
            }
            if json { return printJSON(report) }
            print("linked to \(report.uri) as \(report.machine) since \(formatDate(report.linked))")
            print(report.served ? "syncing (served by a daemon)" : "not syncing: no daemon serves the store (docfs mount starts one)")
            print("waiting to go up: \(report.waiting) change\(report.waiting == 1 ? "" : "s")")
            if let incoming = report.incoming {
                print("waiting to come down: \(incoming) change\(incoming == 1 ? "" : "s")")
            }
            if report.parked > 0 {
                print("could not apply here: \(report.parked) change\(report.parked == 1 ? "" : "s") (tried again now and then)"
                      + (report.parkedProblem.map { "; the first: \($0)" } ?? ""))
            }
            if report.downloadedBytes > 0 { print("fetched on demand since the daemon started: \(report.downloadedBytes) bytes") }
            if let limit = report.cacheLimit {
                print("content here: \(report.cacheUsed.map { "\($0) bytes" } ?? "not measured yet") of a cache limit of \(limit) bytes")
            }
            print("in step: " + Self.inStepLine(report))
            if let count = report.keptHereOnlyCount, count > 0 {
                print("kept here only (does not travel): \(count) item\(count == 1 ? "" : "s")"
                      + (report.keptHereOnly?.first.map { "; the first: \($0.description)" } ?? "") + " (docfs remote check lists them)")
            }
            if let contact = report.lastContact { print("last contact: \(formatDate(contact))") }
            if let error = report.lastError {
                print("last error: \(error)" + (report.nextTry.map { "; trying again at \(formatDate($0))" } ?? ""))
            }
        }

        /// Whether the store is in step, as the daemon's own check last found it: "yes" only when
        /// that check found nothing, nothing moved since, and nothing waits or failed.
        static func inStepLine(_ report: RemoteStatusReport) -> String {
            guard report.served else { return "not known: no daemon serves the store (docfs remote check compares it now)" }
            if report.inStep == true {
                return "yes (checked \(report.checked.map(formatDate) ?? "-")"
                    + (report.checkDuration.map { String(format: " in %.2f s", $0) } ?? "") + ")"
            }
            if let found = report.checkDifferences, found > 0, let checked = report.checked {
                return "no: the check at \(formatDate(checked)) found \(found) difference\(found == 1 ? "" : "s")"
                    + " (what it could, it set right; docfs remote check lists them)"
            }
            if report.waiting > 0 || (report.incoming ?? 0) > 0 || report.parked > 0 || report.lastError != nil {
                return "no: changes wait (above)"
            }
            return "not known yet: the daemon checks once changes settle"
        }
    }

    struct Sweep: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove chunks no version names from the remote.",
            discussion: """
                An upload cut short (a machine killed mid-upload, a file changed while it was read) \
                leaves chunks on the remote that no version names. Daemons sweep them once a day; \
                this sweeps now. Chunks used within the pause given are spared: an upload under way \
                may be about to name them.
                """)

        @Option(name: .long, help: ArgumentHelp("Spare chunks used in the last this many minutes.", valueName: "minutes"))
        var unusedFor: Double = 60

        @Option(name: .long, help: ArgumentHelp(
            "First prune the log of versions older than this many days (current versions stay; a machine away longer lists every item again).",
            valueName: "days"))
        var pruneOlderThan: Double?

        @OptionGroup var location: StoreLocation

        func run() throws {
            guard unusedFor >= 0 else { throw ValidationError("--unused-for takes minutes, 0 or more") }
            guard (pruneOlderThan ?? 0) >= 0 else { throw ValidationError("--prune-older-than takes days, 0 or more") }
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            let (pruned, swept) = try reportingErrors { () throws(DocfsError) in
                try RemoteLinking.sweep(layout, unusedFor: unusedFor * 60, pruning: pruneOlderThan.map { $0 * 86400 })
            }
            if pruneOlderThan != nil { print("pruned \(pruned) version\(pruned == 1 ? "" : "s") from the log") }
            print("swept \(swept.chunks) unused chunk\(swept.chunks == 1 ? "" : "s") (\(swept.bytes) bytes) from the remote")
        }
    }

    struct Unlink: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Unlink the store from its remote.",
            discussion: "The documents stay as they are on this machine; changes stop going up and coming down.")

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            if StoreLock.holder(of: layout) != nil {
                let reply = try reportingErrors { () throws(DocfsError) in
                    try ControlClient.send(ControlRequest(kind: .remoteUnlink, path: ""), to: layout)
                }
                guard reply.ok else {
                    printError("docfs: \(reply.message)\n")
                    throw ExitCode(ExitStatus.failed)
                }
                print(reply.message)
                return
            }
            try reportingErrors { () throws(DocfsError) in
                try RemoteLinking.servingHere(layout, purpose: "docfs remote unlink") { shared throws(DocfsError) in
                    try RemoteLinking.unlink(shared)
                }
            }
            print("unlinked")
        }
    }
}
