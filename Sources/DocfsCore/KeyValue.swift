import Foundation

/// A value in a container's key-value store (DESIGN §9.3, the model's
/// NSUbiquitousKeyValueStore): small settings and state an app keeps beside its documents.
/// Stored as a kind and bytes, so every machine reads back the value that was set, typed.
public enum KeyValue: Sendable, Equatable {
    case text(String)
    case number(Double)
    case bool(Bool)
    /// A JSON array or object, in its compact form (keys sorted).
    case json([UInt8])
    case data([UInt8])

    /// The kind's name, as stored and as `docfs kv` shows it.
    public var kind: String {
        switch self {
        case .text: "text"
        case .number: "number"
        case .bool: "bool"
        case .json: "json"
        case .data: "data"
        }
    }

    /// The stored bytes (what counts toward the container's limit, with the key): text as
    /// UTF-8, a number in its shortest decimal form, a boolean as `true`/`false`, JSON
    /// compact, data as it is.
    public var bytes: [UInt8] {
        switch self {
        case .text(let text): Array(text.utf8)
        case .number(let number): Array(Self.decimal(number).utf8)
        case .bool(let value): Array((value ? "true" : "false").utf8)
        case .json(let bytes), .data(let bytes): bytes
        }
    }

    /// The value as it travels to other machines: its kind, a NUL, its bytes.
    public var portable: [UInt8] { Array(kind.utf8) + [0] + bytes }

    /// The value `portable` bytes stand for (another machine's), with a clear error for bytes
    /// that are not one.
    public init(portable: [UInt8]) throws(DocfsError) {
        guard let nul = portable.firstIndex(of: 0) else { throw Self.invalid("a value from the remote has no kind") }
        try self.init(kind: String(decoding: portable[..<nul], as: UTF8.self), bytes: Array(portable[(nul + 1)...]))
    }

    /// The value stored as `kind` with `bytes`; a clear error for anything else.
    public init(kind: String, bytes: [UInt8]) throws(DocfsError) {
        switch kind {
        case "text":
            guard let text = String(validating: bytes, as: UTF8.self) else { throw Self.invalid("a text value is not UTF-8") }
            self = .text(text)
        case "number":
            guard let number = Double(String(decoding: bytes, as: UTF8.self)), number.isFinite else {
                throw Self.invalid("'\(String(decoding: bytes, as: UTF8.self))' is not a finite number")
            }
            self = .number(number)
        case "bool":
            switch String(decoding: bytes, as: UTF8.self) {
            case "true": self = .bool(true)
            case "false": self = .bool(false)
            case let other: throw Self.invalid("'\(other)' is not a boolean: give true or false")
            }
        case "json":
            self = try Self.parsingJSON(bytes)
            guard case .json = self else { throw Self.invalid("a json value is an array or an object") }
        case "data":
            self = .data(bytes)
        default:
            throw Self.invalid("'\(kind)' is no kind of value: text, number, bool, json or data")
        }
    }

    /// The value JSON text `bytes` stands for: an array or object is kept as JSON (compact, keys
    /// sorted), a string as text, a number as a number, true/false as a boolean. Malformed JSON
    /// and `null` are refused, saying where.
    public static func parsingJSON(_ bytes: [UInt8]) throws(DocfsError) -> KeyValue {
        let parsed: Any
        do {
            parsed = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
        } catch {
            throw invalid("malformed JSON: \((error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String ?? "\(error)")")
        }
        // What kind of JSON value it is, by its first character (Foundation's numbers do not
        // tell a boolean from 1 on every platform).
        let first = bytes.first { ![0x20, 0x09, 0x0A, 0x0D].contains($0) }
        switch first {
        case UInt8(ascii: "\""):
            guard let text = parsed as? String else { throw invalid("malformed JSON string") }
            return .text(text)
        case UInt8(ascii: "t"), UInt8(ascii: "f"):
            guard let value = parsed as? Bool else { throw invalid("malformed JSON boolean") }
            return .bool(value)
        case UInt8(ascii: "["), UInt8(ascii: "{"):
            do {
                return .json(Array(try JSONSerialization.data(withJSONObject: parsed, options: [.sortedKeys])))
            } catch {
                throw invalid("the JSON cannot be written back: \(error)")
            }
        case UInt8(ascii: "n"):
            throw invalid("null is no value: remove the key instead (docfs kv remove)")
        default:
            guard let number = (parsed as? NSNumber)?.doubleValue, number.isFinite else { throw invalid("malformed JSON number") }
            return .number(number)
        }
    }

    /// The value as JSON shows it: data as base64 text.
    public var jsonObject: Any {
        switch self {
        case .text(let text): text
        case .number(let number): number
        case .bool(let value): value
        case .json(let bytes): (try? JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])) ?? NSNull()
        case .data(let bytes): Data(bytes).base64EncodedString()
        }
    }

    /// A number in its shortest form that reads back the same (`3`, not `3.0`).
    static func decimal(_ number: Double) -> String {
        if number == number.rounded(), abs(number) < 1e15 { return String(Int64(number)) }
        return "\(number)"
    }

    static func invalid(_ message: String) -> DocfsError { DocfsError(.invalidArgument, message) }
}

/// A local write of a key waiting to go up: a set, or (no value) a removal. `revision` says
/// which write it is, so one made while it went up stays waiting.
public struct PendingKeyValue: Sendable, Equatable {
    public var container: String
    public var key: String
    public var value: KeyValue?
    public var revision: Int64

    public init(container: String, key: String, value: KeyValue?, revision: Int64) {
        self.container = container
        self.key = key
        self.value = value
        self.revision = revision
    }
}

/// The limits of a container's key-value store, as in the model (DESIGN §9.3).
public enum KeyValueLimits {
    /// Bytes of a key's UTF-8.
    public static let keyBytes = 64
    /// Keys per container.
    public static let keys = 1024
    /// Bytes per container, keys and values counted: 1 MiB (the model's "1 MB").
    public static let totalBytes = 1 << 20

    /// Checks that `key` can be a key: 1 to 64 bytes of UTF-8, no `/` or NUL (each key is also
    /// a file of the app's view), not `.` or `..`. `bytes`: the key as given, which may not be
    /// UTF-8.
    public static func check(key bytes: [UInt8]) throws(DocfsError) -> String {
        guard let key = String(validating: bytes, as: UTF8.self) else {
            throw DocfsError(.invalidArgument, "a key must be UTF-8 text")
        }
        guard !bytes.isEmpty else { throw DocfsError(.invalidArgument, "a key cannot be empty") }
        guard bytes.count <= keyBytes else {
            throw DocfsError(.invalidArgument, "key '\(key)' is \(bytes.count) bytes of UTF-8: at most \(keyBytes)")
        }
        guard !bytes.contains(0x2F), !bytes.contains(0), key != ".", key != ".." else {
            throw DocfsError(.invalidArgument, "key '\(key)' cannot be a file name in the app's view: no '/', NUL, '.' or '..'")
        }
        return key
    }
}

/// Why keys of a container's key-value store changed, as watchers are told (the model's
/// change reasons).
public enum KeyValueChangeReason: String, Sendable, CaseIterable {
    /// Another machine's write came down.
    case serverChange = "server-change"
    /// The first values from a remote the store was just linked to.
    case initialSync = "initial-sync"
    /// A write here was refused: it would have passed a limit.
    case quotaViolation = "quota-violation"
    /// The store was linked to another remote (or again): its values were replaced by the
    /// remote's.
    case accountChange = "account-change"
}

/// A write the key-value store's limits refuse: why, with the numbers (the model's quota
/// violation). Nothing of the write is kept.
public struct KeyValueQuotaViolation: Error, Sendable, Equatable, CustomStringConvertible {
    public let container: String
    public let key: String
    /// Keys and bytes the container would hold after the write.
    public let keys: Int
    public let bytes: Int

    public init(container: String, key: String, keys: Int, bytes: Int) {
        self.container = container
        self.key = key
        self.keys = keys
        self.bytes = bytes
    }

    public var description: String {
        if keys > KeyValueLimits.keys {
            return "quota violation: setting '\(key)' would make \(keys) keys in \(container)'s key-value store, at most \(KeyValueLimits.keys): remove some first"
        }
        return "quota violation: setting '\(key)' would make \(bytes) bytes in \(container)'s key-value store (keys and values), at most \(KeyValueLimits.totalBytes): remove or shorten some first"
    }
}
