import CLinux
import DocfsCore
import DocfsIndex
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// Makes the index again from the store (DESIGN §5 S4): every item in every container's
/// documents and data scopes gets its record, records of items no longer there are removed,
/// and items without an id (made behind docfs's back) are given one, as a lookup would. Runs
/// on a store no daemon serves (the daemon keeps its own index current).
public enum IndexRebuild {
    public struct Summary: Sendable {
        public var items = 0
        public var removed = 0
        /// Items that had no id and were given one.
        public var identified = 0
    }

    /// One item found by the walk.
    private struct Found {
        var directory: String
        var name: FileName
        var path: String
        var builder: IndexRecordBuilder
    }

    /// `progress(done, total)` is called as records are made (about 100 times in all).
    public static func run(store: LocalStore, index: IndexDatabase,
                           progress: ((Int, Int) -> Void)? = nil) throws(DocfsError) -> Summary {
        var found: [Found] = []
        for container in try containers(of: store.layout) {
            for (scope, root) in [("documents", store.layout.documentsDirectory(container)), ("data", store.layout.dataDirectory(container))] {
                walk(root, relative: "", builder: IndexRecordBuilder(container: container, scope: scope), into: &found)
            }
        }
        var summary = Summary()
        var records: [IndexRecord] = []
        records.reserveCapacity(found.count)
        let step = max(found.count / 100, 1)
        var directoryFD: Int32 = -1
        var openDirectory = ""
        defer { if directoryFD >= 0 { close(directoryFD) } }
        for (n, item) in found.enumerated() {
            if n % step == 0 { progress?(n, found.count) }
            if item.directory != openDirectory {
                if directoryFD >= 0 { close(directoryFD) }
                directoryFD = open(item.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                openDirectory = item.directory
            }
            guard directoryFD >= 0 else { continue }
            var st = stat()
            guard fstatat(directoryFD, item.name.cString, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }  // gone meanwhile
            let (id, assigned) = identity(of: item.name, in: directoryFD, st, allocator: store.itemIDs)
            if assigned { summary.identified += 1 }
            records.append(item.builder.record(item: id, directoryFD: directoryFD, name: item.name, path: item.path, st: st))
        }
        progress?(found.count, found.count)
        summary.items = records.count
        summary.removed = try index.replaceAll(records)
        return summary
    }

    private static func containers(of layout: StoreLayout) throws(DocfsError) -> [ContainerID] {
        guard let dir = opendir(layout.containersDirectory) else { return [] }
        defer { closedir(dir) }
        var result: [ContainerID] = []
        while let entry = readdir(dir) {
            let name = entryName(entry)
            if name == "." || name == ".." { continue }
            if let id = try? ContainerID(String(decoding: name.bytes, as: UTF8.self)) { result.append(id) }
        }
        return result.sorted { $0.rawValue < $1.rawValue }
    }

    /// Every entry under `directory`, depth first, each folder before what it holds.
    private static func walk(_ directory: String, relative: String, builder: IndexRecordBuilder, into found: inout [Found]) {
        guard let dir = opendir(directory) else { return }
        var subfolders: [(String, String)] = []
        while let entry = readdir(dir) {
            let name = entryName(entry)
            if name.description == "." || name.description == ".." { continue }
            let path = relative + "/" + name.description
            found.append(Found(directory: directory, name: name, path: path, builder: builder))
            if entry.pointee.d_type == UInt8(DT_DIR) { subfolders.append((directory + "/" + name.description, path)) }
        }
        closedir(dir)
        for (folder, path) in subfolders { walk(folder, relative: path, builder: builder, into: &found) }
    }

    private static func entryName(_ entry: UnsafeMutablePointer<dirent>) -> FileName {
        DirectoryHandle.entry(entry).name
    }

    /// The item's id, giving it one when it has none (files and folders; others have derived ids).
    private static func identity(of name: FileName, in directoryFD: Int32, _ st: stat,
                                 allocator: ItemIDAllocator) -> (ItemID, assigned: Bool) {
        let type = st.st_mode & S_IFMT
        guard type == S_IFREG || type == S_IFDIR else { return (.derived(fromBackingInode: UInt64(st.st_ino)), false) }
        if let id = ItemAttributes.id(in: directoryFD, name: name) { return (id, false) }
        let fd = openat(directoryFD, name.cString, DOCFS_O_PATH | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return (.derived(fromBackingInode: UInt64(st.st_ino)), false) }
        defer { close(fd) }
        guard let fresh = try? allocator.allocate(),
              let id = try? ItemAttributes.setID(fresh, onDescriptor: fd, onlyIfAbsent: true) else {
            return (.derived(fromBackingInode: UInt64(st.st_ino)), false)
        }
        return (id, id == fresh)
    }
}
