import DocfsThumbnails
import Foundation
import Testing

/// The daemon's side of the worker: a worker that hangs is killed at the time limit, one that
/// dies is reported, and the next request starts a new one.
@Suite struct ThumbnailWorkerClientTests {
    private func request() -> ThumbnailRequest {
        ThumbnailRequest(job: 1, kind: .render, output: "/dev/null", stamp: ContentStamp(inode: 1, size: 1, version: 1))
    }

    @Test func aWorkerThatHangsIsKilledAtTheTimeLimit() {
        let client = ThumbnailWorkerClient(command: ["/bin/sleep", "60"], timeLimit: 0.5)
        let started = Date()
        let result = client.run(request(), content: -1)
        #expect(Date().timeIntervalSince(started) < 5)
        guard case .failure(.timedOut) = result else {
            Issue.record("expected a time-out, got \(result)")
            return
        }
        _ = client.run(request(), content: -1)
        #expect(client.workersStarted == 2, "a new worker replaces the killed one")
    }

    @Test func aWorkerIsStoppedForTheCPUTimeItUsesNotForWaiting() {
        // Busy all the time: stopped once it has used the CPU limit.
        let spinning = ThumbnailWorkerClient(command: ["/bin/sh", "-c", "while :; do :; done"], timeLimit: 0.3, wallLimit: 30)
        var started = Date()
        guard case .failure(.timedOut) = spinning.run(request(), content: -1) else {
            Issue.record("a spinning worker was not stopped")
            return
        }
        #expect(Date().timeIntervalSince(started) < 5)
        // Idle past the CPU limit (as a worker waiting for a CPU on a busy machine is): it is
        // given until the wall-clock limit.
        let waiting = ThumbnailWorkerClient(command: ["/bin/sleep", "60"], timeLimit: 0.3, wallLimit: 2)
        started = Date()
        guard case .failure(.timedOut) = waiting.run(request(), content: -1) else {
            Issue.record("expected a time-out")
            return
        }
        #expect(Date().timeIntervalSince(started) >= 1.9)
    }

    @Test func aWorkerThatDiesIsReported() {
        let client = ThumbnailWorkerClient(command: ["/bin/sh", "-c", "kill -SEGV $$"], timeLimit: 5)
        guard case .failure(.workerFailed(let why)) = client.run(request(), content: -1) else {
            Issue.record("expected a failure")
            return
        }
        #expect(why.contains("signal") || why.contains("gone") || why.contains("closed"))
    }

    @Test func aWorkerThatCannotStartIsReported() {
        let client = ThumbnailWorkerClient(command: ["/nonexistent/docfs", "thumbnail-worker"])
        guard case .failure(.workerFailed(let why)) = client.run(request(), content: -1) else {
            Issue.record("expected a failure")
            return
        }
        #expect(why.contains("cannot start"))
    }
}
