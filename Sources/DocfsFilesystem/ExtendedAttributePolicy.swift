import DocfsCore
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

    static func checkName(_ name: String) throws(DocfsError) {
        if name.utf8.count > maximumNameLength { throw DocfsError.system(ERANGE) }
        if name.isEmpty { throw DocfsError.system(EINVAL) }
    }
}
