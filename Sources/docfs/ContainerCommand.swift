import ArgumentParser
import DocfsCore
import DocfsDaemon
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// `docfs container …`: the store's containers, each an app's own area (DESIGN §1, issue 6 §1).
struct ContainerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "container",
        abstract: "Create, list, rename and delete the containers of a store.",
        discussion: """
            A container is an app's own area of the store, named by a reverse-DNS id \
            (com.example.Notes) and shown by its display name. It holds a documents scope \
            (STORE/containers/ID/Documents) and a data scope (STORE/containers/ID/Data).
            """,
        subcommands: [Create.self, List.self, Rename.self, Delete.self]
    )

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a container.")

        @Argument(help: ArgumentHelp("The container's reverse-DNS id, like com.example.Notes.", valueName: "id"))
        var id: String

        @Option(name: .long, help: ArgumentHelp("The name people see.", valueName: "name"))
        var name: String

        @Flag(name: .long, help: "Show its documents in the user view (a plain docfs mount).")
        var `public` = false

        @OptionGroup var location: StoreLocation

        func run() throws {
            let change = ContainerChange(id: id, name: name, isPublic: `public`)
            print(try reportingErrors { () throws(DocfsError) in try ContainerCommand.run(.createContainer, change, location) })
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the containers, the default one first.")

        @Flag(name: .long, help: "Print JSON instead of text.")
        var json = false

        @OptionGroup var location: StoreLocation

        func run() throws {
            let records = try reportingErrors { () throws(DocfsError) in try ContainerCommand.registry(location).list() }
            if json { return printJSON(records) }
            let width = records.map(\.id.count).max() ?? 0
            for record in records {
                let visibility = record.id == ContainerID.userDefault.rawValue ? "default" : record.isPublic ? "public" : "private"
                print("\(record.id.padding(width))  \(visibility.padding(7))  \(record.name)")
            }
        }
    }

    struct Rename: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Give a container another display name.")

        @Argument(help: ArgumentHelp("The container's id.", valueName: "id"))
        var id: String

        @Argument(help: ArgumentHelp("Its new display name.", valueName: "name"))
        var name: String

        @OptionGroup var location: StoreLocation

        func run() throws {
            let change = ContainerChange(id: id, name: name)
            print(try reportingErrors { () throws(DocfsError) in try ContainerCommand.run(.renameContainer, change, location) })
        }
    }

    struct Delete: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a container.",
            discussion: "One that holds documents or data is refused unless --force, which deletes them with it."
        )

        @Argument(help: ArgumentHelp("The container's id.", valueName: "id"))
        var id: String

        @Flag(name: .long, help: "Delete it with everything it holds.")
        var force = false

        @OptionGroup var location: StoreLocation

        func run() throws {
            let change = ContainerChange(id: id, force: force)
            print(try reportingErrors { () throws(DocfsError) in try ContainerCommand.run(.deleteContainer, change, location) })
        }
    }

    /// Carries a change out: through the daemon when the store is served (so its mounts show
    /// it at once), else on the store's registry directly. Answers what to print.
    static func run(_ kind: ControlRequest.Kind, _ change: ContainerChange, _ location: StoreLocation) throws(DocfsError) -> String {
        let (layout, _) = try location.resolve()
        let request = ControlRequest(kind: kind, path: "", container: change)
        if kind != .createContainer, StoreLock.holder(of: layout) == nil { _ = try registry(location) }  // the store must exist
        return try StoreRequest.perform(request, on: layout, purpose: "docfs container")
    }

    /// The registry of the store `location` names, which must exist unless `making` (a
    /// container may be made in a store no mount has made yet).
    static func registry(_ location: StoreLocation, making: Bool = false) throws(DocfsError) -> ContainerRegistry {
        let (layout, _) = try location.resolve()
        if making { return ContainerRegistry(layout: try LocalStore(path: layout.root).layout) }
        guard access(layout.formatFile, F_OK) == 0 else {
            throw DocfsError(.storeUnavailable, "\(layout.root) is not a docfs store: give the store with --store, or a mount point")
        }
        return ContainerRegistry(layout: layout)
    }
}
