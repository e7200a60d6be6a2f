import ArgumentParser
import CLinux
import DocfsCore
import DocfsDaemon
import DocfsFUSE
import DocfsFilesystem
import DocfsProvider
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// `docfs mount`: serves a store at a mount point, in the background unless told otherwise.
struct MountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount",
        abstract: "Mount a document store on a directory.",
        discussion: """
            The store defaults to $DOCFS_STORE, else $XDG_DATA_HOME/docfs, else \
            ~/.local/share/docfs, and is created \
            on first use. The command returns once the mount answers; the daemon keeps serving in \
            the background and logs to STORE/logs/daemon.log. Stop it with `docfs unmount`.

            Examples:
              docfs mount ~/Docs
              docfs mount --store /srv/docs -o allow_other /mnt/docs
              docfs mount --foreground ~/Docs
              docfs mount --app com.example.Notes ~/NotesApp

            A store is served by one daemon: mounting a store that is mounted already adds the \
            mount to the daemon serving it (an app view beside the user view, say).
            """
    )

    @Option(name: .long, help: ArgumentHelp("The store directory.", valueName: "dir"))
    var store: String?

    @Option(name: .long, help: ArgumentHelp("Show only this container (its Documents/ and Data/): an app view.", valueName: "container-id"))
    var app: String?

    @Flag(name: .long, help: "Stay attached and log to stderr; Ctrl-C unmounts.")
    var foreground = false

    @Option(name: .short, help: ArgumentHelp(
        "Mount options, comma separated: FUSE's (allow_other, ro, …) and docfs's own (nopassthrough, writeback, nothumbnails, nonempty, timeout=SECONDS).",
        valueName: "opt[,opt]"))
    var options: [String] = []

    @Option(name: .long, help: ArgumentHelp("How much the daemon logs.", valueName: "level"))
    var logLevel: Logger.Level = .notice

    /// Set by the background launcher: the pipe to report readiness on.
    @Option(name: .long, help: .hidden)
    var readyFd: Int32?

    @Argument(help: ArgumentHelp("The directory to mount on (must exist and be empty).", valueName: "mountpoint"))
    var mountPoint: String

    func run() throws {
        let mountPoint = MountTable.canonical(self.mountPoint)
        let storePath = store ?? LocalStore.defaultPath(environment: environmentDictionary())
        var parsed = FUSEMount.Options.parse(options)
        let allowNonEmpty = parsed.fuseOptions.contains("nonempty")
        parsed.fuseOptions.removeAll { $0 == "nonempty" }
        let ready = ReadinessPipe(fd: readyFd)

        /// What the checks found to do: serve the store, or nothing (a serving daemon added
        /// the mount).
        enum Plan { case serve(ContainerID?), added }
        let plan: Plan? = ready.reporting {
            () throws(DocfsError) -> Plan in
            let app = try self.app.map { id throws(DocfsError) in try ContainerID(id) }
            try Preflight.checkFUSEDevice()
            try Preflight.checkFusermount()
            try Preflight.checkMountPoint(mountPoint, allowNonEmpty: allowNonEmpty)
            if readyFd == nil, let added = try addToServingDaemon(storePath, mountPoint: mountPoint, app: app) {
                print(added)
                return .added
            }
            try Preflight.checkStore(storePath)
            if let app { try Preflight.checkContainer(app, in: storePath) }
            return .serve(app)
        }
        guard let plan else { throw ExitCode.failure }
        guard case .serve(let app) = plan else { return }
        if !foreground && readyFd == nil {
            let code = BackgroundLauncher.launch(storePath: storePath, mountPoint: mountPoint)
            throw ExitCode(code)
        }
        guard let daemon = ready.reporting({ () throws(DocfsError) in
            try Daemon(DaemonConfiguration(storePath: storePath, mountPoint: mountPoint, app: app, options: parsed, logLevel: logLevel))
        }) else { throw ExitCode.failure }
        ready.succeed()
        daemon.serve()
        // Everything is done and stored: leave without the exit-time destructors of the C and
        // C++ libraries (one flushes stderr, whose lock a thread gone since may still hold).
        _exit(0)
    }
}

extension MountCommand {
    /// When a daemon serves the store already, asks it to mount this view too (C7: one daemon
    /// per store) and answers what it said; nil when none does.
    private func addToServingDaemon(_ storePath: String, mountPoint: String, app: ContainerID?) throws(DocfsError) -> String? {
        let layout = StoreLayout(root: storePath.hasPrefix("/") ? storePath : MountTable.canonical(storePath))
        guard access(layout.formatFile, F_OK) == 0, let holder = StoreLock.holder(of: layout) else { return nil }
        if foreground {
            throw DocfsError(.storeBusy, "store \(layout.root) is served by daemon pid \(holder.pid): mount without --foreground to add this mount to it")
        }
        let request = ControlRequest(kind: .mount, path: mountPoint,
                                     mount: MountRequest(mountPoint: mountPoint, app: app?.rawValue, options: options))
        let reply = try ControlClient.send(request, to: layout)
        guard reply.ok else { throw DocfsError(.badMountPoint, reply.message) }
        return reply.message
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

func environmentDictionary() -> [String: String] {
    var result: [String: String] = [:]
    var pointer = environ
    while let entry = pointer.pointee {
        let text = String(cString: entry)
        if let eq = text.firstIndex(of: "=") {
            result[String(text[..<eq])] = String(text[text.index(after: eq)...])
        }
        pointer += 1
    }
    return result
}
