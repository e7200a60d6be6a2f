import ArgumentParser
import DocfsCore
import DocfsDaemon
import DocfsIndex
import DocfsProvider
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `docfs bookmark create|resolve` (DESIGN §7): tokens that find an item again after renames,
/// moves, safe-saves and restarts.
struct BookmarkCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bookmark",
        abstract: "Make a bookmark of a document, or find the document a bookmark names.",
        subcommands: [Create.self, Resolve.self]
    )

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a bookmark token for FILE (on a docfs mount or in a store's folders).",
            discussion: """
                A security-scoped bookmark names who it was issued to (--issued-to, by default the \
                user running this) and, with --read-only, lets them only read what it names.
                """
        )

        @Argument(help: ArgumentHelp("The file or folder.", valueName: "file"))
        var file: String

        @Flag(name: .long, help: "Make a security-scoped bookmark.")
        var securityScope = false

        @Flag(name: .long, help: "The security scope grants reading only (implies --security-scope).")
        var readOnly = false

        @Option(name: .long, help: ArgumentHelp("Who the security scope is issued to (an app id, or uid:N).", valueName: "who"))
        var issuedTo: String?

        func run() throws {
            let token = try reportingErrors { () throws(DocfsError) -> String in
                let document = try LocatedDocument.locate(file)
                var backing = stat()
                guard lstat(FileName(document.backingPath).cString, &backing) == 0 else {
                    throw DocfsError(.storeUnavailable, "cannot find \(file) in its store", cause: DocfsError.errno("lstat"))
                }
                let place = document.place
                let scoped = securityScope || readOnly || issuedTo != nil
                let key: StoreKey
                do throws(DocfsError) {
                    key = try StoreKey.load(document.store)
                } catch {
                    // Root serves this user's store with a key only root reads: the daemon makes it.
                    var request = ControlRequest(kind: .bookmark, path: "", item: document.item.rawValue)
                    request.place = PlaceRequest(place)
                    request.bookmarkScope = scoped ? BookmarkScopeRequest(issuedTo: issuedTo, readOnly: readOnly) : nil
                    guard let reply = try? ControlClient.send(request, to: document.store) else { throw error }
                    guard reply.ok, let token = reply.token else { throw DocfsError(.invalidArgument, reply.message) }
                    return token
                }
                var scope: Bookmark.SecurityScope?
                if scoped {
                    scope = Bookmark.SecurityScope(issuedTo: issuedTo ?? "uid:\(getuid())", readOnly: readOnly)
                }
                let bookmark = Bookmark(item: document.item, container: place.container.rawValue, scope: place.scope.rawValue,
                                        path: place.path, backing: backing, storeID: key.storeID, securityScope: scope,
                                        madeOn: try StoreInstance.bytes(document.store))
                return BookmarkToken.encode(bookmark, key: key)
            }
            print(token)
        }
    }

    struct Resolve: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print where the item a bookmark names is now, whether the bookmark is stale, and what it recorded.",
            discussion: """
                Stale means the item moved, was renamed or was replaced since the bookmark was made: \
                it is still found, but the caller should make a new bookmark. Exit status 1 when the \
                item is gone or the token is refused.
                """
        )

        @Argument(help: ArgumentHelp("The bookmark token (docfs-bm1:…).", valueName: "token"))
        var token: String

        @Flag(name: .long, help: "Print JSON instead of text.")
        var json = false

        @OptionGroup var location: StoreLocation

        func run() throws {
            let resolution = try reportingErrors { () throws(DocfsError) -> BookmarkResolution in
                let text = token.trimmingCharacters(in: .whitespacesAndNewlines)
                if let viaDaemon = try resolvedByDaemon(text) { return viaDaemon }
                let (layout, mountPoint, bookmark) = try findStore(of: text)
                let index = try IndexAccess.open(layout)
                return try BookmarkResolution.find(bookmark, index: index, store: layout,
                                                   mountPoint: mountPoint ?? MountTable.mountPoint(of: layout))
            }
            if json { return printJSON(resolution.report) }
            let report = resolution.report
            var lines = [("path", PlainOutput.name(report.path)), ("stale", report.stale ? "yes (\(report.staleBecause.joined(separator: ", "))): make a new bookmark" : "no"),
                         ("item id", String(report.resourceIdentifier)), ("type", report.resourceType),
                         ("name", PlainOutput.name(report.localizedName)), ("modified", formatDate(report.contentModificationDate)),
                         ("made at", PlainOutput.name(report.recordedPath)), ("made", formatDate(report.made))]
            if let scope = report.securityScope {
                lines.append(("scope", "issued to \(scope.issuedTo), " + (scope.readOnly ? "read-only" : "read-write")))
            } else {
                lines.append(("scope", "none (not security-scoped)"))
            }
            for (label, value) in lines { PlainOutput.line("\((label + ":").padding(10)) \(value)") }
        }

        /// The named store's daemon's answer, when this user cannot read that store's key (root
        /// serves the user's store); nil when the key is readable or no store is named.
        private func resolvedByDaemon(_ text: String) throws(DocfsError) -> BookmarkResolution? {
            guard location.store != nil || location.mountPoint != nil else { return nil }
            let (layout, _) = try location.resolve()
            guard access(layout.bookmarkKeyFile, R_OK) != 0 && errno == EACCES else { return nil }
            var request = ControlRequest(kind: .resolveBookmark, path: "")
            request.token = text
            guard let reply = try? ControlClient.send(request, to: layout) else { return nil }
            guard reply.ok, let report = reply.resolution else { throw DocfsError(.invalidArgument, reply.message) }
            return BookmarkResolution(report: report)
        }

        /// The store the token belongs to, and what it says: the one named (--store or a mount
        /// point); else the default store, or any store this user has mounted, whose key checks it.
        private func findStore(of text: String) throws(DocfsError) -> (StoreLayout, String?, Bookmark) {
            let named = location.store != nil || location.mountPoint != nil
            let (layout, mountPoint) = try location.resolve()
            var candidates = [(layout, mountPoint)]
            if !named {
                candidates += MountTable.entries().filter { $0.type == "fuse.docfs" }.compactMap { mount in
                    MountRegistry.record(for: mount.mountPoint).map { (StoreLayout(root: $0.store), mount.mountPoint) }
                }
            }
            var problem = BookmarkTokenProblem.foreignStore
            for (candidate, mountPoint) in candidates {
                guard let key = try? StoreKey.existing(candidate) else { continue }
                do throws(BookmarkTokenProblem) {
                    return (candidate, mountPoint, try BookmarkToken.decode(text, key: key))
                } catch {
                    problem = error
                    if error != .foreignStore { break }  // this store's token, refused
                }
            }
            if problem == .foreignStore && !named {
                throw DocfsError(.invalidArgument, "the bookmark was made by a store that is neither the default one nor mounted: give it with --store")
            }
            throw DocfsError(.invalidArgument, problem.description)
        }
    }
}
