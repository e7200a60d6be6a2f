import DocfsCore

/// What the kernel must forget after a change docfs made itself, not through a request: the
/// names whose entries changed. Sent by whoever owns the kernel session (the bridge).
public struct KernelInvalidations: Sendable {
    public var entries: [(parent: NodeID, name: FileName)] = []
    /// Nodes whose attributes and pages changed.
    public var inodes: [NodeID] = []
    /// Nodes whose attributes alone changed.
    public var attributes: [NodeID] = []

    public init() {}

    /// Adds what `other` says to forget.
    public mutating func add(_ other: KernelInvalidations) {
        entries += other.entries
        inodes += other.inodes
        attributes += other.attributes
    }
}
