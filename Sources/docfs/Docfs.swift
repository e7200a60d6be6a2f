import ArgumentParser

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
            """,
        subcommands: [MountCommand.self, UnmountCommand.self, StatusCommand.self, VersionsCommand.self, WatchCommand.self,
                      QueryCommand.self, IndexCommand.self, BookmarkCommand.self, ContainerCommand.self, PickCommand.self,
                      MoveCommand.self, ExportCommand.self, ReapMountCommand.self,
                      ThumbnailWorkerCommand.self]
    )
}
