import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Records what each step of a scenario answered (ok, a value, or an errno name), so the same
/// scenario run on a plain ext4 directory and on a docfs mount can be compared line by line.
struct Recorder {
    private(set) var lines: [String] = []

    mutating func call(_ label: String, _ result: Int32) {
        lines.append("\(label): \(result < 0 ? errnoName(errno) : "ok")")
    }

    mutating func call(_ label: String, _ result: Int) {
        lines.append("\(label): \(result < 0 ? errnoName(errno) : "\(result)")")
    }

    mutating func note(_ label: String, _ value: Any) {
        lines.append("\(label): \(value)")
    }
}

func errnoName(_ value: Int32) -> String {
    let names: [Int32: String] = [
        EPERM: "EPERM", ENOENT: "ENOENT", EBADF: "EBADF", EACCES: "EACCES", EEXIST: "EEXIST",
        EXDEV: "EXDEV", ENOTDIR: "ENOTDIR", EISDIR: "EISDIR", EINVAL: "EINVAL", ENOSPC: "ENOSPC",
        EROFS: "EROFS", EMLINK: "EMLINK", ERANGE: "ERANGE", ENAMETOOLONG: "ENAMETOOLONG",
        ENOTEMPTY: "ENOTEMPTY", ELOOP: "ELOOP", ENODATA: "ENODATA", EOPNOTSUPP: "EOPNOTSUPP",
        EAGAIN: "EAGAIN", E2BIG: "E2BIG", ENXIO: "ENXIO", EFBIG: "EFBIG", ENOTCONN: "ENOTCONN",
        EIO: "EIO", ENOSYS: "ENOSYS", EBUSY: "EBUSY", ETXTBSY: "ETXTBSY",
    ]
    return names[value] ?? "errno\(value)"
}

/// Runs `scenario` in a plain directory on the backing disk and in a fresh docfs mount, and
/// expects the same answers from every step and the same tree afterwards.
func expectSameAsPlainDirectory(_ scenario: (String, inout Recorder) -> Void,
                                options: [String] = MountFixture.defaultOptions,
                                sourceLocation: SourceLocation = #_sourceLocation) throws {
    let fixture = try MountFixture(options: options)
    defer { fixture.tearDown() }
    let plain = fixture.root + "/plain"
    mkdir(plain, 0o755)
    var expected = Recorder()
    scenario(plain, &expected)
    if ProcessInfo.processInfo.environment["DOCFS_TEST_VERBOSE"] != nil { print(expected.lines.joined(separator: "\n")) }
    var actual = Recorder()
    scenario(fixture.mountPoint, &actual)
    for (index, line) in expected.lines.enumerated() {
        let other = index < actual.lines.count ? actual.lines[index] : "(missing)"
        #expect(other == line, "step \(index)", sourceLocation: sourceLocation)
    }
    #expect(actual.lines.count == expected.lines.count, sourceLocation: sourceLocation)
    let a = TreeSnapshot.take(plain), b = TreeSnapshot.take(fixture.mountPoint)
    #expect(a == b, "trees differ:\n\(TreeSnapshot.difference(a, b))", sourceLocation: sourceLocation)
}
