/// The three-way merge of two versions of one item made from one base (issue 22 §4): each
/// side's changes are taken where the other left that part alone, so a rename on one machine
/// and an edit on another keep both, and an edit wins over a deletion. Content changed on both
/// sides (differently) cannot be merged: one of them is a conflict version.
enum SyncMerge {
    /// The merged version (fields of `theirs`, the current one, with ours where only we changed
    /// them); nil when the content conflicts or there is no base to merge from.
    static func merge(ours: RemoteVersion, theirs: RemoteVersion, base: RemoteVersion?) -> RemoteVersion? {
        if ours.deleted && theirs.deleted { return theirs }
        // A deletion against an edit: the edit is kept (ours comes back over their tombstone;
        // their edit stays current over our deletion: no merge, our tombstone lost).
        if theirs.deleted { return ours }
        if ours.deleted { return nil }
        // A container both machines had before they were linked: the remote's name stands.
        if ours.kind == .container && theirs.kind == .container && base == nil { return theirs }
        guard let base, !base.deleted else { return nil }
        var merged = theirs
        if content(of: ours) != content(of: base) {
            guard content(of: theirs) == content(of: base) || content(of: theirs) == content(of: ours) else { return nil }
            (merged.kind, merged.manifest, merged.size, merged.modified) = (ours.kind, ours.manifest, ours.size, ours.modified)
        }
        // Places, modes and attributes: ours where they left them alone; theirs (the first
        // committed) where both changed them.
        if place(of: ours) != place(of: base) && place(of: theirs) == place(of: base) {
            (merged.container, merged.scope, merged.parent, merged.name) = (ours.container, ours.scope, ours.parent, ours.name)
        }
        if ours.mode != base.mode && theirs.mode == base.mode { merged.mode = ours.mode }
        for key in Set(ours.attributes.keys).union(base.attributes.keys) where ours.attributes[key] != base.attributes[key] {
            if theirs.attributes[key] == base.attributes[key] { merged.attributes[key] = ours.attributes[key] }
        }
        return merged
    }

    /// Whether two versions say the same of their item (numbers, bases, authors aside).
    static func same(_ a: RemoteVersion, _ b: RemoteVersion) -> Bool {
        a.deleted == b.deleted && content(of: a) == content(of: b) && place(of: a) == place(of: b)
            && a.mode == b.mode && a.attributes == b.attributes
    }

    private struct Content: Equatable {
        var kind: RemoteItemKind, manifest: [String], size: Int64
    }

    private struct Place: Equatable {
        var container: String, scope: String, parent: UInt64, name: String
    }

    private static func content(of version: RemoteVersion) -> Content {
        Content(kind: version.kind, manifest: version.manifest, size: version.size)
    }

    private static func place(of version: RemoteVersion) -> Place {
        Place(container: version.container, scope: version.scope, parent: version.parent, name: version.name)
    }
}
