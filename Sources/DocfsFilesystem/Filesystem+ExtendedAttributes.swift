import CLinux
import DocfsCoordination
import DocfsCore
import DocfsProvider
#if canImport(Glibc)
import Glibc
#endif

/// What a getxattr or listxattr answers: the value, or only its size when the caller probed
/// with a zero-size buffer.
public enum AttributeValue: Sendable, Equatable {
    case size(Int)
    case bytes([UInt8])
}

/// user.* extended attributes, stored on the backing file (see `ExtendedAttributePolicy`).
/// Size-0 probes, ERANGE, ENODATA and XATTR_CREATE/REPLACE behave as on ext4.
extension Filesystem {
    public func getExtendedAttribute(_ id: NodeID, name: String, size: Int) throws(DocfsError) -> AttributeValue {
        try ExtendedAttributePolicy.checkName(name)
        if let (container, key) = keyValueFile(id) {
            guard name == Self.keyValueKindAttribute else { throw DocfsError.system(ENODATA) }
            return try fit(Array(try keyValueKind(container, key).utf8), into: size)
        }
        // Asked before every write (security.capability): answered without touching anything.
        guard ExtendedAttributePolicy.isStored(name) else { throw DocfsError.system(ENODATA) }
        guard var node = try readableNode(id) else { throw DocfsError.system(ENODATA) }
        if node.isSymlink { throw DocfsError.system(ENODATA) }
        if node.isReference {
            if ExtendedAttributePolicy.externalNames.contains(name) {
                guard let value = externalAttribute(name, of: node) else { throw DocfsError.system(ENODATA) }
                return try fit(Array(value.utf8), into: size)
            }
            // A reference whose original is gone still says which item it stood for.
            if name == ItemAttributes.id, (try? contentNode(node)) == nil { return try fit(Array(node.item.description.utf8), into: size) }
            node = try contentNode(node)
        }
        // A read-only view's item gives no bookmark: it would grant more than the view does.
        if name == ItemAttributes.bookmark && VirtualNodes.isVirtual(id) { throw DocfsError.system(ENODATA) }
        if name == ItemAttributes.bookmark { return try fit(Array(try bookmarkToken(of: node).utf8), into: size) }
        if name == ItemAttributes.thumbnail { return try fit(try thumbnailAttribute(of: node), into: size) }
        if name == ItemAttributes.status {
            guard let status = syncStatus(of: node) else { throw DocfsError.system(ENODATA) }
            return try fit(Array(status.utf8), into: size)
        }
        if ExtendedAttributePolicy.containerNames.contains(name) {
            guard let value = containerAttribute(name, of: node) else { throw DocfsError.system(ENODATA) }
            return try fit(Array(value.utf8), into: size)
        }
        // The store answers size-0 probes and ERANGE itself: read into the caller's size only.
        let capacity = min(size, ExtendedAttributePolicy.maximumValueSize)
        var buffer = [UInt8](repeating: 0, count: capacity)
        let n = buffer.withUnsafeMutableBytes { docfs_getxattr(node.procPath, name, capacity == 0 ? nil : $0.baseAddress, capacity) }
        guard n >= 0 else {
            let e = Glibc.errno
            if e == ENODATA && name == ItemAttributes.version && hasVersions(node) {
                return try fit(Array("1".utf8), into: size)  // never written since it was made
            }
            if e == ENODATA && name == ItemAttributes.id, let value = unstoredID(of: node) {
                return try fit(Array(value.description.utf8), into: size)
            }
            throw DocfsError.system(e)
        }
        if size == 0 { return .size(n) }
        buffer.removeSubrange(n...)
        return .bytes(buffer)
    }

    public func listExtendedAttributes(_ id: NodeID, size: Int) throws(DocfsError) -> AttributeValue {
        if keyValueFile(id) != nil { return try fit(Array(Self.keyValueKindAttribute.utf8) + [0], into: size) }
        guard let node = try readableNode(id) else { return try fit([], into: size) }
        if node.isSymlink { return try fit([], into: size) }
        if node.isReference {
            let external: [UInt8] = externalAttributeNames(of: node).flatMap { Array($0.utf8) + [UInt8(0)] }
            guard let original = try? contentNode(node) else { return try fit(external, into: size) }
            let names = try listExtendedAttributes(of: original, virtual: VirtualNodes.isVirtual(id))
            return try fit(names + external, into: size)
        }
        return try fit(try listExtendedAttributes(of: node, virtual: VirtualNodes.isVirtual(id)), into: size)
    }

    /// The names `node` lists (`virtual`: reached through a read-only view, which gives no
    /// bookmark).
    private func listExtendedAttributes(of node: Node, virtual: Bool) throws(DocfsError) -> [UInt8] {
        let path = node.procPath
        var length = docfs_listxattr(path, nil, 0) as Int
        guard length >= 0 else { throw DocfsError.system(Glibc.errno) }
        var names = [UInt8]()
        while true {
            var buffer = [CChar](repeating: 0, count: max(length, 1))
            let n = docfs_listxattr(path, &buffer, buffer.count)
            if n < 0 && Glibc.errno == ERANGE {  // grew meanwhile
                length = docfs_listxattr(path, nil, 0) as Int
                continue
            }
            guard n >= 0 else { throw DocfsError.system(Glibc.errno) }
            var hasVersion = false
            var hasID = false
            for name in buffer[0..<n].split(separator: 0) {
                let bytes = name.map { UInt8(bitPattern: $0) }
                let text = String(decoding: bytes, as: UTF8.self)
                if ExtendedAttributePolicy.isStored(text) && !ExtendedAttributePolicy.computed.contains(text)
                    && !ExtendedAttributePolicy.served.contains(text) {
                    names += bytes
                    names.append(0)
                }
                hasVersion = hasVersion || text == ItemAttributes.version
                hasID = hasID || text == ItemAttributes.id
            }
            if !hasVersion && hasVersions(node) { names += Array(ItemAttributes.version.utf8) + [0] }
            if !hasID && unstoredID(of: node) != nil { names += Array(ItemAttributes.id.utf8) + [0] }
            for computed in ExtendedAttributePolicy.computed.sorted() where !virtual {
                names += Array(computed.utf8) + [0]
            }
            if currentThumbnail(of: node) != nil { names += Array(ItemAttributes.thumbnail.utf8) + [0] }
            if hasSyncStatus(node) { names += Array(ItemAttributes.status.utf8) + [0] }
            for name in containerAttributeNames(of: node) { names += Array(name.utf8) + [0] }
            break
        }
        return names
    }

    /// docfs_setxattr(2); `flags` may hold XATTR_CREATE or XATTR_REPLACE.
    public func setExtendedAttribute(_ id: NodeID, name: String, value: [UInt8], flags: Int32) throws(DocfsError) {
        try ExtendedAttributePolicy.checkName(name)
        if value.count > ExtendedAttributePolicy.maximumValueSize { throw DocfsError.system(E2BIG) }
        if let (container, key) = keyValueFile(id) {
            guard name == Self.keyValueKindAttribute else { throw DocfsError.system(EOPNOTSUPP) }
            return try convertKeyValue(container, key, to: value)
        }
        let node = try changeableNode(id)
        guard ExtendedAttributePolicy.isStored(name) else { throw DocfsError.system(EOPNOTSUPP) }
        if node.isSymlink { throw DocfsError.system(EPERM) }
        if name == ItemAttributes.thumbnail { return try setThumbnailAttribute(of: node, png: value, flags: flags) }
        try ExtendedAttributePolicy.checkWritable(name, value: value)
        try changing([(node.item, .metadata)], touching: .file(node)) { () throws(DocfsError) in
            try check(value.withUnsafeBytes { docfs_setxattr(node.procPath, name, $0.baseAddress, $0.count, flags) })
            ownChanges.changedFile(at: node.fd, permissionsToo: false)
            return ((), [.file(.attributes, node)])
        }
    }

    public func removeExtendedAttribute(_ id: NodeID, name: String) throws(DocfsError) {
        try ExtendedAttributePolicy.checkName(name)
        let node = try changeableNode(id)
        guard ExtendedAttributePolicy.isStored(name) else { throw DocfsError.system(EOPNOTSUPP) }
        if node.isSymlink { throw DocfsError.system(EPERM) }
        if name == ItemAttributes.thumbnail { return try removeThumbnailAttribute(of: node) }
        try ExtendedAttributePolicy.checkWritable(name, value: nil)
        try changing([(node.item, .metadata)], touching: .file(node)) { () throws(DocfsError) in
            try check(docfs_removexattr(node.procPath, name))
            ownChanges.changedFile(at: node.fd, permissionsToo: false)
            return ((), [.file(.attributes, node)])
        }
    }

    /// The store node whose attributes `id` shows: its own, a read-only view's item, or nil
    /// for the rest of docfs's own files (which have none).
    private func readableNode(_ id: NodeID) throws(DocfsError) -> Node? {
        guard VirtualNodes.isVirtual(id) else { return try nodes.node(id) }
        if case .readOnlyView(let real) = try virtualNodes.node(id) { return real }
        return nil
    }

    /// Files with an id of their own have versions (folders, links and special files do not).
    private func hasVersions(_ node: Node) -> Bool { node.type == S_IFREG && !node.item.isDerived }

    /// The id of a file made through the mount whose creating handle has not stored it yet.
    /// Asked after the store had none: the handle stores it before it stops being pending,
    /// so when it is no longer pending the store is asked again.
    private func unstoredID(of node: Node) -> ItemID? {
        if let item = identity.pending.item(of: node.key) { return item }
        return ItemAttributes.id(ofDescriptor: node.fd)
    }

    private func fit(_ bytes: [UInt8], into size: Int) throws(DocfsError) -> AttributeValue {
        if size == 0 { return .size(bytes.count) }
        if bytes.count > size { throw DocfsError.system(ERANGE) }
        return .bytes(bytes)
    }
}
