import Foundation
import GRDB

/// Counts and sizes of a ledger, as `stats` shows them.
public struct LedgerStatistics: Sendable {
    /// Events stored, anomalies and the ledger's own events included.
    public var events: Int64 = 0
    /// Events stored, per type.
    public var countsByType: [EventType: Int64] = [:]
    /// Events stored as anomalies, per rule they broke.
    public var anomaliesByRule: [Rule: Int64] = [:]
    /// Events the ledger appended itself: cancellations of an early finish, records of an erasure.
    public var appendedByLedger: Int64 = 0
    /// The whole SQLite file (plus its WAL, if any), in bytes.
    public var fileBytes: Int64 = 0
    /// Uncompressed binary payloads of all events.
    public var payloadBytes: Int64 = 0
    /// Bytes the log takes as stored: sealed blocks and tail rows.
    public var logBytes: Int64 = 0
    /// Uncompressed size of what the sealed blocks hold.
    public var sealedRawBytes: Int64 = 0
    /// Stored (compressed) size of the sealed blocks.
    public var sealedStoredBytes: Int64 = 0
    /// Sealed blocks of events (`event_blocks` rows).
    public var blocks: Int64 = 0
    /// Events in the log's open tail, not yet sealed into a block (`events` rows).
    public var tailEvents: Int64 = 0
    /// Snapshots of the state stored.
    public var snapshots: Int64 = 0
    /// Bytes the snapshots take: their manifests and pages.
    public var snapshotBytes: Int64 = 0
    /// Compression dictionaries stored for the blocks (`dictionaries` rows).
    public var dictionaries: Int64 = 0

    /// Events stored as anomalies, all rules together.
    public var anomalies: Int64 { anomaliesByRule.values.reduce(0, +) }
    /// ``fileBytes`` per event; 0 for an empty ledger.
    public var fileBytesPerEvent: Double { events == 0 ? 0 : Double(fileBytes) / Double(events) }
    /// ``logBytes`` per event; 0 for an empty ledger.
    public var logBytesPerEvent: Double { events == 0 ? 0 : Double(logBytes) / Double(events) }
    /// ``payloadBytes`` per event; 0 for an empty ledger.
    public var payloadBytesPerEvent: Double { events == 0 ? 0 : Double(payloadBytes) / Double(events) }
    /// Uncompressed over stored size of the sealed blocks.
    public var compressionRatio: Double { sealedStoredBytes == 0 ? 1 : Double(sealedRawBytes) / Double(sealedStoredBytes) }
}

extension Ledger {
    /// Counts by type and rule, and the sizes of the file and the log.
    public func statistics() throws -> LedgerStatistics {
        var s = LedgerStatistics()
        try read { db in
            try EventStore.scan(db, integrity: true) { entry in
                let e = entry.event
                s.events += 1
                s.countsByType[e.event.type, default: 0] += 1
                if let rule = e.anomaly { s.anomaliesByRule[rule, default: 0] += 1 }
                if e.appendedByLedger { s.appendedByLedger += 1 }
                s.payloadBytes += Int64(entry.payload.count)
                return true
            }
            if let row = try Row.fetchOne(db, sql: "SELECT count(*), coalesce(sum(raw_size), 0), coalesce(sum(length(data)), 0) FROM event_blocks") {
                s.blocks = row[0]; s.sealedRawBytes = row[1]; s.sealedStoredBytes = row[2]
            }
            let tailBytes = try Int64.fetchOne(db, sql: "SELECT coalesce(sum(length(payload) + length(link) + length(stream) + 24), 0) FROM events") ?? 0
            s.tailEvents = try Int64.fetchOne(db, sql: "SELECT count(*) FROM events") ?? 0
            s.logBytes = s.sealedStoredBytes + tailBytes
            s.snapshots = try Int64.fetchOne(db, sql: "SELECT count(*) FROM snapshots") ?? 0
            s.snapshotBytes =
                (try Int64.fetchOne(db, sql: "SELECT coalesce(sum(length(manifest)), 0) FROM snapshots") ?? 0)
                + (try Int64.fetchOne(db, sql: "SELECT coalesce(sum(length(data) + length(hash)), 0) FROM snapshot_pages") ?? 0)
            s.dictionaries = try Int64.fetchOne(db, sql: "SELECT count(*) FROM dictionaries") ?? 0
        }
        for file in [path, path + "-wal"] {
            if let size = try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber {
                s.fileBytes += size.int64Value
            }
        }
        return s
    }
}
