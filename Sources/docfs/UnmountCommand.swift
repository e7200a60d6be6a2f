import ArgumentParser
import DocfsDaemon
import DocfsFUSE
#if canImport(Glibc)
import Glibc
#endif

/// `docfs unmount`: unmounts a docfs mount and waits for its daemon to finish.
struct UnmountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unmount",
        abstract: "Unmount a docfs mount.",
        discussion: "Fails if files are still open on the mount, unless --lazy is given."
    )

    @Flag(name: .long, help: "Detach now even if files are in use; finish when they are closed.")
    var lazy = false

    @Argument(help: ArgumentHelp("The mount point.", valueName: "mountpoint"))
    var mountPoint: String

    func run() throws {
        let path = MountTable.canonical(mountPoint)
        guard MountTable.entry(at: path) != nil else {
            printError("docfs: \(path) is not a docfs mount: see `findmnt -t fuse.docfs` for the mounts there are\n")
            throw ExitCode.failure
        }
        let record = MountRegistry.record(for: path)
        if !Self.unmount(path, lazy: lazy) {
            printError("docfs: \(path) is busy: close the files and shells using it (fuser -vm \(path)), or use --lazy\n")
            throw ExitCode.failure
        }
        if let record, !Self.waitForEnd(of: path, servedBy: record.pid) {
            printError("docfs: the daemon (pid \(record.pid)) is still finishing; it will exit once its work is done\n")
        }
    }

    /// Unmounts the docfs mount at `path` (canonical); false when it is busy.
    static func unmount(_ path: String, lazy: Bool = false) -> Bool {
        if lazy { return FUSEMount.detach(path) }
        if getuid() == 0 { return umount2(path, 0) == 0 || MountTable.entry(at: path) == nil }
        return ProcessRunner.run("fusermount3", ["-u", path]) == 0
    }

    /// The daemon releases the store when it exits after its last mount; waits (up to 10 s)
    /// for that, so a new mount can follow, or, when it serves other mounts still, for it to be
    /// done with this one. False when it was still finishing.
    static func waitForEnd(of path: String, servedBy pid: pid_t) -> Bool {
        for _ in 0..<1000 {
            if MountRegistry.hasEnded(pid) { return true }
            if MountRegistry.record(for: path) == nil && MountRegistry.serves(pid: pid) { return true }
            usleep(10_000)
        }
        return false
    }
}
