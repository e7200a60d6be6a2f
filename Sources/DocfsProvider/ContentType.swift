import CGio
import CLinux
import DocfsCore
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A document's content type for the index (DESIGN §5 S2): its MIME type as the system's
/// shared-mime-info data tells it from the name (globs) and the first bytes (magic), asked
/// through GLib's GIO, and the Uniform Type Identifier Apple's platforms give it where one is
/// well known (no Linux library knows UTIs; `wellKnownUTIs` maps MIME types to them).
public struct ContentType: Sendable, Equatable {
    public let mime: String
    /// Empty when no UTI is well known for the MIME type.
    public let uti: String

    public init(mime: String) {
        self.mime = mime
        uti = Self.wellKnownUTIs[mime] ?? ""
    }

    public static let folder = ContentType(mime: "inode/directory")
    public static let symlink = ContentType(mime: "inode/symlink")
    public static let other = ContentType(mime: "application/octet-stream")

    /// How much of a file's start magic looks at.
    public static let sniffLength = 4096

    /// The type of a file named `name` whose content starts with `start` (empty: judged by
    /// the name alone, as an empty file has no magic to read).
    ///
    /// What a name says is remembered by name (`typeByName`). A name that matches no glob leaves the type to the content's magic, which costs GIO about 90 µs
    /// (it tries every pattern at every offset of its range): those answers are remembered by a
    /// digest of the content, as they depend on nothing else, so files that start alike (or a
    /// file closed again with the same start) are looked at once.
    public static func of(name: String, start: [UInt8]) -> ContentType {
        of(name: name, reading: { start })
    }

    /// The same, reading the first bytes only when the name leaves the type uncertain.
    public static func of(name: String, reading start: () -> [UInt8]) -> ContentType {
        let (byName, certain) = typeByName(name)
        if certain { return byName }
        let start = start()
        if start.isEmpty { return byName }
        let key = byName == other ? sniffKey(start) : nil
        if let key, let known = sniffed.withLock({ $0[key] }) { return known }
        let type = ContentType(mime: start.withUnsafeBufferPointer { guess(name, $0.baseAddress, gsize($0.count), nil) })
        if let key {
            sniffed.withLock { memo in
                if memo.count >= sniffedCapacity { memo.removeAll(keepingCapacity: true) }
                memo[key] = type
            }
        }
        return type
    }

    /// The type the name alone gives, and whether it settles it. GIO's glob match costs a few
    /// microseconds, more than all else a close's record takes: answers are remembered by name
    /// (names recur: a file closed again, the same names in many folders).
    private static func typeByName(_ name: String) -> (ContentType, certain: Bool) {
        if let known = typesByName.withLock({ $0[name] }) { return known }
        var uncertain: gboolean = 0
        let answer = (ContentType(mime: guess(name, nil, 0, &uncertain)), certain: uncertain == 0)
        typesByName.withLock { memo in
            if memo.count >= sniffedCapacity { memo.removeAll(keepingCapacity: true) }
            memo[name] = answer
        }
        return answer
    }

    private static let typesByName = Mutex<[String: (ContentType, certain: Bool)]>([:])

    /// Types of nameless-type content (no glob matched its name), by a digest of the bytes
    /// magic saw: a file closed again with the same start (most writes land further on) is not
    /// looked at again. Room for many files' starts, since only digests are kept.
    private static let sniffed = Mutex<[UInt64: ContentType]>([:])
    private static let sniffedCapacity = 1 << 16

    /// A digest of first bytes: SipHash with the process's random seed (Hasher), so content
    /// cannot be made to collide with another's on purpose, taken over the bytes in bulk.
    private static func sniffKey(_ bytes: [UInt8]) -> UInt64 {
        var hasher = Hasher()
        hasher.combine(bytes.count)
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        return UInt64(bitPattern: Int64(hasher.finalize()))
    }

    /// GIO's guess, as a MIME type.
    private static func guess(_ name: String, _ data: UnsafePointer<UInt8>?, _ size: gsize,
                              _ uncertain: UnsafeMutablePointer<gboolean>?) -> String {
        guard let guessed = g_content_type_guess(name, data, size, uncertain) else { return other.mime }
        defer { g_free(guessed) }
        // On Unix GIO's content types are MIME types; ask it anyway, for platforms where not.
        return g_content_type_get_mime_type(guessed).map { text -> String in
            defer { g_free(text) }
            return String(cString: text)
        } ?? String(cString: guessed)
    }

    /// UTIs of common MIME types, as Apple's platforms declare them.
    static let wellKnownUTIs: [String: String] = [
        "text/plain": "public.plain-text", "text/markdown": "net.daringfireball.markdown",
        "text/html": "public.html", "text/csv": "public.comma-separated-values-text", "text/xml": "public.xml",
        "application/xml": "public.xml", "application/json": "public.json", "application/pdf": "com.adobe.pdf",
        "application/rtf": "public.rtf", "image/jpeg": "public.jpeg", "image/png": "public.png",
        "image/gif": "com.compuserve.gif", "image/tiff": "public.tiff", "image/webp": "org.webmproject.webp",
        "image/heif": "public.heif", "image/heic": "public.heic", "image/avif": "public.avif",
        "image/svg+xml": "public.svg-image", "image/bmp": "com.microsoft.bmp", "audio/mpeg": "public.mp3",
        "audio/x-wav": "com.microsoft.waveform-audio", "video/mp4": "public.mpeg-4",
        "video/quicktime": "com.apple.quicktime-movie", "application/zip": "public.zip-archive",
        "application/gzip": "org.gnu.gnu-zip-archive", "application/x-tar": "public.tar-archive",
        "application/vnd.oasis.opendocument.text": "org.oasis-open.opendocument.text",
        "application/vnd.oasis.opendocument.spreadsheet": "org.oasis-open.opendocument.spreadsheet",
        "application/vnd.oasis.opendocument.presentation": "org.oasis-open.opendocument.presentation",
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "org.openxmlformats.wordprocessingml.document",
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "org.openxmlformats.spreadsheetml.sheet",
        "application/vnd.openxmlformats-officedocument.presentationml.presentation": "org.openxmlformats.presentationml.presentation",
        "text/x-python": "public.python-script", "text/x-python3": "public.python-script",
        "application/x-shellscript": "public.shell-script", "text/x-csrc": "public.c-source",
        "text/x-chdr": "public.c-header", "text/x-swift": "public.swift-source",
        "inode/directory": "public.folder", "inode/symlink": "public.symlink",
        "application/octet-stream": "public.data",
    ]
}
