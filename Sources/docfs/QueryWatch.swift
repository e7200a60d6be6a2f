import ArgumentParser
import DocfsCore
import DocfsIndex
import DocfsProvider
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// `docfs query --watch`: the results, a `gathered` line, then batches of changes to them, each
/// printed (and flushed, for pipes) as one batch, until interrupted.
struct QueryWatch {
    let query: IndexQuery
    let index: IndexDatabase
    let mountPoint: String?
    let view: UserView
    let json: Bool
    let interval: Double

    func run() throws {
        allowInterruption()
        var live = try reportingErrors { () throws(DocfsError) in try LiveQuery(index: index, query: query) }
        for record in live.initial { emit("result", record) }
        if json {
            print(#"{"event":"gathered","count":\#(live.initial.count)}"#)
        } else {
            print("gathered \(live.initial.count)")
        }
        fflush(nil)
        while true {
            usleep(useconds_t(interval * 1_000_000))
            let events = try reportingErrors { () throws(DocfsError) in try live.poll() }
            guard !events.isEmpty else { continue }
            for event in events { emit(event.name, event.record) }
            fflush(nil)
        }
    }

    /// A result, or a change to the results, said with where the change came from (`remote`
    /// and the machine's name when the sync engine applied another machine's change, else
    /// `local`); a removal with the record as it was last reported.
    private func emit(_ event: String, _ record: IndexRecord) {
        let saysOrigin = event != "result"
        let machine = saysOrigin && !record.remoteMachine.isEmpty ? record.remoteMachine : nil
        if json {
            print(jsonLine(WatchEventJSON(event: event, record: RecordJSON(record),
                                          origin: saysOrigin ? (machine == nil ? "local" : "remote") : nil, machine: machine)))
        } else {
            let record = QueryCommand.withOriginal(record, index: index, view: view)
            // As `docfs watch` says it.
            PlainOutput.line((event == "result" ? "" : event + " ") + QueryCommand.describe(record, mountPoint: mountPoint, view: view)
                             + (machine.map { " [from \(PlainOutput.name($0))]" } ?? ""))
        }
    }
}

/// One line of `docfs query --watch --json`.
struct WatchEventJSON: Encodable {
    let event: String
    let record: RecordJSON
    /// For a change or a removal: `remote` (another machine's, applied here) or `local`.
    let origin: String?
    /// For a remote change or removal: the machine it came from.
    let machine: String?
}
