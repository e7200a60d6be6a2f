import DocfsCore
import Foundation
import GRDB
import Testing
@testable import DocfsIndex

/// `IndexDatabase.open` tells its caller when the index must be made again (issue 4 §4): a new
/// file, an index from an older schema (migrated, needing a rebuild), and a damaged file (set
/// aside and replaced); and once a rebuild has filled it, that it is ready.
@Suite struct IndexConditionTests {
    @Test func openSaysWhenARebuildIsNeeded() throws {
        let directory = NSTemporaryDirectory() + "docfs-condition-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/index.sqlite"

        do {
            let (fresh, condition) = try IndexDatabase.open(path: path)
            #expect(condition == .unbuilt)
            try fresh.apply([], built: true)
            // One writer at a time: a second is refused while the first has the index open.
            #expect(throws: DocfsError.self) { try IndexDatabase.open(path: path, waitingForWriter: 0.2) }
        }
        #expect(try IndexDatabase.open(path: path).1 == .ready)

        // An index made by the previous docfs (schema v1 only).
        let older = directory + "/older.sqlite"
        let queue = try DatabaseQueue(path: older)
        try IndexSchema.migrator().migrate(queue, upTo: "v1")
        try queue.close()
        let (migrated, olderCondition) = try IndexDatabase.open(path: older)
        #expect(olderCondition == .migrated)
        #expect(try migrated.count() == 0)
        #expect(try migrated.isBuilt() == false)

        // Damaged: not a database at all.
        let damaged = directory + "/damaged.sqlite"
        try Data(repeating: 0x5A, count: 8192).write(to: URL(fileURLWithPath: damaged))
        let (replaced, damagedCondition) = try IndexDatabase.open(path: damaged)
        guard case .replaced(let reason, let aside) = damagedCondition else {
            Issue.record("a damaged index was not replaced: \(damagedCondition)")
            return
        }
        #expect(reason.contains("cannot be read") || reason.contains("damaged"), "\(reason)")
        #expect(FileManager.default.fileExists(atPath: aside))
        #expect(try replaced.count() == 0)
    }
}
