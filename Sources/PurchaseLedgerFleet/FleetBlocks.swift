import NIOCore
import PostgresNIO
package import PurchaseLedger

/// One row of `event_blocks` (migration 0012), its events not decoded yet.
struct StoredBlock {
    var ledger: String
    var firstSeq: Int64
    var lastSeq: Int64
    var rawSize: Int64
    var frames: [UInt8]
    var links: [UInt8]

    /// The columns a query selects for ``FleetStore/forEachBlock(_:_:)``, from `event_blocks e`.
    static let columns = "e.ledger_id::text, e.first_seq, e.last_seq, e.raw_size, e.frames, e.links"

    /// Its events, checked for shape (``FleetBlock/decode(firstSeq:lastSeq:rawSize:frames:links:)``).
    func events() throws(LedgerError) -> [UploadedFrame] {
        try FleetBlock.decode(firstSeq: firstSeq, lastSeq: lastSeq, rawSize: rawSize, frames: frames, links: links)
    }

    /// The first seqs of a ledger's chain of blocks (`ranges`, any order): from seq 1, each block
    /// starting where the last ended, as ship writes them (the key makes each start unique). A
    /// block off the chain overlaps it or lies past a gap: planted, or left by a deletion.
    static func chain(_ ranges: [(Int64, Int64)]) -> Set<Int64> {
        let byFirst = Dictionary(ranges.map { ($0.0, $0.1) }, uniquingKeysWith: { a, _ in a })
        var chain = Set<Int64>()
        var next: Int64 = 1
        while let last = byFirst[next], last >= next, last < Int64.max {
            chain.insert(next)
            next = last + 1
        }
        return chain
    }
}

extension FleetStore {
    /// The blocks `query` selects (its columns ``StoredBlock/columns``, in that order), each
    /// handed to `body` as it arrives. `body` must not query the store: the rows are still coming.
    func forEachBlock(_ query: PostgresQuery, _ body: (StoredBlock) async throws -> Void) async throws {
        for try await row in try await connection.query(query, logger: logger) {
            let (ledger, first, last, raw, frames, links) = try row.decode((String, Int64, Int64, Int64, ByteBuffer, ByteBuffer).self)
            try await body(StoredBlock(ledger: ledger, firstSeq: first, lastSeq: last, rawSize: raw, frames: Array(buffer: frames), links: Array(buffer: links)))
        }
    }

    /// The events of each ledger of `heads` (ledger id -> its head's seq) through its head, in
    /// seq order, read from its blocks. A block that starts inside the events before it (one
    /// planted with the shipping credential: ship never writes one) is left out; the audit names
    /// it. Throws ``FleetError/Code/server`` naming a ledger whose blocks do not decode or leave a
    /// gap (run the fleet audit).
    func storedEvents(through heads: [String: Int64]) async throws -> [String: [UploadedFrame]] {
        let ids = heads.keys.sorted()
        var events: [String: [UploadedFrame]] = [:]
        var damaged: (String, Int64)?
        try await forEachBlock(
            """
            SELECT \(unescaped: StoredBlock.columns) FROM event_blocks e JOIN ledgers l ON l.ledger_id = e.ledger_id
            WHERE e.ledger_id = ANY(\(ids)::text[]::uuid[]) AND e.first_seq <= l.last_seq ORDER BY 1, 2
            """
        ) { block in
            guard damaged == nil else { return }
            // Appended in place: a copy of the ledger's array per block would copy its events.
            let held = Int64(events[block.ledger]?.count ?? 0)
            if block.firstSeq <= held { return }
            guard block.firstSeq == held + 1, let decoded = try? block.events() else {
                damaged = (block.ledger, min(block.firstSeq, held + 1))
                return
            }
            let head = heads[block.ledger] ?? 0
            events[block.ledger, default: []].append(contentsOf: block.lastSeq <= head ? decoded[...] : decoded.prefix { $0.seq <= head })
        }
        if let (ledger, seq) = damaged {
            throw FleetError(.server, "\(address): the stored events of ledger \(ledger) are damaged at seq \(seq) (run the fleet audit)")
        }
        return events
    }
}

extension FleetStore {
    /// Every event the store holds of ledger `id`, past its head too, decoded from its blocks in
    /// their order: for tools and tests. Throws ``LedgerError/Code/corruptData`` for a block that
    /// does not decode.
    package func storedEvents(ofLedger id: String) async throws -> [UploadedFrame] {
        try await run {
            var events: [UploadedFrame] = []
            try await forEachBlock("SELECT \(unescaped: StoredBlock.columns) FROM event_blocks e WHERE e.ledger_id = \(id)::uuid ORDER BY 2") { block in
                events += try block.events()
            }
            return events
        }
    }
}

extension FleetStore {
    /// Every event of ledgers `ids` in any block that decodes, past their heads too, in block
    /// order (an event held twice comes twice), each with whether its block is on the ledger's
    /// chain of blocks (``StoredBlock/chain(_:)``): what `forget` searches for a user's ref, which
    /// must not miss one because a head was moved back or a block planted.
    func eventsOfEveryBlock(of ids: [String]) async throws -> [String: [(event: UploadedFrame, onChain: Bool)]] {
        var blocks: [String: [StoredBlock]] = [:]
        try await forEachBlock("SELECT \(unescaped: StoredBlock.columns) FROM event_blocks e WHERE e.ledger_id = ANY(\(ids)::text[]::uuid[]) ORDER BY 1, 2") { block in
            blocks[block.ledger, default: []].append(block)
        }
        return blocks.mapValues { ledger in
            let chain = StoredBlock.chain(ledger.map { ($0.firstSeq, $0.lastSeq) })
            return ledger.flatMap { block in ((try? block.events()) ?? []).map { ($0, chain.contains(block.firstSeq)) } }
        }
    }
}

extension FleetStore {
    /// The blocks of ledgers `ids` that hold events past their heads (`ledgers.last_seq`), by
    /// ledger, in first seq order, with the ledger's chain of blocks (``StoredBlock/chain(_:)``),
    /// which tells its own from planted ones: what ship and the ingest service look for before
    /// storing.
    func blocksPastHead(of ids: [String]) async throws -> [String: (blocks: [StoredBlock], chain: Set<Int64>)] {
        var past: [String: [StoredBlock]] = [:]
        try await forEachBlock(
            """
            SELECT \(unescaped: StoredBlock.columns) FROM event_blocks e JOIN ledgers l ON l.ledger_id = e.ledger_id
            WHERE e.ledger_id = ANY(\(ids)::text[]::uuid[]) AND e.last_seq > l.last_seq ORDER BY 1, 2
            """
        ) { block in
            past[block.ledger, default: []].append(block)
        }
        guard !past.isEmpty else { return [:] }
        var ranges: [String: [(Int64, Int64)]] = [:]
        for try await (id, first, last) in try await connection.query(
            "SELECT ledger_id::text, first_seq, last_seq FROM event_blocks WHERE ledger_id = ANY(\(past.keys.sorted())::text[]::uuid[])", logger: logger
        ).decode((String, Int64, Int64).self) {
            ranges[id, default: []].append((first, last))
        }
        return past.reduce(into: [:]) { out, entry in out[entry.key] = (entry.value, StoredBlock.chain(ranges[entry.key] ?? [])) }
    }

    /// The frames (not the links) of the blocks of `ledgers` that `condition` (SQL over `e`)
    /// selects, a few hundred ledgers a query so that the connection buffers few rows; each
    /// block is handed to `body` with empty links.
    func forEachFramesBlock(of ledgers: [String], where condition: String = "true", _ body: (StoredBlock) async throws -> Void) async throws {
        for part in stride(from: 0, to: ledgers.count, by: 256) {
            let some = Array(ledgers[part..<min(part + 256, ledgers.count)])
            try await forEachBlock(
                """
                SELECT e.ledger_id::text, e.first_seq, e.last_seq, e.raw_size, e.frames, ''::bytea FROM event_blocks e
                WHERE e.ledger_id = ANY(\(some)::text[]::uuid[]) AND \(unescaped: condition)
                """, body)
        }
    }
}
