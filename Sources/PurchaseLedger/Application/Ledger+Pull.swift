import Foundation
import GRDB

/// A ledger as a fleet store holds it (`purchase-ledger pull`): its events with their links, its
/// personal values (an erased user's are gone), the signing headers, and its identity key's
/// public half with the head it last signed. ``Ledger/writePulledCopy(_:to:)`` makes the file.
public struct PulledLedger: Sendable {
    /// The ledger's id.
    public var ledgerID: String
    package var frames: [UploadedFrame]
    package var values: [PersonalValueRow]
    package var signingHeaders: [String]
    /// The public half of the ledger's identity key, as the store holds it.
    public var publicKey: CheckpointPublicKey?
    /// The head the ledger last signed (its JSON statement), when the store holds one.
    public var headStatement: String?
    /// Where it was pulled from (a store's address, never a password) and when: kept in the copy.
    public var source: String

    /// Events held.
    public var count: Int { frames.count }

    package init(
        ledgerID: String, frames: [UploadedFrame], values: [PersonalValueRow], signingHeaders: [String], publicKey: CheckpointPublicKey?,
        headStatement: String?, source: String
    ) {
        self.ledgerID = ledgerID
        self.frames = frames
        self.values = values
        self.signingHeaders = signingHeaders
        self.publicKey = publicKey
        self.headStatement = headStatement
        self.source = source
    }
}

extension Ledger {
    /// Writes `pulled` as a ledger file at `path` (which must not exist) and opens it read-only:
    /// the same events and chain as the device's (every link is recomputed and must be the
    /// store's), its personal values, its id and the public half of its identity key, and its
    /// projections rebuilt from the log. `verify` passes on it as on the device's file; values
    /// of users the store erased are missing, and the copy says so (`ledger_info.fleet_erased_refs`,
    /// which `verify` counts as erasures the store made).
    ///
    /// The copy is read-only for good (``LedgerError/Code/pulledCopy`` on a writable open): its
    /// identity key stayed on the device, and events appended to it would be a history no
    /// device has. It is written under a temporary name and renamed when whole.
    ///
    /// Throws ``LedgerError`` `io` when `path` exists, and `corruptData` naming the seq when the
    /// store's events do not chain (a keyed chain, which needs its key, or damage in the store).
    @discardableResult
    public static func writePulledCopy(_ pulled: PulledLedger, to path: String) throws -> Ledger {
        guard !FileManager.default.fileExists(atPath: path) else {
            throw LedgerError.make(.io, "\(path) exists already; pull writes a new file")
        }
        let temporary = path + ".pulling-\(ProcessInfo.processInfo.processIdentifier)"
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: temporary + suffix) }
        do {
            try writeCopy(pulled, at: temporary)
            try FileManager.default.moveItem(atPath: temporary, toPath: path)
        } catch {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: temporary + suffix) }
            throw error
        }
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        return try Ledger(path: path, configuration: readOnly)
    }

    private static func writeCopy(_ pulled: PulledLedger, at path: String) throws {
        var configuration = LedgerConfiguration()
        configuration.writesPulledCopy = true
        let headers = Dictionary(pulled.signingHeaders.map { (SignedParts.digest(ofHeader: $0[...]), $0) }, uniquingKeysWith: { first, _ in first })
        var highest: Int64 = 0
        for f in pulled.frames { for (ref, _) in PayloadCodec.introductions(in: f.payload) { highest = max(highest, ref) } }
        let personal = PersonalValues(rows: pulled.values, assigned: highest, headers: headers)
        let chain = HashChain(key: nil)
        // Where the chain starts: from the ledger id (ledgers made since ids were bound), or zeros.
        var genesis = HashChain.genesis(ledgerID: pulled.ledgerID)
        if let first = pulled.frames.first {
            var frame = BinaryWriter()
            first.canonical(into: &frame)
            if chain.link(after: genesis, frame: frame.bytes) != first.link {
                guard chain.link(after: HashChain.genesis, frame: frame.bytes) == first.link else {
                    throw LedgerError.corrupt(
                        "the store's event 1 of ledger \(pulled.ledgerID) does not hash to its link from either genesis: a keyed chain (its key stays on the device, so it cannot be pulled) or damage in the store (run the fleet audit)",
                        seq: 1)
                }
                genesis = HashChain.genesis
            }
        }
        do {
            let ledger = try Ledger(path: path, configuration: configuration)
            let statements = PreparedStatements()
            _ = try ledger.file.transaction(statements) { db in
                try db.execute(sql: "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", arguments: [pulled.ledgerID])
                try db.execute(sql: "UPDATE ledger_info SET value = 'pulled from a fleet store' WHERE key = 'ledger_id_origin'")
                if genesis == HashChain.genesis { try db.execute(sql: "DELETE FROM ledger_info WHERE key = 'genesis'") }
                var blocks = try EventStore.BlockWriter(
                    db, blockSize: configuration.blockSize, codec: configuration.blockCodec, chain: chain, lastLink: genesis, storedTail: 0)
                var introduced = Set<Int64>()
                var erasedByEvents = Set<Int64>()
                for f in pulled.frames {
                    let body: EventBody
                    do {
                        body = try EventStore.decodePayload(f.type, f.payload, seq: f.seq, personal: personal)
                    } catch let error as LedgerError {
                        throw LedgerError.corrupt("the store's event \(f.seq) does not decode: \(error.message)", seq: f.seq)
                    }
                    let e = RecordedEvent(
                        seq: f.seq, version: f.version, event: Event(at: Timestamp(nanosecondsSinceEpoch: f.at), body),
                        recordedAt: Timestamp(nanosecondsSinceEpoch: f.recorded), anomaly: f.anomaly, appendedByLedger: f.appendedByLedger)
                    try blocks.add(EventStore.Frame(e, payload: f.payload), db)
                    for (ref, _) in PayloadCodec.introductions(in: f.payload) { introduced.insert(ref) }
                    if case .personalDataErased(let refs) = body { erasedByEvents.formUnion(refs) }
                }
                let written = try blocks.write(db, statements)
                if let last = pulled.frames.last, written.lastLink != last.link {
                    throw LedgerError.corrupt(
                        "the store's events of ledger \(pulled.ledgerID) do not chain to the link it holds at seq \(last.seq): damage in the store (run the fleet audit)",
                        seq: last.seq)
                }
                let insert = try db.makeStatement(sql: "INSERT INTO personal_values (ref, owner, salt, value) VALUES (?, ?, ?, ?)")
                var held = Set<Int64>()
                var others: [PersonalValueRow] = []
                for row in pulled.values.sorted(by: { $0.ref < $1.ref }) where introduced.contains(row.ref) {
                    // User ids as rows; the other values sealed into blocks, as an append does.
                    if row.owner == row.ref {
                        try insert.execute(arguments: [row.ref, row.owner, row.salt.map { Data($0) }, Data(row.value)])
                    } else {
                        others.append(row)
                    }
                    held.insert(row.ref)
                }
                // The ledger is new: no row waits in its tail yet. (Sealed in blocks of the
                // default size; the writer's own size applies to its appends.)
                var tailCount = 0
                for row in try PersonalValueBlocks.seal(others, tailCount: &tailCount, db) {
                    try insert.execute(arguments: [row.ref, row.owner, row.salt.map { Data($0) }, Data(row.value)])
                }
                if let highest = introduced.max() {
                    try db.execute(sql: "DELETE FROM sqlite_sequence WHERE name = 'personal_values'")
                    try db.execute(sql: "INSERT INTO sqlite_sequence (name, seq) VALUES ('personal_values', ?)", arguments: [highest])
                }
                for (digest, header) in headers {
                    try db.execute(sql: "INSERT OR IGNORE INTO signing_headers (digest, header) VALUES (?, ?)", arguments: [Data(digest), header])
                }
                // Values the store no longer holds, that no erasure event of the log removed: the
                // store's own erasures (`forget` in the fleet), which verify counts as such.
                let storeErased = introduced.subtracting(held).subtracting(erasedByEvents).sorted()
                try db.execute(
                    sql: "INSERT OR REPLACE INTO ledger_info (key, value) VALUES ('fleet_erased_refs', ?)",
                    arguments: [storeErased.map(String.init).joined(separator: ",")])
                try db.execute(sql: "UPDATE ledger_info SET value = 'stale' WHERE key = 'projection_stamp'")
            }
        }
        // Opened again: the projections (and the evidence) are rebuilt from the log now held.
        do {
            let ledger = try Ledger(path: path, configuration: configuration)
            _ = try ledger.rebuildProjections(rewritingEveryRow: true)
            try ledger.writeQueue().writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    try db.execute(sql: "DELETE FROM ledger_info WHERE key = 'identity_key'")
                    if let key = pulled.publicKey {
                        try db.execute(
                            sql: "INSERT OR REPLACE INTO ledger_info (key, value) VALUES ('identity_public_key', ?)", arguments: [Data(key.rawRepresentation)])
                    }
                    if let statement = pulled.headStatement {
                        try db.execute(sql: "INSERT OR REPLACE INTO ledger_info (key, value) VALUES ('pulled_head', ?)", arguments: [statement])
                    }
                    try db.execute(sql: "INSERT OR REPLACE INTO ledger_info (key, value) VALUES ('pulled_from', ?)", arguments: [pulled.source])
                    return .commit
                }
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
        }
    }
}
