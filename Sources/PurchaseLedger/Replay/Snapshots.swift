import Foundation
import GRDB

/// Reducer state stored at some seqs, so the state at any point comes back without replaying the
/// whole log. A snapshot is a manifest of pages; a page is stored once, by the SHA-256 of its bytes,
/// and shared by every snapshot that holds it. A snapshot from another reducer version, or one
/// whose pages do not check out, is ignored: snapshots are a cache of the log, never a source of
/// truth.
enum Snapshots {
    /// A snapshot an append has decided on: its manifest, and the pages it adds, spooled.
    struct Pending {
        var seq: Int64
        var manifest: [UInt8]
        var pages: [(address: [UInt8], rawSize: Int, data: Spool.Slice)]
    }

    /// Encodes a snapshot of `state` without writing it. Pages already stored, in the file or by
    /// an earlier snapshot of the same append (`spooled`), are referred to, not added again.
    /// Returns the state as it will be stored: the same records, its transactions and downloads
    /// now held in the snapshot's pages, so the next snapshot adds only what changed.
    static func encode(
        _ state: LedgerState, _ db: Database, overlay: SnapshotCodec.OverlayLimits, spooled: inout Set<[UInt8]>, spool: Spool
    ) throws -> (LedgerState, Pending) {
        let exists = try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM snapshot_pages WHERE hash = ?)")
        let known = spooled
        let encoded = try SnapshotCodec.encode(state, overlay: overlay) { address in
            try known.contains(address) || Bool.fetchOne(exists, arguments: [Data(address)]) ?? false
        }
        var pending = Pending(seq: state.seq, manifest: encoded.manifest, pages: [])
        for page in encoded.pages where spooled.insert(page.address).inserted {
            pending.pages.append((page.address, page.rawSize, try spool.append(page.data)))
        }
        var written = state
        written.transactions = encoded.transactions
        written.downloads = encoded.downloads
        written.registeredURLs = encoded.registeredURLs
        return (written, pending)
    }

    /// Writes the snapshots an append decided on, then thins older ones so at most `keep`
    /// remain, evenly spread over the log.
    static func write(_ snapshots: [Pending], keep: Int, spool: Spool, _ db: Database) throws {
        guard !snapshots.isEmpty else { return }
        let insert = try db.cachedStatement(sql: "INSERT OR IGNORE INTO snapshot_pages (hash, raw_size, data) VALUES (?, ?, ?)")
        for snapshot in snapshots {
            for page in snapshot.pages {
                try insert.execute(arguments: [Data(page.address), page.rawSize, Data(try spool.read(page.data))])
            }
            try db.execute(
                sql: "INSERT OR REPLACE INTO snapshots (seq, reducer_version, format, manifest) VALUES (?, ?, ?, ?)",
                arguments: [snapshot.seq, Reducer.version, SnapshotCodec.format, Data(snapshot.manifest)])
        }
        // Snapshots another reducer version or format wrote are never read again.
        try db.execute(
            sql: "DELETE FROM snapshots WHERE reducer_version != ? OR format != ?",
            arguments: [Reducer.version, SnapshotCodec.format])
        let droppedStale = db.changesCount > 0
        let seqs = try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots ORDER BY seq")
        guard seqs.count > keep, keep >= 2 else {
            if droppedStale { try collectPages(db) }
            return
        }
        // Drop the snapshot whose neighbours are closest together, until `keep` remain.
        var kept = seqs
        while kept.count > keep {
            var best = 1
            var bestGap = Int64.max
            for i in 1..<(kept.count - 1) where kept[i + 1] - kept[i - 1] < bestGap {
                bestGap = kept[i + 1] - kept[i - 1]
                best = i
            }
            try db.execute(sql: "DELETE FROM snapshots WHERE seq = ?", arguments: [kept[best]])
            kept.remove(at: best)
        }
        try collectPages(db)
    }

    /// Deletes pages no snapshot of this format refers to any more.
    static func collectPages(_ db: Database) throws {
        var referenced = Set<Data>()
        let manifests = try Data.fetchAll(db, sql: "SELECT manifest FROM snapshots WHERE format = ?", arguments: [SnapshotCodec.format])
        for manifest in manifests {
            guard let (_, kinds, overlays) = try? SnapshotCodec.parse([UInt8](manifest)) else { continue }
            for kind in kinds { for entry in kind { referenced.insert(Data(entry.address)) } }
            for overlay in overlays.values { for chunk in overlay.chunks { referenced.insert(Data(chunk.address)) } }
        }
        for hash in try Data.fetchAll(db, sql: "SELECT hash FROM snapshot_pages") where !referenced.contains(hash) {
            try db.execute(sql: "DELETE FROM snapshot_pages WHERE hash = ?", arguments: [hash])
        }
    }

    /// The newest usable snapshot at or before `seq`.
    static func latest(_ db: Database, atOrBefore seq: Int64, cache: SnapshotPageCache) throws -> LedgerState? {
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT seq, manifest FROM snapshots
                WHERE seq <= ? AND reducer_version = ? AND format = ? ORDER BY seq DESC
                """, arguments: [seq, Reducer.version, SnapshotCodec.format])
        let page = try db.cachedStatement(sql: "SELECT data FROM snapshot_pages WHERE hash = ?")
        while let row = try rows.next() {
            let manifest: Data = row[1]
            let state = try? SnapshotCodec.decode(manifest: [UInt8](manifest), cache: cache) { address in
                try Data.fetchOne(page, arguments: [Data(address)]).map { [UInt8]($0) }
            }
            if let state, state.seq == row[0] as Int64 { return state }
        }
        return nil
    }
}
