import DocfsCore

/// One record of what an operation on the write path changed (issue 20 §4). An operation reads
/// as: claims → the backing operation → this record → reply; the record's consumers (the
/// index, presenters, thumbnails, other views' kernels; see `Filesystem.deliver`) each take
/// from it what they need, so an operation names what it changed once and cannot forget a
/// consumer: each consumer answers every kind (no default case), so a new kind does not compile
/// until every consumer has said what it does with it. Changes made by the store's shared parts
/// (write sessions, the thumbnailer), by the container registry and by writers behind docfs's
/// back (the store watcher) are records too.
package struct ChangeRecord: Sendable {
    /// What the store watcher saw a writer other than docfs do (C5).
    package enum Uncoordinated: Sendable {
        /// A name came, went or changed (`exists`: the name holds something now).
        case name(exists: Bool)
        /// A file was closed after writing: a new version of its item (docfs counted it).
        case content
        /// A file was written and is still open, or its attributes changed.
        case modified
    }

    package enum Kind: Sendable {
        /// A name now holds an item: one made (folder, link, special file, reference, copy) or
        /// a new name of one (a hard link).
        case created
        /// A regular file made and open: the index learns it when it is first closed (the
        /// stitcher follows the handle), presenters at once.
        case createdOpen
        /// What `from` in the folder `fromFolder` held moved to the record's place
        /// (`exchange`: the two traded places).
        case moved(from: FileName, inFolder: Int32, exchange: Bool)
        /// A document left its container for the record's place (the picker's move-to-service),
        /// from `from` (`fromName` in the folder `fromFolder`).
        case movedOut(from: StorePlace, fromName: FileName, inFolder: Int32)
        /// A safe-save: the new content at `from` in `fromFolder` replaced the document at the
        /// record's place, keeping its identity (`exchange`: the old content went to `from`).
        case replaced(from: FileName, inFolder: Int32, exchange: Bool)
        /// The document at the record's place has new content made by docfs (a restore, a
        /// raced save put back), as `version`; `conflict` when another writer's content became
        /// a conflict version.
        case newVersion(UInt64, conflict: Bool)
        /// The reference at the record's place became a document of its own (an editor's
        /// backup made through a reference), with the record's item.
        case referenceBecameDocument
        /// A name was removed; `wasReference` when it held a reference stub.
        case deleted(wasReference: Bool)
        /// Attributes the index records (size, times, user xattrs) changed; `folder` and
        /// `name` when they are known by place rather than by node.
        case attributes
        /// The file's mode changed: no part of its index record, but on a linked store it
        /// travels, so the file's item goes up.
        case modeChanged
        /// The content changed and was stitched already (a close or fsync of a writer).
        case written
        /// The write session of the file committed: its content is `version`, the content it
        /// superseded is kept (C4).
        case versionCommitted(UInt64)
        /// The write session of the file wrote nothing: its version went back.
        case rolledBack
        /// The thumbnailer installed a new thumbnail set for the file.
        case thumbnailsChanged
        /// A writer other than docfs changed what is at the record's `path` (and, for a name
        /// in a folder this view knows, its `folder` and `name`).
        case uncoordinated(Uncoordinated)
        /// A container was made or renamed (its documents' places changed), or deleted.
        case container(ContainerID, deleted: Bool)
    }

    var kind: Kind
    /// The place changed: a descriptor of the folder (valid while the record is delivered)
    /// and the name in it.
    var folder: Int32?
    var name: FileName?
    /// The node changed (attributes, content; the file a deletion removed a name of).
    var node: Node?
    /// The item (the document's id for a document).
    var item: ItemID?
    /// The version the item's content is at after the change, where the operation knows it.
    package var version: UInt64?
    /// Who asked for the change; nil for docfs's own (a raced save put back, a picker's copy).
    var caller: Caller?
    /// For new content a stitch looked at: what it saw of the file's thumbnail prospects.
    var thumbnailOutlook: IndexRecordBuilder.ThumbnailOutlook? = nil
    /// For a change made behind docfs's back: where in the store, as a backing path.
    var path: String? = nil

    /// A change of the name `name` in the folder `folder` (a descriptor).
    package static func name(_ kind: Kind, _ name: FileName, inFolder folder: Int32, item: ItemID?) -> ChangeRecord {
        ChangeRecord(kind: kind, folder: folder, name: name, node: nil, item: item, version: nil, caller: nil)
    }

    /// A change of the name `name` in `folder`.
    static func name(_ kind: Kind, _ name: FileName, in folder: Node, item: ItemID?) -> ChangeRecord {
        .name(kind, name, inFolder: folder.fd, item: item)
    }

    /// A change of `node` itself.
    static func file(_ kind: Kind, _ node: Node) -> ChangeRecord {
        ChangeRecord(kind: kind, folder: nil, name: nil, node: node, item: node.item, version: nil, caller: nil)
    }

    /// The folder (a descriptor) and name the record is about, when it is about a name.
    var place: (folder: Int32, name: FileName)? {
        guard let folder, let name else { return nil }
        return (folder, name)
    }

    /// A change at `path` in the store that a writer other than docfs made; `name` in `folder`
    /// (a descriptor) when the view knows the folder.
    static func uncoordinated(_ what: Uncoordinated, at path: String, name: FileName? = nil, inFolder folder: Int32? = nil) -> ChangeRecord {
        var change = ChangeRecord(kind: .uncoordinated(what), folder: folder, name: name, node: nil, item: nil, version: nil, caller: nil)
        change.path = path
        return change
    }

    /// A change of the container `id`.
    static func container(_ id: ContainerID, deleted: Bool) -> ChangeRecord {
        ChangeRecord(kind: .container(id, deleted: deleted), folder: nil, name: nil, node: nil, item: nil, version: nil, caller: nil)
    }
}

/// What an operation may change, known before it runs: the names and files other views of the
/// store must stop trusting from their kernel caches once it is over, whether or not it
/// succeeded (a failed operation may have changed something before it failed).
package struct TouchedPlaces {
    var names: [(folder: BackingKey, name: FileName)] = []
    var files: [BackingKey] = []

    package init(names: [(folder: BackingKey, name: FileName)] = [], files: [BackingKey] = []) {
        self.names = names
        self.files = files
    }

    static func name(_ name: FileName, in folder: Node) -> TouchedPlaces {
        TouchedPlaces(names: [(folder.key, name)])
    }

    static func file(_ node: Node) -> TouchedPlaces {
        TouchedPlaces(files: [node.key])
    }
}
