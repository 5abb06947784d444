import Foundation
import GRDB
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting
import PostgresNIO

/// One real PostgreSQL server for the fleet tests (Debian's binaries, a temporary folder, a free
/// loopback port), stopped when the test process exits; each test uses a database of its own.
enum FleetServer {
    static let shared: Result<LocalPostgres, any Error> = {
        let result = Result { try LocalPostgres() }
        if case .success = result { atexit { if case .success(let server) = FleetServer.shared { server.stop() } } }
        return result
    }()

    static var available: Bool {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).contains { Int($0) != nil }
    }

    /// A new database's URL: a fleet store (migrated by `purchase-ledger migrate`), or empty.
    static func database(migrated: Bool = true) throws -> (LocalPostgres, String) {
        let server = try shared.get()
        let name = "fleet_" + UUID().uuidString.prefix(8).lowercased()
        try server.createDatabase(name)
        let url = server.url(database: name)
        if migrated {
            let result = try cli(["migrate", url])
            guard result.status == 0 else { throw LocalPostgres.Failure(description: "migrate failed: \(result.stderr)") }
        }
        return (server, url)
    }
}

/// The shared workload split into device ledgers (some users on two devices).
enum FleetFixture {
    static func ledgers(events: Int, devices: Int, in dir: TemporaryDirectory) throws -> [String] {
        let lines = try String(contentsOfFile: try Workload.file(events: events), encoding: .utf8).split(separator: "\n")
        let all = try lines.map { try JSONLines.decode(String($0)) }
        return try DeviceSplit.split(all, devices: devices).enumerated().map { i, log in
            let path = dir.path("device-\(i).ledger")
            _ = try Ledger(path: path).append(contentsOf: log)
            return path
        }
    }

    /// The server's projection rows of ledger `id` equal the ledger's own, row by row and column
    /// by column.
    static func expectSameProjections(_ ledger: Ledger, _ fleet: FleetStore, id: String) async throws {
        for table in Projector.Table.all where FleetStore.perLedgerTables.contains(table.name) {
            let order = table.columns.prefix(table.name == "owned_content" ? 2 : 1).joined(separator: ", ")
            let columns = table.columns.joined(separator: ", ")
            let expected = try ledger.read { db in try Row.fetchAll(db, sql: "SELECT \(columns) FROM \(table.name) ORDER BY \(order)") }
            let actual = try await fleet.fetch(PostgresQuery(unsafeSQL: "SELECT \(columns) FROM \(table.name) WHERE ledger_id = '\(id)'::uuid ORDER BY \(order)"))
            #expect(actual.count == expected.count, "\(table.name)")
            for (a, e) in zip(actual, expected) {
                for column in table.columns {
                    #expect(a[column] as DatabaseValue == e[column] as DatabaseValue, "\(table.name).\(column)")
                }
            }
        }
    }

    static func open(_ paths: [String]) throws -> [(id: String, ledger: Ledger)] {
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        return try paths.map { path in
            let ledger = try Ledger(path: path, configuration: readOnly)
            return (try #require(try ledger.identity()).id, ledger)
        }
    }
}

@Suite(.serialized, .enabled(if: FleetServer.available && Workload.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres) and the workload generator"))
struct FleetTests {
    @Test func everyLedgerGetsAStableIdentityAndOldOnesGetOneOnFirstWritableOpen() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        let created = try #require(try Ledger(path: path).identity())
        #expect(created.origin == "created")
        #expect(UUID(uuidString: created.id) != nil)
        #expect(try Ledger(path: path).identity() == created, "the id never changes")
        #expect(try Ledger(path: dir.path("b.ledger")).identity()?.id != created.id)

        // A ledger made before identities: none read-only, one (said to be assigned) on a writable open.
        try DatabaseQueue(path: path).write { try $0.execute(sql: "DELETE FROM ledger_info WHERE key IN ('ledger_id', 'ledger_id_origin')") }
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        #expect(try Ledger(path: path, configuration: readOnly).identity() == nil)
        let assigned = try #require(try Ledger(path: path).identity())
        #expect(assigned.origin.hasPrefix("assigned on open at "))
        #expect(try Ledger(path: path).identity() == assigned)
    }

    @Test func shippingIsIdempotentSendsOnlyWhatIsNewAndTheServerEqualsTheLedger() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let lines = try String(contentsOfFile: try Workload.file(events: 20_000), encoding: .utf8).split(separator: "\n").prefix(4000)
        let events = try lines.map { try JSONLines.decode(String($0)) }
        let path = dir.path("device.ledger")
        let ledger = try Ledger(path: path)
        _ = try ledger.append(contentsOf: Array(events.prefix(2500)))

        let fleet = try await FleetStore.connect(url, migrate: true)
        let first = try await fleet.ship(ledger)
        #expect(first.shippedEvents == Int(try ledger.lastSeq()) && first.alreadyShipped == 0)
        let again = try await fleet.ship(ledger)
        #expect(again.shippedEvents == 0 && again.lastSeq == first.lastSeq, "shipping again stores nothing")

        _ = try ledger.append(contentsOf: Array(events.dropFirst(2500)))
        let more = try await fleet.ship(ledger)
        let last = try ledger.lastSeq()
        #expect(more.alreadyShipped == first.lastSeq && Int64(more.shippedEvents) == last - first.lastSeq)

        // Every event once, with the ledger's payload bytes and links.
        let id = try #require(try ledger.identity()).id
        let stored = try await fleet.storedEvents(ofLedger: id)
        #expect(stored.map(\.seq) == Array(1...last))
        let local = try ledger.shipment(after: 0, link: nil)
        #expect(stored.map(\.link) == local.events.map(\.link))
        #expect(stored.map(\.payload) == local.events.map(\.payload))
        #expect(stored.map(\.at) == local.events.map(\.event.event.at.nanosecondsSinceEpoch))
        #expect(stored.map(\.recorded) == local.events.map(\.event.recordedAt.nanosecondsSinceEpoch))
        #expect(stored.map(\.version) == local.events.map(\.event.version))
        #expect(stored.map(\.type) == local.events.map(\.event.event.type))
        #expect(stored.map(\.anomaly) == local.events.map(\.event.anomaly))
        #expect(stored.map(\.appendedByLedger) == local.events.map(\.event.appendedByLedger))
        // In blocks of at most 1,024 events, each ship's from where the last one ended, with a
        // link per event.
        let blocks = try await fleet.fetch(
            "SELECT first_seq, last_seq, octet_length(links) AS links FROM event_blocks WHERE ledger_id = \(id)::uuid ORDER BY first_seq")
        #expect(
            blocks.map { $0["first_seq"] as Int64 } == Array(stride(from: 1, through: first.lastSeq, by: 1024)) + Array(stride(from: first.lastSeq + 1, through: last, by: 1024)))
        #expect(blocks.allSatisfy { ($0["last_seq"] as Int64) - ($0["first_seq"] as Int64) < 1024 })
        #expect(blocks.map { $0["links"] as Int64 } == blocks.map { 32 * (($0["last_seq"] as Int64) - ($0["first_seq"] as Int64) + 1) })
        let server = try await fleet.fetch("SELECT last_seq, last_link FROM ledgers WHERE ledger_id = \(id)::uuid")
        #expect(server.first?["last_link"] == Data(local.lastLink))

        try await FleetFixture.expectSameProjections(ledger, fleet, id: id)
        #expect(try await fleet.revenue() == ledger.revenue())
        #expect(try await fleet.purchaseHistory(PurchaseHistoryQuery(limit: .max)).map(\.entry) == ledger.purchaseHistory(PurchaseHistoryQuery(limit: .max)))
        await fleet.close()
    }

    /// The fleet's history gives a transaction's downloads in their order (position), whatever
    /// order the server keeps their rows in: ship stores them in id order, which an index scan
    /// returns them in.
    @Test func aTransactionsDownloadsComeInTheirOrderWhereverTheServerKeepsTheirRows() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let ledger = try Ledger(path: dir.path("device.ledger"))
        _ = try ledger.append(contentsOf: [
            E.product("p1", contents: [("c1", "1.0")]), E.queued("t1", "p1"), E.purchased("t1", downloads: ["d2", "d1"]), E.start("d2"), E.start("d1"),
        ])
        let fleet = try await FleetStore.connect(url)
        _ = try await fleet.ship(ledger)

        let id = try #require(try ledger.identity()).id
        let stored = try await fleet.fetch("SELECT download_id FROM downloads WHERE ledger_id = \(id)::uuid ORDER BY ctid")
        #expect(stored.map { $0["download_id"] as String } == ["d1", "d2"], "the server keeps them out of their order")
        let history = try await fleet.purchaseHistory()
        #expect(history.first?.entry.downloads.map(\.download) == ["d2", "d1"])
        #expect(history.first?.entry.transaction.downloads == ["d2", "d1"])
        #expect(history.map(\.entry) == (try ledger.purchaseHistory()))
        let undelivered = try await fleet.undelivered()
        #expect(undelivered.map(\.entry) == (try ledger.undelivered()) && undelivered.count == 1)
        await fleet.close()
    }

    /// One store shared by tasks: their calls take turns on its connection, so two ships and a
    /// report started together each run whole (two transactions on one connection at once
    /// would interleave their statements).
    @Test func oneStoreSharedByTasksTakesTurns() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        var ledgers: [Ledger] = []
        for i in 0..<4 {
            let ledger = try Ledger(path: dir.path("device-\(i).ledger"))
            try ledger.append(contentsOf: RuleCase.finished)
            ledgers.append(ledger)
        }
        let fleet = try await FleetStore.connect(url, migrate: true)
        let results = try await withThrowingTaskGroup(of: Int.self) { group in
            for ledger in ledgers {
                group.addTask { try await fleet.ship(ledger).shippedEvents }
                group.addTask {
                    _ = try await fleet.revenue()
                    return 0
                }
            }
            var shipped = 0
            for try await n in group { shipped += n }
            return shipped
        }
        #expect(try await fleet.shippedTotals().ledgers == 4)
        #expect(Int64(results) == ledgers.map { try! $0.lastSeq() }.reduce(0, +), "every event shipped once")

        // A query started while another task's transaction is open waits for it to end instead
        // of running inside it (and seeing the transaction's own settings).
        async let held: Void = fleet.run {
            try await fleet.transaction {
                _ = try await fleet.fetch("SET LOCAL application_name = 'held-by-another-task'")
                _ = try await fleet.fetch("SELECT pg_sleep(0.3)")
            }
        }
        try await Task.sleep(for: .milliseconds(100))
        let name: String = try #require(try await fleet.fetch("SELECT current_setting('application_name') AS name").first)["name"]
        try await held
        let inside = name == "held-by-another-task"
        #expect(!inside, "the query ran inside another task's transaction")
        await fleet.close()
    }

    /// Rows go in PostgreSQL's binary COPY format: text that the text format escapes (tabs,
    /// newlines, backslashes, `\N`), non-ASCII text, NULLs, booleans, negative and fractional
    /// numbers arrive as the ledger holds them.
    @Test func awkwardValuesArriveExactlyAsTheLedgerHoldsThem() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let product = #"com.example.tab\there \\N back\\slash"#
        let lines = [
            #"{"type":"productRegistered","at":"2024-03-01T00:00:00.000Z","product":"\#(product)","kind":"nonConsumable","price":"0.99","currency":"EUR","downloadable":true,"contents":[{"content":"c\nline","contentVersion":"1.0","contentLength":10}],"title":"Ünïcødé 🎉 \\N"}"#,
            #"{"type":"paymentQueued","at":"1969-12-31T23:59:59.999Z","transaction":"tx\t1","product":"\#(product)","user":"u-é\\"}"#,
            #"{"type":"transactionPurchased","at":"2024-03-01T00:00:01.000Z","transaction":"tx\t1","storeTransactionId":"\\N","downloads":[{"download":"d\r1","content":"c\nline","contentVersion":"1.0","contentLength":10}]}"#,
            #"{"type":"downloadStarted","at":"2024-03-01T00:00:02.000Z","download":"d\r1"}"#,
            #"{"type":"downloadProgressed","at":"2024-03-01T00:00:03.000Z","download":"d\r1","progress":0.1,"bytesWritten":1,"timeRemaining":-1}"#,
            #"{"type":"downloadFailed","at":"2024-03-01T00:00:04.000Z","download":"d\r1","error":{"domain":"NSURLErrorDomain","code":-1009,"message":"tab\there, quote \" and \\"}}"#,
        ]
        let path = dir.path("awkward.ledger")
        let ledger = try Ledger(path: path)
        _ = try ledger.append(contentsOf: try lines.map { try JSONLines.decode($0) })
        let fleet = try await FleetStore.connect(url, migrate: true)
        #expect(try await fleet.ship(ledger).shippedEvents == lines.count)
        let id = try #require(try ledger.identity()).id
        try await FleetFixture.expectSameProjections(ledger, fleet, id: id)
        let transactions = try await fleet.fetch("SELECT transaction_id, user_id, store_transaction_id FROM transactions")
        #expect(transactions.map { $0["transaction_id"] as String } == ["tx\t1"])
        #expect(transactions.map { $0["user_id"] as String } == ["u-é\\"])
        #expect(transactions.map { $0["store_transaction_id"] as String } == ["\\N"])
        let downloads = try await fleet.fetch("SELECT download_id, progress, error_code, error_message FROM downloads")
        #expect(downloads.map { $0["download_id"] as String } == ["d\r1"])
        #expect(downloads.map { $0["progress"] as Double } == [0.1])
        #expect(downloads.map { $0["error_code"] as Int64 } == [-1009])
        #expect(downloads.map { $0["error_message"] as String } == ["tab\there, quote \" and \\"])
        let products = try await fleet.fetch("SELECT product, title FROM products")
        #expect(products.map { $0["product"] as String } == ["com.example.tab\there \\N back\\slash"])
        #expect(products.map { $0["title"] as String } == ["Ünïcødé 🎉 \\N"])
        let local = try ledger.shipment(after: 0, link: nil)
        let stored = try await fleet.storedEvents(ofLedger: try #require(try ledger.identity()).id)
        #expect(stored.map(\.payload) == local.events.map(\.payload))
        #expect(stored.map(\.at).min() == -1_000_000, "the payment queued a millisecond before 1970")
        await fleet.close()
    }

    @Test func fleetReportsEqualTheSameViewsOverTheDeviceLedgersMerged() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let paths = try FleetFixture.ledgers(events: 20_000, devices: 12, in: dir)
        let shipped = try cli(["ship"] + paths + ["--to", url, "--json"])
        #expect(shipped.status == 0, "\(shipped.stderr)")
        let ledgers = try FleetFixture.open(paths)
        let fleet = try await FleetStore.connect(url)

        // History: every transaction of every device, in the single ledger's order.
        func historyKey(_ id: String, _ e: PurchaseHistoryEntry) -> Key {
            Key(time: (e.transaction.purchasedAt ?? e.transaction.queuedAt)?.nanosecondsSinceEpoch, id: e.transaction.transaction, ledger: id)
        }
        let history = try ledgers.flatMap { id, ledger in try ledger.purchaseHistory(PurchaseHistoryQuery(limit: .max)).map { (id, $0) } }
            .sorted { historyKey($0.0, $0.1) < historyKey($1.0, $1.1) }
        let fleetHistory = try await fleet.purchaseHistory(PurchaseHistoryQuery(limit: .max))
        #expect(fleetHistory.count == history.count && history.count > 500)
        #expect(fleetHistory.map(\.ledgerID) == history.map(\.0))
        #expect(fleetHistory.map(\.entry) == history.map(\.1))

        // One user's history across their two devices.
        let twoDevices = Dictionary(grouping: history.filter { $0.1.transaction.user != nil }, by: { $0.1.transaction.user! })
            .filter { Set($0.value.map(\.0)).count == 2 }
        let (user, entries) = try #require(twoDevices.max { $0.value.count < $1.value.count })
        let userHistory = try await fleet.purchaseHistory(PurchaseHistoryQuery(user: user, limit: .max))
        #expect(userHistory.map(\.entry) == entries.map(\.1) && Set(userHistory.map(\.ledgerID)).count == 2)
        let filtered = PurchaseHistoryQuery(
            product: history[history.count / 2].1.transaction.product,
            from: try Timestamp.parse("2024-03-05T00:00:00Z"), to: try Timestamp.parse("2024-03-20T00:00:00Z"),
            kinds: [.nonConsumable, .consumable], limit: .max)
        #expect(
            try await fleet.purchaseHistory(filtered).map(\.entry)
                == ledgers.flatMap { id, l in try l.purchaseHistory(filtered).map { (id, $0) } }.sorted { historyKey($0.0, $0.1) < historyKey($1.0, $1.1) }.map(\.1))

        // Revenue, plain and by month: figure by figure.
        for groupBy in [nil, RevenuePeriod.month, .week] {
            var merged: [String: RevenueLine] = [:]
            for (_, ledger) in ledgers {
                for line in try ledger.revenue(groupBy: groupBy) {
                    let key = [line.period ?? "", line.product, line.currency, line.price].joined(separator: "|")
                    var m =
                        merged[key]
                        ?? RevenueLine(
                            period: line.period, product: line.product, currency: line.currency, price: line.price,
                            purchases: 0, units: 0, refundedUnits: 0, gross: 0, refunds: 0)
                    m.add(line)
                    merged[key] = m
                }
            }
            let lines = try await fleet.revenue(groupBy: groupBy)
            #expect(Set(lines) == Set(merged.values) && lines.count == merged.count, "revenue by \(String(describing: groupBy))")
            #expect(RevenueTotal.totals(of: lines) == RevenueTotal.totals(of: Array(merged.values)))
        }

        // Undelivered, stuck, unfinished.
        let undelivered = try ledgers.flatMap { id, l in try l.undelivered(limit: .max).map { (id, $0) } }
            .sorted {
                Key(time: $0.1.transaction.purchasedAt?.nanosecondsSinceEpoch, id: $0.1.transaction.transaction, ledger: $0.0)
                    < Key(time: $1.1.transaction.purchasedAt?.nanosecondsSinceEpoch, id: $1.1.transaction.transaction, ledger: $1.0)
            }
        let fleetUndelivered = try await fleet.undelivered(limit: 1_000_000)
        #expect(fleetUndelivered.map(\.entry) == undelivered.map(\.1) && !undelivered.isEmpty)

        let asOf = try ledgers.compactMap { _, l in try l.downloads().compactMap(\.lastActivityAt).max() }.max()
        let stuck = try ledgers.flatMap { id, l in try l.stuckDownloads(idle: .seconds(600), asOf: asOf).map { (id, $0) } }
            .sorted {
                Key(time: $0.1.lastActivityAt?.nanosecondsSinceEpoch, id: $0.1.download, ledger: $0.0)
                    < Key(time: $1.1.lastActivityAt?.nanosecondsSinceEpoch, id: $1.1.download, ledger: $1.0)
            }
        let fleetStuck = try await fleet.stuckDownloads(idle: .seconds(600))
        #expect(fleetStuck.map(\.download) == stuck.map(\.1) && fleetStuck.map(\.ledgerID) == stuck.map(\.0))

        let unfinished = try ledgers.flatMap { id, l in try l.unfinishedTransactions().map { (id, $0) } }
            .sorted {
                Key(time: ($0.1.purchasedAt ?? $0.1.failedAt)?.nanosecondsSinceEpoch, id: $0.1.transaction, ledger: $0.0)
                    < Key(time: ($1.1.purchasedAt ?? $1.1.failedAt)?.nanosecondsSinceEpoch, id: $1.1.transaction, ledger: $1.0)
            }
        let fleetUnfinished = try await fleet.unfinishedTransactions()
        #expect(fleetUnfinished.map(\.transaction) == unfinished.map(\.1) && !unfinished.isEmpty)

        // Failures: counts summed, shares of the fleet's final transactions.
        var counts: [String: (FailureRate, Int)] = [:]
        for (_, ledger) in ledgers {
            for rate in try ledger.failureRates() {
                let key = "\(rate.domain) \(rate.code)"
                let previous = counts[key]
                var merged = previous?.0 ?? rate
                merged.message = min(previous?.0.message ?? rate.message, rate.message)
                counts[key] = (merged, (previous?.1 ?? 0) + rate.count)
            }
        }
        let finals = history.filter { $0.1.transaction.state == .purchased || $0.1.transaction.state == .failed }.count
        let rates = try await fleet.failureRates()
        #expect(rates.count == counts.count && !rates.isEmpty)
        for rate in rates {
            let expected = try #require(counts["\(rate.domain) \(rate.code)"])
            #expect(rate.count == expected.1 && rate.message == expected.0.message)
            #expect(abs(rate.share - Double(expected.1) / Double(finals)) < 1e-12)
        }
        #expect(rates.map(\.count) == rates.map(\.count).sorted(by: >))

        // The CLI prints the same views, with the device column.
        let csv = try cli(["report", url, "--view", "unfinished", "--format", "csv"])
        #expect(csv.status == 0 && csv.stdout.hasPrefix("device,transaction,"))
        #expect(csv.stdout.split(separator: "\n").count == unfinished.count + 1)
        let html = try cli(["report", url, "--view", "revenue", "--format", "html"])
        #expect(html.status == 0 && html.stdout.contains("<svg") && html.stdout.contains("the fleet store"))
        await fleet.close()
    }

    @Test func aTamperedOrRewrittenLedgerIsRefusedWithItsSeqAndTheOthersStillShip() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let paths = try FleetFixture.ledgers(events: 20_000, devices: 3, in: dir)

        // A flipped byte inside a sealed block of the second ledger.
        let tampered = paths[1]
        try Self.flipAByte(inABlockOf: tampered)
        let result = try cli(["ship"] + paths + ["--to", url])
        #expect(result.status == 1, "one ledger failed: \(result.stdout) \(result.stderr)")
        #expect(result.stderr.contains(tampered) && result.stderr.contains("seq "))
        #expect(result.stdout.contains("2 of 3 ledgers shipped"))
        let fleet = try await FleetStore.connect(url)
        let ids = try FleetFixture.open(paths).map(\.id)
        let held = try await fleet.fetch("SELECT ledger_id::text AS id, count(*) AS n FROM event_blocks GROUP BY 1")
        #expect(Set(held.map { $0["id"] as String }) == [ids[0], ids[2]], "nothing of the tampered ledger")
        #expect(try await fleet.fetch("SELECT 1 FROM transactions WHERE ledger_id = \(ids[1])::uuid").isEmpty)

        // Another file given a shipped ledger's id: an id conflict (its key does not derive the
        // id), and the server keeps what it had. (A rewrite by someone holding the file and its
        // key is refused as rewritten: FleetProductionTests.theFleetWitnessesEachLedgersHistory.)
        let other = dir.path("rewritten.ledger")
        _ = try Ledger(path: other).append(contentsOf: try sampleLog.split(separator: "\n").map { try JSONLines.decode(String($0)) })
        try Self.setLedgerID(of: other, to: ids[0])
        let before = try await fleet.counts()
        let rewritten = try cli(["ship", other, "--to", url, "--json"])
        #expect(rewritten.status == 1)
        #expect(rewritten.stdout.contains("id conflict") && rewritten.stdout.contains(ids[0]), "\(rewritten.stdout)")
        #expect(try await fleet.counts() == before)
        await fleet.close()
    }

    static func flipAByte(inABlockOf path: String) throws {
        let queue = try DatabaseQueue(path: path)
        try queue.write { db in
            let (first, data) = try #require(
                try Row.fetchOne(db, sql: "SELECT first_seq, data FROM event_blocks ORDER BY first_seq LIMIT 1 OFFSET 2")
                    .map { ($0[0] as Int64, $0[1] as Data) })
            var bytes = [UInt8](data)
            bytes[bytes.count / 2] ^= 0x10
            try db.execute(sql: "UPDATE event_blocks SET data = ? WHERE first_seq = ?", arguments: [Data(bytes), first])
        }
    }

    static func setLedgerID(of path: String, to id: String) throws {
        try DatabaseQueue(path: path).write { try $0.execute(sql: "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", arguments: [id]) }
    }

    @Test func badServersGiveClearErrorsAndExitStatus3() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        _ = try Ledger(path: path).append(Event(at: Timestamp.parse("2024-03-01T00:00:00Z"), .restoreStarted(user: "u1")))
        let (server, url) = try FleetServer.database(migrated: false)

        let unreachable = try cli(["ship", path, "--to", "postgres://postgres@127.0.0.1:1/fleet"])
        #expect(unreachable.status == 3 && unreachable.stderr.contains("cannot reach PostgreSQL"), "\(unreachable.stderr)")
        let wrongPassword = try cli(["ship", path, "--to", url.replacingOccurrences(of: server.password, with: "wrong")])
        #expect(wrongPassword.status == 3 && wrongPassword.stderr.contains("refused the credentials"), "\(wrongPassword.stderr)")
        let noDatabase = try cli(["report", server.url(database: "missing_db"), "--view", "revenue"])
        #expect(noDatabase.status == 3 && noDatabase.stderr.contains("missing_db"), "\(noDatabase.stderr)")

        // Not a fleet store yet: a report or a ship on an empty database says to migrate, and
        // writes nothing; migrate refuses someone else's tables.
        for command in [["report", url, "--view", "revenue"], ["ship", path, "--to", url]] {
            let empty = try cli(command)
            #expect(empty.status == 3 && empty.stderr.contains("not a purchase-ledger fleet store yet") && empty.stderr.contains("purchase-ledger migrate"), "\(empty.stderr)")
        }
        let database = String(url.split(separator: "/").last!)
        #expect(try server.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", database: database).trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        let name = "other_" + UUID().uuidString.prefix(6).lowercased()
        try server.createDatabase(name)
        try server.psql("CREATE TABLE invoices (id int)", database: name)
        let foreign = try cli(["migrate", server.url(database: name)])
        #expect(foreign.status == 3 && foreign.stderr.contains("not a purchase-ledger fleet store"), "\(foreign.stderr)")
        #expect(try server.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", database: name).trimmingCharacters(in: .whitespacesAndNewlines) == "1")

        // Migrated (twice: the second applies nothing), then a store migrated by a newer version.
        let migrated = try cli(["migrate", url])
        #expect(migrated.status == 0 && migrated.stdout.contains("applied"), "\(migrated.stdout) \(migrated.stderr)")
        let again = try cli(["migrate", url])
        #expect(again.status == 0 && again.stdout.contains("up to date"), "\(again.stdout)")
        #expect(try cli(["ship", path, "--to", url]).status == 0)
        try server.psql("INSERT INTO fleet_migrations (name) VALUES ('9999_from_the_future')", database: database)
        let newer = try cli(["report", url, "--view", "revenue"])
        #expect(newer.status == 3 && newer.stderr.contains("newer purchase-ledger"), "\(newer.stderr)")
    }

    /// The fleet audit replays every ledger's stored events and compares the store's rows with
    /// the replay's, table by table: a clean store gives no problem; a value, a row removed or
    /// added, a personal value emptied, a transaction moved to another user, or a catalog copy
    /// changed in the store is named with its ledger, table, row and column.
    @Test func theFleetAuditComparesEveryLedgersRowsWithAReplayOfItsEvents() async throws {
        let dir = try TemporaryDirectory()
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let paths = try FleetFixture.ledgers(events: 20_000, devices: 6, in: dir)
        #expect(try cli(["ship"] + paths + ["--to", url]).status == 0)
        let fleet = try await FleetStore.connect(url)
        let problems = Locked<[FleetAuditProblem]>([])
        let clean = try await fleet.audit { problem in problems.withLock { $0.append(problem) } }
        #expect(clean.problems == 0 && clean.projectionsCompared == 6 && clean.ledgers == 6, "\(problems.withLock { $0 })")
        let ids = try FleetFixture.open(paths).map(\.id)

        // Ledger by ledger, one change each.
        func one(_ table: String, _ ledger: String, where condition: String = "TRUE") -> String {
            let key = table == "owned_content_history" ? "seq" : (table == "downloads" ? "download_id" : "transaction_id")
            return "\(key) = (SELECT min(\(key)) FROM \(table) WHERE ledger_id = '\(ledger)' AND \(condition))"
        }
        let moved = try server.psql(
            """
            SELECT t.transaction_id FROM transactions t
            WHERE t.ledger_id = '\(ids[4])' AND t.user_id IN (
                SELECT user_id FROM transactions WHERE ledger_id = '\(ids[4])' GROUP BY 1 HAVING count(*) > 1)
            ORDER BY 1 LIMIT 1
            """, database: database
        ).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!moved.isEmpty)
        try server.psql(
            """
            UPDATE transactions SET quantity = quantity + 1 WHERE ledger_id = '\(ids[0])' AND \(one("transactions", ids[0]));
            DELETE FROM downloads WHERE ledger_id = '\(ids[1])' AND \(one("downloads", ids[1]));
            INSERT INTO owned_content_history (ledger_id, seq, download_id, destination, copied_at_ms)
                SELECT ledger_id, seq + 1000000, download_id, destination, copied_at_ms FROM owned_content_history
                WHERE ledger_id = '\(ids[2])' AND \(one("owned_content_history", ids[2]));
            UPDATE downloads SET destination = NULL WHERE ledger_id = '\(ids[3])' AND \(one("downloads", ids[3], where: "destination IS NOT NULL"));
            UPDATE transactions SET user_id = 'u-99999' WHERE ledger_id = '\(ids[4])' AND transaction_id = '\(moved)';
            UPDATE transactions SET product_price = '0.00' WHERE ledger_id = '\(ids[5])' AND \(one("transactions", ids[5], where: "product_price IS NOT NULL"));
            """, database: database)
        problems.withLock { $0 = [] }
        let audit = try await fleet.audit { problem in problems.withLock { $0.append(problem) } }
        await fleet.close()
        let found = problems.withLock { $0 }
        func says(_ ledger: String, _ texts: String...) -> Bool {
            found.contains { $0.ledgerID == ledger && texts.allSatisfy($0.message.contains) }
        }
        #expect(audit.problems == 6, "\(found)")
        #expect(says(ids[0], "transactions row", "quantity is", "in a replay of the ledger's events"), "\(found)")
        #expect(says(ids[1], "downloads has no row"), "\(found)")
        #expect(says(ids[2], "owned_content_history holds a row"), "\(found)")
        #expect(says(ids[3], "destination is empty in the store"), "\(found)")
        #expect(says(ids[4], "user_id does not group the transactions"), "\(found)")
        #expect(says(ids[5], "product_price is \"0.00\" in the store"), "\(found)")
        let shown = try cli(["verify", url])
        #expect(shown.status == 1 && shown.stdout.contains("6 problems"), "\(shown.stdout)")
    }

    @Test func shipKilledAtRandomMomentsThenRunAgainStoresEveryEventExactlyOnce() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let lines = try String(contentsOfFile: try Workload.file(events: 20_000), encoding: .utf8).split(separator: "\n")
        let devices = GrowingDevices(events: try lines.map { try JSONLines.decode(String($0)) }, devices: 8, rounds: 7, directory: dir.path(""))
        let paths = devices.paths
        let kills = try ShipKiller.run(binary: binary, paths: paths, url: url, kills: 6, maxDelay: 0.8, before: devices.grow)
        #expect(kills.killed > 0)
        try devices.grow(6)
        let final = try cli(["ship"] + paths + ["--to", url])
        #expect(final.status == 0, "\(final.stderr)")
        try await ShipKiller.check(paths: paths, url: url)
        let audit = try cli(["verify", url])
        #expect(audit.status == 0 && audit.stdout.contains("ok: 8 ledgers"), "after the kills, the audit finds nothing: \(audit.stdout)")
    }
}

/// A sort key: time (nil first, as SQLite and the fleet's NULLS FIRST sort it), then id, then ledger.
struct Key: Comparable {
    var time: Int64?
    var id: String
    var ledger: String
    static func < (a: Key, b: Key) -> Bool {
        if a.time != b.time { return (a.time ?? .min) < (b.time ?? .min) }
        if a.id != b.id { return Array(a.id.utf8).lexicographicallyPrecedes(Array(b.id.utf8)) }
        return a.ledger < b.ledger
    }
}
