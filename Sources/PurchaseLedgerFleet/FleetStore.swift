import Foundation
import GRDB
import Logging
import NIOCore
import PostgresNIO
import PurchaseLedger

/// Why the fleet store failed. Every case has a message that names the server, the ledger or the
/// seq concerned; the CLI prints it and exits with status 3.
public struct FleetError: Error, Sendable, CustomStringConvertible {
    public enum Code: String, Sendable {
        /// The server cannot be reached (refused, unknown host, timed out).
        case unreachable
        /// The server refused the user name or password.
        case authentication
        /// The database does not exist, or holds tables that are not a fleet store.
        case notAFleetStore
        /// The database was migrated by a newer purchase-ledger.
        case schemaTooNew
        /// The connection string is not a `postgres://` URL.
        case badURL
        /// Any other error the server reported.
        case server
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}

/// Where a fleet store is: parsed from `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
///
/// The password may instead come from the `PGPASSWORD` environment variable; `?host=/dir` (a
/// directory) connects through the Unix socket `/dir/.s.PGSQL.PORT`, as libpq does.
public struct FleetAddress: Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var socketDirectory: String?

    public init(_ url: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        guard let components = URLComponents(string: url), ["postgres", "postgresql"].contains(components.scheme ?? "") else {
            throw FleetError(.badURL, "\(url) is not a PostgreSQL URL; give postgres://USER@HOST:PORT/DATABASE")
        }
        host = components.host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost"
        port = components.port ?? 5432
        user = components.user ?? environment["PGUSER"] ?? "postgres"
        password = components.password ?? environment["PGPASSWORD"]
        database = String(components.path.drop { $0 == "/" })
        if database.isEmpty { database = user }
        socketDirectory = components.queryItems?.first { $0.name == "host" }?.value.flatMap { $0.hasPrefix("/") ? $0 : nil }
    }

    /// Whether `text` is a `postgres://` or `postgresql://` URL rather than a ledger path.
    public static func isURL(_ text: String) -> Bool {
        text.hasPrefix("postgres://") || text.hasPrefix("postgresql://")
    }

    /// The URL without its password.
    public var description: String {
        "postgres://\(user)@\(socketDirectory ?? host):\(port)/\(database)"
    }

    var configuration: PostgresConnection.Configuration {
        if let socketDirectory {
            return .init(unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        var configuration = PostgresConnection.Configuration(host: host, port: port, username: user, password: password, database: database, tls: .disable)
        configuration.options.connectTimeout = .seconds(10)
        return configuration
    }
}

/// A PostgreSQL database holding many ledgers: their logs, their projections (each row keyed by
/// the ledger's id) and a shared catalog. Ship ledgers into it with ``ship(_:progress:)``; ask
/// fleet questions with the report functions (``purchaseHistory(_:)``, ``revenue(from:to:groupBy:)``...).
///
/// ```swift
/// let fleet = try await FleetStore.connect("postgres://ledger@db.internal:5432/fleet")
/// defer { Task { await fleet.close() } }
/// let result = try await fleet.ship(try Ledger(path: "device.ledger"))
/// print(result.shippedEvents, "new events of", result.ledgerID)
/// let march = try await fleet.revenue(from: Timestamp.parse("2024-03-01T00:00:00Z"))
/// ```
///
/// One connection; use one store from one task at a time (open several for parallel ships).
public final class FleetStore: Sendable {
    public let address: FleetAddress
    let connection: PostgresConnection
    let logger: Logger
    /// The catalog rows this store wrote last: ledgers of one app share them, so most ships skip
    /// the catalog.
    let lastCatalog = Locked<[[[DatabaseValue]]]?>(nil)
    /// Each fleet table's column types, as the server names them: the binary COPY's layout.
    let columnTypeCache = Locked<[String: [String: CopyBinary.ColumnType]]?>(nil)

    private init(address: FleetAddress, connection: PostgresConnection, logger: Logger) {
        self.address = address
        self.connection = connection
        self.logger = logger
    }

    /// Connects to the database at `url`. With `create`, an empty database is made a fleet store
    /// (pending migrations are applied, in order, each once); without it, the database must
    /// already be one. Throws ``FleetError``.
    public static func connect(_ url: String, create: Bool = false) async throws -> FleetStore {
        try await connect(address: try FleetAddress(url), create: create)
    }

    static func connect(address: FleetAddress, create: Bool) async throws -> FleetStore {
        var logger = Logger(label: "purchase-ledger.fleet")
        logger.logLevel = .critical
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: address.configuration, id: 1, logger: logger)
        } catch {
            throw FleetStore.describe(error, address: address)
        }
        let store = FleetStore(address: address, connection: connection, logger: logger)
        do {
            try await store.prepare(create: create)
        } catch {
            await store.close()
            throw error
        }
        return store
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

    private func prepare(create: Bool) async throws {
        try await run {
            let hasMigrations =
                try await connection.query(
                    "SELECT to_regclass('public.fleet_migrations') IS NOT NULL", logger: logger
                ).collect().first?.decode(Bool.self) ?? false
            if !hasMigrations {
                let tables =
                    try await connection.query(
                        """
                        SELECT count(*) FROM pg_tables WHERE schemaname = 'public'
                        """, logger: logger
                    ).collect().first?.decode(Int64.self) ?? 0
                guard create else {
                    throw FleetError(.notAFleetStore, "\(address) is not a purchase-ledger fleet store (no fleet_migrations table); ship a ledger into it first")
                }
                guard tables == 0 else {
                    throw FleetError(
                        .notAFleetStore, "\(address) holds \(tables) other table\(tables == 1 ? "" : "s") and is not a purchase-ledger fleet store; give an empty database")
                }
            }
            try await migrate(create: create)
        }
    }

    /// Applies pending migrations under an advisory lock (two shippers starting together migrate
    /// once); refuses a database migrated by a newer version.
    private func migrate(create: Bool) async throws {
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS fleet_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
            """, logger: logger)
        try await transaction {
            try await connection.query("SELECT pg_advisory_xact_lock(7074127443)", logger: logger)
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
            let pending = embeddedMigrations.filter { !applied.contains($0.name) }
            if !pending.isEmpty && !create {
                throw FleetError(.notAFleetStore, "\(address) needs migration \(pending[0].name); ship into it to apply it")
            }
            for migration in pending {
                for statement in FleetStore.statements(migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query("INSERT INTO fleet_migrations (name) VALUES (\(migration.name))", logger: logger)
            }
        }
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

    /// Runs `body` in one PostgreSQL transaction: committed when it returns, rolled back when it throws.
    func transaction<T>(_ body: () async throws -> T) async throws -> T {
        try await connection.query("BEGIN", logger: logger)
        do {
            let value = try await body()
            try await connection.query("COMMIT", logger: logger)
            return value
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    /// Runs `body`, turning PostgresNIO's errors into ``FleetError``s.
    func run<T>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as FleetError {
            throw error
        } catch let error as LedgerError {
            throw error
        } catch {
            throw FleetStore.describe(error, address: address)
        }
    }

    static func describe(_ error: any Error, address: FleetAddress) -> FleetError {
        guard let error = error as? PSQLError else {
            return FleetError(.server, "\(address): \(String(reflecting: error))")
        }
        let state = error.serverInfo?[.sqlState] ?? ""
        let message = error.serverInfo?[.message] ?? ""
        switch error.code {
        case .server where state.hasPrefix("28"):
            return FleetError(.authentication, "\(address): the server refused the credentials of user \(address.user) (\(message))")
        case .server where state == "3D000":
            return FleetError(.notAFleetStore, "\(address): \(message)")
        case .server:
            return FleetError(.server, "\(address): PostgreSQL error \(state): \(message)")
        case .authMechanismRequiresPassword:
            return FleetError(.authentication, "\(address): the server asks user \(address.user) for a password; put it in the URL or in PGPASSWORD")
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown:
            let cause = error.underlying.map { "\($0)" } ?? "the connection was closed"
            return FleetError(.unreachable, "cannot reach PostgreSQL at \(address): \(cause)")
        default:
            return FleetError(.server, "\(address): \(error.code)")
        }
    }
}

/// Runs async work from synchronous code (the CLI's commands, ledger-bench) and waits for it.
/// The work runs on Swift's concurrency pool and PostgresNIO's event loop, never on the waiting
/// thread; do not call it from a task on that pool.
package func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let result = Locked<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            let value = try await body()
            result.withLock { $0 = .success(value) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}
