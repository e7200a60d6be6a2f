import ArgumentParser
import CLinux
import DocfsCore
import DocfsDaemon
import DocfsFilesystem
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// `docfs pick --app ID --open|--import FILE [--into DIR]`: the document picker's open and
/// import modes (DESIGN §8, issue 6 §3).
struct PickCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pick",
        abstract: "Give an app a document: a reference to it (--open) or a copy of its own (--import).",
        discussion: """
            --open puts a reference in the app's container: reading and writing it reads and \
            writes the original, wherever the original moves; it carries user.docfs.external. \
            --import gives the app its own copy, with a new item id. DIR is a folder of the app's \
            container, like Documents (the default) or Data/inbox.

            Examples:
              docfs pick --app com.example.Notes --open ~/Docs/report.odt
              docfs pick --app com.example.Notes --import ~/Docs/report.odt --into Documents/inbox
            """
    )

    @Option(name: .long, help: ArgumentHelp("The app's container.", valueName: "container-id"))
    var app: String

    @Flag(name: .long, help: "Give a reference to the document (no copy).")
    var open = false

    @Flag(name: .long, help: "Give a copy of the document, with an id of its own.")
    var `import` = false

    @Option(name: .long, help: ArgumentHelp("The folder of the app's container to put it in.", valueName: "dir"))
    var into = "Documents"

    @Argument(help: ArgumentHelp("The document.", valueName: "file"))
    var file: String

    func validate() throws {
        if open == `import` { throw ValidationError("give one of --open and --import") }
    }

    func run() throws {
        print(try reportingErrors { () throws(DocfsError) -> String in
            let document = try LocatedDocument.locate(file)
            let app = try ContainerID(self.app)
            let parts = into.split(separator: "/").map(String.init)
            guard let scope = parts.first.flatMap({ name in StorePaths.scopeFolderNames[name] }) else {
                throw DocfsError(.invalidArgument, "--into \(into): give a folder of the app's container, starting with Documents or Data")
            }
            let folder = StorePlace(container: app, scope: scope, path: parts.count > 1 ? "/" + parts.dropFirst().joined(separator: "/") : "")
            return try Picker.run(open ? .open : .import, document, into: folder)
        })
    }
}

/// `docfs move FILE --to DEST`: move-to-service (DESIGN §8).
struct MoveCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "move",
        abstract: "Move a document out of an app's container into the user's documents, leaving a reference.",
        discussion: """
            DEST is a folder of the user view (on the mount, or in the store's folders). The \
            app keeps reaching the document through the reference left in its place.
            """
    )

    @OptionGroup var target: PickerTarget

    func run() throws {
        print(try reportingErrors { () throws(DocfsError) -> String in
            try Picker.run(.move, try LocatedDocument.locate(target.file), into: try Picker.folder(target.to))
        })
    }
}

/// `docfs export FILE --to DEST`: export-to-service (DESIGN §8).
struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Copy a document out to a folder; the document stays where it is.",
        discussion: """
            DEST is a folder of the user view (the copy gets an id of its own there), or any \
            other folder (a plain copy of the content).
            """
    )

    @OptionGroup var target: PickerTarget

    func run() throws {
        print(try reportingErrors { () throws(DocfsError) -> String in
            let (file, to) = (target.file, target.to)
            let document = try LocatedDocument.locate(file)
            guard let folder = try? Picker.folder(to) else { return try Picker.copyOut(file, to: to) }
            return try Picker.run(.export, document, into: folder)
        })
    }
}

/// The document and the folder `docfs move` and `docfs export` take.
struct PickerTarget: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The folder to put it in.", valueName: "dest"))
    var to: String

    @Argument(help: ArgumentHelp("The document.", valueName: "file"))
    var file: String
}

/// What the picker commands share: the request to the daemon (or to the store), and what
/// they print.
enum Picker {
    static func run(_ mode: DocumentPicker.Mode, _ document: LocatedDocument, into folder: StorePlace) throws(DocfsError) -> String {
        let request = ControlRequest(kind: .pick, path: document.path, item: document.item.rawValue,
                                     pick: PickRequest(mode: mode, folder: PlaceRequest(folder)))
        return try StoreRequest.perform(request, on: document.store, purpose: "docfs \(mode.rawValue)")
    }

    /// The folder `path` names (on a docfs mount, or in a store's folders) as a place.
    static func folder(_ path: String) throws(DocfsError) -> StorePlace {
        let located = try LocatedDocument.locate(path)
        guard located.attributes.st_mode & S_IFMT == S_IFDIR else {
            throw DocfsError(.invalidArgument, "\(path) is not a folder: give the folder to put the document in")
        }
        return located.place
    }

    /// Export to a folder outside docfs: a plain copy of the content (read through the mount,
    /// so under coordination there).
    static func copyOut(_ file: String, to folder: String) throws(DocfsError) -> String {
        var st = stat()
        guard stat(FileName(folder).cString, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw DocfsError(.invalidArgument, "\(folder) is not a folder: give the folder to copy the document to")
        }
        let source = Glibc.open(FileName(file).cString, O_RDONLY | O_CLOEXEC)
        guard source >= 0 else { throw DocfsError.errno("opening \(file)") }
        defer { close(source) }
        let name = String(file.split(separator: "/").last ?? "document")
        let into = Glibc.open(FileName(folder).cString, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard into >= 0 else { throw DocfsError.errno("opening \(folder)") }
        defer { close(into) }
        let free = DocumentPicker.freeName(FileName(name), in: into)
        let target = openat(into, free.cString, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
        guard target >= 0 else { throw DocfsError.errno("making \(folder)/\(free)") }
        defer { close(target) }
        // Read and written in turn: copy_file_range cannot cross from a FUSE mount.
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(source, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw DocfsError.errno("reading \(file)") }
            if n == 0 { break }
            var written = 0
            while written < n {
                let w = buffer.withUnsafeBytes { Glibc.write(target, $0.baseAddress! + written, n - written) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { throw DocfsError.errno("writing \(folder)/\(free)") }
                written += w
            }
        }
        return "exported \(file) to \(folder)/\(free) (a plain copy)"
    }
}
