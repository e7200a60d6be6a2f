import ArgumentParser
import DocfsCore
import DocfsFilesystem
import DocfsIndex
import DocfsProvider
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `docfs index …`: the store's metadata index (DESIGN §5 S4).
struct IndexCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "index",
        abstract: "Rebuild the metadata index that docfs query reads.",
        subcommands: [Rebuild.self]
    )

    /// `docfs index rebuild`: makes the index again from the store.
    struct Rebuild: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make the index again from the store's files.",
            discussion: "Shows progress on a terminal, and a one-line summary at the end."
        )

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            try reportingErrors { () throws(DocfsError) in try IndexAccess.rebuild(layout) }
        }
    }
}

/// Opening a store's index from the CLI: read directly, made first when it is missing.
enum IndexAccess {
    static func open(_ layout: StoreLayout) throws(DocfsError) -> IndexDatabase {
        let path = layout.indexFile
        if access(path, F_OK) != 0 {
            printError("docfs: \(layout.root) has no index yet: building it\n")
            try rebuild(layout)
        }
        return try IndexDatabase(path: path, readOnly: true)
    }

    /// Rebuilds the index of a store no daemon serves, with a progress bar on a terminal.
    static func rebuild(_ layout: StoreLayout) throws(DocfsError) {
        if let holder = StoreLock.holder(of: layout) {
            throw DocfsError(.storeBusy, "the daemon (pid \(holder.pid)) serves \(layout.root) at \(holder.mountPoint): unmount it first (docfs unmount \(holder.mountPoint)), then rebuild")
        }
        guard access(layout.formatFile, F_OK) == 0 else {
            throw DocfsError(.storeUnavailable, "\(layout.root) is not a docfs store: give the store with --store, or a mount point")
        }
        let store = try LocalStore(path: layout.root)
        let index = try IndexDatabase(path: layout.indexFile)
        let bar = ProgressBar(label: "indexing")
        let started = Date()
        let summary = try IndexRebuild.run(store: store, index: index) { done, total in bar.show(done, of: total) }
        bar.finish()
        let seconds = Date().timeIntervalSince(started)
        printError("docfs: indexed \(summary.items) items in \(String(format: "%.1f", seconds)) s (\(summary.removed) records removed, \(summary.identified) items given an id)\n")
    }
}

/// A one-line progress bar on standard error, drawn only when it is a terminal.
final class ProgressBar {
    private let label: String
    private let visible = isatty(2) != 0

    init(label: String) { self.label = label }

    func show(_ done: Int, of total: Int) {
        guard visible else { return }
        let width = 30
        let filled = total > 0 ? width * done / total : width
        printError("\r\(label) [\(String(repeating: "#", count: filled))\(String(repeating: " ", count: width - filled))] \(done)/\(total)")
    }

    func finish() {
        if visible { printError("\r\u{1B}[K") }
    }
}
