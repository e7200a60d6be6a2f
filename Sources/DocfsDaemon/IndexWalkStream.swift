import DocfsCore
import DocfsFilesystem
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// An index rebuild or check asked of the daemon (`docfs index rebuild|check` on a served
/// store): progress lines while it walks, then the outcome.
enum IndexWalkStream {
    static func serve(_ mode: IndexRebuild.Mode, on connection: Int32, filesystem: Filesystem, logger: Logger) {
        defer { close(connection) }
        func send(_ reply: ControlReply) {
            if let data = try? JSONEncoder().encode(reply) { ControlLine.write(Array(data), to: connection) }
        }
        send(ControlReply(ok: true, message: mode == .check ? "checking" : "rebuilding"))
        do {
            let summary = try IndexMaintenance(view: filesystem).walk(mode) { done, total in
                send(ControlReply(ok: true, message: "progress", progress: [done, total]))
            }
            let outcome = IndexWalkOutcome(summary, mode: mode)
            logger.notice("\(outcome.summary) (asked through the control socket)")
            send(ControlReply(ok: true, message: outcome.summary, index: outcome))
        } catch {
            logger.error("index \(mode == .check ? "check" : "rebuild") failed: \(error)")
            send(ControlReply(ok: false, message: error.description, index: IndexWalkOutcome(summary: "", differences: [])))
        }
    }
}

/// What a rebuild or check tells its caller: a one-line summary and a check's differences.
public struct IndexWalkOutcome: Codable {
    public var summary: String
    public var differences: [String]

    public init(summary: String, differences: [String]) {
        self.summary = summary
        self.differences = differences
    }

    public init(_ summary: IndexRebuild.Summary, mode: IndexRebuild.Mode) {
        switch mode {
        case .check:
            self.summary = "checked \(summary.items) items: \(summary.differences.isEmpty ? "index and store agree" : "\(summary.differences.count) differences")"
        case .rebuild, .reconcile:
            self.summary = "indexed \(summary.items) items (\(summary.written) records written, \(summary.removed) removed, \(summary.identified) items given an id\(summary.separatedReport))"
        }
        differences = summary.differences.map(\.description)
    }
}
