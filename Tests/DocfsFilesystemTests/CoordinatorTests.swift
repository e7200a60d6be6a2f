import DocfsCoordination
import DocfsCore
import Foundation
import Synchronization
import Testing

/// The coordinator's claims (C1): exclusive writers, shared readers, first come first served,
/// multi-item claims free of deadlock, nothing left behind by a failed operation.
@Suite struct CoordinatorTests {
    let a = ItemID(rawValue: 100), b = ItemID(rawValue: 200)

    @Test func writersExcludeEveryoneAndReadersShare() throws {
        let coordinator = Coordinator()
        let inside = Atomic(0), readersTogether = Atomic(0), overlap = Atomic(false)
        let done = DispatchGroup()
        for thread in 0..<8 {
            done.enter()
            Thread {
                for round in 0..<300 {
                    let writing = (thread + round) % 3 == 0
                    try? coordinator.withClaims([(a, writing ? .write : .read)]) { () throws(DocfsError) in
                        let now = inside.add(1, ordering: .sequentiallyConsistent).newValue
                        if writing && now != 1 { overlap.store(true, ordering: .relaxed) }
                        if !writing && now > 1 { readersTogether.add(1, ordering: .relaxed) }
                        usleep(20)
                        inside.subtract(1, ordering: .sequentiallyConsistent)
                    }
                }
                done.leave()
            }.start()
        }
        #expect(done.wait(timeout: .now() + 60) == .success)
        let overlapped = overlap.load(ordering: .relaxed), shared = readersTogether.load(ordering: .relaxed)
        #expect(!overlapped, "a writer ran beside another claimant")
        #expect(shared > 0, "readers never shared the item")
        #expect(coordinator.busyItems == 0)
    }

    /// `waitWhileClaimed` sleeps until the last claim on the item goes (queued ones included),
    /// not a poll's interval later; without a claim it answers at once; past its time it gives up.
    @Test func waitingWhileClaimedEndsWhenTheLastClaimGoes() throws {
        let coordinator = Coordinator()
        #expect(!coordinator.waitWhileClaimed(a, seconds: 5))
        let held = DispatchSemaphore(value: 0), letGo = DispatchSemaphore(value: 0), done = DispatchGroup()
        for _ in 0..<2 {  // a holder and one queued behind it: the wait ends after both
            done.enter()
            Thread {
                try? coordinator.withClaims([(a, .write)]) { () throws(DocfsError) in
                    held.signal()
                    letGo.wait()
                }
                done.leave()
            }.start()
        }
        held.wait()
        let queued = Date().addingTimeInterval(5)
        while coordinator.statistics.waited < 1 && Date() < queued { usleep(1000) }  // the second is in the queue
        #expect(coordinator.statistics.waited == 1)
        let ended = Atomic(false)
        let waiter = DispatchGroup()
        waiter.enter()
        Thread {
            #expect(coordinator.waitWhileClaimed(a, seconds: 30))
            ended.store(true, ordering: .sequentiallyConsistent)
            waiter.leave()
        }.start()
        usleep(100_000)
        var endedEarly = ended.load(ordering: .sequentiallyConsistent)
        #expect(!endedEarly, "the wait ended while the item was claimed")
        letGo.signal()  // the first holder goes; the queued one takes the item
        held.wait()
        usleep(100_000)
        endedEarly = ended.load(ordering: .sequentiallyConsistent)
        #expect(!endedEarly, "the wait ended while a queued claim held the item")
        let released = Date()
        letGo.signal()
        #expect(waiter.wait(timeout: .now() + 5) == .success)
        #expect(Date().timeIntervalSince(released) < 1)
        #expect(done.wait(timeout: .now() + 5) == .success)
        #expect(coordinator.busyItems == 0)
        // Held past the wait's time: it gives up then.
        try coordinator.withClaims([(b, .read)]) { () throws(DocfsError) in
            let start = Date()
            #expect(coordinator.waitWhileClaimed(b, seconds: 0.2))
            let waited = Date().timeIntervalSince(start)
            #expect(waited >= 0.15 && waited < 5, "\(waited)")
        }
    }

    @Test func aWaitingWriterIsNotStarvedByReaders() throws {
        let coordinator = Coordinator()
        let stop = Atomic(false)
        let readers = DispatchGroup()
        for _ in 0..<4 {
            readers.enter()
            Thread {
                while !stop.load(ordering: .relaxed) {
                    _ = try? coordinator.withClaims([(a, .read)]) { () throws(DocfsError) in usleep(200) }
                }
                readers.leave()
            }.start()
        }
        usleep(20_000)
        let started = Date()
        try coordinator.withClaims([(a, .write)]) { () throws(DocfsError) in }
        let waited = Date().timeIntervalSince(started)
        stop.store(true, ordering: .relaxed)
        #expect(readers.wait(timeout: .now() + 10) == .success)
        #expect(waited < 1, "the writer waited \(waited) s behind a stream of readers")
        #expect(coordinator.statistics.waited > 0)
    }

    @Test func claimsOnSeveralItemsInEitherOrderNeverDeadlock() throws {
        let coordinator = Coordinator()
        let done = DispatchGroup()
        let completed = Atomic(0)
        for thread in 0..<6 {
            done.enter()
            Thread {
                for _ in 0..<500 {
                    // A rename one way and another the other way: both ends, both intents.
                    let claims: [(ItemID, ClaimIntent)] = thread % 2 == 0 ? [(a, .move), (b, .replace)] : [(b, .move), (a, .write)]
                    _ = try? coordinator.withClaims(claims) { () throws(DocfsError) in completed.add(1, ordering: .relaxed) }
                }
                done.leave()
            }.start()
        }
        #expect(done.wait(timeout: .now() + 60) == .success, "claims deadlocked")
        let count = completed.load(ordering: .relaxed)
        #expect(count == 3000)
        #expect(coordinator.busyItems == 0)
    }

    @Test func aFailingOperationLeavesNoClaimBehind() throws {
        let coordinator = Coordinator()
        #expect(throws: DocfsError.self) {
            try coordinator.withClaims([(a, .write), (b, .read), (a, .read)]) { () throws(DocfsError) in
                throw DocfsError(.internalFailure, "the operation failed")
            }
        }
        #expect(coordinator.busyItems == 0)
        // Taken again at once, exclusively: nothing was leaked.
        try coordinator.withClaims([(a, .write), (b, .write)]) { () throws(DocfsError) in }
        #expect(coordinator.busyItems == 0)
    }
}

/// What `docfs watch --json` says of a change: a pending save is `"pending": "p1"` with no
/// `version` (as `docfs versions --json` lists it); a numbered one is its `version`.
@Suite struct PresentedChangeJSONTests {
    @Test func aPendingSaveIsToldAsPendingAndReadBack() throws {
        let pending = PresentedChange(.version, path: "plan.txt", item: ItemID(rawValue: 7), version: VersionNumber.pendingBase + 2)
        let told = String(decoding: try JSONEncoder().encode(pending), as: UTF8.self)
        #expect(told.contains("\"pending\":\"p2\"") && !told.contains("\"version\":"), "\(told)")
        #expect(try JSONDecoder().decode(PresentedChange.self, from: Data(told.utf8)).version == VersionNumber.pendingBase + 2)
        let numbered = PresentedChange(.version, path: "plan.txt", item: ItemID(rawValue: 7), version: 5)
        let said = String(decoding: try JSONEncoder().encode(numbered), as: UTF8.self)
        #expect(said.contains("\"version\":5") && !said.contains("pending"), "\(said)")
        #expect(try JSONDecoder().decode(PresentedChange.self, from: Data(said.utf8)) == numbered)
    }
}
