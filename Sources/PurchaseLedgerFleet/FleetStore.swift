import Foundation
public import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import PurchaseLedger

/// Why the fleet store failed. Every error has a message that names the server, the ledger or
/// the seq concerned (never a password); the CLI prints it and exits with status 3.
///
/// ```swift
/// do {
///     _ = try await FleetStore.connect("postgres://ledger@db.internal:5432/fleet")
/// } catch let error as FleetError where error.code == .authentication {
///     print("check the credentials:", error.message)
/// }
/// ```
public struct FleetError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. New codes may be added; existing ones never change meaning
    /// (a struct, not an enum, so a new code breaks no caller's `switch`).
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let name: String

        private init(_ name: String) { self.name = name }

        /// The code's name, as in `unreachable`.
        public var description: String { name }

        /// The server cannot be reached (refused, unknown host, timed out).
        public static let unreachable = Code("unreachable")
        /// The server refused the user name or password.
        public static let authentication = Code("authentication")
        /// The database does not exist, or holds tables that are not a fleet store.
        public static let notAFleetStore = Code("notAFleetStore")
        /// The database was migrated by a newer purchase-ledger.
        public static let schemaTooNew = Code("schemaTooNew")
        /// The connection string is not a `postgres://` URL.
        public static let badURL = Code("badURL")
        /// TLS was required and could not be had: the server offers none, its certificate did
        /// not verify, or the handshake failed.
        public static let tls = Code("tls")
        /// The role lacks a privilege the operation needs (docs/fleet.md lists the GRANTs).
        public static let permission = Code("permission")
        /// The fleet schema is missing or older than this version: run `purchase-ledger migrate`.
        public static let notMigrated = Code("notMigrated")
        /// Any other error the server reported.
        public static let server = Code("server")
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed, naming the server, ledger or seq; safe to print and log.
    public var message: String
    /// The error this one was made from, when there was one (PostgresNIO's `PSQLError`, a TLS
    /// error), for callers that need more than the message. It is not printed: a server's error
    /// may quote the values of a statement.
    public var underlying: (any Error)?

    /// An error of `code` saying `message`, made from `underlying` when given.
    public init(_ code: Code, _ message: String, underlying: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    /// The message.
    public var description: String { message }
}

/// A PostgreSQL database holding many ledgers: their logs, their projections (each row keyed by
/// the ledger's id) and a shared catalog. Ship ledgers into it with ``ship(_:)``; ask
/// fleet questions with the report functions (``purchaseHistory(_:)``,
/// ``revenue(from:to:groupBy:byStorefront:allEnvironments:)``...).
///
/// ```swift
/// let fleet = try await FleetStore.connect("postgres://ledger@db.internal:5432/fleet")
/// defer { Task { await fleet.close() } }
/// let result = try await fleet.ship(try Ledger(path: "device.ledger"))
/// print(result.shippedEvents, "new events of", result.ledgerID)
/// let march = try await fleet.revenue(from: Timestamp.parse("2024-03-01T00:00:00Z"))
/// ```
///
/// One connection, confined as GRDB confines a SQLite connection: a store may be shared between
/// tasks, and its calls take turns, one at a time, in the order they arrive (each call's
/// statements and transaction never interleave with another's). Open several stores for
/// parallel work; ``ship(paths:configuration:batchSize:connections:progress:)`` does.
///
/// ## Topics
///
/// ### Connecting
/// - ``connect(_:migrate:logger:)``
/// - ``address``
/// - ``silentLogger``
/// - ``close()``
///
/// ### Schema
/// - ``migrate(_:logger:)``
/// - ``migrationNames``
///
/// ### Shipping ledgers
/// - ``ship(_:)``
/// - ``ship(paths:configuration:batchSize:connections:progress:)``
/// - ``ShipOutcome``
///
/// ### Reports over the fleet
/// - ``purchaseHistory(_:)``
/// - ``forEachHistoryEntry(_:_:)``
/// - ``undelivered(limit:)``
/// - ``forEachUndelivered(limit:_:)``
/// - ``stuckDownloads(idle:asOf:)``
/// - ``forEachStuckDownload(idle:asOf:limit:_:)``
/// - ``unfinishedTransactions()``
/// - ``forEachUnfinishedTransaction(limit:_:)``
/// - ``failureRates(from:to:)``
/// - ``revenue(from:to:groupBy:byStorefront:allEnvironments:)``
///
/// ### Each ledger's history
/// - ``shippedHead(ofLedger:)``
/// - ``shippedTotals()``
/// - ``counts()``
///
/// ### Privacy
/// - ``forget(user:)``
public final class FleetStore: Sendable {
    /// Where the store is; printing it never shows the password.
    public let address: FleetAddress
    let connection: PostgresConnection
    /// Whose turn it is on ``connection``.
    private let gate = TurnGate()
    let logger: Logger
    /// Each fleet table's column types, as the server names them: the binary COPY's layout.
    let columnTypeCache = Locked<[String: [String: CopyBinary.ColumnType]]?>(nil)

    private init(address: FleetAddress, connection: PostgresConnection, logger: Logger) {
        self.address = address
        self.connection = connection
        self.logger = logger
    }

    /// Connects to the fleet store at `url`. Runs no DDL: the database must already hold this
    /// version's schema (``FleetError/Code-swift.struct/notMigrated`` says to run
    /// `purchase-ledger migrate`), so a role with the shipping or reporting rights of
    /// docs/fleet.md is enough. With `migrate`, pending migrations are applied first
    /// (``migrate(_:logger:)``, the owner's rights). Throws ``FleetError``.
    ///
    /// `logger` receives PostgresNIO's log of the connection (queries at `debug`, with their
    /// bound values: give a level above it in production). By default nothing is logged.
    public static func connect(_ url: String, migrate: Bool = false, logger: Logger = FleetStore.silentLogger) async throws -> FleetStore {
        let address = try FleetAddress(url)
        if migrate { _ = try await FleetStore.migrate(address: address, logger: logger) }
        return try await connect(address: address, logger: logger)
    }

    /// Creates or upgrades the fleet schema at `url`: makes an empty database a fleet store, or
    /// applies the migrations it lacks, in order, each once, under an advisory lock (two
    /// migrations started together apply each once). Needs the rights of the schema's owner.
    /// Returns the migrations applied (none when it was up to date). Refuses a database that
    /// holds other tables, or one migrated by a newer version.
    @discardableResult
    public static func migrate(_ url: String, logger: Logger = FleetStore.silentLogger) async throws -> [String] {
        try await migrate(address: try FleetAddress(url), logger: logger)
    }

    static func migrate(address: FleetAddress, logger: Logger) async throws -> [String] {
        let store = try await open(address, logger: logger)
        do {
            let applied = try await store.run { try await store.applyMigrations() }
            await store.close()
            return applied
        } catch {
            await store.close()
            throw error
        }
    }

    static func connect(address: FleetAddress, logger: Logger) async throws -> FleetStore {
        let store = try await open(address, logger: logger)
        do {
            try await store.run { try await store.checkSchema() }
        } catch {
            await store.close()
            throw error
        }
        return store
    }

    /// A logger that drops everything: a store logs nothing unless given a logger.
    public static let silentLogger = Logger(label: "purchase-ledger.fleet", factory: { _ in SwiftLogNoOpLogHandler() })

    private static func open(_ address: FleetAddress, logger: Logger) async throws -> FleetStore {
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: try address.configuration(), id: 1, logger: logger)
        } catch let error as FleetError {
            throw error
        } catch {
            throw FleetStore.describe(error, address: address)
        }
        // Names resolve in the system catalog first, then in `public`: never in a schema named
        // after the role (`"$user"`, first in PostgreSQL's default path) or a temporary one,
        // where a table or view named like the fleet's would be read instead of it.
        do {
            try await connection.query("SET search_path = pg_catalog, public, pg_temp", logger: logger)
        } catch {
            try? await connection.close()
            throw FleetStore.describe(error, address: address)
        }
        return FleetStore(address: address, connection: connection, logger: logger)
    }

    /// Closes the connection. A store released without it closes its connection itself.
    public func close() async {
        try? await connection.close()
    }

    deinit {
        // PostgresNIO wants every connection closed before it is released: keep it until then.
        let connection = self.connection
        connection.close().whenComplete { _ in _ = connection }
    }

    // MARK: - Schema

    /// The migrations this version knows, from `Migrations/postgres/NNNN_name.sql`, oldest first.
    public static var migrationNames: [String] { embeddedMigrations.map(\.name) }

    /// The migrations the server has applied; nil when it has no fleet_migrations table.
    private func appliedMigrations() async throws -> Set<String>? {
        let exists =
            try await connection.query("SELECT to_regclass('public.fleet_migrations') IS NOT NULL", logger: logger).collect().first?.decode(Bool.self) ?? false
        guard exists else { return nil }
        var applied = Set<String>()
        for try await name in try await connection.query("SELECT name FROM fleet_migrations", logger: logger).decode(String.self) {
            applied.insert(name)
        }
        let known = Set(FleetStore.migrationNames)
        if let unknown = applied.subtracting(known).sorted().last {
            throw FleetError(
                .schemaTooNew,
                "\(address) was migrated by a newer purchase-ledger (it has \(unknown); this version knows up to \(FleetStore.migrationNames.last ?? "none")); upgrade to use it"
            )
        }
        return applied
    }

    /// Reads, never writes: the schema must be this version's.
    private func checkSchema() async throws {
        guard let applied = try await appliedMigrations() else {
            throw FleetError(
                .notMigrated, "\(address) is not a purchase-ledger fleet store yet (no fleet_migrations table); run `purchase-ledger migrate \(address)` as its owner first")
        }
        if let pending = embeddedMigrations.first(where: { !applied.contains($0.name) }) {
            throw FleetError(.notMigrated, "\(address) needs migration \(pending.name); run `purchase-ledger migrate \(address)` as its owner first")
        }
    }

    /// Applies pending migrations under an advisory lock; refuses a database migrated by a newer
    /// version, or one that holds tables of something else.
    private func applyMigrations() async throws -> [String] {
        try await transaction {
            // The migrations' objects go to `public` (the session's path puts the catalog first);
            // the path is the session's again when the transaction ends.
            try await connection.query("SET LOCAL search_path = public, pg_catalog, pg_temp", logger: logger)
            try await connection.query("SELECT pg_advisory_xact_lock(7074127443)", logger: logger)
            let applied: Set<String>
            if let known = try await appliedMigrations() {
                applied = known
            } else {
                let tables =
                    try await connection.query("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", logger: logger).collect().first?.decode(Int64.self) ?? 0
                guard tables == 0 else {
                    throw FleetError(
                        .notAFleetStore, "\(address) holds \(tables) other table\(tables == 1 ? "" : "s") and is not a purchase-ledger fleet store; give an empty database")
                }
                try await connection.query(
                    "CREATE TABLE fleet_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())", logger: logger)
                applied = []
            }
            let pending = embeddedMigrations.filter { !applied.contains($0.name) }
            for migration in pending {
                for statement in FleetStore.statements(migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                if migration.name == "0012_event_blocks" { try await moveEventRows() }
                try await connection.query("INSERT INTO fleet_migrations (name) VALUES (\(migration.name))", logger: logger)
            }
            return pending.map(\.name)
        }
    }

    /// Moves the rows of `events` (one per event, before migration 0012) into blocks, a few
    /// hundred ledgers at a time, then drops the old table: part of migration 0012, in its
    /// transaction. Each ledger's run of consecutive seqs becomes blocks of at most
    /// ``FleetBlock/maxEvents``, with the same fields and links; a gap starts a new block (the
    /// audit still names it). A row no block can hold (a type or rule this version does not
    /// know, a version below 1, a link that is not 32 bytes) stops the migration, naming it, and
    /// nothing is changed.
    private func moveEventRows() async throws {
        var ids: [String] = []
        for try await id in try await connection.query("SELECT DISTINCT ledger_id::text FROM events_before_blocks ORDER BY 1", logger: logger).decode(String.self) {
            ids.append(id)
        }
        var start = 0
        while start < ids.count {
            let part = Array(ids[start..<min(start + 250, ids.count)])
            start += part.count
            var runs: [(ledger: String, frames: [UploadedFrame])] = []
            for try await row in try await connection.query(
                """
                SELECT ledger_id::text, seq, type, at_ns, recorded_ns, anomaly, appended_by_ledger, version, payload, link
                FROM events_before_blocks WHERE ledger_id = ANY(\(part)::text[]::uuid[]) ORDER BY 1, 2
                """, logger: logger)
            {
                let (id, seq, typeName, at, recorded, anomaly, appended, version, payload, link) = try row.decode(
                    (String, Int64, String, Int64, Int64, String?, Bool, Int64, ByteBuffer, ByteBuffer).self)
                let rule = anomaly.flatMap { Rule(name: $0) }
                guard let type = EventType(name: typeName), anomaly == nil || rule != nil, link.readableBytes == FleetBlock.linkSize, seq >= 1,
                    version >= 1, payload.readableBytes <= 1 << 20
                else {
                    throw FleetError(
                        .server,
                        "\(address): event \(seq) of ledger \(id) cannot move into a block (its type, anomaly, version, payload or link is not one a ship writes): "
                            + "the fleet audit names what was altered; the owner repairs or deletes the row in `events`, then runs migrate again; nothing was changed")
                }
                let frame = UploadedFrame(
                    seq: seq, type: type, anomaly: rule, appendedByLedger: appended, at: at, recorded: recorded, version: version,
                    payload: Array(buffer: payload), link: Array(buffer: link))
                if let last = runs.last, last.ledger == id, last.frames.last!.seq + 1 == seq {
                    runs[runs.count - 1].frames.append(frame)
                } else {
                    runs.append((id, [frame]))
                }
            }
            try await copyBlocks(runs.map { ($0.ledger, try FleetBlock.encode($0.frames)) })
        }
        try await connection.query("DROP TABLE events_before_blocks", logger: logger)
    }

    /// A migration file's statements: split where a line ends with `;` (the files keep every
    /// statement's end at a line's end), comment-only pieces dropped.
    static func statements(_ sql: String) -> [String] {
        var statements: [String] = []
        var current = ""
        for line in sql.split(separator: "\n", omittingEmptySubsequences: false) {
            current += line + "\n"
            if line.trimmingCharacters(in: .whitespaces).hasSuffix(";") {
                statements.append(current)
                current = ""
            }
        }
        statements.append(current)
        return statements.filter { piece in
            piece.split(separator: "\n").contains { !$0.trimmingCharacters(in: .whitespaces).isEmpty && !$0.trimmingCharacters(in: .whitespaces).hasPrefix("--") }
        }
    }

    // MARK: - Helpers

    /// Runs `body` in one PostgreSQL transaction (PostgresNIO's `withTransaction`): committed when
    /// it returns, rolled back when it throws. The error thrown is the cause (the body's, or the
    /// failed BEGIN's or COMMIT's), not PostgresNIO's wrapper, so callers still tell a refused
    /// value from a refused ledger.
    func transaction<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await connection.withTransaction(logger: logger) { _ in try await body() }
        } catch let error as PostgresTransactionError {
            throw error.closureError ?? error.commitError ?? error.beginError ?? error
        }
    }

    /// Runs `body` on the store's turn (``TurnGate``), turning PostgresNIO's errors into
    /// ``FleetError``s. Every use of ``connection`` goes through here.
    func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await gate.withTurn(body)
        } catch let error as FleetError {
            throw error
        } catch let error as LedgerError {
            throw error
        } catch let error as AppleImportError {
            throw error
        } catch let error as IngestRefusal {
            throw error
        } catch {
            throw FleetStore.describe(error, address: address)
        }
    }

    static func describe(_ error: any Error, address: FleetAddress) -> FleetError {
        var described = classify(error, address: address)
        described.underlying = error
        return described
    }

    /// The code and message of `error`, met talking to `address`.
    private static func classify(_ error: any Error, address: FleetAddress) -> FleetError {
        if isTLSError(error) {
            return FleetError(.tls, "TLS with \(address) failed (sslmode=\(address.tlsMode.rawValue)): \(tlsReason(error))")
        }
        guard let error = error as? PSQLError else {
            return FleetError(.server, "\(address): \(String(reflecting: error))")
        }
        let state = error.serverInfo?[.sqlState] ?? ""
        let message = error.serverInfo?[.message] ?? ""
        switch error.code {
        case .server where state == "28000" && message.contains("pg_hba.conf") && (message.contains("no encryption") || message.contains("SSL off")):
            return FleetError(
                .tls,
                "\(address): the server accepts no plain-text connection from here (\(message)); connect with TLS: ?sslmode=require, or verify-full with sslrootcert"
            )
        case .server where state == "28000" && message.contains("pg_hba.conf"):
            return FleetError(.authentication, "\(address): the server's pg_hba.conf lets no such connection in (\(message))")
        case .server where state.hasPrefix("28"):
            return FleetError(.authentication, "\(address): the server refused the credentials of user \(address.user) (\(message))")
        case .server where state == "3D000":
            return FleetError(.notAFleetStore, "\(address): \(message)")
        case .server where state == "42501":
            return FleetError(
                .permission,
                "\(address): role \(address.user) lacks a privilege (\(message)); docs/fleet.md lists the GRANTs for the shipping, reporting and Apple roles (a role scoped by row-level security reads none of Apple's tables)"
            )
        case .server:
            let context = error.serverInfo?[.locationContext].map { " (\($0.prefix(200)))" } ?? ""
            return FleetError(.server, "\(address): PostgreSQL error \(state): \(message)\(context)")
        case .sslUnsupported:
            return FleetError(.tls, "\(address) does not offer TLS, and sslmode=\(address.tlsMode.rawValue) never falls back to plain text")
        case .authMechanismRequiresPassword:
            return FleetError(.authentication, "\(address): the server asks user \(address.user) for a password; put it in the URL or in PGPASSWORD")
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .failedToAddSSLHandler:
            if let tls = error.underlying, isTLSError(tls) {
                return FleetError(.tls, "TLS with \(address) failed (sslmode=\(address.tlsMode.rawValue)): \(tlsReason(tls))")
            }
            let cause = error.underlying.map { "\($0)" } ?? "the connection was closed"
            return FleetError(.unreachable, "cannot reach PostgreSQL at \(address): \(cause)")
        default:
            return FleetError(.server, "\(address): \(error.code)")
        }
    }

    /// Why a TLS handshake failed, in words: the certificate checks say which.
    private static func tlsReason(_ error: any Error) -> String {
        let text = "\(error)"
        if text.contains("CERTIFICATE_VERIFY_FAILED") || text.contains("certificate verify failed") {
            return "the server's certificate did not verify against the trusted authorities (sslrootcert) (\(text))"
        }
        if text.contains("failedToValidateHostname") {
            return "the server's certificate does not name the host connected to (\(text)); verify-full checks the name, verify-ca does not"
        }
        return text
    }

    private static func isTLSError(_ error: any Error) -> Bool {
        error is NIOSSLError || error is NIOSSLExtraError || error is BoringSSLError
    }
}

/// Lets one call at a time use a connection; the others wait their turn, first come first
/// served. A call made inside another, in the same task (a report that fetches twice, a ship that
/// reads the schema), goes straight through instead of waiting for itself.
final class TurnGate: Sendable {
    private struct State {
        var busy = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private let state = Locked(State())
    /// The gates whose turn the current task holds.
    @TaskLocal private static var held: Set<ObjectIdentifier> = []

    func withTurn<T>(_ body: () async throws -> T) async throws -> T {
        let me = ObjectIdentifier(self)
        if TurnGate.held.contains(me) { return try await body() }
        await withCheckedContinuation { (turn: CheckedContinuation<Void, Never>) in
            let now = state.withLock { s in
                if s.busy {
                    s.waiting.append(turn)
                    return false
                }
                s.busy = true
                return true
            }
            if now { turn.resume() }
        }
        defer {
            let next = state.withLock { s -> CheckedContinuation<Void, Never>? in
                if s.waiting.isEmpty {
                    s.busy = false
                    return nil
                }
                return s.waiting.removeFirst()
            }
            next?.resume()
        }
        return try await TurnGate.$held.withValue(TurnGate.held.union([me])) { try await body() }
    }
}
