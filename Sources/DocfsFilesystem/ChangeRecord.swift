import DocfsCore

/// One record of what an operation on the write path changed (issue 20 §4). An operation reads
/// as: claims → the backing operation → this record → reply; the record's consumers (the
/// index, presenters, thumbnails; see `Filesystem.deliver`) each take from it what they need,
/// so an operation names what it changed once and cannot forget a consumer.
struct ChangeRecord {
    enum Kind {
        /// A name now holds an item: one made (folder, link, special file) or a new name of
        /// one (a hard link).
        case created
        /// A regular file made and open: the index learns it when it is first closed (the
        /// stitcher follows the handle), presenters at once.
        case createdOpen
        /// A name was removed; `wasReference` when it held a reference stub.
        case deleted(wasReference: Bool)
        /// Attributes the index records (size, times, user xattrs) changed.
        case attributes
        /// The content changed and was stitched already (a close or fsync of a writer).
        case written
    }

    var kind: Kind
    /// The place changed: the folder and the name in it (names only).
    var folder: Node?
    var name: FileName?
    /// The node changed (attributes, content; the file a deletion removed a name of).
    var node: Node?
    var item: ItemID?

    /// A change of the name `name` in `folder`.
    static func name(_ kind: Kind, _ name: FileName, in folder: Node, item: ItemID?) -> ChangeRecord {
        ChangeRecord(kind: kind, folder: folder, name: name, node: nil, item: item)
    }

    /// A change of `node` itself.
    static func file(_ kind: Kind, _ node: Node) -> ChangeRecord {
        ChangeRecord(kind: kind, folder: nil, name: nil, node: node, item: node.item)
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
