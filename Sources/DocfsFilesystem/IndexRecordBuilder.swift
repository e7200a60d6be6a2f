import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// Reads an item's index record (DESIGN §5 S2) off its backing file: attributes from stat and
/// statx, the docfs and freedesktop attributes from its xattrs, the content type from its name
/// and first bytes (a `user.mime_type` set by a user wins), and the fingerprint a reconciling
/// walk compares.
struct IndexRecordBuilder: Sendable {
    let container: ContainerID
    /// The container's display name, as records carry it.
    let containerName: String
    /// `documents` or `data`.
    let scope: String
    /// The store's thumbnails (for has-thumbnail).
    let thumbnails: ThumbnailStore

    static let tagsAttribute = "user.xdg.tags"
    static let commentAttribute = "user.xdg.comment"
    static let mimeAttribute = "user.mime_type"

    /// The record of `name` in `directoryFD`, whose attributes are `st`, id `item`, at `path`
    /// within the scope (starting with `/`).
    func record(item: ItemID, directoryFD: Int32, name: FileName, path: String, st: stat) -> IndexRecord {
        let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        defer { if fd >= 0 { close(fd) } }
        return record(item: item, file: fd, path: path, st: st)
    }

    /// The record of the file `file` (any descriptor of it, O_PATH included; -1 when it could
    /// not be opened) whose attributes are `st`, id `item`, at `path` within the scope.
    /// `readable`, a descriptor of the same file open for reading where the caller has one,
    /// serves the content sniff and the attributes without a walk of /proc links; `birth` is
    /// its birth time when the caller read it already.
    func record(item: ItemID, file: Int32, path: String, st: stat, readable: Int32 = -1,
                birth: timespec? = nil) -> IndexRecord {
        var outlook = ThumbnailOutlook()
        return record(item: item, file: file, path: path, st: st, readable: readable, birth: birth, outlook: &outlook)
    }

    /// What building a file's record saw that tells whether a look by the thumbnailer could
    /// come to anything: without one, a close of a file that starts like no image and has no
    /// thumbnail stored queues nothing (the look would open it, find no image and remove no set).
    struct ThumbnailOutlook: Sendable {
        /// The first bytes were read (the name left the type open), and start like no format
        /// thumbnails are made of.
        var startsLikeNoImage = false
        /// No thumbnail set is stored for the item, current or not.
        var noSetStored = false

        var isPointless: Bool { startsLikeNoImage && noSetStored }
    }

    /// What a file's record took from the file that the records of its other names (hard
    /// links) share: the first bytes read for its content type (nil when its name settled the
    /// type), and whether a `user.mime_type` chose the type (then it is every name's).
    struct Basis: Sendable {
        var start: [UInt8]? = nil
        var typeChosen = false
    }

    /// The same, saying in `outlook` what it saw of the file's thumbnail prospects.
    /// `attributes`: an open descriptor of the file (any access mode, not O_PATH) that serves
    /// its extended attributes when there is no `readable` one.
    func record(item: ItemID, file: Int32, path: String, st: stat, readable: Int32 = -1, attributes attributesFD: Int32 = -1,
                birth: timespec? = nil, outlook: inout ThumbnailOutlook) -> IndexRecord {
        var basis = Basis()
        return record(item: item, file: file, path: path, st: st, readable: readable, attributes: attributesFD, birth: birth,
                      outlook: &outlook, basis: &basis)
    }

    /// The same, saying in `basis` what the records of the file's other names can take over.
    func record(item: ItemID, file: Int32, path: String, st: stat, readable: Int32 = -1, attributes attributesFD: Int32 = -1,
                birth: timespec? = nil, outlook: inout ThumbnailOutlook, basis: inout Basis) -> IndexRecord {
        let type = st.st_mode & S_IFMT
        let name = IndexLocation(container: "", scope: "", path: path).name
        let kind: String
        var contentType: ContentType
        var reader = readable
        defer { if reader != readable { close(reader) } }
        switch type {
        case S_IFDIR: (kind, contentType) = (IndexRecord.folderKind, .folder)
        case S_IFLNK: (kind, contentType) = ("symlink", .symlink)
        case S_IFREG:
            kind = IndexRecord.fileKind
            var start: [UInt8]? = nil
            contentType = ContentType.of(name: name, reading: {
                guard st.st_size > 0 else {
                    start = []
                    return []
                }
                if reader < 0 { reader = Self.openForReading(file) }
                // A promised file's first bytes are not here: its type is its name's.
                start = reader >= 0 && PromisedContent.promisedNumber(reader) == nil ? Self.start(of: reader) : nil
                return start ?? []
            })
            outlook.startsLikeNoImage = start.map { ImageSignature.of(Array($0.prefix(ImageSignature.length))) == nil } ?? false
            basis.start = start
        default: (kind, contentType) = ("other", .other)
        }
        // The attributes are read through an open descriptor when there is one (a sniff
        // opened one): an O_PATH one only reaches them by its /proc link.
        let attributes = reader >= 0 ? reader : attributesFD >= 0 ? attributesFD : file
        // One listing says which attributes there are (a new file has none): reading each
        // name in turn would be a lookup of the /proc link apiece.
        let carried = attributes >= 0 && (type == S_IFREG || type == S_IFDIR) ? Self.attributeNames(attributes) : []
        func text(_ attribute: String) -> String? { carried.contains(attribute) ? Self.text(attributes, attribute) : nil }
        if let chosen = text(Self.mimeAttribute), !chosen.isEmpty {
            contentType = ContentType(mime: chosen)
            basis.typeChosen = true
        }
        var created = Self.seconds(st.st_ctim)
        if let birth, birth.tv_sec >= 0 {
            created = Self.seconds(birth)
        } else if birth == nil && file >= 0 {
            var birthSeconds: Int64 = 0
            var birthNanoseconds: UInt32 = 0
            if docfs_fd_birth_time(file, &birthSeconds, &birthNanoseconds) == 0 {
                created = Double(birthSeconds) + Double(birthNanoseconds) / 1e9
            }
        }
        // Files docfs has versioned carry user.docfs.version; others are at version 1.
        let stored = text(ItemAttributes.version).flatMap { VersionNumber.parse($0).map { Int64(bitPattern: $0) } } ?? 1
        let version = type == S_IFREG && !item.isDerived ? max(stored, 1) : 0
        var hasThumbnail = false
        if type == S_IFREG && !item.isDerived {
            let set = thumbnails.stored(item)
            outlook.noSetStored = !set.exists
            hasThumbnail = set.file.map { $0.stamp == ContentStamp(st, version: UInt64(max(stored, 1))) && $0.origin != .none } == true
        }
        var record = IndexRecord(
            id: Int64(bitPattern: item.rawValue), name: name, path: path, container: container.rawValue,
            containerName: containerName, scope: scope, kind: kind, size: type == S_IFREG ? Int64(st.st_size) : 0,
            created: created, modified: Self.seconds(st.st_mtim), contentType: contentType.mime, uti: contentType.uti,
            version: version, tags: IndexRecord.tags(fromAttribute: text(Self.tagsAttribute) ?? ""),
            comment: text(Self.commentAttribute) ?? "",
            hasThumbnail: hasThumbnail,
            conflict: text(Filesystem.conflictAttribute) == "1")
        record.backingInode = UInt64(st.st_ino)
        record.statusChanged = Self.seconds(st.st_ctim)
        if type == S_IFREG && !item.isDerived {
            record.downloadState = carried.contains(ItemAttributes.promised) ? IndexRecord.promisedStatus
                : carried.contains(Filesystem.pinnedAttribute) ? IndexRecord.pinnedStatus : ""
        }
        if type == S_IFREG && st.st_size == 0 && carried.contains(ReferenceStub.attribute) { makeExternal(&record) }
        return record
    }

    /// The record of another name (hard link) of the file `primary` was just built for, at
    /// `path` in this builder's container and scope: the file's attributes, extended
    /// attributes and thumbnail are every name's, so only the place changes, and the content
    /// type where the name decides it (`start` reads the first bytes if the primary's build
    /// did not). Not for references, whose records depend on their place.
    func record(sibling primary: IndexRecord, basis: Basis, path: String, start: () -> [UInt8]) -> IndexRecord {
        var record = primary
        record.name = IndexLocation(container: "", scope: "", path: path).name
        record.path = path
        record.container = container.rawValue
        record.containerName = containerName
        record.scope = scope
        if record.kind == IndexRecord.fileKind && !basis.typeChosen {
            let type = ContentType.of(name: record.name, reading: { basis.start ?? start() })
            record.contentType = type.mime
            record.uti = type.uti
        }
        return record
    }

    /// The first bytes of the file `file` (any descriptor of it; O_PATH ones are opened through
    /// their /proc link), for its content type.
    static func start(ofFile file: Int32) -> [UInt8] {
        let reader = openForReading(file)
        defer { if reader >= 0 { close(reader) } }
        return reader >= 0 ? start(of: reader) : []
    }

    /// A reference's record (DESIGN §5 S2, §8): in the container's external scope, at its path
    /// in the container (`/Documents/a`), which is also its local path. Where the original is
    /// changes without the reference changing, so queries fill that in when they answer.
    private func makeExternal(_ record: inout IndexRecord) {
        let external = location(record.path, isReference: true)
        record.scope = external.scope
        record.path = external.path
        record.localPath = record.path
        record.isExternal = true
        record.version = 0
        record.hasThumbnail = false
    }

    /// A descriptor for reading the file `name` in the folder `directoryFD`, when that name is
    /// still the regular file `key` names, with its attributes and birth time (one statx); nil
    /// when the name now holds something else.
    static func openForReading(_ name: FileName, in directoryFD: Int32,
                               expecting key: BackingKey) -> (fd: Int32, st: stat, birth: timespec)? {
        var fd = openat(directoryFD, name.cString, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | DOCFS_O_NOATIME)
        if fd < 0 && errno == EPERM { fd = openat(directoryFD, name.cString, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) }
        guard fd >= 0 else { return nil }
        var st = stat()
        var seconds: Int64 = 0
        var nanoseconds: UInt32 = 0
        guard docfs_fd_stat_and_birth(fd, &st, &seconds, &nanoseconds) == 0, BackingKey(st) == key,
              st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            return nil
        }
        return (fd, st, timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds)))
    }

    /// Where `path` is in the index.
    func location(_ path: String, isReference: Bool = false) -> IndexLocation {
        guard isReference else { return IndexLocation(container: container.rawValue, scope: scope, path: path) }
        let folder = StorePaths.scopeFolders.first { $0.scope.rawValue == scope }?.name ?? scope
        return IndexLocation(container: container.rawValue, scope: Scope.external.rawValue, path: "/" + folder + path)
    }

    /// A descriptor for reading the file `file` (any descriptor of it) refers to, opened
    /// through its /proc link without moving the access time (indexing is not reading; the
    /// caller's own handle would move it); a daemon that may not do that (neither root nor the
    /// owner) reads as any reader does. -1 when it cannot be opened.
    private static func openForReading(_ file: Int32) -> Int32 {
        guard file >= 0 else { return -1 }
        let fd = open("/proc/self/fd/\(file)", O_RDONLY | O_NONBLOCK | O_CLOEXEC | DOCFS_O_NOATIME)
        if fd < 0 && errno == EPERM { return open("/proc/self/fd/\(file)", O_RDONLY | O_NONBLOCK | O_CLOEXEC) }
        return fd
    }

    /// The first bytes of a regular file open for reading, for its content type.
    private static func start(of fd: Int32) -> [UInt8] {
        guard fd >= 0 else { return [] }
        var start = [UInt8](repeating: 0, count: ContentType.sniffLength)
        let n = start.withUnsafeMutableBytes { pread(fd, $0.baseAddress, ContentType.sniffLength, 0) }
        start.removeSubrange(max(n, 0)...)
        return start
    }

    private static func seconds(_ t: timespec) -> Double { Double(t.tv_sec) + Double(t.tv_nsec) / 1e9 }

    /// The names of the file's extended attributes.
    private static func attributeNames(_ fd: Int32) -> Set<String> {
        var buffer = [CChar](repeating: 0, count: 4096)
        var n = buffer.withUnsafeMutableBufferPointer { docfs_fd_listxattr(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == ERANGE {
            let needed = docfs_fd_listxattr(fd, nil, 0)
            guard needed > 0 else { return [] }
            buffer = [CChar](repeating: 0, count: needed)
            n = buffer.withUnsafeMutableBufferPointer { docfs_fd_listxattr(fd, $0.baseAddress, $0.count) }
        }
        guard n > 0 else { return [] }
        return Set(buffer[0..<n].split(separator: 0).map { String(decoding: $0.map { UInt8(bitPattern: $0) }, as: UTF8.self) })
    }

    /// A user attribute as text; nil when absent.
    private static func text(_ fd: Int32, _ name: String) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = buffer.withUnsafeMutableBytes { docfs_fd_getxattr(fd, name, $0.baseAddress, $0.count) }
        guard n >= 0 else { return nil }
        return String(decoding: buffer[0..<n], as: UTF8.self)
    }
}
