import Foundation
import PurchaseLedger
import PurchaseLedgerTesting

// ledger-bench signed WORKLOAD [--runs N] [--out SIGNED.jsonl]
//
// What Apple's signature costs a ledger (#50): the workload as it is, and the same workload with
// every purchase and restore carrying a StoreKit-shaped signed transaction (one chain made here,
// a payload of Apple's usual size: ids, dates, storefront, price, device verification), each
// imported into a fresh ledger, alternated. Prints the file size of each (after a checkpoint), the
// bytes each signed purchase adds, and both imports' speed.

/// The workload's events with a signed transaction on every purchase and restore that agrees
/// with the event (its product, quantity, price, storefront, environment, ownership).
func signedWorkload(_ events: [Event], chain: SigningChain) throws -> (events: [Event], signed: Int) {
    var products: [String: (product: String, quantity: Int)] = [:]
    var catalog: [String: (price: String, currency: String)] = [:]
    var generator = SystemRandomNumberGenerator()
    var signedCount = 0
    var storeID: Int64 = 2_000_000_000_000_000
    func milliunits(_ decimal: String) -> Int64 {
        let parts = decimal.split(separator: ".", maxSplits: 1)
        let whole = Int64(parts[0]) ?? 0
        var fraction = parts.count > 1 ? String(parts[1].prefix(3)) : ""
        fraction += String(repeating: "0", count: 3 - fraction.count)
        return whole * 1000 + (Int64(fraction) ?? 0)
    }
    func payload(_ e: Event, store: String?, product: String, quantity: Int, terms: PurchaseTerms, original: String?) -> (String, [String: any Sendable]) {
        storeID += 1
        let id = store ?? String(storeID)
        let at = e.at.nanosecondsSinceEpoch / 1_000_000
        let paid = terms.price.map { ($0, terms.currency!) } ?? catalog[product]
        let device = (0..<48).map { _ in UInt8.random(in: 0...255, using: &generator) }
        var p: [String: any Sendable] = [
            "transactionId": id, "originalTransactionId": original ?? id, "bundleId": "com.example.purchase-ledger",
            "productId": product, "purchaseDate": at - 1200, "originalPurchaseDate": at - 1200, "quantity": quantity, "type": "Non-Consumable",
            "inAppOwnershipType": terms.ownership == .familyShared ? "FAMILY_SHARED" : "PURCHASED", "signedDate": at,
            "environment": terms.environment == .sandbox ? "Sandbox" : terms.environment == .xcode ? "Xcode" : "Production",
            "transactionReason": "PURCHASE", "storefront": terms.storefront ?? "USA", "storefrontId": "143441",
            "appTransactionId": String(704_000_000_000_000_000 + storeID % 1_000_000), "deviceVerification": Data(device).base64EncodedString(),
            "deviceVerificationNonce": UUID().uuidString.lowercased(),
        ]
        if let paid {
            p["price"] = milliunits(paid.0)
            p["currency"] = paid.1
        }
        if let offer = terms.offer {
            p["offerType"] =
                switch offer.type {
                case .introductory: 1
                case .promotional: 2
                case .code: 3
                case .winBack: 4
                }
        }
        return (id, p)
    }
    var out: [Event] = []
    out.reserveCapacity(events.count)
    var storeIDs: [String: String] = [:]
    for var e in events {
        switch e.body {
        case .productRegistered(let r):
            catalog[r.product] = (r.price, r.currency)
        case .paymentQueued(let t, let product, let quantity, _):
            products[t] = (product, quantity)
        case .transactionPurchased(let t, let product, let user, let store, let downloads, var terms):
            guard let product = product ?? products[t]?.product else { break }
            let (id, p) = payload(e, store: store, product: product, quantity: products[t]?.quantity ?? 1, terms: terms, original: nil)
            terms.signedTransaction = try chain.sign(p)
            storeIDs[t] = id
            e.body = .transactionPurchased(transaction: t, product: e.body.product, user: user, storeTransactionId: id, downloads: downloads, terms: terms)
            signedCount += 1
        case .transactionRestored(let t, let original, let product, let user, let store, let downloads, var terms):
            let (id, p) = payload(e, store: store, product: product, quantity: 1, terms: terms, original: storeIDs[original])
            terms.signedTransaction = try chain.sign(p)
            storeIDs[t] = id
            e.body = .transactionRestored(
                transaction: t, originalTransaction: original, product: product, user: user, storeTransactionId: id, downloads: downloads,
                terms: terms)
            signedCount += 1
        default:
            break
        }
        out.append(e)
    }
    return (out, signedCount)
}

extension EventBody {
    /// A purchase's own product field (nil when it leaves it to its queued payment).
    fileprivate var product: String? {
        if case .transactionPurchased(_, let product, _, _, _, _) = self { product } else { nil }
    }
}

func signedFigures(workload: String, runs: Int, out: String?) throws {
    let input = try JSONLinesInput(bytes: Array(try Data(contentsOf: URL(fileURLWithPath: workload))))
    let chain = try SigningChain()
    let (signedEvents, signedCount) = try signedWorkload(input.events, chain: chain)
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-bench-signed-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let signedPath = out ?? scratch + "/signed.jsonl"
    try (signedEvents.map { JSONLines.encode($0) }.joined(separator: "\n") + "\n").write(toFile: signedPath, atomically: true, encoding: .utf8)
    // The chain's root, so that `--apple-root` can trust it (DER).
    try Data(chain.root).write(to: URL(fileURLWithPath: signedPath + ".root.der"))
    print("\(input.events.count) events, \(signedCount) purchases and restores signed (one chain, root in \(signedPath).root.der); signed workload: \(signedPath)")
    var sizes: [String: [Double]] = [:]
    var speeds: [String: [Double]] = [:]
    for round in 0..<runs {
        for (name, path) in [("unsigned", workload), ("signed", signedPath)] {
            let ledgerPath = scratch + "/\(name)-\(round).ledger"
            remove(ledgerPath)
            let ledger = try Ledger(path: ledgerPath, configuration: configuration())
            let (summary, seconds) = try time { try ledger.importJSONLines(from: try JSONLinesReader(path: path)) }
            try ledger.checkpoint()
            let bytes = Double((try FileManager.default.attributesOfItem(atPath: ledgerPath)[.size] as? Int) ?? 0)
            sizes[name, default: []].append(bytes)
            speeds[name, default: []].append(Double(summary.stored) / seconds)
            print("  round \(round + 1) \(name): \(Int(bytes)) bytes, \(Int(Double(summary.stored) / seconds)) events/s, anomalies \(summary.anomalies)")
            remove(ledgerPath)
        }
    }
    func median(_ v: [Double]) -> Double { let s = v.sorted(); return s[s.count / 2] }
    let added = (median(sizes["signed"]!) - median(sizes["unsigned"]!)) / Double(max(signedCount, 1))
    print(
        String(
            format: "file: unsigned median %.0f bytes, signed median %.0f bytes: %.0f bytes per signed purchase or restore", median(sizes["unsigned"]!), median(sizes["signed"]!),
            added))
    print(String(format: "import: unsigned median %.0f events/s, signed median %.0f events/s", median(speeds["unsigned"]!), median(speeds["signed"]!)))
    // What each signed purchase adds to the import, against the machine's ES256 verify ceiling
    // (OpenSSL's, one core, measured now).
    let events = Double(input.events.count)
    let signedSeconds = events / median(speeds["signed"]!)
    let perSigned = (signedSeconds - events / median(speeds["unsigned"]!)) / Double(max(signedCount, 1))
    let ceiling = opensslVerifiesPerSecond()
    print(
        String(
            format:
                "signed purchases: %.1f us more each (%.0f per second of the time they add); openssl speed ecdsap256: %.0f verify/s, so %.2fx of it; over the whole import %.0f signed purchases/s (%.2fx)",
            perSigned * 1e6, 1 / perSigned, ceiling, (1 / perSigned) / ceiling, Double(signedCount) / signedSeconds,
            Double(signedCount) / signedSeconds / ceiling))
}

/// `openssl speed -seconds 3 ecdsap256`'s verifications per second (0 when openssl is missing).
func opensslVerifiesPerSecond() -> Double {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["openssl", "speed", "-seconds", "3", "ecdsap256"]
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    guard (try? process.run()) != nil else { return 0 }
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    process.waitUntilExit()
    // "256 bits ecdsa (nistp256)   0.0000s   0.0001s  49927.6  16319.3": the last number.
    guard let line = output.split(separator: "\n").last(where: { $0.contains("nistp256") }), let value = line.split(separator: " ").last else { return 0 }
    return Double(value) ?? 0
}
