import CLinux
#if canImport(Glibc)
import Glibc
#endif

/// The changes a setattr asks for (chmod, chown, truncate, utimens). Nil fields stay as they are.
public struct AttributeChanges: Sendable {
    /// A time to set: a given instant, or "now" (UTIME_NOW).
    public enum TimeChange: Sendable, Equatable {
        case now
        case at(timespec)

        public static func == (a: TimeChange, b: TimeChange) -> Bool {
            switch (a, b) {
            case (.now, .now): return true
            case let (.at(x), .at(y)): return x.tv_sec == y.tv_sec && x.tv_nsec == y.tv_nsec
            default: return false
            }
        }
    }

    public var mode: mode_t?
    public var uid: uid_t?
    public var gid: gid_t?
    public var size: off_t?
    public var accessTime: TimeChange?
    public var modificationTime: TimeChange?

    public init(mode: mode_t? = nil, uid: uid_t? = nil, gid: gid_t? = nil, size: off_t? = nil,
                accessTime: TimeChange? = nil, modificationTime: TimeChange? = nil) {
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.accessTime = accessTime
        self.modificationTime = modificationTime
    }

    var changesTimes: Bool { accessTime != nil || modificationTime != nil }

    /// The utimensat argument: UTIME_OMIT for a time left alone.
    var timespecs: [timespec] {
        func spec(_ change: TimeChange?) -> timespec {
            switch change {
            case nil: return timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_OMIT)
            case .now: return timespec(tv_sec: 0, tv_nsec: DOCFS_UTIME_NOW)
            case .at(let t): return t
            }
        }
        return [spec(accessTime), spec(modificationTime)]
    }
}
