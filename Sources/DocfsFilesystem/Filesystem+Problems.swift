import DocfsCore

/// Steps whose failure must not fail the operation they serve (putting a raced save back,
/// storing a new file's id, undoing a half-made replace, separating a copy): their failures
/// are reported to the daemon's log (`ServedStore.onProblem`) instead of being dropped.
extension Filesystem {
    /// Runs `body`; a failure is reported as failing to `what` and answers nil.
    @discardableResult
    func reporting<T>(_ what: @autoclosure () -> String, _ body: () throws(DocfsError) -> T) -> T? {
        do {
            return try body()
        } catch {
            shared.report("could not \(what()): \(error)")
            return nil
        }
    }
}

extension ServedStore {
    /// Where problems that did not fail an operation are reported (the daemon logs them).
    public func onProblem(_ sink: @escaping @Sendable (String) -> Void) {
        problemSink.set(sink)
        sessions.onProblem(sink)
    }

    func report(_ problem: String) {
        problemSink(problem)
    }
}
