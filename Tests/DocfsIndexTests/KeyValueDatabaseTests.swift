import DocfsCore
import DocfsIndex
import DocfsTestSupport
import Foundation
import Testing

/// The containers' key-value stores on disk (DESIGN §9.3, issue 24): each limit at and past its
/// edge, a write past one changing nothing; bad keys and values refused in words; values read
/// back as the kind they were set; 100,000 random operations against an in-memory model.
@Suite struct KeyValueDatabaseTests {
    let directory: String
    let notes = try! ContainerID("com.example.Notes")
    let other = try! ContainerID("com.example.Other")

    init() {
        // On tmpfs: every set is synced to disk (synchronous=FULL), which the random test does 100,000 times.
        directory = "/dev/shm/docfs-kv-\(UUID().uuidString)"
    }

    func open() throws -> KeyValueDatabase { try KeyValueDatabase(path: directory + "/keyvalues.sqlite") }
    func cleanUp() { try? FileManager.default.removeItem(atPath: directory) }

    /// The error a throwing call ends with; nil when it succeeds.
    func failure(_ body: () throws -> Void) -> DocfsError? {
        do { try body() } catch let error as DocfsError { return error } catch {
            Issue.record("not a DocfsError: \(error)")
            return nil
        }
        return nil
    }

    @Test func keysAreUpTo64BytesOfUTF8AndNamesAFileCanHave() throws {
        defer { cleanUp() }
        let database = try open()
        let longest = String(repeating: "é", count: 32)  // 64 bytes
        try database.set(longest, to: .text("ok"), in: notes)
        #expect(try database.entry(longest, in: notes)?.value == .text("ok"))
        let tooLong = failure { try database.set(longest + "x", to: .text("no"), in: notes) }
        #expect(tooLong?.message.contains("65 bytes") == true, "\(String(describing: tooLong))")
        for bad in ["", "a/b", ".", "..", "nul\u{0}"] {
            #expect(failure { try database.set(bad, to: .text("no"), in: notes) }?.code == .invalidArgument, "'\(bad)'")
        }
        #expect(throws: DocfsError.self) { try KeyValueLimits.check(key: [0x61, 0xFF]) }  // not UTF-8
        #expect(try database.entries(in: notes).map(\.key) == [longest])
    }

    @Test func at1024KeysTheNextNewKeyIsRefusedAndNothingChanges() throws {
        defer { cleanUp() }
        let database = try open()
        for index in 0..<KeyValueLimits.keys { try database.set("key \(index)", to: .number(Double(index)), in: notes) }
        #expect(try database.usage(of: notes).keys == 1024)
        let refused = failure { try database.set("one more", to: .bool(true), in: notes) }
        #expect(refused?.code == .refused && refused?.message.contains("1025 keys") == true && refused?.message.contains("quota violation") == true,
                "\(String(describing: refused))")
        #expect(try database.entry("one more", in: notes) == nil)
        #expect(try database.usage(of: notes).keys == 1024)
        // Changing a key that is there is no new key; another container has its own limits.
        try database.set("key 7", to: .text("seven"), in: notes)
        #expect(try database.entry("key 7", in: notes)?.value == .text("seven"))
        try database.set("one more", to: .bool(true), in: other)
        #expect(try database.remove("key 0", in: notes))
        try database.set("one more", to: .bool(true), in: notes)
        #expect(try database.usage(of: notes).keys == 1024)
    }

    @Test func atOneMebibyteOfKeysAndValuesTheNextByteIsRefused() throws {
        defer { cleanUp() }
        let database = try open()
        let limit = KeyValueLimits.totalBytes
        // "big" (3 bytes) with a value of limit - 8 bytes, then small ones up to exactly the limit.
        try database.set("big", to: .data([UInt8](repeating: 7, count: limit - 8)), in: notes)
        try database.set("x", to: .text(""), in: notes)
        #expect(try database.usage(of: notes).bytes == limit - 4)
        try database.set("y", to: .text("a"), in: notes)
        #expect(try database.usage(of: notes).bytes == limit - 2)
        try database.set("x", to: .text("ab"), in: notes)
        #expect(try database.usage(of: notes).bytes == limit)
        let over = failure { try database.set("y", to: .text("ab"), in: notes) }
        #expect(over?.code == .refused && over?.message.contains("\(limit + 1) bytes") == true && over?.message.contains("at most \(limit)") == true,
                "\(String(describing: over))")
        #expect(try database.entry("y", in: notes)?.value == .text("a"))
        #expect(failure { try database.set("z", to: .text(""), in: notes) }?.code == .refused)
        #expect(try database.usage(of: notes).bytes == limit)
        // A smaller value in place of a big one always fits; a removal frees its key's bytes too.
        try database.set("big", to: .data([1]), in: notes)
        #expect(try database.usage(of: notes).bytes == 3 + 1 + 3 + 2)
        #expect(try database.remove("x", in: notes))
        #expect(try database.usage(of: notes) == (keys: 2, bytes: 3 + 1 + 2))
    }

    @Test func valuesReadBackAsTheKindTheyWereSetAndBadOnesAreRefused() throws {
        defer { cleanUp() }
        let database = try open()
        let values: [String: KeyValue] = [
            "text": .text("Grüße, 世界"), "empty": .text(""), "number": .number(-12.5), "integer": .number(3),
            "yes": .bool(true), "no": .bool(false), "data": .data([0, 1, 0xFF, 0x80]),
            "json": try KeyValue.parsingJSON(Array(#"{"b": [1, 2, {"c": null}], "a": "x"}"#.utf8)),
        ]
        for (key, value) in values { try database.set(key, to: value, in: notes) }
        let reopened = try open()
        for (key, value) in values { #expect(try reopened.entry(key, in: notes)?.value == value, "\(key)") }
        #expect(values["json"]?.bytes == Array(#"{"a":"x","b":[1,2,{"c":null}]}"#.utf8))
        #expect(values["integer"]?.bytes == Array("3".utf8))
        #expect(try KeyValue.parsingJSON(Array(#""quoted""#.utf8)) == .text("quoted"))
        #expect(try KeyValue.parsingJSON(Array(" true".utf8)) == .bool(true))
        #expect(try KeyValue.parsingJSON(Array("1e3".utf8)) == .number(1000))
        for bad in [#"{"a":"#, "nul", "null", "[1, 2", "", "tru"] {
            #expect(throws: DocfsError.self, "\(bad)") { try KeyValue.parsingJSON(Array(bad.utf8)) }
        }
        #expect(throws: DocfsError.self) { try KeyValue(kind: "number", bytes: Array("inf".utf8)) }
        #expect(throws: DocfsError.self) { try KeyValue(kind: "number", bytes: Array("twelve".utf8)) }
        #expect(throws: DocfsError.self) { try KeyValue(kind: "bool", bytes: Array("yes".utf8)) }
        #expect(throws: DocfsError.self) { try KeyValue(kind: "text", bytes: [0xC3]) }
        #expect(throws: DocfsError.self) { try KeyValue(kind: "json", bytes: Array("3".utf8)) }
        #expect(throws: DocfsError.self) { try KeyValue(kind: "colour", bytes: []) }
    }

    /// A write past a limit is told to watchers as a quota violation, with its key; notices
    /// come back in order, after the one a watcher saw last, per container.
    /// A move (an app's rename of a key file) and an exchange are one transaction each: the
    /// old key goes as the new one takes its value (or the value given), what the new one held
    /// is replaced, the usage stays right, and a move past a limit changes nothing.
    @Test func movesAndExchangesAreOneTransactionHeldToTheLimits() throws {
        defer { cleanUp() }
        let database = try open()
        try database.set("draft", to: .text("new text"), in: notes)
        try database.set("theme", to: .text("old"), in: notes)
        #expect(try database.move("draft", to: "theme", in: notes))
        #expect(try database.entries(in: notes).map(\.key) == ["theme"] && database.entry("theme", in: notes)?.value == .text("new text"))
        #expect(try database.usage(of: notes) == (1, "theme".utf8.count + "new text".utf8.count))
        #expect(try database.move("theme", to: "page", value: .number(3), in: notes))
        #expect(try database.entry("page", in: notes)?.value == .number(3) && database.entry("theme", in: notes) == nil)
        #expect(try !database.move("absent", to: "page", in: notes))
        try database.set("font", to: .text("serif"), in: notes)
        #expect(try database.exchange("font", "page", in: notes))
        #expect(try database.entry("font", in: notes)?.value == .number(3) && database.entry("page", in: notes)?.value == .text("serif"))
        #expect(try database.usage(of: notes) == (2, "font".utf8.count + 1 + "page".utf8.count + 5))
        #expect(try !database.exchange("font", "absent", in: notes))
        // Filled to the byte: a move whose value no longer fits is refused whole.
        let room = KeyValueLimits.totalBytes - (try database.usage(of: notes)).bytes - "fill".utf8.count
        try database.set("fill", to: .data([UInt8](repeating: 1, count: room)), in: notes)
        let refused = failure { _ = try database.move("font", to: "font2", value: .text("longer than three"), in: notes) }
        #expect(refused?.cause is KeyValueQuotaViolation, "\(String(describing: refused))")
        #expect(try database.entry("font", in: notes)?.value == .number(3) && database.entry("font2", in: notes) == nil)
        // Every change above waits to go up, the removals too.
        #expect(try Set(database.pending(limit: 100).map(\.key)) == ["draft", "theme", "page", "font", "fill"])
    }

    @Test func aRefusedWriteIsNoticedAsAQuotaViolation() throws {
        defer { cleanUp() }
        let database = try open()
        let start = try database.lastNotice()
        try database.set("small", to: .text("x"), in: notes)
        #expect(try database.notices(of: notes.rawValue, after: start).isEmpty)  // a write here is not told back
        #expect(throws: DocfsError.self) { try database.set("huge", to: .data([UInt8](repeating: 0, count: KeyValueLimits.totalBytes)), in: notes) }
        try database.note(.serverChange, keys: ["a", "b"], in: notes.rawValue)
        try database.note(.serverChange, keys: ["c"], in: other.rawValue)
        let told = try database.notices(of: notes.rawValue, after: start)
        #expect(told.map(\.reason) == [.quotaViolation, .serverChange])
        #expect(told.map(\.keys) == [["huge"], ["a", "b"]])
        #expect(try database.notices(of: notes.rawValue, after: told[0].id).map(\.keys) == [["a", "b"]])
        #expect(try database.notices(of: other.rawValue, after: start).map(\.keys) == [["c"]])
    }

    /// 100,000 random sets (every kind, now and then one past a limit), removals and reads over
    /// two containers, against a dictionary that keeps the same rules; the database is opened
    /// again every 10,000 operations, and a second handle on the same file reads between.
    @Test func randomOperationsAgreeWithAModel() throws {
        defer { cleanUp() }
        var random = SplitMix(seed: 24)
        var database = try open()
        var model: [ContainerID: [String: KeyValue]] = [:]
        var refused = (keys: 0, bytes: 0)
        let keys = (0..<1100).map { "k\($0)" }
        func usage(_ entries: [String: KeyValue]) -> (keys: Int, bytes: Int) {
            (entries.count, entries.reduce(0) { $0 + $1.key.utf8.count + $1.value.bytes.count })
        }
        // What the model would hold after a set, from its usage kept up to date (summing every
        // entry again each set took most of the test's time).
        var used: [ContainerID: (keys: Int, bytes: Int)] = [:]
        func usageAfter(setting key: String, to value: KeyValue, in container: ContainerID) -> (keys: Int, bytes: Int) {
            let now = used[container] ?? (0, 0)
            let old = model[container]?[key].map { key.utf8.count + $0.bytes.count }
            return (now.keys + (old == nil ? 1 : 0), now.bytes - (old ?? 0) + key.utf8.count + value.bytes.count)
        }
        for step in 0..<100_000 {
            if step % 10_000 == 9_999 { database = try open() }
            let container = random.next(below: 4) == 0 ? other : notes
            // Mostly a few hundred keys; for a while the whole range with few removals, to
            // reach the key limit.
            let filling = (40_000..<60_000).contains(step)
            let key = keys[random.next(below: filling ? keys.count : 300)]
            switch random.next(below: 10) + (filling && random.next(below: 4) != 0 ? 10 : 0) {
            case 10...19:
                // A short text (filling the keys), or a read.
                if random.next(below: 3) == 0 {
                    #expect(try database.entry(key, in: container)?.value == model[container]?[key], "step \(step)")
                    continue
                }
                let (count, bytes) = usageAfter(setting: key, to: .text("f"), in: container)
                let fits = count <= KeyValueLimits.keys && bytes <= KeyValueLimits.totalBytes
                do {
                    try database.set(key, to: .text("f"), in: container)
                    #expect(fits, "step \(step): a set past a limit was kept (\(count) keys, \(bytes) bytes)")
                    model[container, default: [:]][key] = .text("f")
                    used[container] = (count, bytes)
                } catch {
                    #expect(!fits && error.code == .refused, "step \(step): \(error)")
                    if count > KeyValueLimits.keys { refused.keys += 1 } else { refused.bytes += 1 }
                }
            case 0...4:
                let value: KeyValue
                switch random.next(below: 6) {
                case 0: value = .text(String(repeating: "v", count: random.next(below: 40)))
                case 1: value = .number(Double(random.next(below: 10_000)) / 4)
                case 2: value = .bool(random.next(below: 2) == 0)
                case 3: value = try KeyValue.parsingJSON(Array("[\(random.next(below: 100)), {\"k\": \(step)}]".utf8))
                case 4: value = .data((0..<random.next(below: 64)).map { _ in UInt8(random.next(below: 256)) })
                default:
                    // Now and then a big one: the byte limit is reached.
                    value = .data([UInt8](repeating: 1, count: random.next(below: 10) == 0 ? random.next(below: 300_000) : random.next(below: 2_000)))
                }
                let (count, bytes) = usageAfter(setting: key, to: value, in: container)
                let fits = count <= KeyValueLimits.keys && bytes <= KeyValueLimits.totalBytes
                do {
                    try database.set(key, to: value, in: container)
                    #expect(fits, "step \(step): a set past a limit was kept (\(count) keys, \(bytes) bytes)")
                    model[container, default: [:]][key] = value
                    used[container] = (count, bytes)
                } catch {
                    #expect(!fits && error.code == .refused, "step \(step): \(error)")
                    if count > KeyValueLimits.keys { refused.keys += 1 } else { refused.bytes += 1 }
                }
            case 5...6:
                let removed = try database.remove(key, in: container)
                let old = model[container]?.removeValue(forKey: key)
                #expect(removed == (old != nil), "step \(step)")
                if let old, let now = used[container] { used[container] = (now.keys - 1, now.bytes - key.utf8.count - old.bytes.count) }
            default:
                #expect(try database.entry(key, in: container)?.value == model[container]?[key], "step \(step)")
            }
            if step % 997 == 0 {
                let second = try open()
                for id in [notes, other] {
                    let entries = try second.entries(in: id)
                    #expect(Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0.value) }) == model[id, default: [:]], "step \(step)")
                    let stored = try second.usage(of: id), expected = usage(model[id, default: [:]])
                    #expect(stored.keys == expected.keys && stored.bytes == expected.bytes, "step \(step)")
                }
            }
        }
        // Both limits were reached along the way.
        #expect(refused.keys > 0 && refused.bytes > 0, "\(refused)")
    }
}
