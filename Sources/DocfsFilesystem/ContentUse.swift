import DocfsCore
import DocfsProvider
import Foundation
import Synchronization

/// When each document whose content is here was last used — opened through a mount, or
/// downloaded — the order in which the cache limit evicts (least recently used first,
/// issue 23 §1). Noted in memory on every open of a store that downloads on demand (one
/// dictionary store), saved beside the promises when the cache is trimmed, so the order
/// survives a restart; a document never noted counts as used when it was last modified.
///
/// Lock order: `times` is a leaf lock.
final class ContentUse: Sendable {
    private let file: String
    /// The times, and whether they changed since they were last saved.
    private let times: Mutex<(of: [UInt64: Double], changed: Bool)>

    init(file: String) {
        self.file = file
        let saved = (try? StoreFiles.read(file)).flatMap { $0 }
            .flatMap { try? JSONDecoder().decode([String: Double].self, from: Data($0)) } ?? [:]
        var times: [UInt64: Double] = [:]
        for (item, time) in saved { if let item = UInt64(item) { times[item] = time } }
        self.times = Mutex((times, false))
    }

    /// `item` was used now.
    func used(_ item: UInt64) {
        let now = Date().timeIntervalSince1970
        times.withLock { times in
            times.of[item] = now
            times.changed = true
        }
    }

    /// When `item` was last used, if it was noted.
    func lastUse(of item: UInt64) -> Double? { times.withLock { $0.of[item] } }

    /// Saves the times of the items in `kept` (those whose content is here), forgetting the
    /// others; nothing is written when nothing changed.
    func save(keeping kept: Set<UInt64>) {
        let saved = times.withLock { times -> [String: Double]? in
            let left = times.of.filter { kept.contains($0.key) }
            guard times.changed || left.count != times.of.count else { return nil }
            times = (left, false)
            return Dictionary(uniqueKeysWithValues: left.map { (String($0.key), $0.value) })
        }
        guard let saved, let data = try? JSONEncoder().encode(saved) else { return }
        try? StoreFiles.replace(file, with: Array(data), durable: false)
    }
}
