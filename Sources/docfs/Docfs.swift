import ArgumentParser
import DocfsCore

#if canImport(Glibc)
import Glibc
#endif

/// The `docfs` command: mounts document stores and works with their documents.
@main
struct Docfs: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "docfs",
        abstract: "Use a document store as an ordinary folder.",
        discussion: """
            docfs mounts a document provider's storage (by default the embedded local store in \
            $XDG_DATA_HOME/docfs) as a normal directory: cp, vim, git and sqlite3 work on it as on \
            any folder.

            Start with:  docfs mount ~/Docs
            Stop with:   docfs unmount ~/Docs

            Exit status: 0 done, 1 the operation failed, 2 a wrong command line, 3 `docfs index \
            check` or `docfs remote check` found differences.
            """,
        version: "docfs \(DocfsVersion.number)",
        subcommands: [MountCommand.self, UnmountCommand.self, StatusCommand.self, VersionsCommand.self, WatchCommand.self,
                      QueryCommand.self, IndexCommand.self, BookmarkCommand.self, ContainerCommand.self, PickCommand.self,
                      MoveCommand.self, ExportCommand.self, RemoteCommand.self, DownloadCommand.self, PinCommand.self,
                      EvictCommand.self, KeyValueCommand.self, ReapMountCommand.self,
                      ThumbnailWorkerCommand.self]
    )

    /// Runs the command line; a wrong one exits with `ExitStatus.usage` (ArgumentParser's own
    /// status for it is 64) after the usual message and usage.
    static func main() {
        do {
            var command = try parseAsRoot(commandLineAsText())
            try command.run()
        } catch {
            guard exitCode(for: error) == .validationFailure else { exit(withError: error) }
            printError(fullMessage(for: error) + "\n")
            Glibc.exit(ExitStatus.usage)
        }
    }
}

/// The command line's arguments (after the program's name) in NameText: Swift's
/// `CommandLine.arguments` turn bytes that are not UTF-8 into U+FFFD, and a file name given on
/// the command line must reach the file it names.
func commandLineAsText() -> [String] {
    (1..<Int(CommandLine.argc)).map { index in
        guard let argument = CommandLine.unsafeArgv[index] else { return "" }
        return NameText.encode(UnsafeBufferPointer(start: argument, count: strlen(argument)).map { UInt8(bitPattern: $0) })
    }
}
