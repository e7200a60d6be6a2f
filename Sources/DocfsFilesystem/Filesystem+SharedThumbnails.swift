import CLinux
import DocfsCore
import DocfsProvider
import DocfsThumbnails
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Every folder of the mount answers for a freedesktop shared thumbnail repository
/// (`.sh_thumbnails/<normal|large|x-large|xx-large>/<md5>.png`, DESIGN §6) unless it holds a
/// real one, so file managers show previews without reading documents. Like the control area
/// it is found by name, never listed, and read-only; each PNG carries `Thumb::URI` and
/// `Thumb::MTime` (and `Thumb::Size`) as the spec asks, the mtime of the file as it is now.
extension Filesystem {
    /// `<folder>/.sh_thumbnails`, when the folder has no real one (the caller looked).
    func sharedRepositoryEntry(in folder: Node) throws(DocfsError) -> Entry {
        guard thumbnailer != nil, folder.isDirectory else { throw DocfsError.system(ENOENT) }
        return try virtualEntry(.sharedRepository(folder.key), .sharedRepository(folder: folder))
    }

    func sharedSizeEntry(_ name: FileName, in folder: Node) throws(DocfsError) -> Entry {
        guard let size = ThumbnailSize(rawValue: name.description), ThumbnailSize.freedesktop.contains(size) else {
            throw DocfsError.system(ENOENT)
        }
        return try virtualEntry(.sharedSize(folder.key, size), .sharedSize(folder: folder, size: size))
    }

    func sharedThumbnailEntry(_ name: FileName, size: ThumbnailSize, in folder: Node) throws(DocfsError) -> Entry {
        let bytes = name.bytes
        guard SharedThumbnailNames.isThumbnailName(bytes),
              let (fileName, uri) = sharedThumbnailFolders.file(named: String(decoding: bytes, as: UTF8.self), in: folder) else {
            throw DocfsError.system(ENOENT)
        }
        let fd = openat(folder.fd, fileName.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw DocfsError.system(ENOENT) }
        var st = stat()
        guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            throw DocfsError.system(ENOENT)
        }
        let key = BackingKey(st)
        let item = nodes.known(key: key)?.item ?? identity.item(of: fd, st)
        let image = Node(id: 0, fd: fd, key: key, type: S_IFREG, item: item)
        return try virtualEntry(.sharedThumbnail(folder: folder.key, size: size, name: name.description),
                                .sharedThumbnail(image: image, size: size, uri: uri))
    }

    /// The thumbnail of `size` of `image` as a shared repository holds it.
    func sharedThumbnail(of image: Node, size: ThumbnailSize, uri: String) throws(DocfsError) -> [UInt8] {
        var st = stat()
        guard let png = thumbnail(size, of: image),
              fstatat(image.fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0 else { throw DocfsError.system(ENOENT) }
        return PNGChunks.addingText([("Thumb::URI", uri), ("Thumb::MTime", String(st.st_mtim.tv_sec)),
                                     ("Thumb::Size", String(st.st_size)), ("Software", "docfs")], to: png)
    }

    /// What `<folder>/.sh_thumbnails/<size>/` lists: the files of the folder that have a
    /// thumbnail of that size (a big photo's xx-large one follows the others a moment later).
    func sharedThumbnailNames(in folder: Node, size: ThumbnailSize) -> [FileName] {
        guard let store = thumbnailer?.store else { return [] }
        return sharedThumbnailFolders.files(in: folder).compactMap { name, listed in
            let fd = openat(folder.fd, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var st = stat()
            guard fstatat(fd, "", &st, DOCFS_AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0, st.st_mode & S_IFMT == S_IFREG,
                  let item = ItemAttributes.id(ofDescriptor: fd),
                  let file = store.current(item, stamp: ContentStamp(st, version: ItemAttributes.version(ofDescriptor: fd))),
                  file.parts[size] != nil else { return nil }
            return FileName(listed)
        }
    }
}

/// The thumbnail names of the files of recently asked folders, so finding the file behind
/// `<md5>.png` hashes a folder's names once per change of the folder, not once per lookup.
///
/// Lock order: `folders` is a leaf lock; a folder is read outside it.
final class SharedThumbnailFolders: Sendable {
    private struct Folder {
        var modified: timespec
        /// Each name a file answers to (`<md5>.png`), with the file's name and the URI it stands for.
        var byThumbnail: [String: (name: FileName, uri: String)]
        /// The files, each with the name it is listed under.
        var files: [(name: FileName, listed: String)]
        var used: UInt64
    }

    private struct State {
        var folders: [BackingKey: Folder] = [:]
        var clock: UInt64 = 0
    }

    private static let kept = 32
    private let state = Mutex(State())

    func file(named thumbnail: String, in folder: Node) -> (FileName, String)? {
        names(of: folder)?.byThumbnail[thumbnail]
    }

    func files(in folder: Node) -> [(name: FileName, listed: String)] {
        names(of: folder)?.files ?? []
    }

    private func names(of folder: Node) -> Folder? {
        var st = stat()
        guard fstatat(folder.fd, "", &st, DOCFS_AT_EMPTY_PATH) == 0 else { return nil }
        let cached: Folder? = state.withLock { state in
            state.clock += 1
            guard var known = state.folders[folder.key], known.modified.tv_sec == st.st_mtim.tv_sec, known.modified.tv_nsec == st.st_mtim.tv_nsec else { return nil }
            known.used = state.clock
            state.folders[folder.key] = known
            return known
        }
        if let cached { return cached }
        guard let made = Self.read(folder, modified: st.st_mtim) else { return nil }
        state.withLock { state in
            if state.folders.count >= Self.kept,
               let oldest = state.folders.min(by: { $0.value.used < $1.value.used })?.key {
                state.folders[oldest] = nil
            }
            var folder = made
            folder.used = state.clock
            state.folders[BackingKey(st)] = folder
        }
        return made
    }

    private static func read(_ folder: Node, modified: timespec) -> Folder? {
        let fd = openat(folder.fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        guard let dir = fdopendir(fd) else {
            close(fd)
            return nil
        }
        defer { closedir(dir) }
        var made = Folder(modified: modified, byThumbnail: [:], files: [], used: 0)
        while let raw = readdir(dir) {
            let entry = DirectoryHandle.entry(raw)
            guard entry.type == DT_REG || entry.type == DT_UNKNOWN else { continue }
            let keys = SharedThumbnailNames.keys(of: entry.name.bytes)
            for key in keys { made.byThumbnail[key.fileName] = (entry.name, key.uri) }
            made.files.append((entry.name, keys[0].fileName))
        }
        return made
    }
}
