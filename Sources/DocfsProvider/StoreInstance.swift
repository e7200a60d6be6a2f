import DocfsCore
import FoundationEssentials

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
        let made = UUID().uuidString.lowercased()
        try StoreFiles.replace(layout.instanceFile, with: Array((made + "\n").utf8))
        return made
    }

    /// The store's key as 16 bytes, when it has one (it was linked once); nil before. Made by
    /// nobody here: bookmarks record it to tell the store they were made on.
    public static func existingBytes(_ layout: StoreLayout) -> [UInt8]? {
        guard let bytes = try? StoreFiles.read(layout.instanceFile),
              let uuid = UUID(uuidString: String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: "\n ")) else { return nil }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }
}
