import DocfsCore
import Foundation
import Testing
@testable import DocfsProvider

extension VersionStore {
    /// Kept version `version` of `item`, all its bytes (copied out through a file, as a restore
    /// copies them).
    func bytes(of item: ItemID, version: UInt64, current: String) throws -> [UInt8] {
        let content = try openContent(item, version: version, current: current)
        let made = NSTemporaryDirectory() + "docfs-made-\(UUID().uuidString)"
        let fd = open(made, O_RDWR | O_CREAT | O_EXCL, 0o600)
        unlink(made)
        defer { close(fd) }
        let length = try content.copy(to: fd)
        var bytes = [UInt8](repeating: 0, count: Int(length))
        #expect(bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(length), 0) } == Int(length))
        return bytes
    }
}
