// What the snapshot layer keeps of how it stored a record map. A map carries it (unread by the
// domain) so the next snapshot refers to what is still current instead of writing it again.

extension RecordMap {
    /// Records a snapshot stores beside its pages instead of rewriting a page for them: changed
    /// or new records, ids removed from the pages, and how many of the records are new.
    struct Overlay: Sendable {
        var changed: [(key: String, value: Value)] = []
        var removed: [String] = []
        var added = 0
    }

    /// The records of `base`, with those of `overlay` on top: what a snapshot holds, `stored` as
    /// that snapshot stored them.
    init(base: RecordPages<Value>, overlay: Overlay, stored: StoredOverlay<Value>? = nil) {
        self.base = base
        changes.reserveCapacity(overlay.changed.count)
        for (id, value) in overlay.changed { changes[RecordKey(id)] = value }
        removed = Set(overlay.removed.map(RecordKey.init))
        added = overlay.added
        self.stored = stored
    }
}

extension RecordMap {
    /// A map that reads as `current` and is stored as `encoded` plus what changed since:
    /// `encoded` is `handedOver` as a snapshot stored it (the same records, in its pages), and
    /// `current` is `handedOver` changed since (the same base, other changes). Each record that
    /// differs between the two is set in `encoded`, as the reducer would have set it there.
    static func carrying(_ current: RecordMap, since handedOver: RecordMap, onto encoded: RecordMap) -> RecordMap {
        var result = encoded
        for (key, value) in current.changes where handedOver.changes[key] != value { result[key.id] = value }
        for key in handedOver.changes.keys where current.changes[key] == nil { result[key.id] = current[key.id] }
        for key in current.removed.symmetricDifference(handedOver.removed) { result[key.id] = current[key.id] }
        return result
    }
}

/// How a snapshot stored a map's pages and overlay (docs/format.md), so that the next snapshot
/// refers to what is still current instead of writing it again. The overlay is stored as
/// **chunks**, oldest first, each holding the records that changed in one stretch of the log; a
/// chunk's record applies to a key only if the chunk is newer than the page holding that key.
struct StoredOverlay<Value: Sendable & Hashable>: Sendable {
    /// Per page of the base, in order, the seq of the snapshot that wrote it.
    var generations: [Int64] = []
    var chunks: [OverlayChunk] = []
    /// Per key the overlay holds, the chunk its current entry is in, and that entry (nil: the id
    /// was removed from its page).
    var entries: [RecordKey: (chunk: Int, value: Value?)] = [:]
}

/// A stored chunk of a snapshot's overlay, as its manifest lists it.
struct OverlayChunk: Sendable, Equatable {
    var address: [UInt8]
    var rawSize: Int
    /// The seq of the snapshot that wrote it.
    var generation: Int64
    /// Records and removed ids it holds, current or not.
    var records: Int
}
