import CLinux
import DocfsCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// What a promised file stands for (DESIGN §9.1, issue 23): the remote version whose content
/// it will hold, as the chunks that content is made of, in order, and their lengths once
/// known (asked of the remote at the first read, so a range maps to its chunks).
public struct Promise: Codable, Sendable, Equatable {
    public var item: UInt64
    public var number: UInt64
    public var size: Int64
    /// Seconds since the epoch: the file's modification time, put back after each chunk lands.
    public var modified: Double
    /// Hex digests, in order.
    public var manifest: [String]
    public var lengths: [Int64]?

    public init(item: UInt64, number: UInt64, size: Int64, modified: Double, manifest: [String], lengths: [Int64]? = nil) {
        self.item = item
        self.number = number
        self.size = size
        self.modified = modified
        self.manifest = manifest
        self.lengths = lengths
    }

    /// Where each chunk starts (one more entry: the end), once the lengths are known.
    public var offsets: [Int64]? {
        guard let lengths, lengths.count == manifest.count else { return nil }
        var offsets = [Int64(0)]
        offsets.reserveCapacity(lengths.count + 1)
        for length in lengths { offsets.append(offsets.last! + length) }
        return offsets
    }

    /// The chunks holding bytes `offset ..< offset + length` (clipped to the content).
    public func chunks(covering offset: Int64, length: Int64, offsets: [Int64]) -> Range<Int> {
        let start = max(0, min(offset, size)), end = max(start, min(offset + max(length, 0), size))
        guard end > start else { return 0..<0 }
        // The last chunk starting at or before `start`, then every one starting before `end`.
        var low = 0, high = manifest.count
        while high - low > 1 {
            let middle = (low + high) / 2
            if offsets[middle] <= start { low = middle } else { high = middle }
        }
        var last = low
        while last + 1 < manifest.count && offsets[last + 1] < end { last += 1 }
        return low..<(last + 1)
    }
}

/// How promised files are kept in the store: the file itself, in its place, with its real
/// size but no content yet (sparse), marked by `ItemAttributes.promised` (the version number);
/// beside the store's containers, `promised/<item>-<number>.json` (the `Promise`) and
/// `promised/<item>-<number>.present` (the indexes of the chunks written so far, four bytes each, appended once a chunk is on disk).
/// A chunk is marked present only after its bytes are synced, so a crash leaves it missing,
/// never marked and empty. Named by number too, so a download of a version a newer one
/// replaced meanwhile never touches the newer one's records. Cost grows with one file's chunks, never with the store.
public struct PromisedContent: Sendable {
    public let directory: String

    public init(directory: String) { self.directory = directory }

    private func recordPath(_ item: UInt64, _ number: UInt64) -> String { directory + "/\(item)-\(number).json" }
    private func presentPath(_ item: UInt64, _ number: UInt64) -> String { directory + "/\(item)-\(number).present" }

    /// The version number the store file `fd` (any descriptor, O_PATH too) is promised as;
    /// nil when its content is here: one getxattr.
    public static func promisedNumber(_ fd: Int32) -> UInt64? {
        var value = [UInt8](repeating: 0, count: 24)
        let n = value.withUnsafeMutableBytes { docfs_fd_getxattr(fd, ItemAttributes.promised, $0.baseAddress, $0.count) }
        guard n > 0 else { return nil }
        return UInt64(String(decoding: value[0..<n], as: UTF8.self))
    }

    /// Records `promise` and marks the (sparse, already sized) file `fd` as standing for it.
    /// The record is not synced on its own (a first sync makes thousands): a crash may lose it,
    /// and the download makes it again from the version the item is in step with.
    public func promise(_ promise: Promise, file fd: Int32) throws(DocfsError) {
        mkdir(directory, 0o700)
        let bytes: [UInt8]
        do {
            bytes = Array(try JSONEncoder().encode(promise))
        } catch {
            throw DocfsError(.internalFailure, "cannot record the promise of item \(promise.item)", cause: error)
        }
        try StoreFiles.replace(recordPath(promise.item, promise.number), with: bytes, durable: false)
        unlink(presentPath(promise.item, promise.number))
        let number = Array(String(promise.number).utf8)
        guard number.withUnsafeBytes({ docfs_fd_setxattr(fd, ItemAttributes.promised, $0.baseAddress, $0.count, 0) }) == 0 else {
            throw DocfsError.errno("marking item \(promise.item) as promised")
        }
    }

    /// The promise recorded for version `number` of `item`; nil when there is none.
    public func record(of item: UInt64, number: UInt64) throws(DocfsError) -> Promise? {
        guard let bytes = try StoreFiles.read(recordPath(item, number)) else { return nil }
        do {
            return try JSONDecoder().decode(Promise.self, from: Data(bytes))
        } catch {
            throw DocfsError(.storeUnavailable, "the promise of item \(item) in \(directory) is damaged", cause: error)
        }
    }

    /// Records the chunk lengths the remote gave.
    public func update(_ promise: Promise) throws(DocfsError) {
        do {
            try StoreFiles.replace(recordPath(promise.item, promise.number), with: Array(try JSONEncoder().encode(promise)))
        } catch let error as DocfsError {
            throw error
        } catch {
            throw DocfsError(.internalFailure, "cannot record the promise of item \(promise.item)", cause: error)
        }
    }

    /// The chunks of version `number` of `item` on disk.
    public func present(_ item: UInt64, number: UInt64) throws(DocfsError) -> Set<Int> {
        guard let bytes = try StoreFiles.read(presentPath(item, number)) else { return [] }
        var present = Set<Int>()
        for start in stride(from: 0, to: bytes.count - 3, by: 4) {
            present.insert(Int(bytes[start]) | Int(bytes[start + 1]) << 8 | Int(bytes[start + 2]) << 16 | Int(bytes[start + 3]) << 24)
        }
        return present
    }

    /// Notes `chunks` of version `number` of `item` as on disk (their bytes synced already).
    public func markPresent(_ item: UInt64, number: UInt64, chunks: [Int]) throws(DocfsError) {
        let fd = open(presentPath(item, number), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw DocfsError.errno("noting chunks of item \(item) as downloaded") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        for index in chunks { bytes += [UInt8(index & 0xff), UInt8(index >> 8 & 0xff), UInt8(index >> 16 & 0xff), UInt8(index >> 24 & 0xff)] }
        guard bytes.withUnsafeBytes({ write(fd, $0.baseAddress, $0.count) }) == bytes.count else {
            throw DocfsError.errno("noting chunks of item \(item) as downloaded")
        }
    }

    /// The file `fd` holds its whole content now: it is no longer promised.
    public func fulfilled(_ item: UInt64, number: UInt64, file fd: Int32) {
        _ = docfs_removexattr("/proc/self/fd/\(fd)", ItemAttributes.promised)
        forget(item, number: number)
    }

    /// Drops what was recorded of a promise (its file was replaced, removed or fulfilled).
    public func forget(_ item: UInt64, number: UInt64) {
        unlink(recordPath(item, number))
        unlink(presentPath(item, number))
    }
}
