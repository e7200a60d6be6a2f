import ArgumentParser
import DocfsCore
import DocfsDaemon
import DocfsIndex
import DocfsProvider
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `docfs kv …`: an app's small settings and state, kept beside its documents in its
/// container's key-value store (DESIGN §9.3, issue 24).
struct KeyValueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kv",
        abstract: "Read and write an app's key-value store (small settings and state).",
        discussion: """
            Each container has a key-value store: keys of up to 64 bytes of UTF-8, at most 1024 \
            keys and 1 MiB (keys and values) per container. Values are text, numbers, booleans, \
            JSON arrays and objects, or binary data (base64 in JSON output). A write past a \
            limit is refused and changes nothing.
            """,
        subcommands: [Get.self, Set.self, Remove.self, List.self, Watch.self]
    )

    /// Which store, and which app's container.
    struct Target: ParsableArguments {
        @Option(name: .long, help: ArgumentHelp("The app whose container's store to use (its container id).", valueName: "id"))
        var app: String

        @Option(name: .long, help: ArgumentHelp("The store directory (default: $DOCFS_STORE, else the embedded default store).", valueName: "dir"))
        var store: String?

        var layout: StoreLayout { StoreLayout(root: store ?? LocalStore.defaultPath(environment: environmentDictionary())) }

        /// Tells the daemon serving the store, if one does, that a key changed: a linked
        /// store sends it up now rather than at its next look.
        func changed() {
            guard StoreLock.holder(of: layout) != nil else { return }
            _ = try? ControlClient.send(ControlRequest(kind: .keyValuesChanged, path: ""), to: layout)
        }

        /// The container (which must exist) and the store's key-value database.
        func open() throws(DocfsError) -> (ContainerID, KeyValueDatabase) {
            let layout = layout
            guard access(layout.formatFile, F_OK) == 0 else {
                throw DocfsError(.notFound, "there is no store at \(layout.root): give it with --store, or make it with docfs mount")
            }
            let container: ContainerID
            do { container = try ContainerID(app) } catch {
                throw DocfsError(.invalidArgument, "'\(app)' is not a container id (reverse DNS, like com.example.Notes)")
            }
            guard try ContainerRegistry(layout: layout).record(of: container) != nil else {
                throw DocfsError(.notFound, "the store has no container \(container): make it with docfs container create \(container) --name NAME")
            }
            return (container, try KeyValueDatabase(path: layout.keyValuesFile))
        }
    }

    /// A key as given on the command line: its bytes, which must be UTF-8.
    static func key(_ argument: String) throws(DocfsError) -> String {
        try KeyValueLimits.check(key: NameText.decode(argument))
    }

    /// `entry` as JSON: key, kind, value (data as base64), when it was set.
    static func json(_ entry: KeyValueEntry) -> [String: Any] {
        ["key": entry.key, "kind": entry.value.kind, "value": entry.value.jsonObject, "changed": entry.changed]
    }

    static func printJSONObject(_ object: Any) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .fragmentsAllowed, .withoutEscapingSlashes]) else { return }
        print(String(decoding: data, as: UTF8.self))
    }

    struct Get: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a key's value (data as its bytes).")

        @Argument(help: "The key.") var key: String
        @OptionGroup var target: Target
        @Flag(name: .long, help: "Print JSON: key, kind, value (data in base64), when it was set.") var json = false

        func run() throws {
            let entry = try reportingErrors { () throws(DocfsError) -> KeyValueEntry? in
                let (container, database) = try target.open()
                return try database.entry(try KeyValueCommand.key(key), in: container)
            }
            guard let entry else {
                printError("docfs: \(target.app)'s key-value store has no key '\(key)' (docfs kv list --app \(target.app))\n")
                throw ExitCode(ExitStatus.failed)
            }
            if json { return KeyValueCommand.printJSONObject(KeyValueCommand.json(entry)) }
            if case .data(let bytes) = entry.value {
                FileHandle.standardOutput.write(Data(bytes))
            } else {
                print(String(decoding: entry.value.bytes, as: UTF8.self))
            }
        }
    }

    struct Set: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Set a key's value (text unless told otherwise).",
            discussion: "docfs kv set --app com.example.Notes theme dark; … --number page 12; … --json layout '{\"columns\": 2}'; … --data icon ./icon.png (- reads standard input).")

        @Argument(help: "The key.") var key: String
        @Argument(help: "The value (with --data: a file, or - for standard input).") var value: String
        @OptionGroup var target: Target
        @Flag(name: .long, help: "The value is a number.") var number = false
        @Flag(name: .long, help: "The value is a boolean: true or false.") var bool = false
        @Flag(name: .long, help: "The value is JSON: an array or object is kept as JSON, a string as text, a number or boolean as such.") var json = false
        @Flag(name: .long, help: "The value is binary data, read from the file named (- for standard input).") var data = false

        func validate() throws {
            if [number, bool, json, data].filter({ $0 }).count > 1 { throw ValidationError("give at most one of --number, --bool, --json, --data") }
        }

        func run() throws {
            try reportingErrors { () throws(DocfsError) in
                let key = try KeyValueCommand.key(key)
                let given = NameText.decode(value)
                let kind = number ? "number" : bool ? "bool" : "text"
                let parsed: KeyValue
                if json {
                    parsed = try KeyValue.parsingJSON(given)
                } else if data {
                    parsed = .data(try Self.read(value))
                } else {
                    parsed = try KeyValue(kind: kind, bytes: given)
                }
                let (container, database) = try target.open()
                try database.set(key, to: parsed, in: container)
            }
            target.changed()
        }

        /// The bytes of file `path`, or of standard input for `-`.
        private static func read(_ path: String) throws(DocfsError) -> [UInt8] {
            let handle = path == "-" ? FileHandle.standardInput : FileHandle(forReadingAtPath: path)
            guard let handle else { throw DocfsError(.notFound, "cannot read \(path): \(String(cString: strerror(errno)))") }
            // One byte past the limit tells enough: a file of any size is not read whole.
            let bytes = (try? handle.read(upToCount: KeyValueLimits.totalBytes + 1)) ?? Data()
            guard bytes.count <= KeyValueLimits.totalBytes else {
                throw DocfsError(.refused, "quota violation: \(path) holds more than a container's key-value store holds (\(KeyValueLimits.totalBytes) bytes)")
            }
            return Array(bytes)
        }
    }

    struct Remove: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Remove a key.")

        @Argument(help: "The key.") var key: String
        @OptionGroup var target: Target

        func run() throws {
            let removed = try reportingErrors { () throws(DocfsError) -> Bool in
                let (container, database) = try target.open()
                return try database.remove(try KeyValueCommand.key(key), in: container)
            }
            guard removed else {
                printError("docfs: \(target.app)'s key-value store has no key '\(key)'\n")
                throw ExitCode(ExitStatus.failed)
            }
            target.changed()
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the keys, their kinds and sizes, and what the store holds of its limits.")

        @OptionGroup var target: Target
        @Flag(name: .long, help: "Print JSON: every entry with its value, and the usage.") var json = false

        func run() throws {
            let (entries, usage) = try reportingErrors { () throws(DocfsError) -> ([KeyValueEntry], (keys: Int, bytes: Int)) in
                let (container, database) = try target.open()
                return (try database.entries(in: container), try database.usage(of: container))
            }
            if json {
                return KeyValueCommand.printJSONObject([
                    "entries": entries.map(KeyValueCommand.json),
                    "keys": usage.keys, "bytes": usage.bytes,
                    "limits": ["keys": KeyValueLimits.keys, "bytes": KeyValueLimits.totalBytes, "keyBytes": KeyValueLimits.keyBytes],
                ])
            }
            for entry in entries {
                print("\(entry.key)\t\(entry.value.kind)\t\(entry.value.bytes.count)")
            }
            print("\(usage.keys) of \(KeyValueLimits.keys) keys, \(usage.bytes) of \(KeyValueLimits.totalBytes) bytes")
        }
    }

    struct Watch: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print each change of the app's store as it happens, with its reason, until interrupted.",
            discussion: """
                Reasons: server-change (another machine's write came down), initial-sync (the first \
                values from a remote the store was just linked to), quota-violation (a write here was \
                refused: it would have passed a limit), account-change (the store was linked to another \
                remote). Writes made here through docfs kv are not told back.
                """)

        @OptionGroup var target: Target
        @Flag(name: .long, help: "Print each change as a line of JSON: container, reason, keys, time.") var json = false

        func run() throws {
            allowInterruption()
            let (container, database) = try reportingErrors { () throws(DocfsError) in try target.open() }
            var last = try reportingErrors { () throws(DocfsError) in try database.lastNotice() }
            while true {
                let notices = try reportingErrors { () throws(DocfsError) in try database.notices(of: container.rawValue, after: last) }
                for notice in notices {
                    if json {
                        let object: [String: Any] = ["container": notice.container, "reason": notice.reason.rawValue, "keys": notice.keys, "time": notice.time]
                        if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) {
                            Self.say(String(decoding: data, as: UTF8.self))
                        }
                    } else {
                        Self.say("\(notice.reason.rawValue)\t\(notice.keys.joined(separator: ", "))")
                    }
                    last = notice.id
                }
                usleep(100_000)
            }
        }

        /// A line out at once (a watcher reads it from a pipe as it comes).
        private static func say(_ line: String) {
            FileHandle.standardOutput.write(Data((line + "\n").utf8))
        }
    }
}
