/// A path field of the kernel's mount tables (/proc/self/mounts, /proc/self/mountinfo), which
/// write space, tab, newline and backslash as octal escapes (`\040`, `\011`, `\012`, `\134`):
/// a mount point must be unescaped before it is compared with a path.
public enum MountInfoField {
    /// The bytes `field` stands for.
    public static func unescape(_ field: some Collection<UInt8>) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(field.count)
        var rest = field[...]
        while let byte = rest.popFirst() {
            if byte == UInt8(ascii: "\\"), rest.count >= 3,
               let value = octal(rest.prefix(3)) {
                bytes.append(value)
                rest = rest.dropFirst(3)
            } else {
                bytes.append(byte)
            }
        }
        return bytes
    }

    /// The same, as text (for paths that are UTF-8).
    public static func unescape(_ field: Substring) -> String {
        field.contains("\\") ? String(decoding: unescape(Array(field.utf8)), as: UTF8.self) : String(field)
    }

    private static func octal(_ digits: some Collection<UInt8>) -> UInt8? {
        var value = 0
        for digit in digits {
            guard digit >= UInt8(ascii: "0"), digit <= UInt8(ascii: "7") else { return nil }
            value = value * 8 + Int(digit - UInt8(ascii: "0"))
        }
        return value <= 255 ? UInt8(value) : nil
    }
}
