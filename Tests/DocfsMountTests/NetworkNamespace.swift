import Foundation

/// A "machine"'s own network for many-machine tests (issue 22 §6): a network namespace joined
/// to this machine's by a veth pair, so a daemon started in it (`launcher`) reaches a server
/// listening on `hostAddress` only over the pair, and its link can be cut (the host side taken
/// down: packets vanish, as when a cable is pulled, no connection is told) and restored.
final class NetworkNamespace {
    let name: String
    let hostSide: String
    /// The host side's address: what a server listens on for this namespace.
    let hostAddress: String

    /// Makes the namespace `docfs-PID-LABEL` and its pair on 10.201.SUBNET.0/24.
    init(_ label: String, subnet: Int) throws {
        let tag = "\(getpid() % 100_000)\(label)"
        name = "docfs-\(tag)"
        hostSide = "dfh\(tag)".prefix(15).description
        let inside = "dfn\(tag)".prefix(15).description
        hostAddress = "10.201.\(subnet).1"
        try Self.ip("netns add \(name)")
        do {
            try Self.ip("link add \(hostSide) type veth peer name \(inside)")
            try Self.ip("link set \(inside) netns \(name)")
            try Self.ip("addr add \(hostAddress)/24 dev \(hostSide)")
            try Self.ip("link set \(hostSide) up")
            try Self.ip("-n \(name) addr add 10.201.\(subnet).2/24 dev \(inside)")
            try Self.ip("-n \(name) link set \(inside) up")
            try Self.ip("-n \(name) link set lo up")
        } catch {
            remove()
            throw error
        }
    }

    /// The command prefix that runs a program in the namespace (its network only: the mounts
    /// it makes are everyone's).
    var launcher: [String] { ["/usr/bin/nsenter", "--net=/run/netns/\(name)", "--"] }

    /// Pulls the cable: nothing passes until `restore`.
    func cut() throws { try Self.ip("link set \(hostSide) down") }

    func restore() throws { try Self.ip("link set \(hostSide) up") }

    func remove() {
        _ = try? Self.ip("link del \(hostSide)")
        _ = try? Self.ip("netns del \(name)")
    }

    private static func ip(_ arguments: String) throws {
        let answer = try shell("ip \(arguments) 2>&1")
        guard answer.status == 0 else { throw FixtureError("ip \(arguments): \(answer.output)") }
    }
}
