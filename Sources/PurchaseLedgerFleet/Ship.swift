import Foundation
import NIOCore
import PostgresNIO
public import PurchaseLedger

/// What shipping one ledger did.
public struct ShipResult: Sendable, Hashable {
    /// The ledger's id (``LedgerIdentity/id``), which keys its rows on the server.
    public var ledgerID: String
    /// The path of the ledger file shipped.
    public var path: String
    /// Events the server did not hold before, now stored.
    public var shippedEvents: Int
    /// The ledger's last seq, now the server's too.
    public var lastSeq: Int64
    /// Events the server already held (left as they were).
    public var alreadyShipped: Int64
}

extension FleetStore {
    /// Sends `ledger`'s events that the server does not hold yet, with the projections after
    /// them, in one PostgreSQL transaction: a ship killed at any moment leaves the server as it
    /// was, and shipping again stores each event exactly once.
    ///
    /// The whole file is read and its hash chain recomputed first; a tampered file throws
    /// ``LedgerError`` `corruptData` naming the seq, and a file whose history differs from what
    /// was shipped before throws `chainMismatch`. Nothing of that ledger is written then.
    ///
    /// The ledger must have an identity (``Ledger/identity()``): open it for writing once.
    public func ship(_ ledger: Ledger) async throws -> ShipResult {
        let outcome = try await shipBatch([(ledger.path, { ledger })])[0]
        return try outcome.result.get()
    }

    /// What shipping one ledger of several gave: its result, or why it was refused.
    public struct ShipOutcome: Sendable {
        /// The ledger file's path, as given in `paths`.
        public var path: String
        /// What shipping it did, or the ``LedgerError`` that refused it (tampered, rewritten, unreadable).
        public var result: Result<ShipResult, LedgerError>
    }

    /// Ships ledger files, opened (with `configuration`) a batch at a time. Each batch of up to
    /// `batchSize` ledgers goes in one PostgreSQL transaction, with one COPY per table, so each
    /// ledger is on the server whole (up to its last seq) or not at all, as with
    /// ``ship(_:)``. A refused ledger (tampered, rewritten, unreadable) gets its error in its
    /// outcome, writes nothing, and the others still go. Server errors throw.
    ///
    /// `connections` batches go at once, each on a connection of its own (this store's and
    /// more to the same server): one reads and checks its files while PostgreSQL stores another's.
    /// Outcomes come back in the order of `paths`.
    public func ship(
        paths: [String], configuration: LedgerConfiguration = LedgerConfiguration(), batchSize: Int = 64,
        connections: Int = 2, progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil
    ) async throws -> [ShipOutcome] {
        let size = max(1, batchSize)
        let batches = stride(from: 0, to: paths.count, by: size).map { Array(paths[$0..<min(paths.count, $0 + size)]) }
        var stores = [self]
        do {
            for _ in 1..<max(1, min(connections, batches.count)) {
                stores.append(try await FleetStore.connect(address: address, logger: logger))
            }
        } catch {
            for store in stores.dropFirst() { await store.close() }
            throw error
        }
        let done = Locked(0)
        let total = paths.count
        let workers = stores
        do {
            let results = try await withThrowingTaskGroup(of: [(Int, [ShipOutcome])].self) { group in
                for (worker, store) in workers.enumerated() {
                    group.addTask {
                        var mine: [(Int, [ShipOutcome])] = []
                        for index in stride(from: worker, to: batches.count, by: workers.count) {
                            let outcomes = try await store.shipBatch(
                                batches[index].map { path in
                                    (path, { try FleetStore.openForShipping(path, configuration: configuration) })
                                })
                            mine.append((index, outcomes))
                            let count = done.withLock {
                                $0 += outcomes.count; return $0
                            }
                            progress?(count, total)
                        }
                        return mine
                    }
                }
                var all: [(Int, [ShipOutcome])] = []
                for try await part in group { all += part }
                return all
            }
            for store in stores.dropFirst() { await store.close() }
            return results.sorted { $0.0 < $1.0 }.flatMap(\.1)
        } catch {
            for store in stores.dropFirst() { await store.close() }
            throw error
        }
    }

    /// Opens a ledger read-only (no state load, nothing written), unless it first needs a
    /// migration or a ledger id: then once for writing, which gives it both.
    static func openForShipping(_ path: String, configuration: LedgerConfiguration) throws -> Ledger {
        guard FileManager.default.fileExists(atPath: path) else { throw LedgerError.make(.io, "no ledger at \(path)") }
        // An empty file is no ledger (a truncated one, or a placeholder): never made one by shipping it.
        if ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1) == 0 {
            throw LedgerError.make(.notALedger, "\(path) is an empty file, not a ledger (truncated?); nothing was shipped or written")
        }
        var readOnly = configuration
        readOnly.readOnly = true
        if let ledger = try? Ledger(path: path, configuration: readOnly), try ledger.identity()?.publicKey != nil {
            return ledger
        }
        return try Ledger(path: path, configuration: configuration)
    }

    /// One PostgreSQL transaction for several ledgers: lock their rows (in ledger-id order, so
    /// concurrent shippers never deadlock), read and check each file, then COPY the events and
    /// projections of all that passed (the catalog with them, per ledger) and move their rows.
    private func shipBatch(_ entries: [(path: String, open: () throws -> Ledger)]) async throws -> [ShipOutcome] {
        var outcomes: [ShipOutcome?] = Array(repeating: nil, count: entries.count)
        var opened: [(index: Int, ledger: Ledger, identity: LedgerIdentity)] = []
        for (i, entry) in entries.enumerated() {
            do {
                let ledger = try entry.open()
                guard let identity = try ledger.identity() else {
                    throw LedgerError.make(.io, "\(entry.path) has no ledger id yet (made by an older version and only opened read-only); open it for writing once")
                }
                // A fleet keys every row by a uuid: an id edited into something else is this
                // file's problem, not the batch's.
                guard UUID(uuidString: identity.id) != nil else {
                    throw LedgerError.make(.notALedger, "\(entry.path): its ledger id \(identity.id.debugDescription.prefix(80)) is not a ledger id (a UUID)")
                }
                // A key-derived id (UUID version 8) that this file's own key does not derive was
                // copied from another ledger: refused before the fleet store is touched.
                guard identity.publicKey != nil, !identity.contradictsItsKey else {
                    throw LedgerError.make(
                        .idConflict,
                        "\(entry.path): its ledger id \(identity.id) is not derived from this file's identity key: the id belongs to another ledger and was copied into this file (an id conflict); nothing of it was shipped"
                    )
                }
                opened.append((i, ledger, identity))
            } catch let error as LedgerError {
                outcomes[i] = ShipOutcome(path: entry.path, result: .failure(error))
            } catch {
                outcomes[i] = ShipOutcome(path: entry.path, result: .failure(LedgerError.make(.io, "\(entry.path): \(error)")))
            }
        }
        if !opened.isEmpty {
            do {
                try await shipInOneTransaction(opened, into: &outcomes)
            } catch let error as FleetError where error.code == .server {
                // A value the server refused (checked in Swift where it can be, but the server
                // has the last word) rolls back the whole batch: ship its ledgers one by one, so
                // only the ledger that holds it is refused, with the server's reason.
                for entry in opened {
                    do {
                        try await shipInOneTransaction([entry], into: &outcomes)
                    } catch let error as FleetError where error.code == .server {
                        outcomes[entry.index] = ShipOutcome(
                            path: entry.ledger.path,
                            result: .failure(
                                LedgerError.make(.io, "\(entry.ledger.path) (ledger \(entry.identity.id)): the fleet store refused a value: \(error.message)")))
                    }
                }
            }
        }
        return outcomes.map { $0! }
    }

    private func shipInOneTransaction(_ opened: [(index: Int, ledger: Ledger, identity: LedgerIdentity)], into outcomes: inout [ShipOutcome?]) async throws {
        try await run {
            try await transaction {
                try await shipLocked(opened, into: &outcomes)
            }
        }
    }

    private func shipLocked(_ opened: [(index: Int, ledger: Ledger, identity: LedgerIdentity)], into outcomes: inout [ShipOutcome?]) async throws {
        // Lock (or create at seq 0) every ledger's row; a ledger named twice is shipped once.
        let byID = Dictionary(opened.map { ($0.identity.id, $0) }, uniquingKeysWith: { first, _ in first })
        let ids = byID.keys.sorted()
        let rows = try await connection.query(
            """
            INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at, public_key, chain)
            SELECT k.id::uuid, k.origin, 0, \(ByteBuffer(bytes: Shipment.genesis)), now(), now(), decode(nullif(k.key, ''), 'hex'), k.chain
            FROM unnest(\(ids)::text[], \(ids.map { byID[$0]!.identity.origin })::text[],
                        \(ids.map { byID[$0]!.identity.publicKey.map { Self.hex($0.rawRepresentation) } ?? "" })::text[],
                        \(ids.map { byID[$0]!.ledger.chain.isKeyed ? "hmac-sha256" : "sha256" })::text[]) AS k(id, origin, key, chain)
            ORDER BY k.id
            ON CONFLICT (ledger_id) DO UPDATE SET last_shipped_at = ledgers.last_shipped_at
            RETURNING ledger_id::text, last_seq, last_link, xmax = 0 AS inserted, rows_version, public_key
            """, logger: logger
        ).collect()
        var server: [String: (seq: Int64, link: [UInt8], inserted: Bool, rowsVersion: Int16, publicKey: [UInt8]?)] = [:]
        for row in rows {
            let (id, seq, link, inserted, rowsVersion, key) = try row.decode((String, Int64, ByteBuffer, Bool, Int16, ByteBuffer?).self)
            server[id] = (seq, Array(buffer: link), inserted, rowsVersion, key.map { Array(buffer: $0) })
        }
        // Events the store holds of a ledger past the head its row says: the ledger's own, when the
        // row's head was moved back (the shipping role may update it), or events it never shipped
        // (anyone with the shipping credential can insert blocks). Its own are kept and the head
        // moves past them; others would overlap its next ship's blocks, so that ledger is refused
        // naming their blocks instead, and the owner removes them.
        let pastHead = try await blocksPastHead(of: ids)
        // Users erased from these ledgers in the store: their rows go with markers.
        var erased: [String: Set<Int64>] = [:]
        for try await row in try await connection.query(
            "SELECT ledger_id::text, user_ref FROM erased_users WHERE ledger_id = ANY(\(ids)::text[]::uuid[])", logger: logger)
        {
            let (id, ref) = try row.decode((String, Int64).self)
            erased[id, default: []].insert(ref)
        }
        // Users erased from the store while this ledger was elsewhere (a device never shipped
        // before, or not since): the store knows them by a keyed digest, never by id.
        var users: [String: [Int64: String]] = [:]
        for entry in opened where byID[entry.identity.id]?.index == entry.index {
            users[entry.identity.id] = (try? entry.ledger.userIDs()) ?? [:]
        }
        // (An id holding a NUL cannot be asked about, nor stored: its ledger is refused below.)
        let asked = Array(Set(users.values.flatMap(\.values))).filter { !$0.utf8.contains(0) }.sorted()
        if !asked.isEmpty {
            var erasedIDs = Set<String>()
            for try await row in try await connection.query("SELECT erased_subjects_among(\(asked)::text[])", logger: logger) {
                erasedIDs.insert(try row.decode(String.self))
            }
            for (ledger, byRef) in users {
                for (ref, user) in byRef where erasedIDs.contains(user) { erased[ledger, default: []].insert(ref) }
            }
        }
        var accepted: [(ledger: String, shipment: Shipment)] = []
        var heads: [String: (key: [UInt8], statement: String)] = [:]
        var refusedNew: [String] = []
        for entry in opened {
            let id = entry.identity.id
            guard byID[id]?.index == entry.index else {
                outcomes[entry.index] = ShipOutcome(
                    path: entry.ledger.path, result: .failure(LedgerError.make(.io, "\(entry.ledger.path) is ledger \(id), already named in this ship")))
                continue
            }
            guard let held = server[id] else { throw FleetError(.server, "\(address): the ledgers row of \(id) was not returned") }
            do {
                // The id is held by the key that shipped it first (for a key-derived id, the only
                // key that can): a file with another key claims an id that is not its own.
                guard let key = entry.identity.publicKey, held.publicKey == nil || held.publicKey == key.rawRepresentation else {
                    throw LedgerError.make(
                        .idConflict,
                        "the fleet store holds this ledger id under another ledger's identity key: this file claims an id that is not its own (an id conflict), and the ledger that holds it still ships"
                    )
                }
                var shipment = try entry.ledger.shipment(
                    after: held.seq, link: held.link, erasedUsers: erased[id] ?? [], allValues: held.rowsVersion < FleetStore.valuesRowsVersion)
                if let (stored, chain) = pastHead[id] {
                    // The ledger's own blocks (each event the file's, at its seq, from the head on)
                    // are kept; if any other block is there, nothing is shipped and its blocks are named.
                    let own = Self.ownEvents(stored, chain: chain, head: held.seq, file: shipment.events)
                    if let block = own.differing.first {
                        throw LedgerError.make(
                            .chainMismatch,
                            "the fleet store's block of events \(block.firstSeq)...\(block.lastSeq) holds this ledger's events up to the head it shipped (seq \(held.seq)) and, past it, events that are not this file's; "
                                + "nothing was shipped: the store's owner runs the fleet audit (`purchase-ledger verify URL`), which names what was altered",
                            seq: held.seq + 1)
                    }
                    if !own.foreign.isEmpty {
                        let first = own.foreign.map { max($0.firstSeq, held.seq + 1) }.min()!
                        let blocks = own.foreign.map(\.firstSeq)
                        let count = own.foreign.reduce(Int64(0)) { $0 &+ ($1.lastSeq &- max($1.firstSeq, held.seq + 1) &+ 1) }
                        throw LedgerError.make(
                            .chainMismatch,
                            "the fleet store holds \(count) event\(count == 1 ? "" : "s") of this ledger past the head it shipped (seq \(held.seq + Int64(own.count))), "
                                + "from seq \(first), that are not this ledger's (written by someone with the shipping credential?); nothing was shipped. "
                                + "The store's owner removes them: DELETE FROM event_blocks WHERE ledger_id = '\(id)' AND first_seq IN (\(blocks.map(String.init).joined(separator: ", ")));",
                            seq: first)
                    }
                    shipment.dropHeldEvents(own.count)
                }
                if let field = shipment.textHoldingNUL() {
                    throw LedgerError.make(.malformedInput, "\(field) holds a NUL byte, which PostgreSQL text cannot store")
                }
                outcomes[entry.index] = ShipOutcome(
                    path: entry.ledger.path,
                    result: .success(
                        ShipResult(
                            ledgerID: id, path: entry.ledger.path, shippedEvents: shipment.events.count, lastSeq: shipment.lastSeq, alreadyShipped: held.seq)))
                // Rows written before this version's layout are replaced even with no new event,
                // and a ledger shipped before keys were kept gets its key recorded.
                if !shipment.events.isEmpty || shipment.lastSeq != held.seq || held.rowsVersion < FleetStore.rowsVersion || held.publicKey == nil {
                    guard let statement = try entry.ledger.identityStatement(seq: shipment.lastSeq, link: shipment.lastLink) else {
                        throw LedgerError.make(.io, "the file has no identity key to sign its head with; open it for writing once")
                    }
                    accepted.append((id, shipment))
                    heads[id] = (key.rawRepresentation, statement.json)
                }
            } catch let error as LedgerError {
                outcomes[entry.index] = ShipOutcome(
                    path: entry.ledger.path,
                    result: .failure(
                        LedgerError.make(error.code, "\(entry.ledger.path) (ledger \(id)): \(error.message)", seq: error.seq)))
                if held.inserted { refusedNew.append(id) }
            }
        }
        if !refusedNew.isEmpty {
            // Nothing of a refused ledger stays, not even the row the lock created.
            try await connection.query("SELECT forget_unshipped_ledgers(\(refusedNew)::text[]::uuid[])", logger: logger)
        }
        guard !accepted.isEmpty else { return }
        try await store(accepted, heads: heads, unclaimed: accepted.map(\.ledger).filter { server[$0]?.publicKey == nil })
    }

    /// Which blocks the store holds past a ledger's head (`stored`, by first seq) are the ledger's
    /// own (`file`: its events after `head`, in order). Kept: the blocks of the ledger's chain
    /// (`chain`, ``StoredBlock/chain(_:)``: from seq 1, each starting where the last ended) from
    /// the one holding the head's next seq on, while each decodes and every event of it past the
    /// head is the file's, field for field and link for link. Every other block is `foreign`
    /// (planted, or past a gap), but a chain block that also holds events up to the head, which
    /// no deletion may remove: that one is `differing`.
    static func ownEvents(
        _ stored: [StoredBlock], chain: Set<Int64>, head: Int64, file: [ChainedEvent]
    ) -> (count: Int, foreign: [StoredBlock], differing: [StoredBlock]) {
        func isFiles(_ e: UploadedFrame) -> Bool {
            let i = e.seq &- head &- 1
            return i >= 0 && i < Int64(file.count) && UploadedFrame(file[Int(i)]).isSameEvent(as: e)
        }
        var next = head + 1
        var kept = Set<Int>()
        var stopped = false
        for (i, block) in stored.enumerated() where chain.contains(block.firstSeq) {
            guard !stopped, block.firstSeq <= next, block.lastSeq >= next, block.lastSeq < Int64.max - Int64(FleetBlock.maxEvents),
                let events = try? block.events(), events.allSatisfy({ $0.seq <= head || isFiles($0) })
            else {
                stopped = true
                continue
            }
            kept.insert(i)
            next = block.lastSeq + 1
        }
        let others = stored.indices.filter { !kept.contains($0) }.map { stored[$0] }
        let holdsHead = { (b: StoredBlock) in chain.contains(b.firstSeq) && b.firstSeq <= head }
        return (Int(next - head - 1), others.filter { !holdsHead($0) }, others.filter(holdsHead))
    }

    /// Stores accepted shipments in the current transaction, the one path of `ship` and of the
    /// ingest service: each ledger's projection rows replaced, its new events COPYed, its
    /// evidence and personal values stored, its head moved to the shipment's last seq and link
    /// with the statement its identity key signed (`heads`), and the keys of `unclaimed` ledgers
    /// (shipped before keys were kept, or new) recorded.
    func store(
        _ accepted: [(ledger: String, shipment: Shipment)], heads: [String: (key: [UInt8], statement: String)], unclaimed: [String]
    ) async throws {
        let acceptedIDs = accepted.map(\.ledger)
        try await connection.query(
            """
            WITH t AS (DELETE FROM transactions WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 d AS (DELETE FROM downloads WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 o AS (DELETE FROM owned_content WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 h AS (DELETE FROM owned_content_history WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 p AS (DELETE FROM products WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 c AS (DELETE FROM product_contents WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 r AS (DELETE FROM related_products WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 v AS (DELETE FROM product_views WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[]))
            SELECT 1
            """, logger: logger)
        try await copyEvents(accepted.map { ($0.ledger, $0.shipment.events) })
        try await copyProjections(accepted)
        try await copyEvidence(accepted)
        try await connection.query(
            """
            UPDATE ledgers l SET last_seq = k.seq, last_link = decode(k.link, 'hex'), last_shipped_at = now(), rows_version = \(FleetStore.rowsVersion),
                head_statement = k.statement
            FROM unnest(\(acceptedIDs)::text[], \(accepted.map(\.shipment.lastSeq))::int8[], \(accepted.map { Self.hex($0.shipment.lastLink) })::text[],
                        \(acceptedIDs.map { Self.hex(heads[$0]!.key) })::text[], \(acceptedIDs.map { heads[$0]!.statement })::text[]) AS k(id, seq, link, key, statement)
            WHERE l.ledger_id = k.id::uuid
            """, logger: logger)
        try await storeValues(accepted)
        // A ledger shipped before keys were kept gets its key now (never replacing one).
        if !unclaimed.isEmpty {
            try await connection.query(
                """
                SELECT claim_ledger_key(k.id::uuid, decode(k.key, 'hex'))
                FROM unnest(\(unclaimed)::text[], \(unclaimed.map { Self.hex(heads[$0]!.key) })::text[]) AS k(id, key)
                """, logger: logger)
        }
    }

    static func hex(_ bytes: [UInt8]) -> String {
        Hex.encode(bytes)
    }

    /// Stores the shipments' personal values (migration 0010): the rows of the refs their events
    /// erased deleted (a user id's and every row it owns), a ledger's rows replaced when its
    /// shipment carries all of them, the new ones COPYed.
    private func storeValues(_ batches: [(ledger: String, shipment: Shipment)]) async throws {
        let replaced = batches.filter(\.shipment.replacesValues).map(\.ledger)
        if !replaced.isEmpty {
            try await connection.query("DELETE FROM personal_values WHERE ledger_id = ANY(\(replaced)::text[]::uuid[])", logger: logger)
        }
        for (ledger, shipment) in batches where !shipment.erasedValueRefs.isEmpty {
            try await connection.query(
                """
                DELETE FROM personal_values WHERE ledger_id = \(ledger)::uuid
                    AND (ref = ANY(\(shipment.erasedValueRefs)::int8[]) OR owner = ANY(\(shipment.erasedValueRefs)::int8[]))
                """, logger: logger)
        }
        guard batches.contains(where: { !$0.shipment.values.isEmpty }) else { return }
        let columns = ["ledger_id", "ref", "owner", "salt", "value"]
        try await copyBinary(into: "personal_values", columns: columns) { writer in
            var rows = CopyBinary()
            for (ledger, shipment) in batches {
                let id = try Self.uuidBytes(ledger)
                let erased = Set(shipment.erasedValueRefs)
                for value in shipment.values where !erased.contains(value.ref) && !erased.contains(value.owner) {
                    rows.startRow(fields: columns.count)
                    rows.field(uuid: id)
                    rows.field(value.ref)
                    rows.field(value.owner)
                    if let salt = value.salt { rows.field(bytes: salt) } else { rows.null() }
                    rows.field(bytes: value.value)
                    if rows.buffer.readableBytes > 1 << 20 { try await writer.write(rows.take()) }
                }
            }
            try await writer.write(rows.finish())
        }
    }

    /// Adds the chains' headers (by their SHA-256) the store does not hold; returns their digests,
    /// sorted, in hex.
    @discardableResult
    func storeSigningHeaders(_ headers: [[UInt8]: String]) async throws -> [String] {
        let digests = headers.keys.sorted { Self.hex($0) < Self.hex($1) }
        try await connection.query(
            """
            INSERT INTO signing_headers (digest, header)
            SELECT decode(k.digest, 'hex'), k.header FROM unnest(\(digests.map(Self.hex))::text[], \(digests.map { headers[$0]! })::text[]) AS k(digest, header)
            ON CONFLICT (digest) DO NOTHING
            """, logger: logger)
        return digests.map(Self.hex)
    }

    /// Stores the events of one or more ledgers as blocks (``FleetBlock``, migration 0012).
    private func copyEvents(_ batches: [(ledger: String, events: [ChainedEvent])]) async throws {
        try await copyBlocks(batches.map { ($0.ledger, try FleetBlock.encode($0.events.map(UploadedFrame.init))) })
    }

    /// COPYs encoded blocks of one or more ledgers into `event_blocks`.
    func copyBlocks(_ batches: [(ledger: String, blocks: [FleetBlock.Encoded])]) async throws {
        guard batches.contains(where: { !$0.blocks.isEmpty }) else { return }
        let columns = ["ledger_id", "first_seq", "last_seq", "raw_size", "frames", "links"]
        try await copyBinary(into: "event_blocks", columns: columns) { writer in
            var rows = CopyBinary()
            for (ledger, blocks) in batches {
                let id = try Self.uuidBytes(ledger)
                for block in blocks {
                    rows.startRow(fields: columns.count)
                    rows.field(uuid: id)
                    rows.field(block.firstSeq)
                    rows.field(block.lastSeq)
                    rows.field(block.rawSize)
                    rows.field(bytes: block.frames)
                    rows.field(bytes: block.links)
                    if rows.buffer.readableBytes > 1 << 20 { try await writer.write(rows.take()) }
                }
            }
            try await writer.write(rows.finish())
        }
    }

    /// COPYs the per-ledger projection rows of one or more shipments, table by table, each
    /// value in the binary form of its column's type on the server.
    private func copyProjections(_ batches: [(ledger: String, shipment: Shipment)]) async throws {
        let tables = Projector.Table.all.filter { FleetStore.perLedgerTables.contains($0.name) }
        let types = try await columnTypes(of: tables.map(\.name))
        for table in tables {
            var rows = batches.map { ($0.ledger, $0.shipment.projections.first { $0.table.name == table.name }?.rows ?? []) }
            guard rows.contains(where: { !$0.1.isEmpty }) else { continue }
            var columns = table.columns
            if table.name == Projector.Table.transactions.name {
                columns += FleetStore.catalogColumns.map(\.column)
                rows = zip(batches, rows).map { batch, ledgerRows in (ledgerRows.0, FleetStore.withCatalog(ledgerRows.1, of: batch.shipment)) }
            }
            let columnTypes = try columns.map { column in
                guard let type = types[table.name]?[column] else {
                    throw FleetError(.notAFleetStore, "\(address): the fleet store's \(table.name) table has no column \(column)")
                }
                return type
            }
            try await copyBinary(into: table.name, columns: ["ledger_id"] + columns) { writer in
                var out = CopyBinary()
                for (ledger, rows) in rows {
                    let id = try Self.uuidBytes(ledger)
                    for row in rows {
                        out.startRow(fields: 1 + row.count)
                        out.field(uuid: id)
                        for (i, value) in row.enumerated() where !out.field(value, as: columnTypes[i]) {
                            throw FleetError(
                                .server, "cannot store the value \(value) in \(table.name).\(columns[i]), a \(columnTypes[i]) column on the server")
                        }
                        if out.buffer.readableBytes > 1 << 20 { try await writer.write(out.take()) }
                    }
                }
                try await writer.write(out.finish())
            }
        }
    }

    /// Replaces each ledger's evidence rows with those the ship checked, keeping the rows of
    /// transactions whose signature the device erased (the store checked them while it could),
    /// and adds the chains' headers the store does not hold.
    private func copyEvidence(_ batches: [(ledger: String, shipment: Shipment)]) async throws {
        for (ledger, shipment) in batches {
            try await connection.query(
                """
                DELETE FROM transaction_evidence WHERE ledger_id = \(ledger)::uuid AND NOT (transaction_id = ANY(\(shipment.erasedSignatures)::text[]))
                """, logger: logger)
        }
        let headers = Dictionary(batches.flatMap { $0.shipment.signingHeaders.map { ($0.key, $0.value) } }, uniquingKeysWith: { first, _ in first })
        if !headers.isEmpty { try await storeSigningHeaders(headers) }
        let rows = batches.flatMap { batch in batch.shipment.evidence.map { (batch.ledger, $0) } }
        guard !rows.isEmpty else { return }
        try await connection.query(
            """
            INSERT INTO transaction_evidence (ledger_id, transaction_id, seq, level, reason, signing_header)
            SELECT k.ledger::uuid, k.t, k.seq, k.level, nullif(k.reason, ''), decode(nullif(k.header, ''), 'hex')
            FROM unnest(\(rows.map(\.0))::text[], \(rows.map(\.1.transaction))::text[], \(rows.map(\.1.seq))::int8[], \(rows.map(\.1.level))::text[],
                        \(rows.map { $0.1.reason ?? "" })::text[], \(rows.map { $0.1.header.map(Self.hex) ?? "" })::text[]) AS k(ledger, t, seq, level, reason, header)
            ON CONFLICT (ledger_id, transaction_id) DO UPDATE SET seq = excluded.seq, level = excluded.level, reason = excluded.reason,
                signing_header = excluded.signing_header
            """, logger: logger)
    }

    /// Runs `COPY table (columns) FROM STDIN WITH (FORMAT binary)`, fed by `writeRows`.
    ///
    /// PostgresNIO (1.33) offers COPY in text format only, and writes the table name it is given
    /// into its one-line statement between double quotes. The name passed here closes that
    /// quote, names the columns and the binary format, and opens a comment that takes in the text
    /// options PostgresNIO appends, so the server runs
    /// `COPY "events" ("ledger_id", ...) FROM STDIN WITH (FORMAT binary) --" FROM STDIN WITH (FORMAT text)`.
    /// Table and column names are this module's constants. Binary rows cost the server about a
    /// third less than text to store (no hex to decode for bytea, no numbers or uuids to parse;
    /// docs/fleet.md has the measurement), and the client a copy instead of an encoding.
    func copyBinary(into table: String, columns: [String], writeRows: (PostgresCopyFromWriter) async throws -> Void) async throws {
        precondition(
            ([table] + columns).allSatisfy { name in name.utf8.allSatisfy { $0 == UInt8(ascii: "_") || ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) } },
            "table and column names are plain identifiers")
        let statementTail = "\(table)\" (\(columns.map { "\"\($0)\"" }.joined(separator: ", "))) FROM STDIN WITH (FORMAT binary) --"
        try await connection.copyFrom(table: statementTail, logger: logger, writeData: writeRows)
    }

    /// The types of the columns of `tables`, as the server's catalog names them ("bigint",
    /// "boolean", "text", ...), read once per store.
    func columnTypes(of tables: [String]) async throws -> [String: [String: CopyBinary.ColumnType]] {
        if let known = columnTypeCache.withLock({ $0 }) { return known }
        var types: [String: [String: CopyBinary.ColumnType]] = [:]
        let rows = try await connection.query(
            """
            SELECT c.relname::text, a.attname::text, format_type(a.atttypid, NULL)
            FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.oid = ANY(SELECT to_regclass(t) FROM unnest(\(tables)::text[]) AS t) AND a.attnum > 0 AND NOT a.attisdropped
            """, logger: logger
        ).collect()
        for row in rows {
            let (table, column, type) = try row.decode((String, String, String).self)
            types[table, default: [:]][column] = CopyBinary.ColumnType(type)
        }
        columnTypeCache.withLock { $0 = types }
        return types
    }

    /// A ledger id's 16 bytes, as PostgreSQL's binary uuid.
    static func uuidBytes(_ id: String) throws -> [UInt8] {
        guard let uuid = UUID(uuidString: id) else { throw FleetError(.server, "ledger id \(id) is not a UUID") }
        return withUnsafeBytes(of: uuid.uuid) { Array($0) }
    }

    /// The benchmark's ceiling: the same event and projection rows as shipping these ledgers
    /// writes, COPYed straight in (one COPY per table for all of them, one transaction, nothing
    /// read from the files, no checks).
    package func rawCopy(_ shipments: [(ledger: String, shipment: Shipment)]) async throws {
        try await run {
            try await transaction {
                try await copyEvents(shipments.map { ($0.ledger, $0.shipment.events) })
                try await copyProjections(shipments)
            }
        }
    }

    /// Every projection table is kept per ledger: the catalog too (a ledger's registrations
    /// never touch another ledger's rows, contract 5.1).
    static let perLedgerTables: Set<String> = Set(Projector.Table.all.map(\.name))

    /// Every table the fleet's migrations make: what the audit checks no role reads another version of.
    static let fleetTables: [String] =
        [
            "ledgers", "event_blocks", "erased_users", "erased_subjects", "fleet_secret", "fleet_migrations", "signing_headers", "transaction_evidence",
            "apple_transactions", "apple_notifications", "apple_histories", "personal_values", "ingest_tokens",
        ]
        + Projector.Table.all.map(\.name)

    /// Columns the fleet's `transactions` rows hold besides the declared ones (migration 0006):
    /// their product's kind, price and currency as the ledger's catalog holds them (NULL: never
    /// registered), from these `products` columns. A ship writes them with the ledger's other
    /// rows, in the same transaction, so they always equal that join; reports read them instead
    /// of joining a product row to each transaction (over 5,000 ledgers, 1,000,000 product rows:
    /// a third of the undelivered report's time on the server).
    package static let catalogColumns: [(column: String, product: String)] = [
        ("product_kind", "kind"), ("product_price", "price"), ("product_currency", "currency"),
    ]

    /// `transactions` (rows of ``Projector/Table/transactions``) each with its ``catalogColumns``,
    /// from the shipment's `products` rows.
    static func withCatalog(_ transactions: [[ColumnValue]], of shipment: Shipment) -> [[ColumnValue]] {
        withCatalog(transactions, of: shipment.projections)
    }

    /// `transactions` each with its ``catalogColumns``, from the `products` rows of `projections`.
    static func withCatalog(_ transactions: [[ColumnValue]], of projections: [(table: Projector.Table, rows: [[ColumnValue]])]) -> [[ColumnValue]] {
        let products = Projector.Table.products.columns, productAt = Projector.Table.transactions.columns.firstIndex(of: "product")!
        let keyAt = products.firstIndex(of: "product")!, wanted = catalogColumns.map { products.firstIndex(of: $0.product)! }
        var catalog: [ColumnValue: [ColumnValue]] = [:]
        for row in projections.first(where: { $0.table.name == Projector.Table.products.name })?.rows ?? [] {
            catalog[row[keyAt]] = wanted.map { row[$0] }
        }
        let none = [ColumnValue](repeating: .null, count: catalogColumns.count)
        return transactions.map { $0 + (catalog[$0[productAt]] ?? none) }
    }

    /// The layout of the projection rows a ship writes; a ledger whose rows are older (shipped
    /// before migration 0003) has them all replaced on its next ship.
    ///
    /// 3: with each signed transaction's evidence (migration 0008), which a ledger shipped
    /// before gets on its next ship.
    ///
    /// 4: with each ledger's personal values (migration 0010), which a ledger shipped before gets
    /// all of on its next ship.
    static let rowsVersion: Int16 = 4

    /// The first ``rowsVersion`` whose ships stored personal values.
    static let valuesRowsVersion: Int16 = 4
}

/// Rows in PostgreSQL's binary COPY format: a signature and a header, then each row as its number
/// of fields and each field as its length (-1 for NULL) and its bytes in the binary form of the
/// column's type (big-endian integers and floats, a uuid's 16 bytes, text as UTF-8), then a
/// trailer. `take()` hands over what is written so far; `finish()` the rest with the trailer.
struct CopyBinary {
    private(set) var buffer = ByteBuffer()

    init() {
        buffer.writeBytes(Array("PGCOPY\n".utf8) + [0xFF, 0x0D, 0x0A, 0x00])
        buffer.writeInteger(Int32(0))  // flags: no OIDs
        buffer.writeInteger(Int32(0))  // header extension: none
    }

    /// Fields only, no header: the fleet audit's form of a row (each field as a COPY writes it).
    init(fieldsOnly: Void) {}

    /// A field exactly as the server sent it in binary form (nil: NULL).
    mutating func field(raw: ByteBuffer?) {
        guard var raw else { return null() }
        buffer.writeInteger(Int32(raw.readableBytes))
        buffer.writeBuffer(&raw)
    }

    mutating func startRow(fields: Int) {
        buffer.writeInteger(Int16(fields))
    }

    mutating func field(_ text: String?) {
        guard let text else { return null() }
        let at = buffer.writerIndex
        buffer.writeInteger(Int32(0))
        let count = buffer.writeString(text)
        buffer.setInteger(Int32(count), at: at)
    }

    mutating func field(_ number: Int64) {
        buffer.writeInteger(Int32(8))
        buffer.writeInteger(number)
    }

    mutating func field(_ flag: Bool) {
        buffer.writeInteger(Int32(1))
        buffer.writeInteger(UInt8(flag ? 1 : 0))
    }

    mutating func field(_ number: Double) {
        buffer.writeInteger(Int32(8))
        buffer.writeInteger(number.bitPattern)
    }

    mutating func field(bytes: [UInt8]) {
        buffer.writeInteger(Int32(bytes.count))
        buffer.writeBytes(bytes)
    }

    mutating func field(uuid: [UInt8]) {
        field(bytes: uuid)
    }

    mutating func null() {
        buffer.writeInteger(Int32(-1))
    }

    /// The column types a projection value can go to.
    enum ColumnType: Sendable, CustomStringConvertible {
        case bigint, boolean, doublePrecision, text, bytea
        case other(String)

        init(_ name: String) {
            switch name {
            case "bigint": self = .bigint
            case "boolean": self = .boolean
            case "double precision": self = .doublePrecision
            case "text": self = .text
            case "bytea": self = .bytea
            default: self = .other(name)
            }
        }

        var description: String {
            switch self {
            case .bigint: "bigint"
            case .boolean: "boolean"
            case .doublePrecision: "double precision"
            case .text: "text"
            case .bytea: "bytea"
            case .other(let name): name
            }
        }
    }

    /// A projection value (SQLite's storage classes) in the form of its PostgreSQL column type
    /// (booleans are stored in SQLite as 0 and 1); false, writing nothing, for a value the type
    /// cannot hold.
    mutating func field(_ value: ColumnValue, as type: ColumnType) -> Bool {
        switch (value, type) {
        case (.null, _): null()
        case (.int64(let n), .bigint): field(n)
        case (.int64(let n), .boolean): field(n != 0)
        case (.int64(let n), .doublePrecision): field(Double(n))
        case (.double(let d), .doublePrecision): field(d)
        case (.string(let s), .text): field(s)
        case (.blob(let data), .bytea): field(bytes: Array(data))
        default: return false
        }
        return true
    }

    mutating func take() -> ByteBuffer {
        defer { buffer = ByteBuffer() }
        return buffer
    }

    mutating func finish() -> ByteBuffer {
        buffer.writeInteger(Int16(-1))
        return take()
    }
}

extension Shipment {
    /// The first text value (as `table.column`, or `events.stream`) holding a NUL byte: SQLite
    /// stores one, PostgreSQL's text refuses it.
    func textHoldingNUL() -> String? {
        for chained in events where chained.event.stream.utf8.contains(0) { return "events.stream at seq \(chained.event.seq)" }
        for (table, rows) in projections {
            for row in rows {
                for (i, value) in row.enumerated() {
                    if case .string(let text) = value, text.utf8.contains(0) { return "\(table.name).\(table.columns[i])" }
                }
            }
        }
        return nil
    }
}
