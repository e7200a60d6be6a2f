#if canImport(Glibc)
import Glibc
#endif

/// The number FUSE knows an item by. 1 is the mount root.
public typealias NodeID = UInt64

/// What a lookup, create, mkdir, mknod, symlink or link answers: the node, its generation and
/// its attributes. Each Entry handed to the kernel counts as one lookup of that node.
public struct Entry: Sendable {
    public var node: NodeID
    public var generation: UInt64
    public var attributes: stat
    /// Whether the kernel may keep the name and attributes for the cache policy's timeouts;
    /// false for what docfs makes up as it is asked (a link to where an item is now).
    public var cacheable: Bool

    public init(node: NodeID, generation: UInt64, attributes: stat, cacheable: Bool = true) {
        self.node = node
        self.generation = generation
        self.attributes = attributes
        self.cacheable = cacheable
    }
}

/// Who asked: the process behind a request, as the kernel reports it.
public struct Caller: Sendable, Equatable {
    public var uid: uid_t
    public var gid: gid_t
    public var pid: pid_t

    public init(uid: uid_t, gid: gid_t, pid: pid_t) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
    }

    /// The daemon itself (root-owned internal work and in-process tests).
    public static let daemon = Caller(uid: getuid(), gid: getgid(), pid: getpid())
}

