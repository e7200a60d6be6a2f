/// Marks the changes the sync engine applies (issue 22 §3): they come from the remote, so the
/// stitcher does not put them in the outbox (they would go back up). Bound for the duration of
/// one coordinated apply, on the sync thread that makes it.
enum RemoteApplication {
    @TaskLocal static var isApplying = false
}
