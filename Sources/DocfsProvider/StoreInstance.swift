import DocfsCore
import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

/// The key a store registers under when it joins a remote (DESIGN §9.0 identity): made once,
/// at the store's first link, kept across unlinks, in `STORE/instance-id`. The remote gives an
/// id space and a machine name per key, so two stores (several on one host all ask for the
/// host's name) never share either; the same store joining again gets its own back.
///
/// A copy of a whole store directory carries the key too: link only one of the two, or remove
/// the copy's `instance-id` before linking it (it then joins as a store of its own).
public enum StoreInstance {
    /// The store's key, made now when it has none yet. Called by the holder of the store's lock.
    public static func key(_ layout: StoreLayout) throws(DocfsError) -> String {
        if let bytes = try StoreFiles.read(layout.instanceFile) {
            let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: "\n ")
            guard UUID(uuidString: text) != nil else {
                throw DocfsError(.storeUnavailable,
                                 "\(layout.instanceFile) is damaged (\"\(text.prefix(40))\"): remove it; the store then joins its remote as a new machine at its next link")
            }
            return text.lowercased()
        }
        // Written aside, then linked into place: link(2) refuses to replace, so of two processes
        // making the key at once (two commands making bookmarks) the first wins and both use it.
        let made = UUID().uuidString.lowercased()
        let aside = layout.instanceFile + ".\(getpid()).new"
        try StoreFiles.replace(aside, with: Array((made + "\n").utf8))
        let linked = link(aside, layout.instanceFile) == 0 || errno == EEXIST
        unlink(aside)
        guard linked else { throw DocfsError.errno("making \(layout.instanceFile)") }
        return try key(layout)
    }

    /// The store's key as 16 bytes, when it has one; nil before it is made. Bookmarks record it
    /// to tell the store they were made on.
    public static func existingBytes(_ layout: StoreLayout) -> [UInt8]? {
        guard let bytes = try? StoreFiles.read(layout.instanceFile),
              let uuid = UUID(uuidString: String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: "\n ")) else { return nil }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }

    /// The store's key as 16 bytes, made now when it has none: a bookmark made before the
    /// store's first link says where it was made too, so no other machine judges it by its own
    /// files.
    public static func bytes(_ layout: StoreLayout) throws(DocfsError) -> [UInt8] {
        guard let uuid = UUID(uuidString: try key(layout)) else {
            throw DocfsError(.storeUnavailable, "\(layout.instanceFile) cannot be read back: check the store's permissions")
        }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }
}
