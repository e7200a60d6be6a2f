#if canImport(Glibc)
import Glibc
#endif

/// Cuts content into content-defined chunks (FastCDC: a gear hash with normalized chunking),
/// so that an edit moves only the chunks around it and the rest of the content cuts the same
/// way wherever it sits: versions of a document, and later other machines, share the chunks
/// their content has in common.
///
/// The cut points are a format, fixed for good: the gear table, the seed it comes from, the
/// sizes and the masks below. Changing any of them would cut the same content differently on
/// two machines, and nothing would be shared between them any more.
public struct ContentChunker: Sendable {
    /// No chunk is shorter, except the last of the content.
    public let minimumSize: Int
    /// The size chunks come out at on average.
    public let averageSize: Int
    /// No chunk is longer.
    public let maximumSize: Int
    /// Before the average size a cut is harder to find (more bits must be zero), after it
    /// easier: chunk sizes cluster around the average (normalized chunking, level 2).
    private let strictMask: UInt64
    private let looseMask: UInt64

    /// The chunking of docfs's stores: 256 KiB / 1 MiB / 4 MiB.
    public static let standard = ContentChunker(minimumSize: 256 << 10, averageSize: 1 << 20, maximumSize: 4 << 20)

    /// Sizes for tests and other uses; `averageSize` is rounded down to a power of two.
    public init(minimumSize: Int, averageSize: Int, maximumSize: Int) {
        precondition(minimumSize >= 64 && minimumSize <= averageSize && averageSize <= maximumSize)
        self.minimumSize = minimumSize
        self.averageSize = averageSize
        self.maximumSize = maximumSize
        let bits = UInt64(Int.bitWidth - 1 - averageSize.leadingZeroBitCount)
        // The mask's bits are the hash's top ones: they depend on the last 64 bytes read.
        strictMask = ~0 << (64 - (bits + 2))
        looseMask = ~0 << (64 - (bits - 2))
    }

    /// How many bytes of `data` (which starts at a chunk's start) the chunk takes. `atEnd`
    /// says nothing follows `data`; otherwise `data` must hold `maximumSize` bytes or more.
    public func cutPoint(_ data: UnsafeRawBufferPointer, atEnd: Bool) -> Int {
        let count = min(data.count, maximumSize)
        precondition(atEnd || count == maximumSize, "cutPoint needs maximumSize bytes unless the content ends")
        guard count > minimumSize else { return count }
        let bytes = data.bindMemory(to: UInt8.self)
        return Self.gear.withUnsafeBufferPointer { gear -> Int in
            var hash: UInt64 = 0
            // The hash only depends on the last 64 bytes: warm it up on the bytes before the minimum.
            var i = minimumSize - 64
            while i < minimumSize {
                hash = (hash << 1) &+ gear[Int(bytes[i])]
                i += 1
            }
            let normal = min(averageSize, count)
            while i < normal {
                hash = (hash << 1) &+ gear[Int(bytes[i])]
                if hash & strictMask == 0 { return i + 1 }
                i += 1
            }
            while i < count {
                hash = (hash << 1) &+ gear[Int(bytes[i])]
                if hash & looseMask == 0 { return i + 1 }
                i += 1
            }
            return count
        }
    }

    /// Reads the first `length` bytes of `fd` (fewer if it is shorter) and hands each chunk to
    /// `body`, in order, with its offset. The bytes are valid only during the call.
    public func forEachChunk(of fd: Int32, length: Int64,
                             _ body: (Int64, UnsafeRawBufferPointer) throws(ChunkError) -> Void) throws(ChunkError) {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: maximumSize, alignment: 64)
        defer { buffer.deallocate() }
        var offset: Int64 = 0  // of buffer[0] in the file
        var filled = 0
        var ended = false
        while true {
            while !ended && filled < maximumSize {
                let want = min(maximumSize - filled, Int(max(0, length - offset - Int64(filled))))
                if want == 0 {
                    ended = true
                    break
                }
                let n = pread(fd, buffer.baseAddress! + filled, want, off_t(offset) + off_t(filled))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw ChunkError("cannot read the content to chunk", errno: errno)
                }
                if n == 0 { ended = true }
                filled += n
            }
            guard filled > 0 else { return }
            let cut = cutPoint(UnsafeRawBufferPointer(rebasing: buffer[0..<filled]), atEnd: ended)
            try body(offset, UnsafeRawBufferPointer(rebasing: buffer[0..<cut]))
            let rest = filled - cut
            if rest > 0 { memmove(buffer.baseAddress!, buffer.baseAddress! + cut, rest) }
            filled = rest
            offset += Int64(cut)
        }
    }

    /// The gear table: 256 pseudo-random words from SplitMix64 seeded with "docfs-cdc".
    static let gear: [UInt64] = {
        var state: UInt64 = 0x646f_6366_732d_6364  // "docfs-cd"
        return (0..<256).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }()
}
