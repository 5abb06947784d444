import Foundation
import GRDB
import NIOCore
import PostgresNIO
import PurchaseLedger

/// What shipping one ledger did.
public struct ShipResult: Sendable, Hashable {
    public var ledgerID: String
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
        public var path: String
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
                stores.append(try await FleetStore.connect(address: address, create: false))
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
        var readOnly = configuration
        readOnly.readOnly = true
        if let ledger = try? Ledger(path: path, configuration: readOnly), try ledger.identity() != nil {
            return ledger
        }
        return try Ledger(path: path, configuration: configuration)
    }

    /// One PostgreSQL transaction for several ledgers: lock their rows (in ledger-id order, so
    /// concurrent shippers never deadlock), read and check each file, then COPY the events and
    /// projections of all that passed, merge the catalog once and move their rows.
    private func shipBatch(_ entries: [(path: String, open: () throws -> Ledger)]) async throws -> [ShipOutcome] {
        var outcomes: [ShipOutcome?] = Array(repeating: nil, count: entries.count)
        var opened: [(index: Int, ledger: Ledger, identity: LedgerIdentity)] = []
        for (i, entry) in entries.enumerated() {
            do {
                let ledger = try entry.open()
                guard let identity = try ledger.identity() else {
                    throw LedgerError.make(.io, "\(entry.path) has no ledger id yet (made by an older version and only opened read-only); open it for writing once")
                }
                opened.append((i, ledger, identity))
            } catch let error as LedgerError {
                outcomes[i] = ShipOutcome(path: entry.path, result: .failure(error))
            } catch {
                outcomes[i] = ShipOutcome(path: entry.path, result: .failure(LedgerError.make(.io, "\(entry.path): \(error)")))
            }
        }
        if !opened.isEmpty {
            try await run {
                try await transaction {
                    try await shipLocked(opened, into: &outcomes)
                }
            }
        }
        return outcomes.map { $0! }
    }

    private func shipLocked(_ opened: [(index: Int, ledger: Ledger, identity: LedgerIdentity)], into outcomes: inout [ShipOutcome?]) async throws {
        // Lock (or create at seq 0) every ledger's row; a ledger named twice is shipped once.
        let byID = Dictionary(opened.map { ($0.identity.id, $0) }, uniquingKeysWith: { first, _ in first })
        let ids = byID.keys.sorted()
        let rows = try await connection.query(
            """
            INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at)
            SELECT k.id::uuid, k.origin, 0, \(ByteBuffer(bytes: Shipment.genesis)), now(), now()
            FROM unnest(\(ids)::text[], \(ids.map { byID[$0]!.identity.origin })::text[]) AS k(id, origin) ORDER BY k.id
            ON CONFLICT (ledger_id) DO UPDATE SET ledger_id = excluded.ledger_id
            RETURNING ledger_id::text, last_seq, last_link, xmax = 0 AS inserted
            """, logger: logger
        ).collect()
        var server: [String: (seq: Int64, link: [UInt8], inserted: Bool)] = [:]
        for row in rows {
            let (id, seq, link, inserted) = try row.decode((String, Int64, ByteBuffer, Bool).self)
            server[id] = (seq, Array(buffer: link), inserted)
        }
        var accepted: [(ledger: String, shipment: Shipment)] = []
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
                let shipment = try entry.ledger.shipment(after: held.seq, link: held.link)
                outcomes[entry.index] = ShipOutcome(
                    path: entry.ledger.path,
                    result: .success(
                        ShipResult(
                            ledgerID: id, path: entry.ledger.path, shippedEvents: shipment.events.count, lastSeq: shipment.lastSeq, alreadyShipped: held.seq)))
                if !shipment.events.isEmpty { accepted.append((id, shipment)) }
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
            try await connection.query("DELETE FROM ledgers WHERE ledger_id = ANY(\(refusedNew)::text[]::uuid[])", logger: logger)
        }
        guard !accepted.isEmpty else { return }
        let acceptedIDs = accepted.map(\.ledger)
        try await connection.query(
            """
            WITH t AS (DELETE FROM transactions WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 d AS (DELETE FROM downloads WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 o AS (DELETE FROM owned_content WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[])),
                 h AS (DELETE FROM owned_content_history WHERE ledger_id = ANY(\(acceptedIDs)::text[]::uuid[]))
            SELECT 1
            """, logger: logger)
        try await copyEvents(accepted.map { ($0.ledger, $0.shipment.events) })
        try await copyProjections(accepted)
        for (_, shipment) in accepted { try await mergeCatalog(shipment) }
        try await connection.query(
            """
            UPDATE ledgers l SET last_seq = k.seq, last_link = decode(k.link, 'hex'), last_shipped_at = now()
            FROM unnest(\(acceptedIDs)::text[], \(accepted.map(\.shipment.lastSeq))::int8[], \(accepted.map { Self.hex($0.shipment.lastLink) })::text[]) AS k(id, seq, link)
            WHERE l.ledger_id = k.id::uuid
            """, logger: logger)
    }

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    /// COPYs events of one or more ledgers into `events`.
    private func copyEvents(_ batches: [(ledger: String, events: [ChainedEvent])]) async throws {
        try await connection.copyFrom(
            table: "events",
            columns: [
                "ledger_id", "seq", "stream", "version", "type", "at_ns", "recorded_ns", "anomaly", "appended_by_ledger", "payload", "link",
            ], logger: logger
        ) { writer in
            var text = CopyText()
            for (ledger, events) in batches {
                for chained in events {
                    let e = chained.event
                    text.field(ledger)
                    text.field(e.seq)
                    text.field(e.stream)
                    text.field(e.version)
                    text.field(e.event.type.name)
                    text.field(e.event.at.nanosecondsSinceEpoch)
                    text.field(e.recordedAt.nanosecondsSinceEpoch)
                    text.field(e.anomaly?.name)
                    text.field(e.appendedByLedger ? "t" : "f")
                    text.field(bytes: chained.payload)
                    text.field(bytes: chained.link)
                    text.endRow()
                    if text.buffer.readableBytes > 1 << 20 { try await writer.write(text.take()) }
                }
            }
            try await writer.write(text.take())
        }
    }

    /// COPYs the per-ledger projection rows of one or more shipments, table by table.
    private func copyProjections(_ batches: [(ledger: String, shipment: Shipment)]) async throws {
        for table in Projector.Table.all where FleetStore.perLedgerTables.contains(table.name) {
            let rows = batches.map { ($0.ledger, $0.shipment.projections.first { $0.table.name == table.name }?.rows ?? []) }
            guard rows.contains(where: { !$0.1.isEmpty }) else { continue }
            try await connection.copyFrom(table: table.name, columns: ["ledger_id"] + table.columns, logger: logger) { writer in
                var text = CopyText()
                for (ledger, rows) in rows {
                    for row in rows {
                        text.field(ledger)
                        for value in row { text.field(value) }
                        text.endRow()
                        if text.buffer.readableBytes > 1 << 20 { try await writer.write(text.take()) }
                    }
                }
                try await writer.write(text.take())
            }
        }
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

    static let perLedgerTables: Set<String> = ["transactions", "downloads", "owned_content", "owned_content_history"]

    /// The catalog is shared by every ledger: a product's newest registration wins (ties: the
    /// first shipped), related products are those of the winning registration, and each
    /// content's latest version is the highest any ledger saw (compared as the ledger compares
    /// versions, in Swift). Skipped when this store already wrote the very same catalog.
    private func mergeCatalog(_ shipment: Shipment) async throws {
        let catalog = shipment.projections.filter { !FleetStore.perLedgerTables.contains($0.table.name) }
        var hasher = Hasher()
        for (table, rows) in catalog {
            hasher.combine(table.name)
            for row in rows { hasher.combine(row) }
        }
        let fingerprint = hasher.finalize()
        if lastCatalog.withLock({ $0 }) == fingerprint { return }
        // The library's own row layout, read by column name as the SQLite projections are.
        func rows(_ table: Projector.Table) -> [Row] {
            (catalog.first { $0.table.name == table.name }?.rows ?? []).map { Row(Dictionary(uniqueKeysWithValues: zip(table.columns, $0))) }
        }
        let related = Dictionary(grouping: rows(.relatedProducts)) { $0["product"] as String }
        for row in rows(.products) {
            let product: String = row["product"]
            let won = try await connection.query(
                """
                INSERT INTO products (product, kind, price, currency, downloadable, title, registered_at_ms)
                VALUES (\(product), \(row["kind"] as String), \(row["price"] as String), \(row["currency"] as String),
                        \(row["downloadable"] as Bool), \(row["title"] as String?), \(row["registered_at_ms"] as Int64))
                ON CONFLICT (product) DO UPDATE SET kind = excluded.kind, price = excluded.price, currency = excluded.currency,
                    downloadable = excluded.downloadable, title = excluded.title, registered_at_ms = excluded.registered_at_ms
                WHERE products.registered_at_ms < excluded.registered_at_ms
                RETURNING product
                """, logger: logger
            ).collect()
            guard !won.isEmpty else { continue }
            try await connection.query("DELETE FROM related_products WHERE product = \(product)", logger: logger)
            for pair in related[product] ?? [] {
                try await connection.query(
                    """
                    INSERT INTO related_products (product, related_product) VALUES (\(product), \(pair["related_product"] as String))
                    """, logger: logger)
            }
        }
        for row in rows(.productContents) {
            let (product, content): (String, String) = (row["product"], row["content"])
            guard let version = ContentVersion(row["latest_version"]) else { continue }
            let current = try await connection.query(
                """
                SELECT latest_version FROM product_contents WHERE product = \(product) AND content = \(content) FOR UPDATE
                """, logger: logger
            ).collect().first.map { try $0.decode(String.self) }
            if let current, let known = ContentVersion(current), !version.isNewer(than: known) { continue }
            try await connection.query(
                """
                INSERT INTO product_contents (product, content, latest_version) VALUES (\(product), \(content), \(version.text))
                ON CONFLICT (product, content) DO UPDATE SET latest_version = excluded.latest_version
                """, logger: logger)
        }
        lastCatalog.withLock { $0 = fingerprint }
    }
}

/// Rows in PostgreSQL's COPY text format: tab-separated fields, `\N` for NULL, backslash escapes
/// in text, `\\x` hex for bytea.
struct CopyText {
    var buffer = ByteBuffer()
    private var first = true

    private mutating func separate() {
        if !first { buffer.writeInteger(UInt8(ascii: "\t")) }
        first = false
    }

    mutating func field(_ text: String?) {
        separate()
        guard let text else { buffer.writeStaticString("\\N"); return }
        let utf8 = text.utf8
        if !utf8.contains(where: { $0 == UInt8(ascii: "\\") || $0 < 0x20 }) {
            buffer.writeString(text)
            return
        }
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
            case UInt8(ascii: "\n"): buffer.writeStaticString("\\n")
            case UInt8(ascii: "\r"): buffer.writeStaticString("\\r")
            case UInt8(ascii: "\t"): buffer.writeStaticString("\\t")
            case 0..<0x20:
                buffer.writeInteger(UInt8(ascii: "\\"))
                buffer.writeString(String(byte, radix: 8).leftPadded(to: 3))
            default: buffer.writeInteger(byte)
            }
        }
    }

    mutating func field(_ number: Int64) {
        separate()
        // Decimal digits straight into the buffer (String(number) allocates).
        var magnitude = number.magnitude
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &digits) { raw in
            var i = raw.count
            repeat {
                i -= 1
                raw[i] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if number < 0 { i -= 1; raw[i] = UInt8(ascii: "-") }
            buffer.writeBytes(UnsafeRawBufferPointer(rebasing: raw[i...]))
        }
    }

    mutating func field(bytes: [UInt8]) {
        separate()
        buffer.writeStaticString("\\\\x")
        let count = bytes.count * 2
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { out in
            bytes.withUnsafeBufferPointer { source in
                var j = 0
                for byte in source {
                    let high = byte >> 4, low = byte & 15
                    out[j] = high < 10 ? 48 + high : 87 + high
                    out[j + 1] = low < 10 ? 48 + low : 87 + low
                    j += 2
                }
            }
            return count
        }
    }

    /// A projection value: integers (and booleans, stored as 0 and 1) as digits, reals in their
    /// shortest exact form.
    mutating func field(_ value: DatabaseValue) {
        switch value.storage {
        case .null: field(nil as String?)
        case .int64(let n): field(n)
        case .double(let d):
            separate()
            buffer.writeString("\(d)")
        case .string(let s): field(s)
        case .blob(let data): field(bytes: Array(data))
        }
    }

    mutating func endRow() {
        buffer.writeInteger(UInt8(ascii: "\n"))
        first = true
    }

    mutating func take() -> ByteBuffer {
        defer { buffer = ByteBuffer() }
        return buffer
    }
}

private extension String {
    func leftPadded(to width: Int) -> String {
        String(repeating: "0", count: max(0, width - count)) + self
    }
}
