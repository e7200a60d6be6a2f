/// How a version of a linked store's document is numbered (DESIGN §9.0 "Numbers"): a version's
/// number is given by the remote's commit order and is the same on every machine, so a save
/// made here that has not gone up yet has no number. It is *pending*: the store keeps it under a
/// key from a range no remote number reaches (`pendingBase` up: `p1`, `p2`, … as people read it),
/// and renames it to the number the remote gives it when it commits. Nothing ever shows a
/// guessed number that later changes, and a number the remote gives is free here by
/// construction (no save of this machine's can hold one).
///
/// A store with no remote numbers its saves itself, 1 up: it is the only machine.
public enum VersionNumber {
    /// Keys at or above this are pending saves; remote numbers stay below it.
    public static let pendingBase: UInt64 = 1 << 40

    /// Whether `number` is a pending save's key.
    public static func isPending(_ number: UInt64) -> Bool { number > pendingBase }

    /// As people read it: `7`, or `p2` for the second pending save of an item.
    public static func shown(_ number: UInt64) -> String {
        isPending(number) ? "p\(number - pendingBase)" : String(number)
    }

    /// Parses what `shown` writes (`7`, `p2`); nil for anything else.
    public static func parse(_ text: some StringProtocol) -> UInt64? {
        if text.first == "p" {
            guard let ordinal = UInt64(text.dropFirst()), ordinal > 0, ordinal < pendingBase else { return nil }
            return pendingBase + ordinal
        }
        guard let number = UInt64(text), !isPending(number) else { return nil }
        return number
    }

    /// The key a new save made on top of `current` takes in a store numbering `pending` (linked
    /// to a remote) or not, before skipping keys held (`VersionStore.nextSaveNumber`).
    public static func after(_ current: UInt64, pending: Bool) -> UInt64 {
        pending ? max(current, pendingBase) : current
    }
}
