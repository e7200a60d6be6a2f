/// The rule for two items that claim one name in one folder (two machines created them, or
/// moved items there, while apart; issue 22 §4): both are kept, and the item whose creation
/// committed later on the remote (an item not yet committed counts as latest) takes the first
/// free name of `stem (2).ext`, `stem (3).ext`, … (the extension being what follows the last
/// dot that is not the first character), as Finder and most sync clients name copies. The
/// machine that finds the clash makes the rename, and it goes up like any local rename.
enum SyncNames {
    static func free<Failure: Error>(_ name: String, isTaken: (String) throws(Failure) -> Bool) throws(Failure) -> String {
        let (stem, suffix) = split(name)
        var number = 2
        while true {
            let candidate = "\(stem) (\(number))\(suffix)"
            if try !isTaken(candidate) { return candidate }
            number += 1
        }
    }

    private static func split(_ name: String) -> (stem: String, suffix: String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        return (String(name[..<dot]), String(name[dot...]))
    }
}
