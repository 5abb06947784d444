import Foundation
import GRDB

/// Reducer state stored at some seqs, so the state at any point comes back without replaying the
/// whole log. A snapshot is a manifest of pages; a page is stored once, by the SHA-256 of its bytes,
/// and shared by every snapshot that holds it. A snapshot from another reducer version, or one
/// whose pages do not check out, is ignored: snapshots are a cache of the log, never a source of
/// truth.
enum Snapshots {
    /// Stores a snapshot of `state`, then thins older ones so at most `keep` remain, evenly
    /// spread over the log.
    static func write(_ state: LedgerState, keep: Int, _ db: Database) throws {
        try write(state, db)
        let seqs = try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots ORDER BY seq")
        guard seqs.count > keep, keep >= 2 else { return }
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

    static func write(_ state: LedgerState, _ db: Database) throws {
        let paged = SnapshotCodec.encode(state)
        var manifest = BinaryWriter()
        manifest.lengthPrefixed(paged.scalars)
        for pages in paged.pages {
            manifest.varint(UInt64(pages.count))
            for page in pages {
                let hash = HashChain.sha256(page)
                manifest.bytes.append(contentsOf: hash)
                let exists = try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM snapshot_pages WHERE hash = ?)"),
                                               arguments: [Data(hash)]) ?? false
                if exists { continue }
                let compressed: [UInt8]
                do {
                    compressed = try LZ4.compress(page)
                } catch {
                    throw LedgerError.storage("compressing a snapshot page failed: \(error)")
                }
                try db.cachedStatement(sql: "INSERT INTO snapshot_pages (hash, raw_size, data) VALUES (?, ?, ?)")
                    .execute(arguments: [Data(hash), page.count, Data(compressed)])
            }
        }
        try db.execute(sql: "INSERT OR REPLACE INTO snapshots (seq, reducer_version, format, manifest) VALUES (?, ?, ?, ?)",
                       arguments: [state.seq, Reducer.version, SnapshotCodec.format, Data(manifest.bytes)])
    }

    /// Deletes pages no snapshot refers to any more.
    static func collectPages(_ db: Database) throws {
        var referenced = Set<Data>()
        for manifest in try Data.fetchAll(db, sql: "SELECT manifest FROM snapshots") {
            guard let (_, hashes) = try? parse(manifest) else { continue }
            for kind in hashes { for hash in kind { referenced.insert(hash) } }
        }
        for hash in try Data.fetchAll(db, sql: "SELECT hash FROM snapshot_pages") where !referenced.contains(hash) {
            try db.execute(sql: "DELETE FROM snapshot_pages WHERE hash = ?", arguments: [hash])
        }
    }

    /// A manifest's scalars and page hashes per kind.
    private static func parse(_ manifest: Data) throws -> ([UInt8], [[Data]]) {
        let bytes = [UInt8](manifest)
        return try bytes.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            let scalars = try r.bytes()
            var kinds: [[Data]] = []
            for _ in SnapshotCodec.Kind.allCases {
                let count = try r.int(max: buffer.count / 32)
                var hashes: [Data] = []
                for _ in 0..<count {
                    guard r.end - r.offset >= 32 else { throw BinaryReader.Failure(message: "truncated manifest") }
                    hashes.append(Data(buffer[r.offset..<(r.offset + 32)]))
                    r.offset += 32
                }
                kinds.append(hashes)
            }
            guard r.isAtEnd else { throw BinaryReader.Failure(message: "trailing bytes in the manifest") }
            return (scalars, kinds)
        }
    }

    /// The newest usable snapshot at or before `seq`.
    static func latest(_ db: Database, atOrBefore seq: Int64) throws -> LedgerState? {
        let rows = try Row.fetchCursor(db, sql: """
            SELECT seq, manifest FROM snapshots
            WHERE seq <= ? AND reducer_version = ? AND format = ? ORDER BY seq DESC
            """, arguments: [seq, Reducer.version, SnapshotCodec.format])
        while let row = try rows.next() {
            if let state = try? load(db, manifest: row[1]), state.seq == row[0] as Int64 { return state }
        }
        return nil
    }

    private static func load(_ db: Database, manifest: Data) throws -> LedgerState {
        let (scalars, kinds) = try parse(manifest)
        let statement = try db.cachedStatement(sql: "SELECT raw_size, data FROM snapshot_pages WHERE hash = ?")
        let pages: [[[UInt8]]] = try kinds.map { hashes in
            try hashes.map { hash in
                guard let row = try Row.fetchOne(statement, arguments: [hash]) else {
                    throw BinaryReader.Failure(message: "missing page")
                }
                let data: Data = row[1]
                let raw = try data.withUnsafeBytes { try LZ4.decompress($0, originalSize: Int(clamping: row[0] as Int64)) }
                // Every page is checked against its hash: a damaged page makes the snapshot unusable.
                guard Data(HashChain.sha256(raw)) == hash else { throw BinaryReader.Failure(message: "page does not match its hash") }
                return raw
            }
        }
        return try SnapshotCodec.decode(scalars: scalars, pages: pages)
    }
}
