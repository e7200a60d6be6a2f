/// Marks the changes the sync engine applies (issue 22 §3) with the machine they came from:
/// the stitcher keeps them out of the outbox (they would go back up), and presenters hear them
/// with origin `remote` and that machine's name. Bound for the duration of one coordinated
/// apply, on the sync thread that makes it. The sync engine's own bookkeeping here (a version
/// number raised to the remote's, a conflict mark cleared) binds `ownBookkeeping`: kept out of
/// the outbox too, but no other machine's change.
package enum RemoteApplication {
    @TaskLocal package static var machine: String? = nil

    package static let ownBookkeeping = ""

    static var isApplying: Bool { machine != nil }

    /// The other machine whose change is being applied, if one is.
    static var otherMachine: String? {
        guard let machine, machine != ownBookkeeping else { return nil }
        return machine
    }
}
