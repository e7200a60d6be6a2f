import DocfsCore

/// One record of what an operation on the write path changed (issue 20 §4). An operation reads
/// as: claims → the backing operation → this record → reply; the record's consumers (the
/// index, presenters, thumbnails; see `Filesystem.deliver`) each take from it what they need,
/// so an operation names what it changed once and cannot forget a consumer.
struct ChangeRecord {
    enum Kind {
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
        /// The content changed and was stitched already (a close or fsync of a writer).
        case written
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
    var version: UInt64?
    /// Who asked for the change; nil for docfs's own (a raced save put back, a picker's copy).
    var caller: Caller?
    /// For new content a stitch looked at: what it saw of the file's thumbnail prospects.
    var thumbnailOutlook: IndexRecordBuilder.ThumbnailOutlook? = nil

    /// A change of the name `name` in the folder `folder` (a descriptor).
    static func name(_ kind: Kind, _ name: FileName, inFolder folder: Int32, item: ItemID?) -> ChangeRecord {
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
}

/// What an operation may change, known before it runs: the names and files other views of the
/// store must stop trusting from their kernel caches once it is over, whether or not it
/// succeeded (a failed operation may have changed something before it failed).
struct TouchedPlaces {
    var names: [(folder: BackingKey, name: FileName)] = []
    var files: [BackingKey] = []

    static func name(_ name: FileName, in folder: Node) -> TouchedPlaces {
        TouchedPlaces(names: [(folder.key, name)])
    }

    static func file(_ node: Node) -> TouchedPlaces {
        TouchedPlaces(files: [node.key])
    }
}
