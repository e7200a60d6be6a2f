#if canImport(Glibc)
import Glibc
#endif

extension timespec {
    /// A time given in seconds since the epoch (as versions and promises carry it), to the
    /// nanosecond a double holds.
    public init(seconds: Double) {
        let whole = seconds.rounded(.down)
        self.init(tv_sec: Int(whole), tv_nsec: Int((seconds - whole) * 1e9))
    }
}
