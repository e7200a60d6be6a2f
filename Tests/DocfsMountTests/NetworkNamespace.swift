import Foundation

/// A "machine"'s own network for many-machine tests (issue 22 §6): a network namespace joined
/// to this machine's by a veth pair, so a daemon started in it (`launcher`) reaches a server
/// only over the pair, and its link can be cut (the host side taken down: packets vanish, as
/// when a cable is pulled, no connection is told) and restored. Alone, the pair is the
/// namespace's only link, to a server listening on `hostAddress`; in a `TestNetwork` the host
/// side is a port of the network's bridge, which joins every namespace of the test (the
/// server's among them).
final class NetworkNamespace {
    let name: String
    let hostSide: String
    /// The host side's address, when the pair is the namespace's only link: what a server
    /// listens on for this namespace.
    let hostAddress: String
    /// The namespace's own address.
    let address: String

    /// Makes the namespace `docfs-PIDLABELSUBNET` and its pair on 10.201.SUBNET.0/24: alone
    /// (the host side 10.201.SUBNET.1, the namespace .2), or as `number` on `bridge`. The
    /// subnet in its names keeps apart the networks of tests running at once in one process.
    init(_ label: String, subnet: Int, bridge: String? = nil, number: Int = 2) throws {
        let tag = "\(getpid() % 100_000)\(label)\(subnet)"
        name = "docfs-\(tag)"
        hostSide = "dfh\(tag)".prefix(15).description
        let inside = "dfn\(tag)".prefix(15).description
        hostAddress = "10.201.\(subnet).1"
        address = "10.201.\(subnet).\(number)"
        try Self.ip("netns add \(name)")
        do {
            try Self.ip("link add \(hostSide) type veth peer name \(inside)")
            try Self.ip("link set \(inside) netns \(name)")
            if let bridge {
                try Self.ip("link set \(hostSide) master \(bridge)")
            } else {
                try Self.ip("addr add \(hostAddress)/24 dev \(hostSide)")
            }
            try Self.ip("link set \(hostSide) up")
            try Self.ip("-n \(name) addr add \(address)/24 dev \(inside)")
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

    static func ip(_ arguments: String) throws {
        let answer = try shell("ip \(arguments) 2>&1")
        guard answer.status == 0 else { throw FixtureError("ip \(arguments): \(answer.output)") }
    }
}

/// A test's own network (issue 22 §6: the server in one namespace, each daemon in its own): a
/// bridge on 10.201.SUBNET.0/24 (this machine at .1, so the test's own commands reach the
/// server too) joining namespaces made with `namespace`, each cut off and restored alone.
final class TestNetwork {
    let subnet: Int
    let bridge: String
    private(set) var namespaces: [NetworkNamespace] = []

    init(subnet: Int) throws {
        self.subnet = subnet
        bridge = "dfbr\(getpid() % 100_000)-\(subnet)".prefix(15).description
        try NetworkNamespace.ip("link add \(bridge) type bridge")
        do {
            try NetworkNamespace.ip("addr add 10.201.\(subnet).1/24 dev \(bridge)")
            try NetworkNamespace.ip("link set \(bridge) up")
        } catch {
            remove()
            throw error
        }
    }

    /// A namespace on the bridge, at 10.201.SUBNET.(2 + how many came before).
    func namespace(_ label: String) throws -> NetworkNamespace {
        let made = try NetworkNamespace(label, subnet: subnet, bridge: bridge, number: 2 + namespaces.count)
        namespaces.append(made)
        return made
    }

    func remove() {
        for namespace in namespaces { namespace.remove() }
        _ = try? NetworkNamespace.ip("link del \(bridge)")
    }
}
