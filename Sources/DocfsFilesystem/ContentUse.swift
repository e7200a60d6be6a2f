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
    private let times: Mutex<[UInt64: Double]>

    init(file: String) {
        self.file = file
        let saved = (try? StoreFiles.read(file)).flatMap { $0 }
            .flatMap { try? JSONDecoder().decode([String: Double].self, from: Data($0)) } ?? [:]
        var times: [UInt64: Double] = [:]
        for (item, time) in saved { if let item = UInt64(item) { times[item] = time } }
        self.times = Mutex(times)
    }

    /// `item` was used now.
    func used(_ item: UInt64) {
        let now = Date().timeIntervalSince1970
        times.withLock { $0[item] = now }
    }

    /// When `item` was last used, if it was noted.
    func lastUse(of item: UInt64) -> Double? { times.withLock { $0[item] } }

    /// Saves the times of the items in `kept` (those whose content is here), forgetting the others.
    func save(keeping kept: Set<UInt64>) {
        let saved = times.withLock { times -> [String: Double] in
            times = times.filter { kept.contains($0.key) }
            return Dictionary(uniqueKeysWithValues: times.map { (String($0.key), $0.value) })
        }
        guard let data = try? JSONEncoder().encode(saved) else { return }
        try? StoreFiles.replace(file, with: Array(data), durable: false)
    }
}
