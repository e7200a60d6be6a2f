import ArgumentParser
import DocfsCoordination
import DocfsCore
import DocfsDaemon
import DocfsFilesystem
import DocfsProvider
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `docfs watch PATH`: the changes under a file or folder as they happen, whoever makes them.
struct WatchCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Print changes to a file or folder as they happen, until interrupted.",
        discussion: """
            Reports created, changed (by the mount or, marked uncoordinated, by programs writing \
            in the store directly), moved (with the new path), deleted, new versions and \
            conflicts. The store must be mounted: its daemon is the one that sees the changes.
            """
    )

    @Flag(name: .long, help: "Print one JSON object per change.")
    var json = false

    @Argument(help: ArgumentHelp("The file or folder to watch (on a docfs mount or in a store).", valueName: "path"))
    var path: String

    func run() throws {
        allowInterruption()
        let (store, relative, app) = try reportingErrors { () throws(DocfsError) in try Self.target(path) }
        guard StoreLock.holder(of: store) != nil else {
            printError("docfs: no daemon serves \(store.root): mount it (docfs mount) to watch its changes\n")
            throw ExitCode.failure
        }
        let fd = try reportingErrors { () throws(DocfsError) in try ControlClient.connect(to: store) }
        defer { close(fd) }
        let reader = LineReader(fd)
        let reply = try reportingErrors { () throws(DocfsError) in
            try ControlClient.exchange(ControlRequest(kind: .watch, path: relative, view: app?.rawValue), on: fd, store: store, reader: reader)
        }
        guard reply.ok else {
            printError("docfs: \(reply.message)\n")
            throw ExitCode.failure
        }
        printError("docfs: \(reply.message) (Ctrl-C to stop)\n")
        while let line = reader.next() {
            if json {
                print(NameText.reversibleJSON(String(decoding: line, as: UTF8.self)))
            } else if let change = try? JSONDecoder().decode(PresentedChange.self, from: Data(line)) {
                PlainOutput.line(Self.describe(change))
            }
            fflush(nil)  // one change per line, as it happens, into pipes too
        }
    }

    /// The store, the path under a view's root that `path` names (a folder or a file), and the
    /// app whose view that is (nil for the user view): the app view `path` is on, or for a
    /// path in the store that the user view does not show, its container's.
    static func target(_ path: String) throws(DocfsError) -> (StoreLayout, String, ContainerID?) {
        let document = try LocatedDocument.locate(path)
        if let app = document.app, let mountPoint = document.mountPoint {
            return (document.store, String(document.path.dropFirst(mountPoint.count).drop { $0 == "/" }), app)
        }
        if let shown = try? document.pathUnderRoot() { return (document.store, shown, nil) }
        let place = document.place
        return (document.store, String(Filesystem.localPath(place).dropFirst()), place.container)
    }

    static func describe(_ change: PresentedChange) -> String {
        var text = "\(change.kind.rawValue.padding(9))\(PlainOutput.name(change.path))"
        if let newPath = change.newPath { text += " -> \(PlainOutput.name(newPath))" }
        if let version = change.version { text += " (version \(VersionNumber.shown(version)))" }
        if change.uncoordinated { text += " [uncoordinated]" }
        if let machine = change.machine { text += " [from \(PlainOutput.name(machine))]" }
        return text
    }
}

/// For a command that runs until interrupted: makes sure it can be (a parent may have left
/// SIGINT, SIGTERM and SIGHUP blocked).
func allowInterruption() {
    var signals = sigset_t()
    sigemptyset(&signals)
    for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, signal) }
    pthread_sigmask(SIG_UNBLOCK, &signals, nil)
}
