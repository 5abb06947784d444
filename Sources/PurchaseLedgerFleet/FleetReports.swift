import Foundation
import NIOCore
import NIOFoundationCompat
package import PostgresNIO
public import PurchaseLedger

/// A purchase-history entry of the fleet: the entry and the ledger (device) it came from.
public struct FleetHistoryEntry: Sendable, Hashable {
    /// The id of the ledger (device) the entry comes from (``LedgerIdentity/id``).
    public var ledgerID: String
    /// The entry, as that ledger's own history gives it.
    public var entry: PurchaseHistoryEntry
}

/// A download of the fleet, with its ledger.
public struct FleetDownload: Sendable, Hashable {
    /// The id of the ledger (device) the download comes from.
    public var ledgerID: String
    /// The download, as last shipped.
    public var download: DownloadRecord
}

/// A transaction of the fleet, with its ledger.
public struct FleetTransaction: Sendable, Hashable {
    /// The id of the ledger (device) the transaction comes from.
    public var ledgerID: String
    /// The transaction, as last shipped.
    public var transaction: TransactionRecord
}

/// The fleet's reports: the same views as a single ledger's (``Ledger/purchaseHistory(_:)`` and
/// the others), computed in SQL on PostgreSQL over every shipped ledger, with bound parameters
/// only. Each gives the figures the same view gives over all those ledgers merged. Sort orders
/// are the single ledger's, ties broken by id and then ledger id; text is compared bytewise
/// (`COLLATE "C"`), as SQLite does.
extension FleetStore {
    /// Transactions matching `query` across the fleet (a user's history from every device),
    /// sorted by purchase date (queue date when never purchased), with their downloads.
    public func purchaseHistory(_ query: PurchaseHistoryQuery = PurchaseHistoryQuery()) async throws -> [FleetHistoryEntry] {
        var entries: [FleetHistoryEntry] = []
        try await forEachHistoryEntry(query) { entries.append($0) }
        return entries
    }

    /// ``purchaseHistory(_:)`` as a stream: each entry is handed to `body` as its rows arrive
    /// from the server (one query, downloads joined), so memory stays flat whatever the number
    /// of rows. `body` must not use this store.
    public func forEachHistoryEntry(_ query: PurchaseHistoryQuery, _ body: (FleetHistoryEntry) throws -> Void) async throws {
        var conditions: [String] = []
        var binds = PostgresBindings()
        func bind(_ value: some PostgresNonThrowingEncodable & Sendable) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        if let user = query.user { conditions.append("t.user_id = \(bind(Identifier.normalize(user)))") }
        if let product = query.product { conditions.append("t.product = \(bind(Identifier.normalize(product)))") }
        if let from = query.from { conditions.append("coalesce(t.purchased_at_ms, t.queued_at_ms) >= \(bind(Projector.ms(from)))") }
        if let to = query.to { conditions.append("coalesce(t.purchased_at_ms, t.queued_at_ms) < \(bind(Projector.ms(to)))") }
        if !query.kinds.isEmpty { conditions.append("t.product_kind = ANY(\(bind(query.kinds.map(\.rawValue))))") }
        let selection = """
            SELECT t.* FROM transactions t
            \(conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND "))
            ORDER BY coalesce(t.purchased_at_ms, t.queued_at_ms) NULLS FIRST, t.transaction_id COLLATE "C", t.ledger_id
            LIMIT \(bind(Int64(query.limit))) OFFSET \(bind(Int64(query.offset)))
            """
        try await streamHistory(selection, order: "coalesce(t.purchased_at_ms, t.queued_at_ms)", binds: binds, body)
    }

    /// Paid but never delivered, across the fleet: purchased or restored, not revoked, with
    /// hosted content never copied out.
    public func undelivered(limit: Int = 1000) async throws -> [FleetHistoryEntry] {
        var entries: [FleetHistoryEntry] = []
        try await forEachUndelivered(limit: limit) { entries.append($0) }
        return entries
    }

    /// ``undelivered(limit:)`` as a stream, as ``forEachHistoryEntry(_:_:)``.
    public func forEachUndelivered(limit: Int, _ body: (FleetHistoryEntry) throws -> Void) async throws {
        var binds = PostgresBindings()
        binds.append(Int64(limit))
        let selection = """
            SELECT t.* FROM transactions t
            WHERE t.state IN ('purchased', 'restored') AND NOT t.revoked
              AND EXISTS (SELECT 1 FROM downloads d WHERE d.ledger_id = t.ledger_id AND d.transaction_id = t.transaction_id AND NOT d.copied_out)
            ORDER BY t.purchased_at_ms NULLS FIRST, t.transaction_id COLLATE "C", t.ledger_id
            LIMIT $1
            """
        try await streamHistory(selection, order: "t.purchased_at_ms", binds: binds, body)
    }

    /// The transactions `selection` picks (in its order), each with its downloads: one
    /// statement, its rows read as they come. A transaction's rows are consecutive (one per
    /// download, or one with no download): the order ends with the transaction's key, so only
    /// its own rows can tie. Download columns are prefixed `d__`. Its downloads are put in
    /// order here, by position: ordering them in SQL sorted the whole result again (a fifth of
    /// the server's time for 100,000 transactions), where the join already gives it in order.
    private func streamHistory(_ selection: String, order: String, binds: PostgresBindings, _ body: (FleetHistoryEntry) throws -> Void) async throws {
        let downloadColumns = Projector.Table.downloads.columns.map { "d.\($0) AS d__\($0)" }.joined(separator: ", ")
        let sql = """
            WITH t AS (\(selection))
            SELECT t.*, \(downloadColumns) FROM t
            LEFT JOIN downloads d ON d.ledger_id = t.ledger_id AND d.transaction_id = t.transaction_id
            ORDER BY \(order) NULLS FIRST, t.transaction_id COLLATE "C", t.ledger_id
            """
        try await run {
            var current: (ledger: ByteBuffer, transaction: ByteBuffer?, columns: PostgresColumns, downloads: [(position: Int64, record: DownloadRecord)])?
            var layout: PostgresLayout?
            // Where the keys are, and the catalog's columns (``catalogColumns``: kind, price, currency).
            var at: (ledger: Int, transaction: Int, download: Int, position: Int, catalog: [Int?])!
            func emit() throws {
                guard var c = current else { return }
                if c.downloads.count > 1 { c.downloads.sort { $0.position < $1.position } }
                let downloads = c.downloads.map(\.record)
                // The downloads' ids given to the initializer: set through the record's key-path
                // subscript from this module, the key path was made anew for every row.
                let record = TransactionRecord(columns: c.columns, downloads: downloads.map { $0.fields.download })
                try body(
                    FleetHistoryEntry(
                        ledgerID: c.ledger.withUnsafeReadableBytes(Hex.uuid),
                        entry: PurchaseHistoryEntry(
                            transaction: record, kind: at.catalog[0].flatMap(c.columns.string(at:)).flatMap(ProductKind.init(rawValue:)),
                            catalogPrice: at.catalog[1].flatMap(c.columns.string(at:)), catalogCurrency: at.catalog[2].flatMap(c.columns.string(at:)),
                            downloads: downloads)))
            }
            for try await row in try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {
                if layout == nil {
                    let l = PostgresLayout(row)
                    guard let ledger = l.positions["ledger_id"], let transaction = l.positions["transaction_id"], let download = l.downloadPositions["download_id"],
                        let position = l.downloadPositions["position"]
                    else { throw FleetError(.server, "the history result lacks its key columns") }
                    at = (ledger, transaction, download, position, FleetStore.catalogColumns.map { l.positions[$0.column] })
                    layout = l
                }
                let columns = PostgresColumns(row: row, layout: layout!)
                // A transaction's rows are consecutive: a new ledger id or transaction id starts
                // the next one. The ids are compared as the server sent them.
                guard let ledger = columns.bytes(at: at.ledger), ledger.readableBytes == 16 else {
                    throw FleetError(.server, "a history row without its ledger id")
                }
                let transaction = columns.bytes(at: at.transaction)
                if current?.ledger != ledger || current?.transaction != transaction {
                    try emit()
                    current = (ledger, transaction, columns, [])
                }
                if !columns.isNull(at: at.download) {
                    current!.downloads.append((columns.int64(at: at.position) ?? 0, DownloadRecord(columns: columns.download)))
                }
            }
            try emit()
        }
    }

    /// Revenue per product and currency over the fleet
    /// (``Ledger/revenue(from:to:groupBy:byStorefront:allEnvironments:)``): summed per day, product
    /// and price in SQL, made into lines by the same Swift code.
    ///
    /// `apple`: the chains judged Apple's (``appleChains(verifier:)``); each line then also
    /// counts what Apple's signature vouches for, as ship checked it, and with `onlyApple` nothing else.
    public func revenue(
        from: Timestamp? = nil, to: Timestamp? = nil, groupBy: RevenuePeriod? = nil, byStorefront: Bool = false, allEnvironments: Bool = false,
        apple: AppleChains? = nil, onlyApple: Bool = false
    ) async throws -> [RevenueLine] {
        var binds = PostgresBindings()
        binds.append(from.map(Projector.ms) ?? Int64.min)
        binds.append(to.map(Projector.ms) ?? Int64.max)
        let evidence = apple.map { RevenueGroup.AppleEvidence(trusted: $0.trusted, only: onlyApple) } ?? (onlyApple ? .init(trusted: [], only: true) : nil)
        let sql = RevenueGroup.sql(
            byDay: groupBy != nil, byStorefront: byStorefront, allEnvironments: allEnvironments, dialect: .postgres, apple: evidence)
        let rows = try await fetchRows(PostgresQuery(unsafeSQL: sql, binds: binds))
        return RevenueLine.lines(rows.map { RevenueGroup(columns: $0) }, groupBy: groupBy)
    }

    /// The chains of the store's signed transactions (`signing_headers`, every ledger's) judged
    /// with `verifier`'s roots: what ``revenue(from:to:groupBy:byStorefront:allEnvironments:apple:onlyApple:)`` counts as Apple's.
    public func appleChains(verifier: AppleSignatureVerifier = AppleSignatureVerifier()) async throws -> AppleChains {
        var headers: [([UInt8], String)] = []
        for row in try await fetchRows(PostgresQuery(unsafeSQL: "SELECT digest, header FROM signing_headers ORDER BY digest")) {
            headers.append((row.bytes("digest") ?? [], row.string("header") ?? ""))
        }
        return await AppleChains.judged(headers: headers, verifier: verifier)
    }

    /// Started downloads with no progress for `idle` as of `asOf` (by default, the fleet's latest
    /// download activity), oldest first.
    public func stuckDownloads(idle: Duration = .seconds(3600), asOf: Timestamp? = nil) async throws -> [FleetDownload] {
        var downloads: [FleetDownload] = []
        try await forEachStuckDownload(idle: idle, asOf: asOf, limit: .max) { downloads.append($0) }
        return downloads
    }

    /// ``stuckDownloads(idle:asOf:)`` as a stream of at most `limit` rows, each handed to `body`
    /// as it arrives. `body` must not use this store.
    public func forEachStuckDownload(
        idle: Duration = .seconds(3600), asOf: Timestamp? = nil, limit: Int, _ body: (FleetDownload) throws -> Void
    ) async throws {
        var now = asOf.map(Projector.ms)
        if now == nil {
            now = try await fetchRows("SELECT coalesce(max(last_activity_at_ms), 0) AS now FROM downloads").first?.int64("now") ?? 0
        }
        let query: PostgresQuery = """
            SELECT * FROM downloads WHERE started AND state IN ('waiting', 'active') AND last_activity_at_ms <= \(StuckCutoff.milliseconds(now: now!, idle: idle))
            ORDER BY last_activity_at_ms, download_id COLLATE "C", ledger_id
            LIMIT \(Int64(limit))
            """
        try await run {
            var layout: PostgresLayout?
            for try await row in try await connection.query(query, logger: logger) {
                if layout == nil { layout = PostgresLayout(row) }
                let columns = PostgresColumns(row: row, layout: layout!)
                try body(FleetDownload(ledgerID: try columns.uuid("ledger_id"), download: DownloadRecord(columns: columns)))
            }
        }
    }

    /// Transactions that reached a final state but were never finished, across the fleet.
    public func unfinishedTransactions() async throws -> [FleetTransaction] {
        var transactions: [FleetTransaction] = []
        try await forEachUnfinishedTransaction(limit: .max) { transactions.append($0) }
        return transactions
    }

    /// ``unfinishedTransactions()`` as a stream of at most `limit` rows, as ``forEachHistoryEntry(_:_:)``.
    public func forEachUnfinishedTransaction(limit: Int, _ body: (FleetTransaction) throws -> Void) async throws {
        var binds = PostgresBindings()
        binds.append(Int64(limit))
        let selection = """
            SELECT t.* FROM transactions t WHERE NOT t.finished AND t.state IN ('purchased', 'restored', 'failed')
            ORDER BY coalesce(t.purchased_at_ms, t.failed_at_ms) NULLS FIRST, t.transaction_id COLLATE "C", t.ledger_id
            LIMIT $1
            """
        try await streamHistory(selection, order: "coalesce(t.purchased_at_ms, t.failed_at_ms)", binds: binds) { entry in
            try body(FleetTransaction(ledgerID: entry.ledgerID, transaction: entry.entry.transaction))
        }
    }

    /// Payment failures by error code across the fleet, most frequent first.
    public func failureRates(from: Timestamp? = nil, to: Timestamp? = nil) async throws -> [FailureRate] {
        let low = from.map(Projector.ms) ?? Int64.min, high = to.map(Projector.ms) ?? Int64.max
        let total =
            try await fetchRows(
                """
                SELECT count(*) AS n FROM transactions WHERE state IN ('purchased', 'failed')
                AND coalesce(purchased_at_ms, failed_at_ms) >= \(low) AND coalesce(purchased_at_ms, failed_at_ms) < \(high)
                """
            ).first?.int64("n") ?? 0
        let rows = try await fetchRows(
            """
            SELECT error_domain, error_code, min(error_message COLLATE "C") AS message, count(*) AS n FROM transactions
            WHERE state = 'failed' AND failed_at_ms >= \(low) AND failed_at_ms < \(high)
            GROUP BY error_domain, error_code ORDER BY n DESC, error_domain COLLATE "C", error_code
            """)
        return FailureRate.rates(rows, total: Int(total))
    }

    /// Store product views per item and style across the fleet (``ProductViewSummary``), of
    /// the views presented in `from..<to`: the devices' counts summed, the percentiles over
    /// every device's load times together (`percentile_disc`, the nearest rank, as a ledger
    /// computes them), the campaign tokens of all of them.
    public func productViewSummary(from: Timestamp? = nil, to: Timestamp? = nil) async throws -> [ProductViewSummary] {
        let low = from.map(Projector.ms) ?? Int64.min, high = to.map(Projector.ms) ?? Int64.max
        let range = "presented_at_ms >= \(low) AND presented_at_ms < \(high)"
        let load = "greatest(0, loaded_at_ms - presented_at_ms)"
        let rows = try await fetchRows(
            PostgresQuery(
                unsafeSQL: """
                    SELECT item, style, count(*) AS presented, count(loaded_at_ms) AS loaded, count(failed_at_ms) AS failed,
                        count(*) FILTER (WHERE dismissed_at_ms IS NOT NULL AND loaded_at_ms IS NULL AND failed_at_ms IS NULL) AS dismissed,
                        percentile_disc(0.5) WITHIN GROUP (ORDER BY \(load)) FILTER (WHERE loaded_at_ms IS NOT NULL) AS median,
                        percentile_disc(0.95) WITHIN GROUP (ORDER BY \(load)) FILTER (WHERE loaded_at_ms IS NOT NULL) AS p95
                    FROM product_views WHERE \(range) GROUP BY item, style
                    """))
        var tokens: [String: [String]] = [:]
        for row in try await fetchRows(
            PostgresQuery(
                unsafeSQL: """
                    SELECT DISTINCT item, style, campaign_token FROM product_views WHERE \(range) AND campaign_token IS NOT NULL
                    """))
        {
            tokens[(row.string("item") ?? "") + "\u{0}" + (row.string("style") ?? ""), default: []].append(row.string("campaign_token") ?? "")
        }
        return rows.map { row in
            let item = row.string("item") ?? "", style = row.string("style") ?? ""
            return ProductViewSummary(
                item: item, style: ProductViewStyle(rawValue: style) ?? .sheet, presented: row.int("presented") ?? 0, loaded: row.int("loaded") ?? 0,
                failed: row.int("failed") ?? 0, dismissedWithoutLoading: row.int("dismissed") ?? 0, medianLoadMilliseconds: row.int64("median"),
                p95LoadMilliseconds: row.int64("p95"), campaignTokens: (tokens[item + "\u{0}" + style] ?? []).sorted())
        }
        .sorted { ($0.item, $0.style.rawValue) < ($1.item, $1.style.rawValue) }
    }

    /// What the store holds of ledger `id` (nil when it never shipped): its last shipped seq, the
    /// chain's link there, and the public identity key the id is held by (nil for a ledger last
    /// shipped before keys were kept). The fleet is a witness of each ledger's history: a file that
    /// no longer extends it was rolled back, cut short or rewritten (``Ledger`` checks it, with
    /// `verifyExtends`; `purchase-ledger verify LEDGER --against URL`).
    public func shippedHead(ofLedger id: String) async throws -> ShippedHead? {
        guard UUID(uuidString: id) != nil else { return nil }
        let rows = try await fetchRows("SELECT last_seq, last_link, public_key FROM ledgers WHERE ledger_id = \(id)::uuid")
        guard let row = rows.first else { return nil }
        return ShippedHead(seq: row.int64("last_seq") ?? 0, link: row.bytes("last_link") ?? [], publicKey: row.bytes("public_key"))
    }

    /// How many ledgers the store holds and how many events they shipped, from the `ledgers`
    /// rows alone (each ledger's events are seq 1 to its `last_seq`, stored in the same
    /// transaction that moves it): instant, where counting the events table reads all of it.
    public func shippedTotals() async throws -> (ledgers: Int, events: Int) {
        let row = try await fetchRows("SELECT count(*) AS ledgers, coalesce(sum(last_seq), 0)::int8 AS events FROM ledgers").first
        return (row?.int("ledgers") ?? 0, row?.int("events") ?? 0)
    }

    /// How many ledgers and events the store holds, counted block by block.
    public func counts() async throws -> (ledgers: Int, events: Int) {
        let row = try await fetchRows("SELECT (SELECT count(*) FROM ledgers) AS ledgers, (SELECT coalesce(sum(last_seq - first_seq + 1), 0)::int8 FROM event_blocks) AS events")
            .first
        return (row?.int("ledgers") ?? 0, row?.int("events") ?? 0)
    }

    // MARK: - Rows

    /// Runs a query and returns its rows as values by column name, so the ledger's own row
    /// decoders (``ProjectionColumns``) read them.
    package func fetchRows(_ query: PostgresQuery) async throws -> [FleetRow] {
        try await run {
            var rows: [FleetRow] = []
            for try await row in try await connection.query(query, logger: logger) {
                var names: [String] = [], values: [ColumnValue] = []
                for cell in row {
                    names.append(cell.columnName)
                    values.append(try FleetStore.value(of: cell))
                }
                rows.append(FleetRow(names: names, values: values))
            }
            return rows
        }
    }

    private static func value(of cell: PostgresCell) throws -> ColumnValue {
        guard cell.bytes != nil else { return .null }
        switch cell.dataType {
        case .int2, .int4, .int8: return .int64(try cell.decode(Int64.self))
        case .bool: return .int64(try cell.decode(Bool.self) ? 1 : 0)
        case .float4, .float8: return .double(try cell.decode(Double.self))
        case .uuid: return .string(try cell.decode(UUID.self).uuidString.lowercased())
        case .bytea: return .blob(Data(buffer: try cell.decode(ByteBuffer.self)))
        default: return .string(try cell.decode(String.self))
        }
    }
}

/// One row of a query's result (``FleetStore/fetchRows(_:)``): its columns' names and values,
/// in the result's order, as SQLite's storage classes (a boolean as 0 or 1, a uuid as
/// lowercase text).
package struct FleetRow: Sendable, ProjectionColumns {
    package let names: [String]
    package let values: [ColumnValue]

    /// The value of the first column named `name`, nil when the result has no such column.
    package subscript(_ name: String) -> ColumnValue? { position(name).map { values[$0] } }

    package func position(_ column: String) -> Int? { names.firstIndex(of: column) }
    package func string(at i: Int) -> String? { values[i].string }
    package func int64(at i: Int) -> Int64? { values[i].int64 }
    package func double(at i: Int) -> Double? { values[i].double }
    package var positionCache: PositionCache? { nil }

    /// A bytea column's bytes (nil: NULL, or not bytes).
    package func bytes(_ column: String) -> [UInt8]? {
        guard case .blob(let data)? = self[column] else { return nil }
        return [UInt8](data)
    }
}

/// How a result's columns read, found once per statement from its first row: each name's
/// position (a download column also without its `d__` prefix, in ``downloadPositions``) and how
/// each position's bytes decode.
struct PostgresLayout: Sendable {
    enum Kind: Sendable {
        case text, int8, int4, int2, bool, float8, other
    }

    let positions: [String: Int]
    let downloadPositions: [String: Int]
    let kinds: [Kind]
    /// Where declarations' columns are, by the row's names and by the download names.
    let cache = PositionCache(), downloadCache = PositionCache()

    init(_ row: PostgresRow) {
        var positions: [String: Int] = [:], downloads: [String: Int] = [:], kinds: [Kind] = []
        for (i, cell) in row.enumerated() {
            if cell.columnName.hasPrefix("d__") {
                downloads[String(cell.columnName.dropFirst(3))] = i
            } else if positions[cell.columnName] == nil {
                positions[cell.columnName] = i
            }
            guard cell.format == .binary else {
                kinds.append(.other)
                continue
            }
            switch cell.dataType {
            case .text, .varchar, .name: kinds.append(.text)
            case .int8: kinds.append(.int8)
            case .int4: kinds.append(.int4)
            case .int2: kinds.append(.int2)
            case .bool: kinds.append(.bool)
            case .float8: kinds.append(.float8)
            default: kinds.append(.other)
            }
        }
        self.positions = positions
        downloadPositions = downloads
        self.kinds = kinds
    }
}

/// One result row's columns, read by name through a ``PostgresLayout``. Only the columns read
/// are touched (a `PostgresCell` made for each of a row's 50 columns, with its name, showed in the
/// profile of a 100,000-row report), and binary values are read straight from their bytes.
struct PostgresColumns: ProjectionColumns {
    let row: PostgresRandomAccessRow
    let layout: PostgresLayout
    /// Which names to read by: the layout's ``PostgresLayout/positions`` or its download ones.
    let downloadColumns: Bool

    init(row: PostgresRow, layout: PostgresLayout) {
        self.row = PostgresRandomAccessRow(row)
        self.layout = layout
        downloadColumns = false
    }

    private init(row: PostgresRandomAccessRow, layout: PostgresLayout, downloadColumns: Bool) {
        self.row = row
        self.layout = layout
        self.downloadColumns = downloadColumns
    }

    /// The same row, read by the download columns' names (without their `d__` prefix).
    var download: PostgresColumns { PostgresColumns(row: row, layout: layout, downloadColumns: true) }

    func position(_ column: String) -> Int? {
        downloadColumns ? layout.downloadPositions[column] : layout.positions[column]
    }

    var positionCache: PositionCache? { downloadColumns ? layout.downloadCache : layout.cache }

    /// A column's bytes as the server sent them (nil: NULL).
    func bytes(at i: Int) -> ByteBuffer? { row[data: i].value }

    func isNull(at i: Int) -> Bool { bytes(at: i) == nil }

    func string(at i: Int) -> String? {
        guard let bytes = bytes(at: i) else { return nil }
        if layout.kinds[i] == .text { return String(buffer: bytes) }
        return try? row[i].decode(String.self)
    }

    func int64(at i: Int) -> Int64? {
        guard let bytes = bytes(at: i) else { return nil }
        switch layout.kinds[i] {
        case .int8: return bytes.getInteger(at: bytes.readerIndex, as: Int64.self)
        case .int4: return bytes.getInteger(at: bytes.readerIndex, as: Int32.self).map(Int64.init)
        case .int2: return bytes.getInteger(at: bytes.readerIndex, as: Int16.self).map(Int64.init)
        case .bool: return bytes.getInteger(at: bytes.readerIndex, as: UInt8.self).map { $0 == 0 ? 0 : 1 }
        default:
            let cell = row[i]
            if cell.dataType == .bool { return (try? cell.decode(Bool.self)).map { $0 ? 1 : 0 } }
            return try? cell.decode(Int64.self)
        }
    }

    func double(at i: Int) -> Double? {
        guard let bytes = bytes(at: i) else { return nil }
        if layout.kinds[i] == .float8, let bits = bytes.getInteger(at: bytes.readerIndex, as: UInt64.self) {
            return Double(bitPattern: bits)
        }
        return try? row[i].decode(Double.self)
    }

    /// A uuid column as lowercase text.
    func uuid(_ column: String) throws -> String {
        guard let i = position(column) else { throw FleetError(.server, "the result has no column \(column)") }
        guard let bytes = bytes(at: i), bytes.readableBytes == 16 else { return try row[i].decode(UUID.self).uuidString.lowercased() }
        return bytes.withUnsafeReadableBytes(Hex.uuid)
    }
}

/// What a fleet store holds of one ledger's history (``FleetStore/shippedHead(ofLedger:)``).
public struct ShippedHead: Sendable, Equatable {
    /// The ledger's last shipped seq.
    public var seq: Int64
    /// The hash chain's link at ``seq``, as shipped.
    public var link: [UInt8]
    /// The raw public identity key the id is held by; nil when last shipped before keys were kept.
    public var publicKey: [UInt8]?
}

extension RevenueGroup.Dialect {
    /// PostgreSQL's: `$1`, `$2` parameters, counts and sums cast to `bigint`, and the day by
    /// floor division in integers (through numeric, `floor(ms / 86400000.0)` took a fifth of the
    /// query's time over 700,000 transactions). The fleet's migration 0006 keeps statistics on
    /// this day expression, to the letter: change both together.
    static let postgres = RevenueGroup.Dialect(
        day: "(t.purchased_at_ms - (t.purchased_at_ms % 86400000 + 86400000) % 86400000) / 86400000", low: "$1", high: "$2",
        integerCast: "::bigint", evidenceJoin: "e.ledger_id = t.ledger_id AND e.transaction_id = t.transaction_id", bytesPrefix: "'\\x",
        bytesSuffix: "'::bytea")
}

extension ColumnType {
    /// The type a fleet migration declares (`information_schema.columns.data_type`).
    package var postgres: String {
        switch self {
        case .text: "text"
        case .integer: "bigint"
        case .boolean: "boolean"
        case .real: "double precision"
        }
    }
}
