import CGio
import CLinux
import DocfsCore
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
    public static func of(name: String, start: [UInt8]) -> ContentType {
        let guessed: UnsafeMutablePointer<gchar>? = start.isEmpty
            ? g_content_type_guess(name, nil, 0, nil)
            : start.withUnsafeBufferPointer { g_content_type_guess(name, $0.baseAddress, gsize($0.count), nil) }
        guard let guessed else { return other }
        defer { g_free(guessed) }
        // On Unix GIO's content types are MIME types; ask it anyway, for platforms where not.
        let mime = g_content_type_get_mime_type(guessed).map { text -> String in
            defer { g_free(text) }
            return String(cString: text)
        } ?? String(cString: guessed)
        return ContentType(mime: mime)
    }

    /// The type of the regular file `name` in `directoryFD`, reading its first bytes.
    public static func ofFile(in directoryFD: Int32, name: FileName) -> ContentType {
        let fd = openat(directoryFD, name.cString, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        var start = [UInt8]()
        if fd >= 0 {
            defer { close(fd) }
            start = [UInt8](repeating: 0, count: sniffLength)
            let n = start.withUnsafeMutableBytes { pread(fd, $0.baseAddress, sniffLength, 0) }
            start.removeSubrange(max(n, 0)...)
        }
        return of(name: name.description, start: start)
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
