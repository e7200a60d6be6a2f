/// Marks the changes the sync engine applies (issue 22 §3) with the machine they came from:
/// the stitcher keeps them out of the outbox (they would go back up), and presenters hear them
/// with origin `remote` and that machine's name. Bound for the duration of one coordinated
/// apply, on the sync thread that makes it.
enum RemoteApplication {
    @TaskLocal static var machine: String? = nil

    static var isApplying: Bool { machine != nil }
}
