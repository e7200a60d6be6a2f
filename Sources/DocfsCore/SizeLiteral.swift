/// Sizes: a number with an optional unit. KB, MB, GB, TB are powers of 1000 (as disks are
/// sold), KiB, MiB, GiB, TiB powers of 1024; K, M, G, T alone are the decimal ones. Case does
/// not matter.
public enum SizeLiteral {
    public static func bytes(_ text: String) -> Int64? {
        let digits = text.prefix { ($0.isASCII && $0.isNumber) || $0 == "." }
        let unit = text.dropFirst(digits.count).lowercased()
        guard !digits.isEmpty, digits.filter({ $0 == "." }).count <= 1, let number = Double(digits) else { return nil }
        let scale: Double
        switch unit {
        case "", "b": scale = 1
        case "k", "kb": scale = 1e3
        case "m", "mb": scale = 1e6
        case "g", "gb": scale = 1e9
        case "t", "tb": scale = 1e12
        case "kib": scale = 1024
        case "mib": scale = 1_048_576
        case "gib": scale = 1_073_741_824
        case "tib": scale = 1_099_511_627_776
        default: return nil
        }
        let value = (number * scale).rounded()
        guard value.isFinite, value < 9.2e18 else { return nil }
        return Int64(value)
    }
}
