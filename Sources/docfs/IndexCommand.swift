import ArgumentParser
import DocfsCore
import DocfsDaemon
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
        abstract: "Rebuild or check the metadata index that docfs query reads.",
        subcommands: [Rebuild.self, Check.self]
    )

    /// `docfs index rebuild`: makes the index again from the store.
    struct Rebuild: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make the index again from the store's files.",
            discussion: "Works on a served store too (through its daemon). Shows progress on a terminal, and a one-line summary at the end."
        )

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            _ = try reportingErrors { () throws(DocfsError) in try IndexAccess.walk(.rebuild, layout) }
        }
    }

    /// `docfs index check`: lists every difference between the index and the store.
    struct Check: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Compare the index with the store and list every difference.",
            discussion: "Exit status 0 when they agree, 3 when there are differences (`docfs index rebuild` fixes them), 1 when the check could not be made."
        )

        @OptionGroup var location: StoreLocation

        func run() throws {
            let (layout, _) = try reportingErrors { () throws(DocfsError) in try location.resolve() }
            let differences = try reportingErrors { () throws(DocfsError) in try IndexAccess.walk(.check, layout) }
            for difference in differences { PlainOutput.line(difference) }
            if !differences.isEmpty { throw ExitCode(ExitStatus.differences) }
        }
    }
}

/// Reaching a store's index from the CLI: read directly; rebuilt and checked by the daemon
/// when one serves the store, else here.
enum IndexAccess {
    /// The index for reading. An index that is missing, from an older docfs or damaged is
    /// made again first (the daemon does that itself when it starts).
    static func open(_ layout: StoreLayout) throws(DocfsError) -> IndexDatabase {
        if StoreLock.holder(of: layout) == nil {
            try requireStore(layout)
            let (index, condition) = try IndexDatabase.open(path: layout.indexFile)
            if condition != .ready {
                printError("docfs: \(Self.explain(condition, layout)): building it\n")
                _ = try walk(.rebuild, layout, index: index)
            }
        }
        return try IndexDatabase(path: layout.indexFile, readOnly: true)
    }

    /// Rebuilds or checks the index, with a progress bar on a terminal; answers a check's
    /// differences.
    @discardableResult
    static func walk(_ mode: IndexRebuild.Mode, _ layout: StoreLayout, index given: IndexDatabase? = nil) throws(DocfsError) -> [String] {
        let bar = ProgressBar(label: mode == .check ? "checking" : "indexing")
        let started = Date()
        let outcome: IndexWalkOutcome
        if StoreLock.holder(of: layout) != nil {
            outcome = try IndexWalkRequest.send(mode, to: layout) { bar.show($0, of: $1) }
        } else {
            try requireStore(layout)
            let index: IndexDatabase
            if let given {
                index = given
            } else {
                let (opened, condition) = try IndexDatabase.open(path: layout.indexFile)
                if case .replaced = condition { printError("docfs: \(explain(condition, layout))\n") }
                index = opened
            }
            let store = try LocalStore(path: layout.root)
            let summary = try IndexRebuild.run(store: store, index: index, mode: mode, separatingCopies: true,
                                               progress: { bar.show($0, of: $1) })
            outcome = IndexWalkOutcome(summary, mode: mode)
        }
        bar.finish()
        let seconds = String(format: "%.1f", Date().timeIntervalSince(started))
        printError("docfs: \(outcome.summary) in \(seconds) s\n")
        return outcome.differences
    }

    private static func requireStore(_ layout: StoreLayout) throws(DocfsError) {
        guard access(layout.formatFile, F_OK) == 0 else {
            throw DocfsError(.storeUnavailable, "\(layout.root) is not a docfs store: give the store with --store, or a mount point")
        }
    }

    static func explain(_ condition: IndexDatabase.Condition, _ layout: StoreLayout) -> String {
        switch condition {
        case .ready: "the index is ready"
        case .unbuilt: "\(layout.root) has no index yet"
        case .migrated: "the index of \(layout.root) is from an older docfs"
        case .replaced(let reason, let aside): "the index of \(layout.root) was set aside (\(reason)) as \(aside)"
        }
    }
}

/// A rebuild or check done by the daemon serving the store: it streams progress lines, then
/// the outcome.
enum IndexWalkRequest {
    static func send(_ mode: IndexRebuild.Mode, to layout: StoreLayout,
                     progress: (Int, Int) -> Void) throws(DocfsError) -> IndexWalkOutcome {
        let fd = try ControlClient.connect(to: layout)
        defer { close(fd) }
        let reader = LineReader(fd)
        let request = ControlRequest(kind: mode == .check ? .checkIndex : .rebuildIndex, path: "")
        let first = try ControlClient.exchange(request, on: fd, store: layout, reader: reader)
        guard first.ok else { throw DocfsError(.storeUnavailable, first.message) }
        while let line = reader.next() {
            guard let reply = try? JSONDecoder().decode(ControlReply.self, from: Data(line)) else { break }
            if let counts = reply.progress, counts.count == 2 { progress(counts[0], counts[1]) }
            if let outcome = reply.index {
                guard reply.ok else { throw DocfsError(.internalFailure, reply.message) }
                return outcome
            }
            if !reply.ok { throw DocfsError(.internalFailure, reply.message) }
        }
        throw DocfsError(.storeUnavailable, "the daemon serving \(layout.root) stopped answering: see \(layout.daemonLog)")
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
        let filled = total > 0 ? width * min(done, total) / total : width
        printError("\r\(label) [\(String(repeating: "#", count: filled))\(String(repeating: " ", count: width - filled))] \(done)/\(total)")
    }

    func finish() {
        if visible { printError("\r\u{1B}[K") }
    }
}
