import DocfsCore
import DocfsIndex
import DocfsProvider
import FoundationEssentials
import Logging
#if canImport(Glibc)
import Glibc
#endif

/// `docfs query` on a served store, answered by the daemon (issue 20 §0). The daemon holds the
/// changes waiting for their commit in memory (`IndexOverlay`, kept as they are stitched), so
/// its answer costs what the answer holds; a command reading the index itself must first lay
/// the journal's waiting frames over its snapshot, a quarter second of a busy mount's changes
/// (about 100 ms under a stream of creates on this 2-core machine). The records come back in
/// batches, in the query's order.
public enum QueryStream {
    /// Records per reply line (a line stays well under the reader's 1 MiB).
    static let batch = 500

    static func serve(_ request: QueryRequest?, on connection: Int32, index: IndexDatabase, logger: Logger) {
        defer { close(connection) }
        func send(_ reply: ControlReply) {
            if let data = try? JSONEncoder().encode(reply) { ControlLine.write(Array(data), to: connection) }
        }
        guard let request else { return send(ControlReply(ok: false, message: "a query request without its query")) }
        let query: IndexQuery
        do {
            query = try Self.query(of: request)
        } catch {
            return send(ControlReply(ok: false, message: error.description))
        }
        do throws(DocfsError) {
            let records = try index.records(matching: query)
            var start = 0
            repeat {
                let end = min(start + batch, records.count)
                var reply = ControlReply(ok: true, message: "records")
                reply.records = Array(records[start..<end])
                reply.done = end == records.count
                send(reply)
                start = end
            } while start < records.count
        } catch {
            logger.error("a query failed: \(error)")
            send(ControlReply(ok: false, message: error.description))
        }
    }

    /// The query `request` describes, parsed as the command parsed it.
    static func query(of request: QueryRequest) throws(DocfsError) -> IndexQuery {
        let parser = PredicateParser(now: Date(timeIntervalSince1970: request.now),
                                     timeZone: TimeZone(identifier: request.timeZone) ?? .current)
        let predicate: QueryPredicate
        do {
            predicate = try parser.parse(request.predicate)
        } catch {
            throw DocfsError(.invalidArgument, "bad predicate: \(error.pointed)")
        }
        guard let scope = IndexQuery.Scope(rawValue: request.scope) else {
            throw DocfsError(.invalidArgument, "no scope \(request.scope)")
        }
        var keys: [IndexQuery.SortKey] = []
        for text in request.sort {
            guard let key = IndexQuery.SortKey(parsing: text) else { throw DocfsError(.invalidArgument, "cannot sort by \(text)") }
            keys.append(key)
        }
        return IndexQuery(predicate: predicate, scope: scope, sort: keys, limit: request.limit)
    }

    /// Asks the daemon serving `store` for `request`'s records; nil when it cannot answer (a
    /// daemon from before queries went through it), so the caller reads the index itself.
    public static func records(_ request: QueryRequest, from store: StoreLayout) throws(DocfsError) -> [IndexRecord]? {
        let fd = try ControlClient.connect(to: store)
        defer { close(fd) }
        let reader = LineReader(fd)
        var message = ControlRequest(kind: .query, path: "")
        message.query = request
        var reply = try ControlClient.exchange(message, on: fd, store: store, reader: reader)
        var records: [IndexRecord] = []
        while true {
            guard reply.ok, let batch = reply.records else {
                // An older daemon reads no query request; one that failed said why.
                if reply.message.hasPrefix(ControlProtocol.unreadableRequest) { return nil }
                throw DocfsError(.internalFailure, reply.message)
            }
            records += batch
            if reply.done == true { return records }
            guard let line = reader.next(), let next = try? JSONDecoder().decode(ControlReply.self, from: Data(line)) else {
                throw DocfsError(.storeUnavailable, "the daemon serving \(store.root) stopped answering: see \(store.daemonLog)")
            }
            reply = next
        }
    }
}
