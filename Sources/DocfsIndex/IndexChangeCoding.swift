/// The binary form of a list of `IndexChange`s, as the stitching journal holds them: fixed-width
/// little-endian numbers and length-prefixed UTF-8 text. Decoding checks every length against
/// what is there, so a torn or foreign frame is an error, never a crash.
enum IndexChangeCoding {
    struct Malformed: Error {}

    static func encode(_ changes: [IndexChange], into bytes: inout [UInt8]) {
        var w = Writer(bytes: bytes)
        w.u32(UInt32(changes.count))
        for change in changes {
            switch change {
            case .put(let record) where record.remoteMachine.isEmpty:
                w.u8(1)
                w.record(record)
            case .put(let record):
                // A record of another machine's change: with that machine's name (a tag of its
                // own, so frames written before it existed read as they were).
                w.u8(8)
                w.record(record)
                w.text(record.remoteMachine)
            case .touch(let location, let modified, let statusChanged):
                w.u8(2)
                w.location(location)
                w.f64(modified)
                w.f64(statusChanged)
            case .remove(let location, let machine) where machine.isEmpty:
                w.u8(3)
                w.location(location)
            case .remove(let location, let machine):
                w.u8(9)  // as 8 is to 1
                w.location(location)
                w.text(machine)
            case .removeEntries(let entries):
                w.u8(4)
                w.u32(UInt32(entries.count))
                for entry in entries { w.i64(entry) }
            case .move(let from, let to):
                w.u8(5)
                w.location(from)
                w.location(to)
            case .exchange(let a, let b):
                w.u8(6)
                w.location(a)
                w.location(b)
            case .outbox(let item):
                w.u8(7)
                w.i64(item)
            }
        }
        bytes = w.bytes
    }

    static func decode(_ bytes: ArraySlice<UInt8>) throws(Malformed) -> [IndexChange] {
        var r = Reader(bytes: bytes)
        let count = try r.u32()
        var changes: [IndexChange] = []
        changes.reserveCapacity(min(Int(count), 1024))
        for _ in 0..<count {
            switch try r.u8() {
            case 1: changes.append(.put(try r.record()))
            case 2: changes.append(.touch(try r.location(), modified: try r.f64(), statusChanged: try r.f64()))
            case 3: changes.append(.remove(try r.location()))
            case 4:
                let n = try r.u32()
                guard Int(n) * 8 <= r.remaining else { throw Malformed() }
                var entries: [Int64] = []
                for _ in 0..<n { entries.append(try r.i64()) }
                changes.append(.removeEntries(entries))
            case 5: changes.append(.move(from: try r.location(), to: try r.location()))
            case 6: changes.append(.exchange(try r.location(), try r.location()))
            case 7: changes.append(.outbox(item: try r.i64()))
            case 8:
                var record = try r.record()
                record.remoteMachine = try r.text()
                changes.append(.put(record))
            case 9: changes.append(.remove(try r.location(), machine: try r.text()))
            default: throw Malformed()
            }
        }
        guard r.remaining == 0 else { throw Malformed() }
        return changes
    }

    struct Writer {
        var bytes: [UInt8]

        mutating func u8(_ v: UInt8) { bytes.append(v) }
        mutating func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
        mutating func u64(_ v: UInt64) { withUnsafeBytes(of: v.littleEndian) { bytes.append(contentsOf: $0) } }
        mutating func i64(_ v: Int64) { u64(UInt64(bitPattern: v)) }
        mutating func f64(_ v: Double) { u64(v.bitPattern) }
        mutating func bool(_ v: Bool) { u8(v ? 1 : 0) }
        mutating func text(_ s: String) {
            var s = s
            s.withUTF8 { utf8 in
                u32(UInt32(utf8.count))
                bytes.append(contentsOf: utf8)
            }
        }

        mutating func location(_ l: IndexLocation) {
            text(l.container)
            text(l.scope)
            text(l.path)
        }

        mutating func record(_ r: IndexRecord) {
            i64(r.id)
            text(r.name)
            text(r.path)
            text(r.container)
            text(r.containerName)
            text(r.scope)
            text(r.kind)
            i64(r.size)
            f64(r.created)
            f64(r.modified)
            text(r.contentType)
            text(r.uti)
            i64(r.version)
            u32(UInt32(r.tags.count))
            for tag in r.tags { text(tag) }
            text(r.comment)
            bool(r.hasThumbnail)
            bool(r.isExternal)
            text(r.originalPath)
            text(r.localPath)
            bool(r.conflict)
            text(r.downloadState)
            text(r.uploadState)
            u64(r.backingInode)
            f64(r.statusChanged)
        }
    }

    struct Reader {
        let bytes: ArraySlice<UInt8>
        var at: Int

        init(bytes: ArraySlice<UInt8>) {
            self.bytes = bytes
            at = bytes.startIndex
        }

        var remaining: Int { bytes.endIndex - at }

        mutating func u8() throws(Malformed) -> UInt8 {
            guard remaining >= 1 else { throw Malformed() }
            defer { at += 1 }
            return bytes[at]
        }

        mutating func u32() throws(Malformed) -> UInt32 {
            guard remaining >= 4 else { throw Malformed() }
            var v: UInt32 = 0
            for i in 0..<4 { v |= UInt32(bytes[at + i]) << (8 * i) }
            at += 4
            return v
        }

        mutating func u64() throws(Malformed) -> UInt64 {
            guard remaining >= 8 else { throw Malformed() }
            var v: UInt64 = 0
            for i in 0..<8 { v |= UInt64(bytes[at + i]) << (8 * i) }
            at += 8
            return v
        }

        mutating func i64() throws(Malformed) -> Int64 { Int64(bitPattern: try u64()) }
        mutating func f64() throws(Malformed) -> Double { Double(bitPattern: try u64()) }

        mutating func bool() throws(Malformed) -> Bool {
            switch try u8() {
            case 0: false
            case 1: true
            default: throw Malformed()
            }
        }

        mutating func text() throws(Malformed) -> String {
            let n = Int(try u32())
            guard n <= remaining else { throw Malformed() }
            defer { at += n }
            return String(decoding: bytes[at..<(at + n)], as: UTF8.self)
        }

        mutating func location() throws(Malformed) -> IndexLocation {
            IndexLocation(container: try text(), scope: try text(), path: try text())
        }

        mutating func record() throws(Malformed) -> IndexRecord {
            let id = try i64()
            let name = try text(), path = try text(), container = try text(), containerName = try text()
            let scope = try text(), kind = try text()
            let size = try i64(), created = try f64(), modified = try f64()
            let contentType = try text(), uti = try text()
            let version = try i64()
            let tagCount = Int(try u32())
            guard tagCount * 4 <= remaining else { throw Malformed() }
            var tags: [String] = []
            for _ in 0..<tagCount { tags.append(try text()) }
            let comment = try text()
            let hasThumbnail = try bool(), isExternal = try bool()
            let originalPath = try text(), localPath = try text()
            let conflict = try bool()
            let downloadState = try text(), uploadState = try text()
            var record = IndexRecord(
                id: id, name: name, path: path, container: container, containerName: containerName, scope: scope,
                kind: kind, size: size, created: created, modified: modified, contentType: contentType, uti: uti,
                version: version, tags: tags, comment: comment, hasThumbnail: hasThumbnail, isExternal: isExternal,
                originalPath: originalPath, localPath: localPath, conflict: conflict, downloadState: downloadState,
                uploadState: uploadState)
            record.backingInode = try u64()
            record.statusChanged = try f64()
            return record
        }
    }
}
