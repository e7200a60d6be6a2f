import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Which extended attribute names pass through to the store. `user.*` is stored with the file;
/// the other namespaces (security, trusted, system ACLs) are not offered by docfs: reads find
/// nothing and writes answer EOPNOTSUPP, as on a filesystem mounted without them.
enum ExtendedAttributePolicy {
    static let maximumValueSize = 65536
    static let maximumNameLength = 255

    static func isStored(_ name: String) -> Bool { name.hasPrefix("user.") }

    /// Names under `user.docfs.` are docfs's (DESIGN §6): users may write only these.
    static let docfsPrefix = "user.docfs."
    static let userWritableDocfsNames: Set<String> = ["user.docfs.skip-backup"]
    /// Names whose value docfs makes when they are read, for every file and folder; whatever
    /// the store holds under them is not shown.
    static let computed: Set<String> = [ItemAttributes.bookmark]
    /// Names docfs serves from its own state, listed only when the item has them; whatever the
    /// store holds under them is not shown.
    static let served: Set<String> = Set([ItemAttributes.thumbnail, ItemAttributes.status]).union(containerNames).union(externalNames)
        .union([ReferenceStub.attribute])
    /// The names a container's folder carries (DESIGN §6, issue 6 §1).
    static let containerNames: Set<String> = [ItemAttributes.container, ItemAttributes.containerID]
    /// The names a reference carries (DESIGN §6, §8).
    static let externalNames: Set<String> = [ItemAttributes.external, ItemAttributes.container,
                                             ItemAttributes.original, ItemAttributes.localPath]

    /// Refuses a write (`value`) or removal (nil) of a name docfs keeps itself, and values a
    /// writable docfs name does not take.
    static func checkWritable(_ name: String, value: [UInt8]?) throws(DocfsError) {
        if let value { try checkValue(name, value) }
        guard name.hasPrefix(docfsPrefix) else { return }
        guard userWritableDocfsNames.contains(name) else {
            throw DocfsError(.refused, "\(name) is kept by docfs and cannot be set or removed")
        }
        if let value, value != Array("1".utf8), value != Array("0".utf8) {
            throw DocfsError(.invalidArgument, "\(name) takes 1 (keep out of backups) or 0")
        }
    }

    /// `user.mime_type` (a freedesktop content type) and the freedesktop `user.xdg.*` attributes
    /// (UTF-8 text, DESIGN §6) are indexed: values they cannot hold are refused.
    static let mimeType = "user.mime_type"

    private static func checkValue(_ name: String, _ value: [UInt8]) throws(DocfsError) {
        if name == mimeType {
            // type/subtype, each a MIME token (RFC 2045): what GIO and the index can use.
            let parts = value.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false)
            let token = { (part: ArraySlice<UInt8>) -> Bool in
                !part.isEmpty && part.allSatisfy { $0 > 32 && $0 < 127 && !Array("()<>@,;:\\\"/[]?=".utf8).contains($0) }
            }
            guard value.count <= 255, parts.count == 2, token(parts[0]), token(parts[1]) else {
                throw DocfsError(.invalidArgument, "\(name) takes a content type such as text/plain or image/png")
            }
        } else if name.hasPrefix("user.xdg.") {
            guard String(validating: value, as: UTF8.self) != nil else {
                throw DocfsError(.invalidArgument, "\(name) takes UTF-8 text, as the freedesktop attributes are")
            }
        }
    }

    static func checkName(_ name: String) throws(DocfsError) {
        if name.utf8.count > maximumNameLength { throw DocfsError.system(ERANGE) }
        if name.isEmpty { throw DocfsError.system(EINVAL) }
    }
}
