import ArgumentParser
import CLinux
import DocfsCore
import DocfsDaemon
import DocfsProvider
import FoundationEssentials
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// `docfs download`, `docfs pin` and `docfs evict` (DESIGN §9.1, issue 23): each file named,
/// and every file under each folder named, asked of the daemon serving its store, one at a time,
/// with a progress line on a terminal (the file under way and how much of it is here) and a
/// JSON report on request.
struct PromiseAction {
    let kind: ControlRequest.Kind
    let verb: String

    struct Outcome: Encodable, Sendable {
        var path: String
        var ok: Bool
        var message: String
        /// Bytes downloaded (download, pin) or given back to the disk (evict).
        var bytes: Int64?
    }

    /// Every regular file `paths` name, folders walked (symbolic links not followed).
    static func files(_ paths: [String]) -> [String] {
        var files: [String] = []
        for path in paths {
            var st = stat()
            guard lstat(path, &st) == 0 else {
                files.append(path)  // reported as it fails
                continue
            }
            guard st.st_mode & S_IFMT == S_IFDIR else {
                files.append(path)
                continue
            }
            var stack = [path]
            while let folder = stack.popLast() {
                guard let listing = opendir(folder) else { continue }
                var names: [String] = []
                while let entry = readdir(listing) {
                    let name = withUnsafePointer(to: &entry.pointee.d_name) {
                        $0.withMemoryRebound(to: CChar.self, capacity: 256) { String(cString: $0) }
                    }
                    if name != "." && name != ".." && !(folder == path && name == ".docfs") { names.append(name) }
                }
                closedir(listing)
                for name in names.sorted() {
                    let child = folder.hasSuffix("/") ? folder + name : folder + "/" + name
                    var inner = stat()
                    guard lstat(child, &inner) == 0 else { continue }
                    if inner.st_mode & S_IFMT == S_IFDIR { stack.append(child) }
                    else if inner.st_mode & S_IFMT == S_IFREG { files.append(child) }
                }
            }
        }
        return files
    }

    /// Carries the action out on every file; answers whether all went well.
    func run(_ paths: [String], json: Bool) -> Bool {
        let files = Self.files(paths)
        let onTerminal = !json && isatty(STDERR_FILENO) == 1
        var outcomes: [Outcome] = []
        for (index, file) in files.enumerated() {
            let outcome = perform(on: file) { percent in
                guard onTerminal else { return }
                let shown = file.split(separator: "/").last.map(String.init) ?? file
                printError("\r\u{1B}[K\(verb) \(index + 1)/\(files.count): \(shown) \(percent.map { "\($0)%" } ?? "")")
            }
            if onTerminal { printError("\r\u{1B}[K") }
            if !json {
                if outcome.ok {
                    PlainOutput.line("\(outcome.message): \(PlainOutput.name(outcome.path))" + (outcome.bytes.map { $0 > 0 ? " (\($0) bytes)" : "" } ?? ""))
                } else {
                    printError("docfs: \(verb) \(outcome.path): \(outcome.message)\n")
                }
            }
            outcomes.append(outcome)
        }
        if json { printJSON(outcomes) }
        return outcomes.allSatisfy(\.ok)
    }

    /// The action on one file; `progress` hears how much of it is here while a download runs.
    private func perform(on file: String, progress: @escaping (Int?) -> Void) -> Outcome {
        let document: LocatedDocument
        do {
            document = try LocatedDocument.locate(file)
        } catch {
            return Outcome(path: file, ok: false, message: error.message.isEmpty ? "\(error)" : error.message)
        }
        guard StoreLock.holder(of: document.store) != nil else {
            return Outcome(path: file, ok: false, message: "no daemon serves its store: docfs mount starts one")
        }
        // The daemon answers when it is done; meanwhile the file's status says how far it is.
        let reply = Mutex<Outcome?>(nil)
        let (store, kind, path, item) = (document.store, kind.rawValue, document.path, document.item.rawValue)
        DetachedThread.start {
            let request = ControlRequest(kind: ControlRequest.Kind(rawValue: kind)!, path: path, item: item)
            var outcome: Outcome
            do throws(DocfsError) {
                let answered = try ControlClient.send(request, to: store)
                outcome = Outcome(path: file, ok: answered.ok, message: answered.message,
                                  bytes: answered.ok ? answered.progress?.first.map(Int64.init) : nil)
            } catch {
                outcome = Outcome(path: file, ok: false, message: error.message)
            }
            reply.withLock { $0 = outcome }
        }
        while true {
            if let outcome = reply.withLock({ $0 }) { return outcome }
            if document.mountPoint != nil {
                var value = [UInt8](repeating: 0, count: 64)
                let n = value.withUnsafeMutableBytes { docfs_getxattr(file, ItemAttributes.status, $0.baseAddress, $0.count) }
                let status = n > 0 ? String(decoding: value[0..<n], as: UTF8.self) : ""
                progress(status.hasPrefix("downloading ") ? Int(status.dropFirst(12).dropLast()) : nil)
            }
            usleep(100_000)
        }
    }
}


/// What `download`, `pin` and `evict` take: the files and folders, and whether to report in JSON.
struct PromiseTargets: ParsableArguments {
    @Flag(name: .long, help: "Print a JSON report instead of text.")
    var json = false

    @Argument(help: ArgumentHelp("Files or folders on a docfs mount.", valueName: "file"))
    var files: [String]

    /// Runs `action` on them; a failure on any is exit status 1.
    func run(_ action: PromiseAction) throws {
        guard action.run(files, json: json) else { throw ExitCode(ExitStatus.failed) }
    }
}

struct DownloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "download",
        abstract: "Fetch promised documents now (folders: every file under them).",
        discussion: "Each FILE is on a docfs mount of a store linked to a remote. Exits 1 if any could not be fetched."
    )

    @OptionGroup var targets: PromiseTargets

    func run() throws { try targets.run(PromiseAction(kind: .download, verb: "download")) }
}

struct PinCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pin",
        abstract: "Keep documents on this machine for good: fetched now, never evicted (--unpin lets them go).",
        discussion: "Each FILE is on a docfs mount of a store linked to a remote; folders: every file under them."
    )

    @Flag(name: .long, help: "Unpin instead: they may be evicted again.")
    var unpin = false

    @OptionGroup var targets: PromiseTargets

    func run() throws {
        try targets.run(unpin ? PromiseAction(kind: .unpin, verb: "unpin") : PromiseAction(kind: .pin, verb: "pin"))
    }
}

struct EvictCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evict",
        abstract: "Free the disk space of documents the remote holds: they stay listed, promised, fetched again when read.",
        discussion: """
            Each FILE is on a docfs mount of a store linked to a remote; folders: every file under them. \
            A file that is pinned, open, changed here and not yet gone up, or in conflict is left as it is (exit 1).
            """
    )

    @OptionGroup var targets: PromiseTargets

    func run() throws { try targets.run(PromiseAction(kind: .evict, verb: "evict")) }
}
