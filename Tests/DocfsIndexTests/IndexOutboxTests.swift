import DocfsCore
import Foundation
import Testing
@testable import DocfsIndex

/// The durable outbox (issue 22 §0): an outbox entry stitched with a change is in the same
/// journal append, so it survives a writer killed before its commit, is read in the order the
/// changes were made, once per item per batch (at its first place: a folder stays ahead of
/// what was made in it), and goes when acknowledged; sync states and the anchor are kept
/// beside it.
@Suite struct IndexOutboxTests {
    @Test func outboxEntriesAreStitchedWithTheirChangesAndSurviveAKilledWriter() throws {
        let directory = NSTemporaryDirectory() + "docfs-outbox-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var index: IndexDatabase? = try IndexDatabase(path: directory + "/index.sqlite")
        try index!.stitch([.put(IndexQueryTests.record(21, "a.txt")), .outbox(item: 21)])
        try index!.stitch([.put(IndexQueryTests.record(22, "b.txt")), .outbox(item: 22)])
        try index!.stitch([.remove(IndexQueryTests.location("/a.txt")), .outbox(item: 21)])
        // Nothing committed yet: the writer goes as a killed one would (its frames only in the journal).
        #expect(index!.waitingFrames == 3)
        index = nil
        let reopened = try IndexDatabase(path: directory + "/index.sqlite")
        let entries = try reopened.outbox(limit: 10)
        // One batch: an item's later entry folds into its first; order is the changes'.
        #expect(entries.map(\.item) == [21, 22])
        try reopened.acknowledgeOutbox(entries[1].position)
        #expect(try reopened.outbox(limit: 10).map(\.item) == [21])
        // Outbox entries change no record.
        #expect(try reopened.record(at: IndexQueryTests.location("/b.txt"))?.id == 22)
        #expect(try reopened.record(at: IndexQueryTests.location("/a.txt")) == nil)
        // Entries of separate batches stay separate (each is a change to send).
        try reopened.stitch([.outbox(item: 21)])
        try reopened.flush()
        try reopened.stitch([.outbox(item: 30)])
        #expect(try reopened.outbox(limit: 10).map(\.item) == [21, 21, 30] && reopened.outboxCount() == 3)
        try reopened.enqueueForUpload([40, 41])
        #expect(try reopened.outbox(limit: 2).map(\.item) == [21, 21])
        #expect(try reopened.outboxCount() == 5)
    }

    @Test func syncStatesAndTheAnchorAreKeptAndForgotten() throws {
        let directory = NSTemporaryDirectory() + "docfs-outbox-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var index: IndexDatabase? = try IndexDatabase(path: directory + "/index.sqlite")
        #expect(try index!.syncState(of: 5) == nil && index!.syncAnchor() == 0)
        try index!.setSyncState(Array("{\"number\":3}".utf8), of: 5)
        try index!.setSyncAnchor(42)
        index = nil
        let reopened = try IndexDatabase(path: directory + "/index.sqlite")
        #expect(try reopened.syncState(of: 5) == Array("{\"number\":3}".utf8) && reopened.syncAnchor() == 42)
        try reopened.setSyncState(nil, of: 5)
        #expect(try reopened.syncState(of: 5) == nil)
        try reopened.setSyncState([1, 2, 3], of: 6)
        try reopened.enqueueForUpload([6])
        try reopened.forgetSync()
        #expect(try reopened.syncState(of: 6) == nil && reopened.syncAnchor() == 0 && reopened.outboxCount() == 0)
    }
}
