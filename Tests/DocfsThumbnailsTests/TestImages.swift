import Foundation

/// The images `scripts/make-test-images` writes, made once per test process.
enum TestImages {
    static let directory: String = {
        let directory = "/tmp/docfs-tests/images-\(getpid())"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../scripts/make-test-images").standardized.path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [script, directory]
        process.standardOutput = FileHandle.nullDevice
        try? process.run()
        process.waitUntilExit()
        return directory
    }()

    static func path(_ name: String) -> String { directory + "/" + name }

    static func bytes(_ name: String) -> [UInt8] {
        Array((try? Data(contentsOf: URL(fileURLWithPath: path(name)))) ?? Data())
    }
}
