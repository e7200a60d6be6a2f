import ArgumentParser
import DocfsCore
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
            let record = try reportingErrors { () throws(DocfsError) in
                try ContainerCommand.registry(location, making: true).create(try ContainerID(id), name: name, isPublic: `public`)
            }
            print("created \(record.id) (\(record.name), \(record.isPublic ? "public" : "private"))")
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
            try reportingErrors { () throws(DocfsError) in try ContainerCommand.registry(location).rename(try ContainerID(id), to: name) }
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
            try reportingErrors { () throws(DocfsError) in try ContainerCommand.registry(location).delete(try ContainerID(id), force: force) }
        }
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
