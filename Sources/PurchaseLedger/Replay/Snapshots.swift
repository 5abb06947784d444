import Foundation
import GRDB

/// Reducer state stored at some seqs, so the state at any point comes back without replaying the
/// whole log. A snapshot from another reducer version, or whose bytes do not check out, is
/// ignored: snapshots are a cache of the log, never a source of truth.
enum Snapshots {
    static func write(_ state: LedgerState, _ db: Database) throws {
        let raw = SnapshotCodec.encode(state)
        let compressed: [UInt8]
        do {
            compressed = try LZ4.compress(raw)
        } catch {
            throw LedgerError.storage("compressing the snapshot at seq \(state.seq) failed: \(error)")
        }
        try db.execute(sql: """
            INSERT OR REPLACE INTO snapshots (seq, reducer_version, format, raw_size, data, checksum) VALUES (?, ?, ?, ?, ?, ?)
            """, arguments: [state.seq, Reducer.version, SnapshotCodec.format, raw.count, Data(compressed), Data(HashChain.sha256(raw))])
    }

    /// The newest usable snapshot at or before `seq`.
    static func latest(_ db: Database, atOrBefore seq: Int64) throws -> LedgerState? {
        let rows = try Row.fetchCursor(db, sql: """
            SELECT seq, raw_size, data, checksum FROM snapshots
            WHERE seq <= ? AND reducer_version = ? AND format = ? ORDER BY seq DESC
            """, arguments: [seq, Reducer.version, SnapshotCodec.format])
        while let row = try rows.next() {
            if let state = decode(row) { return state }
        }
        return nil
    }

    private static func decode(_ row: Row) -> LedgerState? {
        guard let data = row[2] as Data?, let checksum = row[3] as Data? else { return nil }
        let rawSize: Int64 = row[1]
        guard let raw = try? data.withUnsafeBytes({ try LZ4.decompress($0, originalSize: Int(clamping: rawSize)) }),
              Data(HashChain.sha256(raw)) == checksum,
              let state = try? SnapshotCodec.decode(raw),
              state.seq == row[0] as Int64
        else { return nil }
        return state
    }

    /// Seqs of the snapshots stored, and whether each is usable by this version.
    static func list(_ db: Database) throws -> [(seq: Int64, usable: Bool, bytes: Int)] {
        try Row.fetchAll(db, sql: "SELECT seq, reducer_version, format, length(data) FROM snapshots ORDER BY seq").map { row in
            (row[0], (row[1] as Int) == Reducer.version && (row[2] as Int) == SnapshotCodec.format, row[3])
        }
    }
}
