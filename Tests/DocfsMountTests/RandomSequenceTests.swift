import CLinux
import Foundation
import DocfsTestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Model-based random sequences: several threads create, write, truncate, rename, unlink, link
/// and set xattrs through the mount; the same operations replayed on a plain directory must
/// answer the same and leave the same tree. The replay applies docfs's one documented departure
/// from a plain directory (`SafeSaveModel`: a safe-save keeps the document's user attributes).
@Suite(.needsRootAndFUSE) struct RandomSequenceTests {
    static let threads = 4
    static let operationsPerThread = 400

    /// Threads share one namespace; each operation runs under a lock so the order is known.
    @Test(arguments: [UInt64(0x5eed_0001), 0x5eed_0002])
    func sharedNamespaceInterleaved(seed: UInt64) throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let log = OperationLog()
        let workers = (0..<Self.threads).map { index -> @Sendable () -> Void in
            {
                var rng = SplitMix(seed: seed &+ UInt64(index) &* 0x9e37_79b9)
                var handles = Handles()
                for _ in 0..<Self.operationsPerThread {
                    let operation = RandomOperation.random(&rng, thread: index, prefix: "")
                    log.serialized { entries in
                        let result = operation.apply(in: fixture.mountPoint, handles: &handles)
                        entries.append((operation, result, SafeSaveModel.now()))
                    }
                }
                handles.closeAll()
            }
        }
        try runAll(workers)
        let plain = fixture.root + "/plain"
        mkdir(plain, 0o755)
        var replayHandles = Handles(model: SafeSaveModel())
        var mismatches: [String] = []
        for (index, (operation, result, time)) in log.entries.enumerated() {
            let replayed = operation.apply(in: plain, handles: &replayHandles, at: time)
            if replayed != result && mismatches.count < 10 {
                mismatches.append("#\(index) \(operation): docfs \(result), plain \(replayed)")
            }
        }
        replayHandles.closeAll()
        #expect(log.entries.count == Self.threads * Self.operationsPerThread)
        let worked = log.entries.filter { !$0.1.hasPrefix("E") && $0.1 != "no handle" }.count
        #expect(worked * 5 > log.entries.count, "only \(worked) operations succeeded: the sequence tests little")
        if ProcessInfo.processInfo.environment["DOCFS_TEST_VERBOSE"] != nil { print("seed \(seed): \(worked) of \(log.entries.count) succeeded") }
        #expect(mismatches.isEmpty, "seed \(seed):\n\(mismatches.joined(separator: "\n"))")
        let a = TreeSnapshot.take(plain), b = TreeSnapshot.take(fixture.mountPoint)
        let same = a == b
        #expect(same, "seed \(seed): trees differ:\n\(TreeSnapshot.difference(a, b))")
    }

    /// Threads run truly concurrently, each in a folder of its own; each thread's sequence is
    /// replayed in its folder on the plain directory.
    @Test func disjointFoldersConcurrently() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let seed: UInt64 = 0xc0ff_ee00
        let logs = (0..<Self.threads).map { _ in OperationLog() }
        let workers = (0..<Self.threads).map { index -> @Sendable () -> Void in
            {
                mkdir(fixture.mountPoint + "/t\(index)", 0o755)
                var rng = SplitMix(seed: seed &+ UInt64(index))
                var handles = Handles()
                for _ in 0..<Self.operationsPerThread {
                    let operation = RandomOperation.random(&rng, thread: index, prefix: "t\(index)/")
                    let result = operation.apply(in: fixture.mountPoint, handles: &handles)
                    let time = SafeSaveModel.now()
                    logs[index].serialized { $0.append((operation, result, time)) }
                }
                handles.closeAll()
            }
        }
        try runAll(workers)
        let plain = fixture.root + "/plain"
        mkdir(plain, 0o755)
        var mismatches: [String] = []
        for (index, log) in logs.enumerated() {
            mkdir(plain + "/t\(index)", 0o755)
            var handles = Handles(model: SafeSaveModel())
            for (operation, result, time) in log.entries {
                let replayed = operation.apply(in: plain, handles: &handles, at: time)
                if replayed != result && mismatches.count < 10 {
                    mismatches.append("\(operation): docfs \(result), plain \(replayed)")
                }
            }
            handles.closeAll()
        }
        #expect(mismatches.isEmpty, "\(mismatches.joined(separator: "\n"))")
        let a = TreeSnapshot.take(plain), b = TreeSnapshot.take(fixture.mountPoint)
        let same = a == b
        #expect(same, "trees differ:\n\(TreeSnapshot.difference(a, b))")
    }

    /// Runs each body on a thread of its own and waits for all of them.
    private func runAll(_ workers: [@Sendable () -> Void]) throws {
        let done = DispatchGroup()
        for body in workers {
            done.enter()
            Thread {
                body()
                done.leave()
            }.start()
        }
        if done.wait(timeout: .now() + 240) == .timedOut {
            throw FixtureError("random sequence did not finish in time")
        }
    }
}

/// The operations the threads performed, in order, with what each answered.
final class OperationLog: @unchecked Sendable {
    private let lock = NSLock()
    /// Each operation, its answer, and when it returned (monotonic seconds).
    private(set) var entries: [(RandomOperation, String, Double)] = []

    func serialized(_ body: (inout [(RandomOperation, String, Double)]) -> Void) {
        lock.lock()
        defer { lock.unlock() }
        body(&entries)
    }
}

/// Open descriptors by slot number, so a replay opens and uses "the same" handles.
struct Handles {
    var slots: [Int: Int32] = [:]
    /// Set for the replay on the plain directory.
    var model: SafeSaveModel? = nil

    mutating func closeAll() {
        for fd in slots.values { close(fd) }
        slots = [:]
    }
}

/// One step of a random sequence, and how to perform it under a root directory.
enum RandomOperation: CustomStringConvertible {
    case create(String, mode: mode_t)
    case open(slot: Int, String, flags: Int32)
    case write(slot: Int, offset: Int, length: Int, fill: UInt8)
    case read(slot: Int, offset: Int, length: Int)
    case truncate(String, size: Int)
    case ftruncate(slot: Int, size: Int)
    case fsync(slot: Int)
    case close(slot: Int)
    case rename(String, String, flags: UInt32)
    case unlink(String)
    case link(String, String)
    case symlink(target: String, String)
    case mkdir(String)
    case rmdir(String)
    case setxattr(String, name: String, value: String, flags: Int32)
    case removexattr(String, name: String)
    case stat(String)
    case list(String)

    static let folders = ["", "d0/", "d1/", "d0/e/"]
    static let files = ["f0", "f1", "f2", "f3", "f4"]

    static func random(_ rng: inout SplitMix, thread: Int, prefix: String) -> RandomOperation {
        func path() -> String { prefix + folders.randomElement(using: &rng)! + files.randomElement(using: &rng)! }
        func folder() -> String { prefix + ["d0", "d1", "d0/e", "d1/g"].randomElement(using: &rng)! }
        func slot() -> Int { thread * 10 + Int.random(in: 0..<3, using: &rng) }
        switch Int.random(in: 0..<100, using: &rng) {
        case 0..<10: return .create(path(), mode: [0o644, 0o600, 0o755].randomElement(using: &rng)!)
        case 10..<20: return .open(slot: slot(), path(), flags: [O_RDWR, O_RDONLY, O_WRONLY | O_APPEND, O_RDWR | O_TRUNC, O_RDWR | O_CREAT].randomElement(using: &rng)!)
        case 20..<34: return .write(slot: slot(), offset: Int.random(in: 0..<70_000, using: &rng), length: Int.random(in: 1..<20_000, using: &rng), fill: UInt8.random(in: 1...255, using: &rng))
        case 34..<42: return .read(slot: slot(), offset: Int.random(in: 0..<70_000, using: &rng), length: Int.random(in: 1..<40_000, using: &rng))
        case 42..<46: return .truncate(path(), size: Int.random(in: 0..<90_000, using: &rng))
        case 46..<49: return .ftruncate(slot: slot(), size: Int.random(in: 0..<90_000, using: &rng))
        case 49..<51: return .fsync(slot: slot())
        case 51..<56: return .close(slot: slot())
        case 56..<64:
            let flags: [UInt32] = [0, 0, DOCFS_RENAME_NOREPLACE, DOCFS_RENAME_EXCHANGE]
            let same = Bool.random(using: &rng)
            return .rename(same ? path() : folder(), same ? path() : folder(), flags: flags.randomElement(using: &rng)!)
        case 64..<70: return .unlink(path())
        case 70..<74: return .link(path(), path())
        case 74..<76: return .symlink(target: files.randomElement(using: &rng)!, path())
        case 76..<80: return .mkdir(folder())
        case 80..<83: return .rmdir(folder())
        case 83..<90: return .setxattr(path(), name: ["user.a", "user.b", "user.xdg.tags"].randomElement(using: &rng)!,
                                       value: String(repeating: "v", count: Int.random(in: 0..<300, using: &rng)),
                                       flags: [0, 0, DOCFS_XATTR_CREATE, DOCFS_XATTR_REPLACE].randomElement(using: &rng)!)
        case 90..<93: return .removexattr(path(), name: ["user.a", "user.b"].randomElement(using: &rng)!)
        case 93..<97: return .stat(path())
        default: return .list(prefix + folders.randomElement(using: &rng)!)
        }
    }

    func apply(in root: String, handles: inout Handles, at time: Double = 0) -> String {
        func at(_ path: String) -> String { root + "/" + path }
        func answer(_ r: Int32) -> String { r < 0 ? errnoName(errno) : "ok" }
        func answer(_ r: Int) -> String { r < 0 ? errnoName(errno) : "\(r)" }
        switch self {
        case let .create(path, mode):
            let existed = access(at(path), F_OK) == 0
            let fd = DocfsMountTests.open(at(path), O_CREAT | O_EXCL | O_WRONLY, mode)
            if fd >= 0 { Glibc.close(fd) }
            let failed = fd < 0 ? errno : 0
            if fd >= 0 && !existed { handles.model?.created(at(path), time: time) }
            errno = failed
            return answer(fd < 0 ? -1 : 0)
        case let .open(slot, path, flags):
            if let old = handles.slots.removeValue(forKey: slot) { Glibc.close(old) }
            let existed = access(at(path), F_OK) == 0
            let fd = DocfsMountTests.open(at(path), flags, 0o644)
            let failed = fd < 0 ? errno : 0
            if fd >= 0 { handles.slots[slot] = fd }
            if fd >= 0 && !existed && flags & O_CREAT != 0 { handles.model?.created(at(path), time: time) }
            errno = failed
            return answer(fd < 0 ? -1 : 0)
        case let .write(slot, offset, length, fill):
            guard let fd = handles.slots[slot] else { return "no handle" }
            let bytes = [UInt8](repeating: fill, count: length)
            return answer(pwrite(fd, bytes, length, off_t(offset)))
        case let .read(slot, offset, length):
            guard let fd = handles.slots[slot] else { return "no handle" }
            var bytes = [UInt8](repeating: 0, count: length)
            let n = pread(fd, &bytes, length, off_t(offset))
            guard n >= 0 else { return errnoName(errno) }
            return "\(n) bytes, sum \(bytes[0..<n].reduce(UInt64(0)) { $0 &* 31 &+ UInt64($1) })"
        case let .truncate(path, size):
            return answer(Glibc.truncate(at(path), off_t(size)))
        case let .ftruncate(slot, size):
            guard let fd = handles.slots[slot] else { return "no handle" }
            return answer(Glibc.ftruncate(fd, off_t(size)))
        case let .fsync(slot):
            guard let fd = handles.slots[slot] else { return "no handle" }
            return answer(Glibc.fsync(fd))
        case let .close(slot):
            guard let fd = handles.slots.removeValue(forKey: slot) else { return "no handle" }
            return answer(Glibc.close(fd))
        case let .rename(from, to, flags):
            let replace = handles.model?.beforeRename(at(from), at(to), flags: flags) ?? false
            let r = docfs_renameat2(AT_FDCWD, at(from), AT_FDCWD, at(to), flags)
            let failed = errno
            if r == 0 && !replace { handles.model?.renamed(at(from), at(to), flags: flags, time: time) }
            errno = failed
            return answer(r)
        case let .unlink(path):
            return answer(Glibc.unlink(at(path)))
        case let .link(from, to):
            return answer(Glibc.link(at(from), at(to)))
        case let .symlink(target, path):
            return answer(Glibc.symlink(target, at(path)))
        case let .mkdir(path):
            return answer(Glibc.mkdir(at(path), 0o755))
        case let .rmdir(path):
            return answer(Glibc.rmdir(at(path)))
        case let .setxattr(path, name, value, flags):
            return answer(docfs_lsetxattr(at(path), name, value, value.utf8.count, flags))
        case let .removexattr(path, name):
            return answer(docfs_lremovexattr(at(path), name))
        case let .stat(path):
            var st = Glibc.stat()
            guard lstat(at(path), &st) == 0 else { return errnoName(errno) }
            let size = st.st_mode & S_IFMT == S_IFDIR ? 0 : st.st_size
            return "mode \(String(st.st_mode, radix: 8)) size \(size) links \(st.st_mode & S_IFMT == S_IFDIR ? 0 : st.st_nlink)"
        case let .list(path):
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: at(path)) else { return "unlisted" }
            return names.sorted().joined(separator: ",")
        }
    }

    var description: String {
        switch self {
        case let .create(p, m): return "create \(p) \(String(m, radix: 8))"
        case let .open(s, p, f): return "open #\(s) \(p) flags \(f)"
        case let .write(s, o, l, _): return "write #\(s) at \(o) len \(l)"
        case let .read(s, o, l): return "read #\(s) at \(o) len \(l)"
        case let .truncate(p, s): return "truncate \(p) \(s)"
        case let .ftruncate(h, s): return "ftruncate #\(h) \(s)"
        case let .fsync(s): return "fsync #\(s)"
        case let .close(s): return "close #\(s)"
        case let .rename(a, b, f): return "rename \(a) \(b) flags \(f)"
        case let .unlink(p): return "unlink \(p)"
        case let .link(a, b): return "link \(a) \(b)"
        case let .symlink(t, p): return "symlink \(t) \(p)"
        case let .mkdir(p): return "mkdir \(p)"
        case let .rmdir(p): return "rmdir \(p)"
        case let .setxattr(p, n, v, f): return "setxattr \(p) \(n) len \(v.count) flags \(f)"
        case let .removexattr(p, n): return "removexattr \(p) \(n)"
        case let .stat(p): return "stat \(p)"
        case let .list(p): return "list \(p)"
        }
    }
}

/// docfs's safe-save rules (docs/semantics.md), applied to a plain directory so a replay there
/// predicts what docfs answers: a file made moments ago renamed over (or exchanged with) a
/// document takes the document's user attributes it lacks; a file created where a document was
/// just renamed away to a backup name of it (`doc` → `doc~`) takes the backup's. Every file the
/// test creates counts as made moments ago.
struct SafeSaveModel {
    private var vacated: [String: (backup: String, inode: ino_t, time: Double)] = [:]

    static func now() -> Double {
        var t = timespec()
        clock_gettime(CLOCK_MONOTONIC, &t)
        return Double(t.tv_sec) + Double(t.tv_nsec) / 1e9
    }

    /// Before a rename: carries the attributes over when it is a replace; answers whether it is.
    func beforeRename(_ from: String, _ to: String, flags: UInt32) -> Bool {
        guard flags & DOCFS_RENAME_NOREPLACE == 0, let source = Self.single(from), let target = Self.single(to),
              source.st_ino != target.st_ino else { return false }
        Self.copyMissingAttributes(from: to, to: from)
        return true
    }

    mutating func renamed(_ from: String, _ to: String, flags: UInt32, time: Double) {
        guard flags & DOCFS_RENAME_EXCHANGE == 0 else { return }
        let (folder, name) = Self.split(from), (newFolder, newName) = Self.split(to)
        guard folder == newFolder, newName.utf8.count > name.utf8.count,
              Self.contains(newName, name),
              let moved = Self.single(to) else { return }
        vacated[from] = (to, moved.st_ino, time)
    }

    mutating func created(_ path: String, time: Double) {
        guard let entry = vacated.removeValue(forKey: path), time - entry.time < 30,
              let backup = Self.single(entry.backup), backup.st_ino == entry.inode else { return }
        Self.copyMissingAttributes(from: entry.backup, to: path)
    }

    /// A regular file with one link.
    private static func single(_ path: String) -> stat? {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_nlink == 1 else { return nil }
        return st
    }

    private static func copyMissingAttributes(from source: String, to target: String) {
        var names = [CChar](repeating: 0, count: 4096)
        let n = docfs_llistxattr(source, &names, names.count)
        guard n > 0 else { return }
        for raw in names[0..<n].split(separator: 0) {
            let name = String(decoding: raw.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            var value = [UInt8](repeating: 0, count: 65536)
            let m = docfs_lgetxattr(source, name, &value, value.count)
            if m >= 0 { _ = docfs_lsetxattr(target, name, value, m, DOCFS_XATTR_CREATE) }
        }
    }

    private static func split(_ path: String) -> (String, String) {
        guard let slash = path.lastIndex(of: "/") else { return ("", path) }
        return (String(path[..<slash]), String(path[path.index(after: slash)...]))
    }

    private static func contains(_ haystack: String, _ needle: String) -> Bool {
        let a = Array(haystack.utf8), b = Array(needle.utf8)
        return a.count > b.count && (0...(a.count - b.count)).contains { Array(a[$0..<($0 + b.count)]) == b }
    }
}
