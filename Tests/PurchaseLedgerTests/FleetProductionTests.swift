import Foundation
import GRDB
import PostgresNIO
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting
import PurchaseLedgerTesting

/// A certificate authority and server certificates made with openssl, in a folder of the test's.
struct TestCertificates {
    let ca: String
    let otherCA: String
    /// Signed by `ca`, naming `localhost` only (so verify-full to 127.0.0.1 must fail).
    let certificate: String
    let key: String

    init(in dir: TemporaryDirectory) throws {
        func openssl(_ arguments: [String]) throws {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            process.arguments = arguments
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            guard process.terminationStatus == 0 else { throw LocalPostgres.Failure(description: "openssl \(arguments.joined(separator: " ")) failed") }
        }
        for name in ["ca", "other-ca"] {
            try openssl([
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir.path("\(name).key"), "-out", dir.path("\(name).pem"),
                "-days", "2", "-subj", "/CN=purchase-ledger test \(name)",
            ])
        }
        try openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", dir.path("server.key"), "-out", dir.path("server.csr"), "-subj", "/CN=localhost"])
        try Data("subjectAltName=DNS:localhost\n".utf8).write(to: URL(fileURLWithPath: dir.path("san.ext")))
        try openssl([
            "x509", "-req", "-in", dir.path("server.csr"), "-CA", dir.path("ca.pem"), "-CAkey", dir.path("ca.key"), "-CAcreateserial",
            "-out", dir.path("server.pem"), "-days", "2", "-extfile", dir.path("san.ext"),
        ])
        ca = dir.path("ca.pem")
        otherCA = dir.path("other-ca.pem")
        certificate = dir.path("server.pem")
        key = dir.path("server.key")
    }
}

/// A ledger of a few purchases, from the sample log.
func sampleLedger(_ path: String) throws {
    _ = try Ledger(path: path).append(contentsOf: try sampleLog.split(separator: "\n").map { try JSONLines.decode(String($0)) })
}

@Suite(.serialized, .enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct FleetProductionTests {
    @Test func urlsParseAsLibpqDoesAndTheDefaultTLSModeDependsOnTheHost() throws {
        let remote = try FleetAddress("postgres://ledger:pw@db.internal/fleet", environment: [:])
        #expect(remote.tlsMode == .require && remote.host == "db.internal" && remote.port == 5432 && remote.password == "pw")
        #expect(try FleetAddress("postgres://ledger@127.0.0.1:6543/fleet", environment: [:]).tlsMode == .prefer)
        #expect(try FleetAddress("postgres://ledger@localhost/fleet", environment: [:]).tlsMode == .prefer)
        // Only addresses of this machine are loopback: a name that begins with "127." is resolved
        // by DNS like any other, and gets TLS by default.
        #expect(try FleetAddress("postgres://ledger@127.mitm.example/fleet", environment: [:]).tlsMode == .require)
        #expect(try FleetAddress("postgres://ledger@127.0.0.1.example/fleet", environment: [:]).tlsMode == .require)
        #expect(try FleetAddress("postgres://ledger@127.1.2.3/fleet", environment: [:]).tlsMode == .prefer)
        #expect(try FleetAddress("postgres://ledger@[0:0:0:0:0:0:0:1]/fleet", environment: [:]).tlsMode == .prefer)
        #expect(try FleetAddress("postgres://ledger@[::2]/fleet", environment: [:]).tlsMode == .require)
        #expect(try FleetAddress("Postgres://ledger@db/fleet", environment: [:]).host == "db", "the scheme in any case")
        #expect(FleetAddress.isURL("POSTGRES://x@db/fleet") && FleetAddress.isURL("postgres:/x@db/f") && !FleetAddress.isURL("postgres.ledger"))
        #expect(try FleetAddress("postgres://ledger@[::1]:7000/fleet", environment: [:]).port == 7000)
        #expect(try FleetAddress("postgres://ledger@db/fleet?sslmode=disable", environment: [:]).tlsMode == .disable)
        #expect(try FleetAddress("postgres://ledger@db/fleet", environment: ["PGSSLMODE": "verify-full"]).tlsMode == .verifyFull)
        #expect(try FleetAddress("postgres://ledger@db/fleet?sslmode=prefer", environment: ["PGSSLMODE": "verify-full"]).tlsMode == .prefer, "the URL wins")
        let rooted = try FleetAddress("postgres://ledger@db/fleet?sslmode=require&sslrootcert=/etc/ca.pem", environment: [:])
        #expect(rooted.tlsMode == .verifyCA && rooted.rootCertificates == "/etc/ca.pem", "require with a root certificate verifies it, as libpq does")
        // Unencoded # ? / @ in a password: parsed, never printed.
        let odd = try FleetAddress("postgres://ledger:s3cr#t/?@x@db.internal:5433/fleet?sslmode=require", environment: [:])
        #expect(odd.password == "s3cr#t/?@x" && odd.host == "db.internal" && odd.port == 5433 && odd.database == "fleet")
        #expect(!odd.description.contains("s3cr"))
        #expect(try FleetAddress("postgres://ledger:p%40ss@db/fleet", environment: [:]).password == "p@ss")
        #expect(throws: FleetError.self) { try FleetAddress("postgres://ledger@db/fleet?sslmode=sometimes", environment: [:]) }
        #expect(throws: FleetError.self) { try FleetAddress("postgres://ledger@db:99999/fleet", environment: [:]) }
        #expect(throws: FleetError.self) { try FleetAddress("postgres://ledger@db/fleet?sslcert=x", environment: [:]) }
    }

    /// Every error path a malformed or unreachable URL can take, on every command that takes one:
    /// the password is in none of their output, raw or percent-decoded.
    @Test func noOutputEverEchoesThePassword() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        try sampleLedger(path)
        let secret = "s3cr#t/?x"
        let encoded = "s3cr%23t%2F%3Fx"
        let urls = [
            "postgres://ledger:\(secret)@127.0.0.1:1/fleet",
            "postgres://ledger:\(encoded)@127.0.0.1:1/fleet",
            "postgres://ledger:\(secret)@127.0.0.1:99999/fleet",
            "postgres://ledger:\(secret)@127.0.0.1:1/fleet?sslmode=bogus",
            "postgres://ledger:\(secret)@127.0.0.1:1/fleet?nonsense=1",
            "postgres://ledger:\(secret)@[::1/fleet",
            "postgre://ledger:\(secret)@host/fleet",
            "postgres://ledger:\(secret)@no-such-host.invalid/fleet",
            "postgres://ledger@127.0.0.1:1/fleet?password=\(secret)",
            // Mistyped schemes: refused as URLs, never opened as files named by the URL.
            "postgres//ledger:\(secret)@127.0.0.1:1/fleet", "postgres:/ledger:\(secret)@127.0.0.1:1/fleet",
            "Postgres://ledger:\(secret)@127.0.0.1:1/fleet", "POSTGRESQL:ledger:\(secret)@127.0.0.1:1/fleet",
        ]
        var checked = 0
        for url in urls {
            for command in [["ship", path, "--to", url], ["report", url, "--view", "revenue"], ["migrate", url], ["report", url, "extra-argument"]] {
                let result = try cli(command)
                #expect(result.status != 0, "\(command)")
                for text in [result.stdout, result.stderr] {
                    #expect(!text.contains("s3cr"), "\(command[0]) printed the password: \(text)")
                }
                checked += 1
            }
        }
        // PGPASSWORD too.
        let fromEnvironment = try cli(["report", "postgres://ledger@127.0.0.1:1/fleet?sslmode=bogus-\(secret)"], environment: ["PGPASSWORD": secret])
        #expect(!fromEnvironment.stderr.contains("s3cr") && fromEnvironment.status == 3)
        #expect(checked == urls.count * 4)
    }

    @Test func aTLSOnlyServerIsReachedWithTLSAndPlainTextIsRefusedWithTheRightReason() throws {
        let dir = try TemporaryDirectory()
        let certificates = try TestCertificates(in: dir)
        let server = try LocalPostgres(
            tls: (certificates.certificate, certificates.key),
            hba: "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\nhostssl all all ::1/128 scram-sha-256\n")
        defer { server.stop() }
        try server.createDatabase("fleet")
        let path = dir.path("a.ledger")
        try sampleLedger(path)
        func url(_ host: String, _ query: String) -> String { server.url(database: "fleet", host: host) + query }

        // Plain text is refused by the server, and the error says TLS, not the password.
        let plain = try cli(["migrate", url("127.0.0.1", "?sslmode=disable")])
        #expect(plain.status == 3 && plain.stderr.contains("accepts no plain-text connection") && plain.stderr.contains("sslmode=require"), "\(plain.stderr)")
        #expect(!plain.stderr.contains("credentials"))
        let fromEnvironment = try cli(["migrate", url("127.0.0.1", "")], environment: ["PGSSLMODE": "disable"])
        #expect(fromEnvironment.status == 3 && fromEnvironment.stderr.contains("accepts no plain-text connection"))

        // verify-full: the certificate names localhost and is signed by the test's CA.
        let full = url("localhost", "?sslmode=verify-full&sslrootcert=\(certificates.ca)")
        let migrated = try cli(["migrate", full])
        #expect(migrated.status == 0, "\(migrated.stderr)")
        let shipped = try cli(["ship", path, "--to", full])
        #expect(shipped.status == 0 && shipped.stdout.contains("1 of 1 ledger shipped"), "\(shipped.stdout) \(shipped.stderr)")
        let report = try cli(["report", full, "--view", "revenue", "--format", "csv"])
        #expect(report.status == 0 && report.stdout.contains("book,USD,4.99"), "\(report.stdout) \(report.stderr)")

        // The same certificate does not name 127.0.0.1: verify-full refuses, verify-ca accepts.
        let wrongName = try cli(["report", url("127.0.0.1", "?sslmode=verify-full&sslrootcert=\(certificates.ca)"), "--view", "revenue"])
        #expect(wrongName.status == 3 && wrongName.stderr.contains("does not name the host"), "\(wrongName.stderr)")
        #expect(try cli(["report", url("127.0.0.1", "?sslmode=verify-ca&sslrootcert=\(certificates.ca)"), "--view", "revenue"]).status == 0)
        // Another authority: refused, whatever the name.
        let otherCA = try cli(["report", url("localhost", "?sslmode=verify-ca&sslrootcert=\(certificates.otherCA)"), "--view", "revenue"])
        #expect(otherCA.status == 3 && otherCA.stderr.contains("did not verify"), "\(otherCA.stderr)")
        let missingRoot = try cli(["report", url("localhost", "?sslmode=verify-full&sslrootcert=\(dir.path("none.pem"))"), "--view", "revenue"])
        #expect(missingRoot.status == 3 && missingRoot.stderr.contains("cannot read sslrootcert"), "\(missingRoot.stderr)")
        // require (no check of the certificate) and the loopback default (prefer) both take TLS here.
        #expect(try cli(["report", url("127.0.0.1", "?sslmode=require"), "--view", "revenue"]).status == 0)
        #expect(try cli(["report", url("127.0.0.1", ""), "--view", "revenue"]).status == 0)
    }

    @Test func aPlainServerIsRefusedUnderRequireAndUsedUnderTheLoopbackDefault() throws {
        let (_, url) = try FleetServer.database()
        let required = try cli(["report", url + "?sslmode=require", "--view", "revenue"])
        #expect(required.status == 3 && required.stderr.contains("does not offer TLS"), "\(required.stderr)")
        #expect(try cli(["report", url, "--view", "revenue"]).status == 0, "prefer on loopback falls back to plain text")
        #expect(try cli(["report", url + "?sslmode=disable", "--view", "revenue"]).status == 0)
    }

    /// Tools/fleet-up.sh, as a newcomer runs it: a local fleet store whose owner is no superuser,
    /// the documented roles made with docs/fleet.md's blocks as written, and URLs that ship and
    /// report; `stop` removes it all.
    @Test func fleetUpStartsAStoreThatShipsAndReportsUnderTheDocumentedRoles() throws {
        let script = packageRoot.appending(path: "Tools/fleet-up.sh").path
        // The script runs the CLI this test runs (without it, it would build one).
        setenv("PURCHASE_LEDGER_BIN", binary, 1)
        // Through posix_spawn, not Process: the server the script starts keeps its descriptors.
        let up = try LocalPostgres.run("/bin/bash", [script])
        let lines = up.split(separator: "\n")
        func url(_ label: String) throws -> String {
            let line = try #require(lines.first { $0.contains(label) }, "\(up)")
            return String(try #require(line.split(separator: " ").last))
        }
        let folder = String(try #require(lines.last { $0.hasPrefix("Stop it") }?.split(separator: " ").last))
        // The same URLs as shell variables, on stdout, for `eval "$(Tools/fleet-up.sh)"`.
        let exports = try #require(lines.last { $0.hasPrefix("export FLEET_OWNER=") }, "\(up)")
        #expect(exports.contains("FLEET_SHIP='\(try url("shipping (ship)"))'") && exports.contains("FLEET_FOLDER='\(folder)'"))
        defer { _ = try? LocalPostgres.run("/bin/bash", [script, "stop", folder]) }
        #expect(try url("owner (migrate, forget)").hasPrefix("postgres://fleet_owner:"))
        let dir = try TemporaryDirectory()
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        let shipped = try cli(["ship", path, "--to", try url("shipping (ship)")])
        #expect(shipped.status == 0, "\(shipped.stderr)")
        let report = try cli(["report", try url("reporting (report)"), "--format", "csv"])
        #expect(report.status == 0 && report.stdout.split(separator: "\n").count > 1, "\(report.stderr)")
        let stopped = try LocalPostgres.run("/bin/bash", [script, "stop", folder])
        #expect(stopped.contains("stopped") && !FileManager.default.fileExists(atPath: folder), "\(stopped)")
    }

    /// The GRANTs of docs/fleet.md, run as written: shipping and reporting work under them, and
    /// neither role can do more.
    @Test func shipAndReportRunUnderTheDocumentedLeastPrivilegeRoles() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!)
        // Role names are per cluster: give this test's its own.
        let suffix = "_" + database.suffix(8)
        try server.psql(try Self.documentedSQL("roles.sql", suffix: suffix), database: database)
        try server.psql(try Self.documentedSQL("grants.sql", suffix: suffix), database: database)
        let shipURL = server.url(database: database, password: "change-me", user: "ledger_ship" + suffix)
        let reportURL = server.url(database: database, password: "change-me-too", user: "ledger_report" + suffix)

        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        try sampleLedger(path)
        let shipped = try cli(["ship", path, "--to", shipURL])
        #expect(shipped.status == 0, "\(shipped.stderr)")
        // Again, with new events: the shipping role replaces projection rows.
        _ = try Ledger(path: path).append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-02T09:00:00Z","transaction":"t9","product":"book","user":"bob"}"#))
        #expect(try cli(["ship", path, "--to", shipURL]).status == 0)
        let report = try cli(["report", reportURL, "--format", "csv"])
        #expect(report.status == 0 && report.stdout.contains("t9"), "\(report.stderr)")
        // Apple's record: the Apple role stores it, the reporting role reads the divergences.
        let apple = try ReconciliationTests()
        try apple.chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        try apple.info(try apple.signed("1001")).write(toFile: dir.path("info.json"), atomically: true, encoding: .utf8)
        // A device's shipping credential cannot plant a statement of Apple's: a role of its own writes them.
        let shipperImports = try cli(["apple-import", shipURL, dir.path("info.json"), "--apple-root", dir.path("root.pem"), "--user", "bob"])
        #expect(shipperImports.status == 3 && shipperImports.stderr.contains("lacks a privilege"), "\(shipperImports.stderr)")
        let appleURL = server.url(database: database, password: "change-me-three", user: "ledger_apple" + suffix)
        let appleImported = try cli(["apple-import", appleURL, dir.path("info.json"), "--apple-root", dir.path("root.pem"), "--user", "bob"])
        #expect(appleImported.status == 0, "\(appleImported.stderr)")
        let divergence = try cli(["report", reportURL, "--view", "divergence", "--format", "csv"])
        #expect(divergence.status == 0 && divergence.stdout.contains("chargedNotRecorded"), "\(divergence.stdout)\(divergence.stderr)")

        // Neither role can do more than that.
        let reporterShips = try cli(["ship", path, "--to", reportURL])
        #expect(reporterShips.status == 3 && reporterShips.stderr.contains("lacks a privilege") && reporterShips.stderr.contains("docs/fleet.md"), "\(reporterShips.stderr)")
        try server.createDatabase("empty" + suffix)
        let shipperMigrates = try cli(["migrate", server.url(database: "empty" + suffix, password: "change-me", user: "ledger_ship" + suffix)])
        #expect(shipperMigrates.status == 3 && shipperMigrates.stderr.contains("lacks a privilege"), "\(shipperMigrates.stderr)")
        let role = "ledger_ship" + suffix
        let events = try server.psql(
            "SELECT has_table_privilege('\(role)', 'event_blocks', 'UPDATE'), has_table_privilege('\(role)', 'event_blocks', 'DELETE')", database: database)
        #expect(events.trimmingCharacters(in: .whitespacesAndNewlines) == "f|f", "events are append-only for the shipping role")

        // It can change no ledger's identity key...
        let id = try #require(try Ledger(path: path).identity()?.id)
        #expect(throws: (any Error).self, "the shipping role updates a ledger's key") {
            try server.psql("SET ROLE \(role); UPDATE ledgers SET public_key = '\\x00' WHERE ledger_id = '\(id)'", database: database)
        }
        #expect(throws: (any Error).self, "the shipping role changes the erasure list") {
            try server.psql("SET ROLE \(role); INSERT INTO erased_users VALUES ('\(id)', 1, now())", database: database)
        }
        // ...and an event it plants after a ledger's head never blocks that ledger silently: ship
        // names it, and the owner removes it with the statement the message gives.
        try server.psql(
            """
            SET ROLE \(role);
            INSERT INTO event_blocks (ledger_id, first_seq, last_seq, raw_size, frames, links)
            SELECT ledger_id, last_seq + 1, last_seq + 1, raw_size, frames, substring(links from 1 for 32)
            FROM event_blocks WHERE ledger_id = '\(id)' ORDER BY first_seq DESC LIMIT 1
            """, database: database)
        _ = try Ledger(path: path).append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-03T09:00:00Z","transaction":"t10","product":"book","user":"bob"}"#))
        let blocked = try cli(["ship", path, "--to", shipURL])
        #expect(blocked.status == 1 && blocked.stderr.contains("past the head it shipped (seq 11), from seq 12"), "\(blocked.stdout) \(blocked.stderr)")
        let statement = try #require(blocked.stderr.range(of: "DELETE FROM event_blocks").map { String(blocked.stderr[$0.lowerBound...].prefix { $0 != ";" }) })
        try server.psql(statement, database: database)
        let unblocked = try cli(["ship", path, "--to", shipURL])
        #expect(unblocked.status == 0, "\(unblocked.stderr)")
        #expect(try cli(["verify", path, "--against", reportURL]).status == 0)

        // It cannot delete a ledger's row (to register the id again under its own key), nor make
        // temporary objects (which would shadow names inside the owner's functions).
        let rights = try server.psql(
            "SELECT has_table_privilege('\(role)', 'ledgers', 'DELETE'), has_database_privilege('\(role)', current_database(), 'TEMPORARY')",
            database: database)
        #expect(rights.trimmingCharacters(in: .whitespacesAndNewlines) == "f|f", "\(rights)")
        // A head it moves back is not a block: the ledger's own events past it are kept, the head moves on.
        let saved = try server.psql("SELECT last_seq, encode(last_link, 'hex'), head_statement FROM ledgers WHERE ledger_id = '\(id)'", database: database)
        let fields = saved.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|", maxSplits: 2).map(String.init)
        _ = try Ledger(path: path).append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-04T09:00:00Z","transaction":"t11","product":"book","user":"bob"}"#))
        #expect(try cli(["ship", path, "--to", shipURL]).status == 0)
        try server.psql(
            "SET ROLE \(role); UPDATE ledgers SET last_seq = \(fields[0]), last_link = decode('\(fields[1])', 'hex'), head_statement = $h$\(fields[2])$h$ WHERE ledger_id = '\(id)'",
            database: database)
        let again = try cli(["ship", path, "--to", shipURL])
        #expect(again.status == 0, "\(again.stdout) \(again.stderr)")
        #expect(try cli(["verify", path, "--against", reportURL]).status == 0, "the head is the file's again")
    }

    /// A block of SQL from docs/fleet.md, as written there, with this test's role names.
    static func documentedSQL(_ name: String, suffix: String) throws -> String {
        let docs = try String(contentsOf: packageRoot.appending(path: "docs/fleet.md"), encoding: .utf8)
        let marker = try #require(docs.range(of: "<!-- \(name) -->\n```sql\n"))
        let sql = docs[marker.upperBound...].components(separatedBy: "\n```")[0]
        return sql.replacingOccurrences(of: "ledger_ship", with: "ledger_ship" + suffix).replacingOccurrences(of: "ledger_report", with: "ledger_report" + suffix)
            .replacingOccurrences(of: "ledger_apple", with: "ledger_apple" + suffix).replacingOccurrences(of: "ledger_ingest", with: "ledger_ingest" + suffix)
    }

    /// The row-level security of docs/fleet.md: a reporting role sees the ledgers of its scope
    /// only, and the shipping role still replaces rows.
    @Test func rowLevelSecurityLimitsAReportingRoleToItsLedgers() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!)
        let suffix = "_" + database.suffix(8)
        try server.psql(try Self.documentedSQL("roles.sql", suffix: suffix), database: database)
        try server.psql(try Self.documentedSQL("grants.sql", suffix: suffix), database: database)
        try server.psql(try Self.documentedSQL("rls.sql", suffix: suffix), database: database)
        let shipURL = server.url(database: database, password: "change-me", user: "ledger_ship" + suffix)
        let reportURL = server.url(database: database, password: "change-me-too", user: "ledger_report" + suffix)
        let dir = try TemporaryDirectory()
        let paths = (0..<3).map { dir.path("device-\($0).ledger") }
        for path in paths { try sampleLedger(path) }
        #expect(try cli(["ship"] + paths + ["--to", shipURL]).status == 0)
        let ids = try paths.map { try #require(try Ledger(path: $0).identity()).id }
        #expect(try cli(["report", reportURL, "--format", "csv"]).stdout.split(separator: "\n").count == 1, "no scope: no rows")
        try server.psql("INSERT INTO report_scope VALUES ('ledger_report\(suffix)', '\(ids[1])')", database: database)
        let scoped = try cli(["report", reportURL, "--format", "csv"])
        let rows = scoped.stdout.split(separator: "\n").dropFirst()
        #expect(!rows.isEmpty && rows.allSatisfy { $0.hasPrefix(ids[1]) }, "\(scoped.stdout) \(scoped.stderr)")
        // Its revenue is that ledger's, and of the catalogs it sees that ledger's only.
        let revenue = ["--view", "revenue", "--format", "csv"]
        #expect(try cli(["report", reportURL] + revenue).stdout == (try cli(["report", paths[1]] + revenue).stdout))
        // The shipping role still replaces a ledger's rows under RLS.
        _ = try Ledger(path: paths[1]).append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-02T09:00:00Z","transaction":"t9","product":"book","user":"bob"}"#))
        #expect(try cli(["ship"] + paths + ["--to", shipURL]).status == 0)
        #expect(try cli(["report", reportURL, "--format", "csv"]).stdout.contains("t9"))
        // The documented policies are the owner's choice: the owner's audit still finds nothing.
        let audit = try cli(["verify", url])
        #expect(audit.status == 0 && audit.stdout.contains("ok: 3 ledgers"), "\(audit.stdout)")
        // Under RLS, apple-import still finds whose each store id is; the scoped role reads none of it.
        let apple = try ReconciliationTests()
        try apple.ledger(apple.purchase("t1", store: "1001").replacingOccurrences(of: "\"u1\"", with: "\"carol\""), name: "carol.ledger").checkpoint()
        #expect(try cli(["ship", apple.dir.path("carol.ledger"), "--to", shipURL]).status == 0)
        try apple.chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        try apple.info(try apple.signed("1001")).write(toFile: dir.path("info.json"), atomically: true, encoding: .utf8)
        let appleURL = server.url(database: database, password: "change-me-three", user: "ledger_apple" + suffix)
        let imported = try cli(["apple-import", appleURL, dir.path("info.json"), "--apple-root", dir.path("root.pem")])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try server.psql("SELECT user_id FROM apple_transactions", database: database).trimmingCharacters(in: .whitespacesAndNewlines) == "carol")
        let scopedDivergence = try cli(["report", reportURL, "--view", "divergence"])
        #expect(scopedDivergence.status == 3 && scopedDivergence.stderr.contains("reads none of Apple's tables"), "\(scopedDivergence.stderr)")
    }

    /// One ledger the server cannot take (an id that is not a UUID, a NUL byte in a user id, from
    /// a version that let one in)
    /// is refused with its reason; the others of the same batch still go, and the exit status says so.
    @Test func oneBadLedgerInABatchNeverStopsTheOthers() throws {
        let (_, url) = try FleetServer.database()
        let dir = try TemporaryDirectory()
        let paths = (0..<4).map { dir.path("device-\($0).ledger") }
        for path in paths { try sampleLedger(path) }
        try FleetTests.setLedgerID(of: paths[1], to: "not-a-uuid")
        // Input refuses a NUL today; versions before the checks took one (and verify passes on such a file).
        var unchecked = LedgerConfiguration()
        unchecked.checksInput = false
        _ = try Ledger(path: paths[2], configuration: unchecked).append(
            Event(at: Timestamp.parse("2024-03-02T09:00:00Z"), .paymentQueued(transaction: "t9", product: "book", quantity: 1, user: "bo\u{0}b")))
        let result = try cli(["ship"] + paths + ["--to", url, "--json"])
        #expect(result.status == 1, "\(result.stdout) \(result.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
        let ledgers = try #require(json["ledgers"] as? [[String: Any]])
        #expect(ledgers.count == 4 && (json["failed"] as? Int) == 2)
        #expect((ledgers[1]["error"] as? String)?.contains("not a ledger id") == true, "\(ledgers[1])")
        #expect((ledgers[2]["error"] as? String)?.contains("transactions.user_id holds a NUL byte") == true, "\(ledgers[2])")
        #expect(ledgers[0]["shippedEvents"] as? Int == ledgers[3]["shippedEvents"] as? Int && (ledgers[0]["shippedEvents"] as? Int ?? 0) > 0)
        let text = try cli(["ship"] + paths + ["--to", url])
        #expect(text.status == 1 && text.stdout.contains("2 of 4 ledgers shipped") && text.stderr.contains("not a ledger id"), "\(text.stdout) \(text.stderr)")
    }

    /// A file edited so that an event no longer passes the rules (its product renamed to one never
    /// registered) with every later link recomputed: the chain is whole, so only the rules catch
    /// it. `verify` refuses it and so does `ship`, naming the seq, while the batch's other ledger ships.
    @Test func shipRefusesALedgerVerifyRefusesOnTheRules() throws {
        let (_, url) = try FleetServer.database()
        let dir = try TemporaryDirectory()
        let good = dir.path("good.ledger"), edited = dir.path("edited.ledger")
        try sampleLedger(good)
        try sampleLedger(edited)
        _ = try Ledger(path: edited).append(
            Event(at: Timestamp.parse("2024-03-02T09:00:00Z"), .paymentQueued(transaction: "t2", product: "book", quantity: 1, user: "bob")))
        try DatabaseQueue(path: edited).write { db in
            let seq = try #require(try Int64.fetchOne(db, sql: "SELECT max(seq) FROM events"))
            try db.execute(sql: "UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 'book', 'boox') AS BLOB) WHERE seq = ?", arguments: [seq])
            let row = try #require(try Row.fetchOne(db, sql: "SELECT version, type, at_ns, recorded_ns, payload FROM events WHERE seq = ?", arguments: [seq]))
            let previous = [UInt8](try #require(try Data.fetchOne(db, sql: "SELECT link FROM events WHERE seq = ?", arguments: [seq - 1])))
            // The link recomputed from the stored columns, as a forger (or the fleet's audit) does.
            let link = HashChain(key: nil).link(
                after: previous, seq: seq, type: EventType(rawValue: UInt8(row[1] as Int64))!, anomaly: nil, appendedByLedger: false, at: row[2],
                recorded: row[3], version: row[0], payload: [UInt8](row[4] as Data))
            try db.execute(sql: "UPDATE events SET link = ? WHERE seq = ?", arguments: [Data(link), seq])
        }
        let verify = try cli(["verify", edited])
        #expect(verify.status == 1 && verify.stdout.contains("seq 11") && verify.stdout.contains("unknownProduct"), "\(verify.stdout)")
        let shipped = try cli(["ship", good, edited, "--to", url, "--json"])
        #expect(shipped.status == 1, "\(shipped.stdout) \(shipped.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(shipped.stdout.utf8)) as? [String: Any])
        let ledgers = try #require(json["ledgers"] as? [[String: Any]])
        #expect((ledgers[0]["shippedEvents"] as? Int ?? 0) > 0, "\(ledgers[0])")
        #expect((ledgers[1]["error"] as? String)?.contains("event 11 does not pass the rules") == true, "\(ledgers[1])")
        let rows = try cli(["report", url, "--format", "csv"]).stdout
        #expect(!rows.contains("boox") && rows.split(separator: "\n").count == 2, "only the good ledger's t1: \(rows)")
    }

    /// `verify postgres://...` audits the whole store: clean, it says what it checked; after what
    /// a shipping credential (or anyone with the database) can do, it names each ledger and why.
    @Test func theFleetAuditFindsWhatWasDoneInTheStore() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let dir = try TemporaryDirectory()
        let paths = (0..<4).map { dir.path("device-\($0).ledger") }
        for path in paths.prefix(3) { try sampleLedger(path) }
        _ = try Ledger(path: paths[3])
        #expect(try cli(["ship"] + paths.prefix(3) + ["--to", url]).status == 0)
        let clean = try cli(["verify", url])
        #expect(clean.status == 0 && clean.stdout.contains("ok: 3 ledgers, 30 events") && clean.stdout.contains("3 chains recomputed"), "\(clean.stdout) \(clean.stderr)")

        let ids = try paths.map { try #require(try Ledger(path: $0).identity()) }
        // A planted event past ledger 0's head; a payload byte of ledger 1's event 3 changed; ledger
        // 2's signed head replaced; ledger 3's id registered under ledger 0's key; a user the store
        // erased put back in a row.
        try server.psql(
            """
            INSERT INTO event_blocks (ledger_id, first_seq, last_seq, raw_size, frames, links)
            SELECT ledger_id, last_seq + 1, last_seq + 1, raw_size, frames, substring(links from 1 for 32)
            FROM event_blocks WHERE ledger_id = '\(ids[0].id)' ORDER BY first_seq DESC LIMIT 1;
            UPDATE ledgers SET head_statement = (SELECT head_statement FROM ledgers WHERE ledger_id = '\(ids[0].id)') WHERE ledger_id = '\(ids[2].id)';
            INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at, public_key)
            SELECT '\(ids[3].id)', 'created', 0, last_link, now(), now(), public_key FROM ledgers WHERE ledger_id = '\(ids[0].id)';
            """, database: database)
        // (The payload byte with a script, as the blocks are compressed: decoded, edited, encoded again.)
        try server.editEvents(of: ids[1].id, containing: 3, database: database) { $0[2].payload[2] = 0x7a }
        #expect(try cli(["forget", url, "--user", "alice"]).status == 0)
        try server.psql("UPDATE transactions SET user_id = 'alice' WHERE ledger_id = '\(ids[1].id)'", database: database)
        let audit = try cli(["verify", url])
        #expect(audit.status == 1, "\(audit.stdout) \(audit.stderr)")
        let lines = audit.stdout.split(separator: "\n").map(String.init)
        func says(_ id: String, _ text: String) -> Bool { lines.contains { $0.contains("ledger \(id)") && $0.contains(text) } }
        #expect(says(ids[0].id, "seq 11") && says(ids[0].id, "past the signed head"), "\(audit.stdout)")
        #expect(says(ids[1].id, "seq 3") && says(ids[1].id, "does not hash to its stored link"), "\(audit.stdout)")
        #expect(says(ids[2].id, "signed head does not verify"), "\(audit.stdout)")
        #expect(says(ids[3].id, "does not derive its id"), "\(audit.stdout)")
        #expect(says(ids[1].id, "erased"), "\(audit.stdout)")
        #expect(!audit.stdout.contains("alice"), "an audit prints no user id")
        // Event 1 of a plain chain altered: the store knows its mode, so the audit says so.
        try server.editEvents(of: ids[2].id, containing: 1, database: database) { $0[0].payload[2] = 0x7a }
        let first = try cli(["verify", url])
        #expect(first.stdout.contains("ledger \(ids[2].id), seq 1: the event does not hash to its stored link"), "\(first.stdout)")
        // A ledger's row deleted (by the owner: the shipping role no longer may): its events are orphans, and said so.
        try server.psql("DELETE FROM ledgers WHERE ledger_id = '\(ids[2].id)'", database: database)
        let orphans = try cli(["verify", url])
        #expect(orphans.status == 1 && orphans.stdout.contains("ledger \(ids[2].id), seq 1: the store holds events of this ledger but no row"), "\(orphans.stdout)")
    }

    /// The outside review of the audit (after rows were compared): what it got past the audit
    /// is now a problem line. A keyless ledger row made with SQL, a rows_version no ship writes,
    /// a rewrite rule, or a shadowing schema that lets the reporting role read other rows,
    /// an erased user put back under another spelling; and a value from the store can forge no
    /// line of the output, nor break its JSON.
    @Test func theFleetAuditCatchesWhatTheReviewGotPastIt() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let dir = try TemporaryDirectory()
        let paths = (0..<2).map { dir.path("device-\($0).ledger") }
        for path in paths { try sampleLedger(path) }
        #expect(try cli(["ship"] + paths + ["--to", url]).status == 0)
        #expect(try cli(["verify", url]).status == 0)
        let ids = try paths.map { try #require(try Ledger(path: $0).identity()).id }
        let revenue = try cli(["report", url, "--view", "revenue", "--format", "csv"]).stdout
        // A clone under a random id with no key; ledger 1's rows marked with a layout no ship writes.
        let clone = "11111111-2222-4333-8444-555555555555"
        try server.psql(
            """
            INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at, rows_version)
            SELECT '\(clone)', 'created', last_seq, last_link, now(), now(), rows_version FROM ledgers WHERE ledger_id = '\(ids[0])';
            INSERT INTO event_blocks SELECT '\(clone)', first_seq, last_seq, raw_size, frames, links FROM event_blocks WHERE ledger_id = '\(ids[0])';
            UPDATE ledgers SET rows_version = 9 WHERE ledger_id = '\(ids[1])';
            """, database: database)
        var audit = try cli(["verify", url])
        #expect(audit.status == 1 && audit.stdout.contains("ledger \(clone): no signature vouches for it"), "\(audit.stdout)")
        #expect(audit.stdout.contains("ledger \(ids[1]): ledgers.rows_version is 9, not 4"), "\(audit.stdout)")
        try server.psql(
            "DELETE FROM event_blocks WHERE ledger_id = '\(clone)'; DELETE FROM ledgers WHERE ledger_id = '\(clone)'; UPDATE ledgers SET rows_version = 4",
            database: database)
        #expect(try cli(["verify", url]).status == 0)

        // Row-level security, and a schema named after the role that reads (here the owner, whose
        // name is first in PostgreSQL's default search path) with a view doubling the prices.
        let role = try server.psql("SELECT current_user", database: database).trimmingCharacters(in: .whitespacesAndNewlines)
        try server.psql(
            """
            CREATE RULE keep AS ON DELETE TO downloads DO INSTEAD NOTHING;
            CREATE SCHEMA "\(role)";
            CREATE VIEW "\(role)".transactions AS SELECT * FROM public.transactions;
            """, database: database)
        audit = try cli(["verify", url])
        #expect(audit.stdout.contains("the store: public.downloads has 1 rewrite rule(s)"), "\(audit.stdout)")
        #expect(audit.stdout.contains("the store: a relation named like the fleet's transactions in schema \(role)"), "\(audit.stdout)")
        try server.psql("DROP VIEW \"\(role)\".transactions", database: database)
        try server.psql(
            "CREATE VIEW \"\(role)\".transactions AS SELECT * FROM public.transactions WHERE false; DROP RULE keep ON downloads",
            database: database)
        #expect(try cli(["report", url, "--view", "revenue", "--format", "csv"]).stdout == revenue, "reports never read a shadowing schema")
        try server.psql("DROP SCHEMA \"\(role)\" CASCADE", database: database)

        // An erased user put back under another spelling: its rows must hold its marker exactly.
        #expect(try cli(["forget", url, "--user", "alice"]).status == 0)
        #expect(try cli(["verify", url]).status == 0)
        try server.psql("UPDATE transactions SET user_id = 'Alice' WHERE user_id LIKE '[erased %'", database: database)
        audit = try cli(["verify", url])
        #expect(audit.status == 1 && audit.stdout.contains("where the store erased the user"), "\(audit.stdout)")
        #expect(!audit.stdout.contains("Alice"))

        // A problem's text from the store (a product name in a row, which the audit quotes): one
        // escaped line, and inside the JSON under --json.
        try server.psql(
            "UPDATE transactions SET product = E'x\\n\\u001b[32mok: all fine' WHERE ledger_id = '\(ids[0])'", database: database)
        audit = try cli(["verify", url])
        #expect(audit.stdout.contains("ok: all fine"), "\(audit.stdout)")
        #expect(!audit.stdout.contains("\u{1B}") && !audit.stdout.split(separator: "\n").contains { $0.hasPrefix("ok") }, "\(audit.stdout)")
        let json = try cli(["verify", url, "--json"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any], "\(json.stdout)")
        let problems = try #require(object["problems"] as? [[String: Any]])
        #expect(object["valid"] as? Bool == false && object["problemCount"] as? Int == problems.count && !problems.isEmpty)
    }

    /// What no audit of the store alone can see, a witness kept outside it does: a ledger put
    /// back to an earlier signed head with its events and rows of then, and a ledger deleted
    /// whole, both pass a plain audit and are problems against the witness of an earlier audit.
    @Test func aWitnessKeptOutsideTheStoreCatchesAPutBackHeadAndADeletedLedger() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let dir = try TemporaryDirectory()
        let paths = (0..<2).map { dir.path("device-\($0).ledger") }
        for path in paths { try sampleLedger(path) }
        let ids = try paths.map { try #require(try Ledger(path: $0).identity()).id }
        #expect(try cli(["ship"] + paths + ["--to", url]).status == 0)
        // The store as a backup holds it now: ledger 0's row, events and rows.
        let tables = ["ledgers", "event_blocks"] + Projector.Table.all.map(\.name)
        try server.psql(tables.map { "CREATE TABLE saved_\($0) AS SELECT * FROM \($0) WHERE ledger_id = '\(ids[0])';" }.joined(separator: "\n"), database: database)
        try Ledger(path: paths[0]).append(Event(at: E.at(5000), .restoreStarted(user: nil)))
        #expect(try cli(["ship", paths[0], "--to", url]).status == 0)
        let witness = dir.path("heads.json")
        let first = try cli(["verify", url, "--witness", witness])
        #expect(first.status == 0 && first.stdout.contains("witness: \(witness) holds these 2 heads"), "\(first.stdout) \(first.stderr)")
        #expect(first.stdout.contains("did not exist, so nothing was compared"))
        // Another store's audit refuses this witness rather than call every ledger deleted.
        let (_, otherURL) = try FleetServer.database()
        let other = try cli(["verify", otherURL, "--witness", witness])
        #expect(other.status == 1 && other.stdout.contains("the store: the witness is of another fleet store"), "\(other.stdout)")

        // The backup put back for ledger 0; ledger 1 deleted whole. The store agrees with itself.
        try server.psql(
            (tables.map { "DELETE FROM \($0) WHERE ledger_id = '\(ids[0])'; INSERT INTO \($0) SELECT * FROM saved_\($0);" }
                + tables.map { "DELETE FROM \($0) WHERE ledger_id = '\(ids[1])';" } + tables.map { "DROP TABLE saved_\($0);" }).joined(separator: "\n"),
            database: database)
        #expect(try cli(["verify", url]).status == 0, "the store alone cannot tell")
        let caught = try cli(["verify", url, "--witness", witness])
        #expect(caught.status == 1, "\(caught.stdout)")
        #expect(caught.stdout.contains("ledger \(ids[0]), seq 10: its head went back: seq 10 in the store, seq 11"), "\(caught.stdout)")
        #expect(caught.stdout.contains("ledger \(ids[1]): the witness of ") && caught.stdout.contains("deleted"), "\(caught.stdout)")
        #expect(caught.stdout.contains("left as it was"))
        #expect(try cli(["verify", url, "--witness", witness]).status == 1, "a witness is never replaced by a store found unsound")
        #expect(try cli(["verify", paths[0], "--witness", witness]).stderr.contains("--witness goes with a fleet store"))
    }

    /// An empty file in a batch is that ledger's failure, never a phantom ledger in the store.
    @Test func anEmptyFileIsNeverShippedAsALedger() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let dir = try TemporaryDirectory()
        let good = dir.path("good.ledger"), empty = dir.path("empty.ledger")
        try sampleLedger(good)
        _ = FileManager.default.createFile(atPath: empty, contents: nil)
        let shipped = try cli(["ship", good, empty, "--to", url, "--json"])
        #expect(shipped.status == 1, "\(shipped.stdout) \(shipped.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(shipped.stdout.utf8)) as? [String: Any])
        let ledgers = try #require(json["ledgers"] as? [[String: Any]])
        #expect((ledgers[1]["error"] as? String)?.contains("empty file") == true, "\(ledgers[1])")
        #expect(try FileManager.default.attributesOfItem(atPath: empty)[.size] as? Int == 0)
        #expect(try server.psql("SELECT count(*) FROM ledgers", database: database) == "1\n", "only the good ledger")
    }

    /// The catalog goes in bulk, and each ledger keeps its own (contract 5.1): thousands of
    /// products registered by two ledgers at different prices, titles, related products and
    /// content versions; neither ledger's registrations change the other's rows.
    @Test func aLargeCatalogGoesInBulkAndEachLedgerKeepsItsOwn() async throws {
        let (_, url) = try FleetServer.database()
        let dir = try TemporaryDirectory()
        func registration(_ i: Int, day: Int, price: String, version: String, title: Bool) -> String {
            let titleField = title ? #","title":"Product \#(i) on day \#(day)""# : ""
            return
                #"{"type":"productRegistered","at":"2024-03-0\#(day)T00:00:00Z","product":"p\#(i)","kind":"nonConsumable","price":"\#(price)","currency":"USD","downloadable":true,"contents":[{"content":"c\#(i)","contentVersion":"\#(version)","contentLength":10}],"relatedProducts":["r\#(i)-\#(day)"]\#(titleField)}"#
        }
        let count = 3000
        let a = dir.path("a.ledger"), b = dir.path("b.ledger")
        #expect(try cli(["append", a], stdin: (0..<count).map { registration($0, day: 1, price: "0.99", version: "1.9", title: true) }.joined(separator: "\n")).status == 0)
        // b registers the even products later, at another price, with version 1.10 for the first
        // half and 1.2 for the rest, and no title: in a shared catalog they would have won.
        let later = (0..<count).filter { $0 % 2 == 0 }.map { registration($0, day: 2, price: "1.99", version: $0 < count / 2 ? "1.10" : "1.2", title: false) }
        #expect(try cli(["append", b], stdin: later.joined(separator: "\n")).status == 0)
        #expect(try cli(["ship", a, b, "--to", url]).status == 0)
        let idA = try #require(try Ledger(path: a).identity()).id, idB = try #require(try Ledger(path: b).identity()).id
        let fleet = try await FleetStore.connect(url)
        func key(_ row: Row, _ column: String = "product") -> String { (row["ledger_id"] as String) + " " + (row[column] as String) }
        let products = try await fleet.fetch("SELECT ledger_id::text, product, price, title FROM products")
        #expect(products.count == count + count / 2)
        let byProduct = Dictionary(uniqueKeysWithValues: products.map { (key($0), $0) })
        #expect(byProduct["\(idA) p0"]?["price"] == "0.99" && byProduct["\(idA) p0"]?["title"] == "Product 0 on day 1", "a's rows are a's")
        #expect(byProduct["\(idB) p0"]?["price"] == "1.99" && (byProduct["\(idB) p0"]?["title"] as String?) == nil)
        #expect(byProduct["\(idB) p1"] == nil)
        let related = try await fleet.fetch("SELECT ledger_id::text, product, related_product FROM related_products")
        #expect(related.count == count + count / 2)
        #expect(Set(related.filter { $0["product"] == "p0" }.map { key($0, "related_product") }) == ["\(idA) r0-1", "\(idB) r0-2"])
        let versions = Dictionary(
            uniqueKeysWithValues: try await fleet.fetch("SELECT ledger_id::text, product, latest_version FROM product_contents").map { (key($0), $0["latest_version"] as String) })
        #expect(versions.count == count + count / 2)
        #expect(versions["\(idA) p0"] == "1.9" && versions["\(idB) p0"] == "1.10" && versions["\(idB) p\(count - 2)"] == "1.2")
        await fleet.close()
    }

    /// An id made before ids were derived from keys (a random UUID) is held by the first key
    /// shipped with it: another file claiming it afterwards is an id conflict. A ledger shipped
    /// before the fleet kept keys gets its key recorded by its next ship.
    @Test func anIDMadeBeforeKeysIsHeldByTheFirstKeyShippedWithIt() async throws {
        let (server, url) = try FleetServer.database()
        let dir = try TemporaryDirectory()
        let legacyID = UUID().uuidString.lowercased()
        func legacy(_ name: String, user: String) throws -> String {
            let path = dir.path(name)
            _ = try Ledger(path: path)
            try DatabaseQueue(path: path).write { try $0.execute(sql: "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", arguments: [legacyID]) }
            try Ledger(path: path).append(contentsOf: [E.product("p1"), E.queued("t1", user: user), E.purchased("t1")])
            return path
        }
        let first = try legacy("first.ledger", user: "u1"), second = try legacy("second.ledger", user: "u2")
        let identity = try #require(try Ledger(path: first).identity())
        #expect(!identity.isProvenByKey && !LedgerIdentity.hasDerivedForm(identity.id))
        #expect(try cli(["verify", first]).status == 0, "an id made before keys is no problem on its own")
        #expect(try cli(["ship", first, "--to", url]).status == 0)
        let conflict = try cli(["ship", second, "--to", url])
        #expect(conflict.status == 1 && conflict.stderr.contains("id conflict"), "\(conflict.stderr)")
        try Ledger(path: first).append(contentsOf: [E.queued("t2", user: "u1"), E.purchased("t2")])
        #expect(try cli(["ship", first, "--to", url]).status == 0)

        let database = String(url.split(separator: "/").last!)
        try server.psql("UPDATE ledgers SET public_key = NULL, head_statement = NULL", database: database)
        #expect(try cli(["ship", first, "--to", url]).status == 0)
        let fleet = try await FleetStore.connect(url)
        let head = try #require(try await fleet.shippedHead(ofLedger: legacyID))
        #expect(head.seq == 5 && head.publicKey == identity.publicKey?.rawRepresentation)
        // The head the fleet holds is signed by the ledger's own key.
        let statement = try #require(try await fleet.fetch("SELECT head_statement FROM ledgers").first?["head_statement"] as String?)
        let checkpoint = try Checkpoint(json: statement)
        let publicKey = try #require(identity.publicKey)
        #expect(checkpoint.seq == 5 && checkpoint.link == head.link && checkpoint.isSigned(by: publicKey))
        try Ledger(path: first).verify(against: checkpoint, publicKey: publicKey)
        await fleet.close()
    }

    /// The fleet as a witness: `verify --against` checks a file against the seq and link the
    /// fleet store holds of it, catching a file put back to an older copy or rewritten with every
    /// link recomputed, which plain `verify` cannot.
    @Test func theFleetWitnessesEachLedgersHistory() throws {
        let (_, url) = try FleetServer.database()
        let dir = try TemporaryDirectory()
        let path = dir.path("device.ledger")
        let ledger = try CheckpointTests.ledger(path, count: 60)
        let older = dir.path("older.ledger")
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.copyItem(atPath: path + suffix, toPath: older + suffix)
        }
        try ledger.append(contentsOf: [E.queued("t-late"), E.purchased("t-late")])
        #expect(try cli(["ship", path, "--to", url]).status == 0)
        let ok = try cli(["verify", path, "--against", url])
        #expect(ok.status == 0 && ok.stdout.contains("extends what the fleet store holds"), "\(ok.stdout) \(ok.stderr)")

        // The older copy put back: the file ends before what the fleet holds.
        #expect(try cli(["verify", older]).status == 0, "on its own, the older copy verifies")
        let rolledBack = try cli(["verify", older, "--against", url])
        #expect(rolledBack.status == 1 && rolledBack.stdout.contains("ends at seq 121, before what the fleet store holds seq 123"), "\(rolledBack.stdout)")

        // Rewritten with every link recomputed, the same id: caught, and ship refuses it too.
        let forged = try CheckpointTests.forge(ledger, to: dir.path("forged.ledger")) { event in
            if case .paymentQueued("t3", let p, let q, _) = event.body { return Event(at: event.at, .paymentQueued(transaction: "t3", product: p, quantity: q, user: "mallory")) }
            return event
        }
        #expect(try forged.verify().isValid)
        let rewritten = try cli(["verify", dir.path("forged.ledger"), "--against", url])
        #expect(rewritten.status == 1 && rewritten.stdout.contains("seq 123") && rewritten.stdout.contains("rewritten"), "\(rewritten.stdout)")
        let reship = try cli(["ship", dir.path("forged.ledger"), "--to", url])
        #expect(reship.status == 1 && reship.stderr.contains("rewritten"), "\(reship.stderr)")

        // A ledger the fleet never saw.
        let unknown = dir.path("unknown.ledger")
        _ = try CheckpointTests.ledger(unknown, count: 2)
        let never = try cli(["verify", unknown, "--against", url])
        #expect(never.status == 1 && never.stdout.contains("never shipped"), "\(never.stdout)")
    }
}

extension LocalPostgres {
    /// Edits the events of the block of ledger `id` holding seq `seq` as a script with the
    /// database would: the block decoded, `edit` applied to its events, and encoded again in
    /// place (links as they were).
    func editEvents(of id: String, containing seq: Int64, database: String, _ edit: (inout [UploadedFrame]) -> Void) throws {
        let row = try psql(
            "SELECT first_seq, last_seq, raw_size, encode(frames, 'hex'), encode(links, 'hex') FROM event_blocks WHERE ledger_id = '\(id)' AND first_seq <= \(seq) AND last_seq >= \(seq)",
            database: database
        ).trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map(String.init)
        try #require(row.count == 5, "one block holds seq \(seq)")
        var events = try FleetBlock.decode(
            firstSeq: Int64(row[0])!, lastSeq: Int64(row[1])!, rawSize: Int64(row[2])!, frames: Hex.decode(row[3])!, links: Hex.decode(row[4])!)
        edit(&events)
        let block = try #require(try FleetBlock.encode(events).first)
        try psql(
            "UPDATE event_blocks SET raw_size = \(block.rawSize), frames = '\\x\(Hex.encode(block.frames))' WHERE ledger_id = '\(id)' AND first_seq = \(row[0])",
            database: database)
    }
}
