import DocfsCore
import Foundation
import Synchronization

/// Runs a sync engine on a thread of its own (never a FUSE worker's): a round when woken (a
/// local change entered the outbox, the remote's watch heard of a commit or reconnected),
/// and every `pollInterval` seconds anyway (a wake-up can be lost, DESIGN §9). A round that
/// fails is tried again with a growing pause (1 s doubling to 60 s); `status` says what is
/// waiting and the last error in words.
///
/// Lock order: `state` is a leaf lock, never held across a round.
public final class SyncLoop: Sendable {
    /// What `docfs remote status` shows.
    public struct Status: Sendable, Equatable {
        /// When a round last reached the remote (seconds since the epoch).
        public var lastContact: Double?
        /// Why the last round failed, if it did.
        public var lastError: String?
        /// When the next try is, after a failure.
        public var nextTry: Double?
        public var rounds = 0
        public var last = SyncEngine.Round()
        /// The last of the engine's own checks (`SyncEngine.audit`), and when a round last moved
        /// something (seconds since the epoch): a check begun before that says nothing of now.
        public var audit: SyncAudit?
        public var lastMoved: Double?
        /// The last check of every item here (`SyncAudit.Scope.everything`).
        public var lastFullAudit: SyncAudit?

        /// Whether the last check found nothing and nothing moved since it began.
        public var checkedInStep: Bool {
            guard let audit, audit.inStep else { return false }
            return lastMoved.map { $0 <= audit.checked } ?? true
        }
    }

    private struct State {
        var status = Status()
        var stopping = false
    }

    public let engine: SyncEngine
    private let pollInterval: Double
    private let log: @Sendable (String) -> Void
    private let state = Mutex(State())
    private let wakeUp = ThreadSemaphore()
    private let done = ThreadSemaphore()
    private let watch = Mutex<RemoteWatch?>(nil)

    /// How often the loop prunes the remote's log (versions older than `retention`, DESIGN §9)
    /// and sweeps its unused chunks (`Remote.sweepChunks`), and how long a chunk must have been
    /// unused to go.
    private let sweepInterval: Double
    private let sweepGrace: Double
    public static let retention: Double = 30 * 86400
    /// How long a version is kept promised before it is fetched: well inside `retention`,
    /// counted on the remote from when the version was superseded (never later than when
    /// this machine kept it), so its content is fetched while the remote still holds it.
    public static let promisedVersionAge: Double = 20 * 86400

    /// How long a wake-up waits for more changes before its round (seconds).
    private let gather: Double
    /// How long, at most, rounds give way to a burst of local changes (a tar x, a build, a git
    /// checkout): once wake-ups arrive at `burstWakeUps` a `gather` or more, the round waits
    /// until they stop for `burstQuiet`, so reading, hashing and sending the files does not take
    /// the CPU the burst's own writes need; then its changes go up in one round. Past this the
    /// rounds run beside the burst (at the sync thread's lower priority).
    private let burstDeferral: Double
    static let burstWakeUps = 8
    /// How long a burst must go without a change to be over: its own pauses (a big file's
    /// writes, a busy machine giving the CPU elsewhere for a few time slices) stay inside it.
    /// Without this a tar x on a loaded machine looked over at its first 20 ms pause, and the
    /// round that started then took the CPU from the rest of it (issue 22 §7: 1.2x to 1.8x the
    /// unlinked time beside a CPU hog).
    private let burstQuiet: Double

    /// When the engine checks the store against the remote (`SyncEngine.audit`): every item at
    /// the start and every `auditInterval` (never sooner than `auditCostFactor` times the last
    /// such check's duration: a big store's check takes a twentieth of the sync thread at most);
    /// the items that moved once rounds are idle after a round that moved something (never
    /// sooner than `auditGap` after the last check, nor than `auditCostFactor` times its duration).
    private let auditInterval: Double
    private let auditGap: Double
    static let auditCostFactor = 20.0

    /// Run first on the loop's thread (the daemon lowers its priority there).
    private let threadSetup: @Sendable () -> Void

    public init(engine: SyncEngine, pollInterval: Double = 5, gather: Double = 0.02, burstDeferral: Double = 10,
                burstQuiet: Double = 0.15, sweepInterval: Double = 86400, sweepGrace: Double = 3600, auditInterval: Double = 600,
                auditGap: Double = 2, threadSetup: @escaping @Sendable () -> Void = {}, log: @escaping @Sendable (String) -> Void) {
        self.engine = engine
        self.auditInterval = auditInterval
        self.auditGap = auditGap
        self.threadSetup = threadSetup
        self.gather = gather
        self.burstDeferral = burstDeferral
        self.burstQuiet = burstQuiet
        self.pollInterval = pollInterval
        self.sweepInterval = sweepInterval
        self.sweepGrace = sweepGrace
        self.log = log
    }

    public var status: Status { state.withLock { $0.status } }

    public func start() {
        let remoteWatch = engine.remote.watchChanges { [weak self] in self?.wake() }
        watch.withLock { $0 = remoteWatch }
        DetachedThread.start { [self] in
            threadSetup()
            run()
            done.signal()
        }
    }

    /// Asks for a round soon (a local change is waiting, or the remote has news).
    public func wake() { wakeUp.signal() }

    /// Ends the loop after the round under way, and waits for it.
    public func stop() {
        watch.withLock { $0?.cancel() }
        engine.stopRequested.store(true, ordering: .relaxed)
        state.withLock { $0.stopping = true }
        wakeUp.signal()
        done.wait()
    }

    private static func monotonic() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Waits a `gather`; if wake-ups came as fast as a burst's (`burstWakeUps` in it), waits on
    /// until none has come for `burstQuiet`, up to `burstDeferral` in all or until the loop
    /// stops. Answers whether the burst outlasted `burstDeferral` (it goes on: the next round
    /// sends all that waits, or a long burst would pile up behind one page a hold).
    private func holdWhileBursting() -> Bool {
        let start = Self.monotonic()
        var lastWakeUp = start
        var first = true
        while true {
            usleep(UInt32(gather * 1_000_000))
            var wakeUps = 0
            while wakeUp.wait(seconds: 0) { wakeUps += 1 }
            let now = Self.monotonic()
            if first && wakeUps < Self.burstWakeUps { return false }
            first = false
            if wakeUps > 0 { lastWakeUp = now }
            if now - lastWakeUp >= burstQuiet || state.withLock({ $0.stopping }) { return false }
            if now - start >= burstDeferral { return true }
        }
    }

    /// Runs the engine's check when it is due (see `auditInterval`); what it set right goes
    /// up or was taken at once, and the next check confirms it.
    private func checkIfDue(now: Double) {
        let (last, lastFull, lastMoved) = state.withLock { ($0.status.audit, $0.status.lastFullAudit, $0.status.lastMoved) }
        // Every item here: at the start and every `auditInterval` (never sooner than its cost
        // allows); else, after changes, the items they touched (and the remote's digest whole).
        let fullDue = lastFull.map { now >= $0.checked + max(auditInterval, $0.duration * Self.auditCostFactor) } ?? true
        let scope: SyncAudit.Scope = fullDue ? .everything : .changed
        if let last, !fullDue {
            // What it set right is confirmed by the next; what it could not waits for a change.
            let stale = lastMoved.map { $0 > last.checked } ?? false || last.repaired > 0
            // Spaced by what a check of the changed items costs (not a check of everything).
            let cost = last.scope == .changed ? last.duration * Self.auditCostFactor : 0
            guard stale, now >= last.checked + max(auditGap, cost) else { return }
        }
        do {
            guard let audit = try engine.audit(scope) else { return }
            if scope == .everything { state.withLock { $0.status.lastFullAudit = audit } }
            let before = state.withLock { status in
                defer { status.status.audit = audit }
                return status.status.audit
            }
            let sameAsBefore = before.map { ($0.remote, $0.here, $0.numbers) == (audit.remote, audit.here, audit.numbers) } ?? false
            if !audit.inStep && !sameAsBefore {
                log("sync: the check against the remote found differences: items not as the remote has them \(audit.remote.count), "
                    + "items here not as last in step \(audit.here.count), version numbers \(audit.numbers.count); set right \(audit.repaired)"
                    + " (docfs remote check lists them)")
            }
            if audit.repaired > 0 {
                state.withLock { $0.status.lastMoved = Date().timeIntervalSince1970 }
                wake()
            }
        } catch {
            log("sync: the check against the remote did not finish (\(error.description)); it runs again later")
        }
    }

    private func run() {
        var pause = 0.0
        var roundEnded = 0.0
        var moreWaiting = false
        var burstOutlasted = false
        // Machines linked at one moment do not all sweep at once.
        var nextSweep = Date().timeIntervalSince1970 + Double.random(in: 0.1...1) * sweepInterval
        while !state.withLock({ $0.stopping }) {
            do {
                let round = try engine.syncOnce(pages: burstOutlasted ? .max : 1)
                burstOutlasted = false
                moreWaiting = round.moreWaiting
                if Date().timeIntervalSince1970 >= nextSweep {
                    nextSweep = Date().timeIntervalSince1970 + sweepInterval
                    let swept = try SyncError.remote { () throws(RemoteError) in
                        _ = try engine.remote.prune(olderThan: Self.retention)
                        return try engine.remote.sweepChunks(unusedFor: sweepGrace)
                    }
                    if swept.chunks > 0 { log("sync: swept \(swept.chunks) unused chunks (\(swept.bytes) bytes) from the remote") }
                    // Versions kept promised come down well before the remote's retention drops them.
                    let aging = engine.store.fetchAgingPromisedVersions(keptBefore: Date().timeIntervalSince1970 - Self.promisedVersionAge)
                    if aging.fetched > 0 { log("sync: fetched \(aging.fetched) versions kept promised before the remote's retention ends") }
                    for problem in aging.problems { log("sync: \(problem)") }
                }
                let now = Date().timeIntervalSince1970
                let moved = round != SyncEngine.Round()
                state.withLock { state in
                    state.status.lastContact = now
                    state.status.lastError = nil
                    state.status.nextTry = nil
                    state.status.rounds += 1
                    state.status.last = round
                    if moved { state.status.lastMoved = now }
                }
                if pause > 0 { log("sync: in step with the remote again") }
                pause = 0
                if !moved && !round.moreWaiting { checkIfDue(now: now) }
            } catch {
                // Every failure is tried again, 1 s doubling to 60 s: most are passing (the server
                // away, a file changed while it was being read for upload, which left a save
                // waiting a minute: bench_sync's one late save in a thousand).
                pause = min(max(1, pause * 2), 60)
                let next = Date().timeIntervalSince1970 + pause
                let failedBefore = state.withLock { state in
                    defer {
                        state.status.lastError = error.description
                        state.status.nextTry = next
                    }
                    return state.status.lastError == error.description
                }
                if !failedBefore { log("sync: \(error.description) (trying again in \(Int(pause)) s)") }
            }
            roundEnded = Self.monotonic()
            if pause > 0 {
                // While failing, a wake-up does not cut the pause short (it would hammer a
                // server that is down), but stopping does.
                let until = Date().addingTimeInterval(pause)
                while Date() < until && !state.withLock({ $0.stopping }) {
                    wakeUp.wait(seconds: until.timeIntervalSinceNow)
                }
            } else if moreWaiting && !wakeUp.wait(seconds: 0) {
                // The round left outbox pages waiting and nothing new came since (a first sync,
                // the end of a burst): the next round goes at once.
            } else if (moreWaiting || wakeUp.wait(seconds: pollInterval)) && gather > 0
                        && Self.monotonic() - roundEnded < 4 * gather {
                // Woken again right after a round: a burst (tar x, a build). Its changes gather a
                // moment into one round, so the rounds' reads of the index do not make it commit
                // once per file; until they stop for `burstQuiet`, up to `burstDeferral`. A lone
                // save goes at once.
                burstOutlasted = holdWhileBursting()
            }
            // Wake-ups that piled up during the round are one round.
            while wakeUp.wait(seconds: 0) {}
        }
    }
}
