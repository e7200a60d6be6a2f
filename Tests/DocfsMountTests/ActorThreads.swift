import Foundation
import Synchronization

/// The actors of a stress-style test: threads that each repeat their body (given the round
/// number) until the test stops them all.
final class ActorThreads: Sendable {
    private let stopping = Atomic(false)
    private let group = DispatchGroup()

    func start(_ body: @escaping @Sendable (Int) -> Void) {
        group.enter()
        Thread { [self] in
            var round = 0
            while !stopping.load(ordering: .relaxed) {
                body(round)
                round += 1
            }
            group.leave()
        }.start()
    }

    /// Tells every actor to stop after its round; true when all did within `seconds` (none
    /// deadlocked or starved).
    func stop(within seconds: Double) -> Bool {
        stopping.store(true, ordering: .relaxed)
        return group.wait(timeout: .now() + seconds) == .success
    }
}
