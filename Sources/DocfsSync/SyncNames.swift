/// The rule for two items that claim one name in one folder (two machines created them, or
/// moved items there, while apart; issue 22 §4): both are kept, and the item whose creation
/// committed later on the remote (an item not yet committed counts as latest) takes the first
/// free name of `stem (2).ext`, `stem (3).ext`, … (the extension being what follows the last
/// dot that is not the first character), as Finder and most sync clients name copies. The
/// remote gives a name to one item at a time (`TreeProblem.nameTaken`): the machine whose
/// commit finds the name taken renames its item; a machine that applies an item to a name one
/// of its own holds without the remote moves its own aside, and that rename goes up.
enum SyncNames {
    static func free<Failure: Error>(_ name: String, isTaken: (String) throws(Failure) -> Bool) throws(Failure) -> String {
        var (stem, suffix) = split(name)
        // A name numbered already goes on from its number: `a (2).txt` gives `a (3).txt`, not
        // `a (2) (2).txt`.
        var number = 2
        if let numbered = numbered(stem) { (stem, number) = (numbered.stem, numbered.number + 1) }
        while true {
            let candidate = "\(stem) (\(number))\(suffix)"
            if try !isTaken(candidate) { return candidate }
            number += 1
        }
    }

    /// `stem (N)` taken apart, N from 2 up (below a billion: what goes on from it never overflows).
    private static func numbered(_ stem: String) -> (stem: String, number: Int)? {
        guard stem.hasSuffix(")"), let open = stem.lastIndex(of: "("), open > stem.startIndex,
              stem[stem.index(before: open)] == " ",
              let number = Int(stem[stem.index(after: open)..<stem.index(before: stem.endIndex)]), number >= 2, number < 1_000_000_000,
              String(number) == stem[stem.index(after: open)..<stem.index(before: stem.endIndex)] else { return nil }
        return (String(stem[..<stem.index(before: open)]), number)
    }

    private static func split(_ name: String) -> (stem: String, suffix: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        return (String(name[..<dot]), String(name[dot...]))
    }
}
