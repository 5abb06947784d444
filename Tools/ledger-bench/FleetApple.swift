import Foundation
import PostgresNIO
import PurchaseLedger
import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting
import PurchaseLedgerTesting

// ledger-bench fleet-apple WORKLOAD [--ledgers N] [--apple M] [--runs R] [--binary PATH]
//
// Apple's record beside a fleet (#51): the workload split into N device ledgers shipped into a
// PostgreSQL started here, then M of Apple's signed transactions (a chain made here) stored with
// `importApple`: most state what a device recorded, 1 in 100 a refund the device never saw, 1 in
// 100 another price, 1 in 20 a charge no device recorded, and 500 users' complete histories.
// Prints the import's verify rate against `openssl speed -seconds 3 ecdsap256` (measured in the
// same run), the CLI's `apple-import` of 20,000 documents into a ledger file (whole process),
// and the CLI's `report URL --view divergence` (whole process: wall time and peak memory).

func fleetAppleBenchmark(workload: String, ledgers count: Int, apple: Int, runs: Int, binary: String) throws {
    let (scratch, paths) = try deviceLedgers(workload: workload, count: count)
    let server = try LocalPostgres(durable: true)
    let keep = ProcessInfo.processInfo.environment["FLEET_APPLE_KEEP"] != nil
    defer {
        if keep {
            print("server kept running for more runs (FLEET_APPLE_KEEP): \(server.url(database: "fleet")); stop it with: kill $(head -1 \(server.directory)/data/postmaster.pid)")
        } else {
            server.stop()
        }
    }
    try server.createDatabase("fleet")
    let url = server.url(database: "fleet")
    let (_, shipSeconds) = try time {
        try blocking {
            let fleet = try await FleetStore.connect(url, migrate: true)
            let outcomes = try await fleet.ship(paths: paths, batchSize: 64, connections: 2)
            await fleet.close()
            for outcome in outcomes { _ = try outcome.result.get() }
        }
    }
    print(String(format: "shipped %d ledgers in %.1f s", paths.count, shipSeconds))

    // The devices' purchases, as Apple would state them.
    struct Purchase {
        var user: String, store: String, product: String, price: String?, currency: String?, at: Int64, environment: String?, ownership: String?
        var consumable: Bool
    }
    let purchases: [Purchase] = try blocking {
        let fleet = try await FleetStore.connect(url)
        let rows = try await fleet.fetchRows(
            PostgresQuery(
                unsafeSQL: """
                    SELECT user_id, store_transaction_id, product, price, currency, purchased_at_ms, environment, ownership, product_kind
                    FROM transactions WHERE state IN ('purchased', 'restored') AND store_transaction_id IS NOT NULL AND user_id IS NOT NULL
                    ORDER BY store_transaction_id
                    """))
        await fleet.close()
        return rows.map {
            Purchase(
                user: $0["user_id"]?.string ?? "", store: $0["store_transaction_id"]?.string ?? "", product: $0["product"]?.string ?? "",
                price: $0["price"]?.string, currency: $0["currency"]?.string, at: $0["purchased_at_ms"]?.int64 ?? 0,
                environment: $0["environment"]?.string, ownership: $0["ownership"]?.string, consumable: $0["product_kind"]?.string == "consumable")
        }
    }
    let chain = try SigningChain()
    func milliunits(_ decimal: String?) -> Int64 {
        guard let decimal else { return 0 }
        let parts = decimal.split(separator: ".", maxSplits: 1)
        var fraction = parts.count > 1 ? String(parts[1].prefix(3)) : ""
        fraction += String(repeating: "0", count: 3 - fraction.count)
        return (Int64(parts[0]) ?? 0) * 1000 + (Int64(fraction) ?? 0)
    }
    let charged = apple / 20
    let stated = min(purchases.count, apple - charged)
    var byUser: [String: [String]] = [:]
    var info: [String] = []
    var refunds = 0, prices = 0
    let (_, signing) = try time {
        for (i, p) in purchases.prefix(stated).enumerated() {
            var payload = SigningChain.payload(
                transaction: p.store, product: p.product, price: milliunits(p.price) + (i % 100 == 7 ? 1000 : 0), currency: p.currency ?? "USD",
                environment: p.environment == "sandbox" ? "Sandbox" : "Production", ownership: p.ownership == "familyShared" ? "FAMILY_SHARED" : "PURCHASED",
                signedDate: p.at + 86_400_000, revocationDate: i % 100 == 3 ? p.at + 3_600_000 : nil)
            payload["purchaseDate"] = p.at
            payload["type"] = p.consumable ? "Consumable" : "Non-Consumable"
            if i % 100 == 3 { refunds += 1 }
            if i % 100 == 7 { prices += 1 }
            let jws = try chain.sign(payload)
            // Apple's history leaves consumables out once finished: those come as lookups.
            if p.consumable { info.append(jws) } else { byUser[p.user, default: []].append(jws) }
        }
        // Charges no device recorded: each names a recorded purchase of its user as its original.
        for i in 0..<charged {
            let p = purchases[(i * 7919) % stated]
            var payload = SigningChain.payload(
                transaction: "9" + String(i), product: p.product, price: milliunits(p.price), currency: p.currency ?? "USD",
                signedDate: p.at + 86_400_000)
            payload["originalTransactionId"] = p.store
            payload["purchaseDate"] = p.at + 60_000
            info.append(try chain.sign(payload))
        }
    }
    // 500 users' statements as complete histories (one user per import); the rest as transactions' info.
    let historyUsers = Array(byUser.keys.sorted().prefix(500))
    for user in byUser.keys.sorted() where !historyUsers.contains(user) { info += byUser[user]! }
    print(
        String(
            format: "%d purchases shipped; signed %d of Apple's transactions in %.1f s (%d agree or differ: %d refunds, %d prices; %d charges no device recorded)",
            purchases.count, stated + charged, signing, stated, refunds, prices, charged))

    let ceiling = opensslVerifiesPerSecond()
    let roots = try chain.roots
    let (histories, infos) = (byUser, info)
    // Transactions' info in batches of 10,000 documents (Apple's notifications and lookups, as a
    // server collects them), then each history user's pages, one import per user.
    // Verification alone, on the first batch: what the import's other work adds to it.
    let firstBatch = infos.prefix(10_000).map { #"{"signedTransactionInfo":""# + $0 + #""}"# }.joined(separator: "\n")
    let (verifiedCount, verifySeconds) = try time {
        try blocking {
            try await VerifiedAppleDocuments.verify(
                try AppleDocument.parse(Array(firstBatch.utf8), file: "first"), verifier: AppleSignatureVerifier(roots: roots)
            ).signatures
        }
    }
    print(
        String(
            format: "parsing and verifying 10,000 transactions' info alone: %.2f s, %.0f signed transactions/s (%.2fx of openssl's %.0f)", verifySeconds,
            Double(verifiedCount) / verifySeconds, Double(verifiedCount) / verifySeconds / ceiling, ceiling))
    let (bulk, bulkSeconds) = try time {
        try blocking { () -> Int in
            let fleet = try await FleetStore.connect(url)
            var stored = 0
            let verifier = AppleSignatureVerifier(roots: roots)
            var start = 0
            while start < infos.count {
                let batch = infos[start..<min(start + 10_000, infos.count)].map { #"{"signedTransactionInfo":""# + $0 + #""}"# }.joined(separator: "\n")
                stored += try await fleet.importApple(try AppleDocument.parse(Array(batch.utf8), file: "info-\(start)"), verifier: verifier).transactions
                start += 10_000
            }
            await fleet.close()
            return stored
        }
    }
    let (imported, historySeconds) = try time {
        try blocking { () -> AppleImportSummary in
            let fleet = try await FleetStore.connect(url)
            var total = AppleImportSummary()
            let verifier = AppleSignatureVerifier(roots: roots)
            for user in historyUsers {
                let page = #"{"revision":"r-1","hasMore":false,"signedTransactions":["# + histories[user]!.map { "\"\($0)\"" }.joined(separator: ",") + "]}"
                let s = try await fleet.importApple(try AppleDocument.parse(Array(page.utf8), file: "history-\(user)"), verifier: verifier, user: user)
                total.transactions += s.transactions
                total.histories += s.histories
            }
            _ = try await fleet.fetch("VACUUM ANALYZE")
            await fleet.close()
            return total
        }
    }
    let rate = Double(bulk) / bulkSeconds
    print(
        String(
            format:
                "importApple into the fleet, batches of 10,000 transactions' info: %d in %.2f s: %.0f signed transactions/s; openssl speed ecdsap256: %.0f verify/s, so %.2fx of it",
            bulk, bulkSeconds, rate, ceiling, rate / ceiling))
    print(
        String(
            format: "importApple into the fleet, %d users' complete histories (one import each): %d transactions in %.2f s (%.1f ms per user)",
            imported.histories, imported.transactions, historySeconds, historySeconds * 1000 / Double(max(imported.histories, 1))))
    let storedTotal = bulk + imported.transactions

    // The CLI's apple-import of 20,000 documents into a ledger file, whole process.
    let file = scratch + "/apple-info.jsonl", root = scratch + "/apple-root.pem"
    try (info.prefix(20_000).map { #"{"signedTransactionInfo":""# + $0 + #""}"# }.joined(separator: "\n") + "\n").write(
        toFile: file, atomically: true, encoding: .utf8)
    try chain.rootPEM.write(toFile: root, atomically: true, encoding: .utf8)
    var cliRates: [Double] = []
    for run in 0..<runs {
        let ledger = scratch + "/apple-\(run).ledger"
        remove(ledger)
        _ = try Ledger(path: ledger)
        let (seconds, _) = try timedRun([binary, "apple-import", ledger, file, "--apple-root", root, "--user", "u"])
        cliRates.append(Double(min(info.count, 20_000)) / seconds)
        remove(ledger)
    }
    let ceilingAgain = opensslVerifiesPerSecond()
    print(
        String(
            format:
                "purchase-ledger apple-import LEDGER (20,000 documents, whole process): median %.0f signed transactions/s (min %.0f, max %.0f) over %d runs; openssl %.0f verify/s now: %.2fx",
            median(cliRates), cliRates.min()!, cliRates.max()!, runs, ceilingAgain, median(cliRates) / ceilingAgain))

    // The fleet audit, Apple's record checked again with it: one run, whole process.
    do {
        let (printed, _) = try childText(["timed-run", binary, "verify", url, "--apple-root", root])
        let figures = printed.split(separator: " ").compactMap { Double($0) }
        if figures.count == 2 {
            print(
                String(
                    format: "verify URL --apple-root (the fleet audit with Apple's %d records, whole process): %.1f s, peak memory %.0f MB", storedTotal, figures[0],
                    figures[1] / 1024))
        }
    } catch {
        print("verify URL --apple-root: FAILED (\(error)); run it by hand on the kept store (FLEET_APPLE_KEEP=1) to see its problems")
    }
    // The divergence report over the fleet, as a user runs it.
    let rows = try blocking { () -> [Divergence] in
        let fleet = try await FleetStore.connect(url)
        let rows = try await fleet.divergences()
        await fleet.close()
        return rows
    }
    var kinds: [String: Int] = [:]
    for row in rows { kinds[row.kind.rawValue, default: 0] += 1 }
    print("divergence rows: \(rows.count): " + kinds.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
    for format in ["table", "csv", "json"] {
        var seconds: [Double] = [], peaks: [Double] = []
        for _ in 0..<runs {
            let (printed, _) = try childText(["timed-run", binary, "report", url, "--view", "divergence", "--format", format])
            let figures = printed.split(separator: " ").compactMap { Double($0) }
            guard figures.count == 2 else { throw BenchError("timed-run printed \(printed)") }
            seconds.append(figures[0])
            peaks.append(figures[1] / 1024)
        }
        print(
            String(
                format:
                    "report URL --view divergence --format %@ (whole process, %d ledgers, %d Apple transactions): median %.2f s (min %.2f, max %.2f), peak memory %.0f-%.0f MB over %d runs",
                format, paths.count, storedTotal, median(seconds), seconds.min()!, seconds.max()!, peaks.min()!, peaks.max()!, runs))
    }
}
