import Foundation
import GRDB
import GRDBSQLite

/// How sealed blocks of events are compressed. Every block records its codec, so a ledger can mix
/// them and a change never rewrites history.
public enum BlockCodec: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// Frames stored as they are.
    case raw = 0
    /// LZ4 over the whole block.
    case lz4 = 1
    /// LZ4 over the whole block, with a dictionary stored in the ledger.
    case lz4Dictionary = 2

    /// `raw`, `lz4` or `lz4+dictionary`.
    public var description: String {
        switch self {
        case .raw: "raw"
        case .lz4: "lz4"
        case .lz4Dictionary: "lz4+dictionary"
        }
    }
}

/// The log's rows, read and written inside a GRDB transaction. Not thread-safe on its own: a
/// `Database` is confined to the pool's connection that passes it in.
package enum EventStore {
    /// Largest dictionary kept (LZ4 looks back 64 KiB at most).
    static let maxDictionarySize = 64 * 1024

    // MARK: - Position

    static func lastSeq(_ db: Database) throws -> Int64 {
        if let tail = try Int64.fetchOne(db.cachedStatement(sql: "SELECT max(seq) FROM events")) { return tail }
        return try lastSealedSeq(db)
    }

    /// The last seq of the last sealed block (blocks are consecutive runs, so that is the one
    /// that starts last: a seek, where `max(last_seq)` read every block's row).
    static func lastSealedSeq(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT last_seq FROM event_blocks ORDER BY first_seq DESC LIMIT 1")) ?? 0
    }

    /// SQLite's data version of `db`'s connection: it changes whenever a transaction commits to
    /// the file, through this connection or any other (read at the start of a transaction, it
    /// reflects every commit before it).
    static func dataVersion(_ db: Database) -> UInt32? {
        var version: UInt32 = 0
        guard sqlite3_file_control(db.sqliteConnection, "main", SQLITE_FCNTL_DATA_VERSION, &version) == SQLITE_OK else { return nil }
        return version
    }

    /// The chain's link after event `seq` as the file stores it: a tail row's own, a block's
    /// last, or recomputed from the block before through the events of its block (nil when the
    /// log has no such event or it does not decode).
    static func link(at seq: Int64, chain: HashChain, _ db: Database) throws -> [UInt8]? {
        if seq == 0 { return try HashChain.genesis(db) }
        if let stored = try Data.fetchOne(db.cachedStatement(sql: "SELECT link FROM events WHERE seq = ?"), arguments: [seq]) {
            return [UInt8](stored)
        }
        guard
            let block = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT first_seq, last_seq, last_link FROM event_blocks WHERE first_seq <= ? ORDER BY first_seq DESC LIMIT 1"),
                arguments: [seq]),
            seq <= block[1] as Int64
        else { return nil }
        if seq == block[1] as Int64 { return [UInt8](block[2] as Data) }
        let first: Int64 = block[0]
        var previous: [UInt8]
        if first == 1 {
            previous = try HashChain.genesis(db)
        } else if let before = try Row.fetchOne(
            // The block before, found by its key: `WHERE last_seq = ?` read every block's row.
            db.cachedStatement(sql: "SELECT last_seq, last_link FROM event_blocks WHERE first_seq < ? ORDER BY first_seq DESC LIMIT 1"), arguments: [first]),
            before[0] as Int64 == first - 1
        {
            previous = [UInt8](before[1] as Data)
        } else {
            return nil
        }
        var found: [UInt8]?
        // Only the stored bytes are hashed: the payloads are not decoded (each event's body is
        // a placeholder; its type is the entry's).
        var frame = BinaryWriter(capacity: 256)
        do {
            try scan(db, from: first, through: seq, integrity: true, personal: .unresolved, bodies: false) { entry in
                FrameCodec.canonical(entry, into: &frame)
                previous = chain.link(after: previous, frame: frame.bytes)
                if entry.event.seq == seq { found = previous }
                return entry.event.seq < seq
            }
        } catch let error as LedgerError where error.code == .corruptData {
            return nil
        }
        return found
    }

    /// The chain link after the last stored event (the genesis link for an empty log).
    static func lastLink(_ db: Database) throws -> [UInt8] {
        if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT link FROM events ORDER BY seq DESC LIMIT 1")) {
            return [UInt8](row[0] as Data)
        }
        if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT last_link FROM event_blocks ORDER BY first_seq DESC LIMIT 1")) {
            return [UInt8](row[0] as Data)
        }
        return try HashChain.genesis(db)
    }

    // MARK: - Reading

    /// How a stored event is protected by the chain.
    enum StoredLink {
        /// A tail row's full link.
        case full([UInt8])
        /// A sealed event's link prefix; `blockLast` is the block's full last link, given with the
        /// block's last event.
        case prefix([UInt8], blockLast: [UInt8]?)

        /// Whether a recomputed link agrees with what is stored.
        func matches(_ link: [UInt8]) -> Bool {
            switch self {
            case .full(let stored): stored == link
            case .prefix(let prefix, let blockLast): link.starts(with: prefix) && (blockLast == nil || blockLast! == link)
            }
        }
    }

    /// What `scan` hands over for each event.
    struct Entry {
        var event: RecordedEvent
        /// The binary payload and stored link; only when integrity data was asked for.
        var payload: [UInt8]
        var link: StoredLink?
        /// Whether `payload`'s commitments were made again from the values beside the log (its
        /// block stored them elided: ``ElidedCommitments``).
        var commitmentsMadeAgain = false
        /// The event's type: also right when its body was not decoded (a scan without `bodies`,
        /// whose events hold a placeholder body).
        var type: EventType

        init(event: RecordedEvent, payload: [UInt8], link: StoredLink? = nil, type: EventType? = nil) {
            self.event = event
            self.payload = payload
            self.link = link
            self.type = type ?? event.event.type
        }
    }

    /// Calls `body` with every event from `seq` on, in order, one block at a time: memory stays
    /// flat whatever the log's size. Return false from `body` to stop. A block or row that does
    /// not decode throws ``LedgerError/Code/corruptData`` naming its seq, unless `onCorrupt` is
    /// given, which is then called and the scan goes on with the next block or row. `prefetch`
    /// is called on the decoding thread with each sealed block's events, once they are handed
    /// over, until the scan returns: what the caller will read for them can be made ready there,
    /// on the other core (ignored with `integrity`, whose scan decodes on the caller's thread).
    static func scan(
        _ db: Database, from seq: Int64 = 1, through last: Int64 = .max, integrity: Bool = false,
        personal given: PersonalValues? = nil, bodies: Bool = true, onCorrupt: ((LedgerError) throws -> Void)? = nil,
        prefetch: (@Sendable ([RecordedEvent]) -> Void)? = nil, _ body: (Entry) throws -> Bool
    ) throws {
        var dictionaries: [Int64: [UInt8]] = [:]
        // What the personal refs stand for: the caller's (``PersonalValues/unresolved`` for the
        // stored bytes only), else the whole table.
        let personal = try given ?? PersonalValues.current(db)
        // From the block holding `seq` (the latest that starts at or before it and ends at or
        // after it), or, when none does (`seq` in the unsealed tail, past the end, or in a hole),
        // from the first block after `seq`: by the key, without walking the blocks before.
        let blocks = try Row.fetchCursor(
            db,
            sql: """
                SELECT first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link FROM event_blocks
                WHERE first_seq >= (SELECT coalesce(max(first_seq), ?1) FROM event_blocks WHERE first_seq <= ?1 AND last_seq >= ?1)
                AND last_seq >= ?1 AND first_seq <= ?2 ORDER BY first_seq
                """, arguments: [seq, last])
        // The log is gap-free from seq 1: a scan without integrity data (which `verify` checks
        // its own way) says so when events are missing or stored twice (a block row deleted or
        // its range edited), instead of handing over a log with a hole.
        var continuity = Continuity(expected: max(seq, 1))
        let keepGoing =
            integrity
            ? try scanWithLinks(
                db, blocks, from: seq, through: last, dictionaries: &dictionaries, personal: personal, bodies: bodies, onCorrupt: onCorrupt, body)
            : try scanPipelined(
                db, blocks, from: seq, through: last, dictionaries: &dictionaries, personal: personal, onCorrupt: onCorrupt, prefetch: prefetch,
                continuity: &continuity, body)
        guard keepGoing else { return }
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT seq, version, type, at_ns, recorded_ns, flags, codec, payload, link FROM events
                WHERE seq >= ? AND seq <= ? ORDER BY seq
                """, arguments: [seq, last])
        while let row = try rows.next() {
            let s: Int64 = row[0]
            let entry: Entry
            do {
                guard (row[6] as Int64) == 0 else { throw LedgerError.corrupt("event \(s) has unknown payload codec \(row[6] as Int64)", seq: s) }
                let payload = try row.withUnsafeData(atIndex: 7) { $0.map { [UInt8]($0) } ?? [] }
                let (appended, anomaly) = try decodeFlags(row[5], seq: s)
                let type = try decodeType(row[2], seq: s)
                let body = bodies ? try decodePayload(type, payload, seq: s, personal: personal) : .restoreCompleted
                let event = RecordedEvent(
                    seq: s, version: row[1], event: Event(at: Timestamp(nanosecondsSinceEpoch: row[3]), body),
                    recordedAt: Timestamp(nanosecondsSinceEpoch: row[4]), anomaly: anomaly, appendedByLedger: appended)
                entry = Entry(event: event, payload: integrity ? payload : [], link: integrity ? .full([UInt8](row[8] as Data)) : nil, type: type)
            } catch let error as LedgerError {
                try report(error, to: onCorrupt)
                continuity.damaged = true
                continue
            }
            if !integrity, try !continuity.admit(s, onCorrupt) { continue }
            if try !body(entry) { return }
        }
        // Events before the scan's end that the log holds further on, though no row gave them.
        if !integrity && continuity.expected <= last && !continuity.damaged {
            let stored = try lastSeq(db)
            if stored >= continuity.expected {
                try report(.corrupt(missing(continuity.expected, min(last, stored)), seq: continuity.expected), to: onCorrupt)
            }
        }
    }

    /// What a hole in the log is called (by a scan, and by `verify`).
    static func missing(_ first: Int64, _ last: Int64) -> String {
        first == last ? "event \(first) is missing" : "events \(first)...\(last) are missing"
    }

    /// The seqs a scan without integrity data has handed over: the next one expected, and whether
    /// damage was reported since the last (the events a damaged block held are reported as that
    /// damage, not again as missing).
    struct Continuity {
        var expected: Int64
        var damaged = false

        /// Whether the event at `s` is handed over: not one stored twice. A hole before it is
        /// reported (thrown, without `onCorrupt`).
        @inline(__always) mutating func admit(_ s: Int64, _ onCorrupt: ((LedgerError) throws -> Void)?) throws -> Bool {
            if s == expected {
                expected += 1
                damaged = false
                return true
            }
            if s < expected {
                try report(.corrupt("event \(s) is stored twice (a block's range overlaps another's)", seq: s), to: onCorrupt)
                return false
            }
            if !damaged { try report(.corrupt(missing(expected, s - 1), seq: expected), to: onCorrupt) }
            expected = s + 1
            damaged = false
            return true
        }
    }
}

/// Byte strings common in any purchase ledger, placed at the start of every dictionary.
enum DictionarySeed {
    static let common: [UInt8] = Array(
        ("file:///var/mobile/Containers/Data/Application//Library/Caches/StoreKit//Contents/"
            + "Library/Application Support/Documents/SKErrorDomainNSURLErrorDomainNSCocoaErrorDomain"
            + "The payment was cancelled.An unknown error occurredThe request timed out."
            + "The network connection was lost.The Internet connection appears to be offline.sha256:").utf8)
}
