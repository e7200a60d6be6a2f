import DocfsCore
import FoundationEssentials

/// The store's `settings.json`, read by each part that has settings there (versions, log):
/// each decodes its own section; a file that is not valid JSON is one clear error for all.
enum StoreSettingsFile {
    /// `settings` decoded as `T`; nil when there is no such file.
    static func decode<T: Decodable>(_ type: T.Type, from settings: String) throws(DocfsError) -> T? {
        guard let bytes = try StoreFiles.read(settings) else { return nil }
        do {
            return try JSONDecoder().decode(T.self, from: Data(bytes))
        } catch {
            throw DocfsError(.storeUnavailable, "\(settings) is not valid JSON: fix it or remove it to use the defaults", cause: error)
        }
    }
}
