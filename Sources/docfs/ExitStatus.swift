import ArgumentParser

/// The exit statuses every `docfs` command keeps to, so scripts can tell a failed operation
/// from a mistyped command and `index check`'s findings from its failure to check
/// (docs/user-guide.md lists them).
enum ExitStatus {  // 0: the command did what it was asked
    /// The operation failed (the store, the daemon or the system said no); the message says why.
    static let failed: Int32 = 1
    /// The command line was wrong: an unknown option, a missing argument, a bad predicate.
    static let usage: Int32 = 2
    /// `docfs index check` or `docfs remote check` compared and found differences.
    static let differences: Int32 = 3
}
