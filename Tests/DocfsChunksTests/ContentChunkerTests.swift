import DocfsChunks
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Content-defined chunking: sizes stay within bounds, and an edit moves only the chunks
/// around it (what lets versions and machines share the rest).
@Suite struct ContentChunkerTests {
    /// Deterministic pseudo-random bytes (xorshift), so failures repeat.
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed | 1
        return (0..<count).map { _ in
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return UInt8(truncatingIfNeeded: state >> 24)
        }
    }

    static func chunks(of data: [UInt8], chunker: ContentChunker = .standard) throws -> [ChunkReference] {
        let path = "/tmp/docfs-chunker-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
        #expect(fd >= 0)
        defer {
            close(fd)
            unlink(path)
        }
        #expect(data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == data.count)
        var found: [ChunkReference] = []
        try chunker.forEachChunk(of: fd, length: Int64(data.count)) { (offset, bytes) in
            found.append(ChunkReference(offset: offset, length: Int64(bytes.count), digest: ChunkDigest(of: bytes)))
        }
        return found
    }

    @Test func chunksCoverTheContentWithinTheBounds() throws {
        let data = Self.bytes(40 << 20, seed: 7)
        let chunks = try Self.chunks(of: data)
        #expect(chunks.first?.offset == 0)
        #expect(zip(chunks, chunks.dropFirst()).allSatisfy { $0.offset + $0.length == $1.offset })
        #expect(chunks.last.map { $0.offset + $0.length } == Int64(data.count))
        for chunk in chunks.dropLast() {
            #expect(chunk.length >= 256 << 10 && chunk.length <= 4 << 20, "chunk of \(chunk.length) bytes")
        }
        // About 1 MiB on average (normalized chunking keeps them near it).
        let average = data.count / chunks.count
        #expect(average > 600 << 10 && average < 1800 << 10, "\(chunks.count) chunks, average \(average)")
    }

    @Test func anInsertionMovesOnlyTheChunksAroundIt() throws {
        let data = Self.bytes(24 << 20, seed: 11)
        var edited = data
        edited.insert(contentsOf: Self.bytes(100, seed: 3), at: 9 << 20)
        edited.removeSubrange((17 << 20)..<((17 << 20) + 5000))
        let before = try Self.chunks(of: data), after = try Self.chunks(of: edited)
        let shared = Set(before.map(\.digest)).intersection(after.map(\.digest))
        // Each edit touches the chunk it lands in and perhaps the next one.
        #expect(shared.count >= before.count - 4, "\(shared.count) of \(before.count) chunks shared")
    }

    @Test func contentShorterThanTheMinimumIsOneChunk() throws {
        let data = Self.bytes(100_000, seed: 5)
        let chunks = try Self.chunks(of: data)
        #expect(chunks.count == 1 && chunks[0].length == 100_000)
        #expect(try Self.chunks(of: []).isEmpty)
    }

    /// The cut points are a format shared by every machine of a store: the same bytes must cut
    /// the same way in every build. These were the cut points when the format was fixed.
    @Test func theCutPointsAreAFixedFormat() throws {
        let chunks = try Self.chunks(of: Self.bytes(8 << 20, seed: 42))
        #expect(chunks.map(\.length) == ContentChunkerTests.fixedLengths, "\(chunks.map(\.length))")
    }

    static let fixedLengths: [Int64] = [1_309_774, 1_424_575, 1_071_831, 573_737, 1_139_937, 1_141_401, 1_544_310, 183_043]

    @Test func digestsNameTheBytes() {
        let a: [UInt8] = Array("abc".utf8)
        let digest = a.withUnsafeBytes { ChunkDigest(of: $0) }
        #expect(digest.hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(ChunkDigest(hex: digest.hex) == digest)
        #expect(ChunkDigest(hex: "../etc/passwd") == nil)
        #expect(ChunkDigest(hex: String(repeating: "A", count: 64)) == nil)
    }
}
