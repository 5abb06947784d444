import Crypto
import Foundation
import GRDB
import PurchaseLedgerTesting
import Testing
@testable import PurchaseLedger

/// Apple's signed transactions recorded with the events (#50): kept exactly, the certificates
/// once per chain, the personal part packed and erasable, the fields checked against the event.
@Suite struct SignedTransactionLedgerTests {
    static let signedAt: Int64 = 1_780_000_000_000  // 2026-05-28T20:26:40Z

    struct Fixture {
        let chain: SigningChain
        let purchase: String
        let restore: String
        let revocation: String
        let liar: String
        let lines: String

        init() throws {
            let chain = try SigningChain()
            self.chain = chain
            let at = SignedTransactionLedgerTests.signedAt
            purchase = try chain.sign(
                SigningChain.payload(transaction: "2000000001", product: "pack.levels", price: 4990, currency: "USD", signedDate: at))
            restore = try chain.sign(
                SigningChain.payload(
                    transaction: "2000000002", original: "2000000001", product: "pack.levels", price: 4990, currency: "USD", signedDate: at + 60_000))
            revocation = try chain.sign(
                SigningChain.payload(
                    transaction: "2000000001", product: "pack.levels", price: 4990, currency: "USD", signedDate: at + 120_000,
                    revocationDate: at + 110_000))
            // Apple signed 9.99; the device books 0.99.
            liar = try chain.sign(SigningChain.payload(transaction: "2000000003", product: "gems", price: 9990, currency: "USD", signedDate: at))
            lines = """
                {"type":"productRegistered","at":"2026-05-28T20:00:00Z","product":"pack.levels","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":false}
                {"type":"productRegistered","at":"2026-05-28T20:00:00Z","product":"gems","kind":"consumable","price":"9.99","currency":"USD","downloadable":false}
                {"type":"paymentQueued","at":"2026-05-28T20:26:00Z","transaction":"t1","product":"pack.levels","user":"u1"}
                {"type":"transactionPurchased","at":"2026-05-28T20:26:41Z","transaction":"t1","storeTransactionId":"2000000001","price":"4.99","currency":"USD","storefront":"USA","signedTransaction":"\(purchase)"}
                {"type":"transactionFinished","at":"2026-05-28T20:26:42Z","transaction":"t1"}
                {"type":"transactionRestored","at":"2026-05-28T20:27:41Z","transaction":"t2","originalTransaction":"t1","product":"pack.levels","user":"u1","storeTransactionId":"2000000002","signedTransaction":"\(restore)"}
                {"type":"transactionRevoked","at":"2026-05-28T20:28:41Z","transaction":"t1","reason":"refund","signedTransaction":"\(revocation)"}
                {"type":"paymentQueued","at":"2026-05-28T20:26:00Z","transaction":"t3","product":"gems","user":"u2"}
                {"type":"transactionPurchased","at":"2026-05-28T20:26:41Z","transaction":"t3","storeTransactionId":"2000000003","price":"0.99","currency":"USD","signedTransaction":"\(liar)"}

                """
        }

        func ledger(_ dir: TemporaryDirectory, _ name: String = "signed.ledger") throws -> (Ledger, ImportSummary) {
            let input = dir.path(name + ".jsonl")
            try lines.write(toFile: input, atomically: true, encoding: .utf8)
            let ledger = try Ledger(path: dir.path(name), configuration: testConfiguration(blockSize: 4, snapshotInterval: 4))
            return (ledger, try ledger.importJSONLines(from: try JSONLinesReader(path: input)))
        }
    }

    @Test func signedTransactionsAreKeptExactlyWithTheirCertificatesOncePerChain() throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, summary) = try f.ledger(dir)
        #expect(summary.stored == 9 && summary.anomalies == 1, "\(summary)")
        // The library's events, `export` and a replay give back the exact strings.
        var signed: [String: String] = [:]
        var flagged: [Int64] = []
        try ledger.forEachEvent { e in
            if let jws = e.event.body.signedTransaction { signed["\(e.event.type.name) \(e.event.body.transactionID!)"] = jws }
            if e.anomaly == .signedFieldsDiffer { flagged.append(e.seq) }
            return true
        }
        #expect(
            signed == [
                "transactionPurchased t1": f.purchase, "transactionRestored t2": f.restore, "transactionRevoked t1": f.revocation,
                "transactionPurchased t3": f.liar,
            ])
        #expect(flagged == [9])
        let exported = try cli(["export", dir.path("signed.ledger")]).stdout
        for jws in [f.purchase, f.restore, f.revocation, f.liar] { #expect(exported.contains("\"signedTransaction\":\"\(jws)\"")) }
        // Applied as reported (the device's 0.99), and flagged: never silently trusted.
        let liar = try #require(try ledger.transaction("t3"))
        #expect(liar.state == .purchased && liar.paid.price == "0.99")
        // One header row for one chain; the four bodies packed (0xFF, then the format byte).
        let (headers, packed) = try DatabaseQueue(path: dir.path("signed.ledger")).read { db in
            (
                try Int.fetchOne(db, sql: "SELECT count(*) FROM signing_headers"),
                // (Rows or sealed in blocks, migration 0010.)
                try PersonalValueRow.read(db, introducedBy: nil).filter { $0.value.starts(with: [0xFF, 0x01]) }.count
            )
        }
        #expect(headers == 1 && packed == 4)
        #expect(try ledger.verify(all: true).isValid)
        // A second import of the same chain into another ledger stores its header once as well,
        // and an export imports again to the same events.
        let again = dir.path("again.jsonl")
        try exported.write(toFile: again, atomically: true, encoding: .utf8)
        let copy = try Ledger(path: dir.path("copy.ledger"))
        #expect(try copy.importJSONLines(from: try JSONLinesReader(path: again)).stored == 9)
        #expect(try cli(["export", dir.path("copy.ledger")]).stdout == exported)
    }

    @Test func aMalformedSignedTransactionIsRefusedNamingTheLineAndNothingIsWritten() throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let seq = try ledger.lastSeq()
        let cases: [(String, String)] = [
            ("abc.def", "three base64url parts"),
            ("e30.e30.AAAA", "header has no alg"),
            (f.purchase.replacingOccurrences(of: ".", with: ".=", options: [], range: nil), "base64url"),
            (f.purchase + "x", "signature is not base64url"),
        ]
        for (jws, reason) in cases {
            let input = dir.path("bad.jsonl")
            try """
            {"type":"paymentQueued","at":"2026-05-28T20:30:00Z","transaction":"t9","product":"gems","user":"u1"}
            {"type":"transactionPurchased","at":"2026-05-28T20:30:01Z","transaction":"t9","signedTransaction":"\(jws)"}

            """.write(toFile: input, atomically: true, encoding: .utf8)
            do {
                _ = try ledger.importJSONLines(from: try JSONLinesReader(path: input))
                Issue.record("accepted \(jws.prefix(20))")
            } catch let error as LedgerError {
                #expect(error.code == .malformedInput, "\(error)")
                let text = "\(error)"
                #expect(text.contains("line 2") && text.contains("signedTransaction") && text.contains(reason), "\(text)")
            }
            #expect(try ledger.lastSeq() == seq, "nothing written")
        }
    }

    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard needle.count <= haystack.count else { return false }
        return (0...(haystack.count - needle.count)).contains { haystack[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    @Test func forgetErasesTheSignedBodyAndVerifyNamesAnEditedHeader() throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let path = dir.path("signed.ledger")
        _ = try ledger.forget(user: "u2")
        // The liar's body is gone from the file and its WAL; the flag it earned stands.
        try DatabaseQueue(path: path).writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
        // Its signature is stored as raw bytes: none of them may be left.
        let bytes = try ErasureTests.bytes(path)
        let signature = try #require(Base64URL.decode(try SignedTransaction.parts(ofJWS: f.liar).signature))
        #expect(signature.count == 64 && !Self.contains(bytes, signature))
        let body = String(SignedTransaction.split(jws: f.liar).body)
        let exported = try cli(["export", path]).stdout
        #expect(!exported.contains(body) && exported.contains("\"signedTransaction\":\"[erased "))
        // u1's bodies are still held (and their signatures with them).
        let kept = try #require(Base64URL.decode(try SignedTransaction.parts(ofJWS: f.purchase).signature))
        #expect(Self.contains(bytes, kept))
        var flagged = 0
        try ledger.forEachEvent { e in
            if e.anomaly == .signedFieldsDiffer { flagged += 1 }
            return true
        }
        #expect(flagged == 1)
        let report = try ledger.verify(all: true)
        #expect(report.isValid, "\(report.problems)")
        // The shared header stays (u1's transactions use it); an edit of it is named.
        try DatabaseQueue(path: path).write { db in try db.execute(sql: "UPDATE signing_headers SET header = header || 'x'") }
        let edited = try Ledger(path: path).verify(all: true)
        #expect(edited.problems.contains { $0.message.contains("no longer hashes to its digest") }, "\(edited.problems)")
    }

    /// docs/format.md prints the packing dictionary so that a reader written from the docs can
    /// unpack a body: it must be the code's, byte for byte.
    @Test func theDocsPrintThePackingDictionary() throws {
        let text = try String(contentsOf: packageRoot.appending(path: "docs/format.md"), encoding: .utf8)
        let start = try #require(text.range(of: "<!-- signed dictionary -->\n```\n")), end = try #require(text.range(of: "```\n<!-- end signed dictionary -->"))
        let printed = text[start.upperBound..<end.lowerBound].split(separator: "\n").joined()
        #expect(Array(printed.utf8) == SignedParts.dictionary)
        #expect(text.contains("these \(SignedParts.dictionary.count) bytes"))
        #expect(text.contains("SHA-256 `\(Hex.encode(Array(SHA256.hash(data: SignedParts.dictionary))))`"))
    }

    /// Each transaction's evidence: stored with the ledger as far as no root is needed, and
    /// judged with the roots when read; every level, from real files.
    @Test func eachTransactionsEvidenceIsStoredAndJudgedWithTheRoots() async throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let at = Self.signedAt
        func purchase(_ t: String, _ store: String, environment: StoreEnvironment? = nil, jws: String) -> Event {
            Event(
                at: Timestamp(millisecondsSinceEpoch: at + 1000),
                .transactionPurchased(
                    transaction: t, product: "gems", user: "u3", storeTransactionId: store,
                    terms: PurchaseTerms(environment: environment, signedTransaction: jws)))
        }
        let xcode = try f.chain.sign(
            SigningChain.payload(transaction: "4", product: "gems", price: 9990, currency: "USD", environment: "Xcode", signedDate: at))
        var tampered = try SignedTransaction.parts(
            ofJWS: try f.chain.sign(
                SigningChain.payload(transaction: "2000000005", product: "gems", price: 9990, currency: "USD", signedDate: at)))
        let otherPayload = Base64URL.encode(
            Array(
                try JSONSerialization.data(
                    withJSONObject: SigningChain.payload(transaction: "2000000005", product: "gems", price: 990, currency: "USD", signedDate: at), options: [.sortedKeys])))
        tampered.payload = otherPayload[...]
        let forged = "\(tampered.header).\(tampered.payload).\(tampered.signature)"
        let future = try f.chain.sign(
            SigningChain.payload(transaction: "2000000006", product: "gems", price: 9990, currency: "USD", signedDate: at + 3_600_000))
        try ledger.append(contentsOf: [
            purchase("t4", "4", environment: .xcode, jws: xcode), purchase("t5", "2000000005", jws: forged), purchase("t6", "2000000006", jws: future),
        ])
        let judged = try await ledger.appleEvidence(verifier: AppleSignatureVerifier(roots: try f.chain.roots))
        func level(_ t: String) -> String { judged[t].map { $0.evidence.description } ?? "unsigned" }
        #expect(level("t1") == "apple" && judged["t1"]?.seq == 7, "the revocation's statement is t1's latest")
        #expect(level("t2") == "apple")
        #expect(level("t3") == "invalid: the event states otherwise than its signed transaction: price is 0.99 in the event, 9.99 in its signed transaction")
        #expect(level("t4") == "xcode")
        #expect(level("t5") == "invalid: the signature does not verify with the leaf certificate's key")
        #expect(level("t6").hasPrefix("invalid: signedDate 2026-05-28T21:26:40.000Z is more than ten minutes after"), "\(level("t6"))")
        // Apple's own root does not trust the test chain: its signed transactions are invalid.
        let apple = try await ledger.appleEvidence()
        #expect(apple["t2"]?.evidence.reason?.contains("does not validate") == true, "\(String(describing: apple["t2"]))")
        #expect(apple["t4"]?.evidence == .xcode)
        #expect(try ledger.verify(all: true).isValid)
    }

    /// `rebuild` makes the evidence rows again from the log; `verify` checks every signature
    /// again and names a row edited to say `signed` over a forged signature, with its seq.
    @Test func rebuildRemakesTheEvidenceAndVerifyCatchesAForgedRow() throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let path = dir.path("signed.ledger")
        func rows() throws -> [String] {
            try DatabaseQueue(path: path).read { db in
                try String.fetchAll(db, sql: "SELECT transaction_id || ' ' || seq || ' ' || level FROM transaction_evidence ORDER BY 1")
            }
        }
        #expect(try rows() == ["t1 7 signed", "t2 6 signed", "t3 9 invalid"])
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DELETE FROM transaction_evidence WHERE transaction_id = 't2'")
            try db.execute(sql: "INSERT INTO transaction_evidence VALUES ('t9', 3, 'signed', NULL, NULL, NULL)")
        }
        let broken = try Ledger(path: path).verify(all: true)
        #expect(broken.problems.filter { $0.kind == .signatures }.count == 2, "\(broken.problems)")
        try Ledger(path: path).rebuildProjections()
        #expect(try rows() == ["t1 7 signed", "t2 6 signed", "t3 9 invalid"])
        // The liar's row edited to say its statement agrees: verify names it, exit 1.
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "UPDATE transaction_evidence SET level = 'signed', reason = NULL WHERE transaction_id = 't3'")
        }
        let verify = try cli(["verify", path])
        #expect(verify.status == 1 && verify.stdout.contains("seq 9") && verify.stdout.contains("transaction t3's evidence is stored as signed"), "\(verify.stdout)")
        _ = ledger
    }

    /// The commands show the evidence: `report --view revenue` counts the money Apple vouches for
    /// (and only that with `--evidence apple`), `replay` and `timeline` show each transaction's or
    /// event's, all with the roots given by `--apple-root`.
    @Test func theCommandsShowTheMoneyApplesSignatureVouchesFor() throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let path = dir.path("signed.ledger")
        let at = Self.signedAt
        let good = try f.chain.sign(SigningChain.payload(transaction: "2000000005", product: "gems", price: 9990, currency: "USD", signedDate: at))
        try ledger.append(
            Event(
                at: Timestamp(millisecondsSinceEpoch: at + 1000),
                .transactionPurchased(
                    transaction: "t5", product: "gems", user: "u5", storeTransactionId: "2000000005",
                    terms: PurchaseTerms(price: "9.99", currency: "USD", signedTransaction: good))))
        try f.chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        let roots = ["--apple-root", dir.path("root.pem")]
        func totals(_ arguments: [String]) throws -> [String: Any] {
            let run = try cli(["report", path, "--view", "revenue", "--format", "json"] + arguments)
            #expect(run.status == 0, "\(run.stderr)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any])
            return try #require((json["totals"] as? [[String: Any]])?.first { $0["currency"] as? String == "USD" })
        }
        // t1 (4.99, apple, refunded), t3 (0.99, the liar: invalid), t5 (9.99, apple).
        let trusted = try totals(roots)
        #expect(trusted["net"] as? String == "10.98" && trusted["appleNet"] as? String == "9.99" && trusted["appleUnits"] as? Int == 2, "\(trusted)")
        let untrusted = try totals([])
        #expect(untrusted["net"] as? String == "10.98" && untrusted["appleNet"] as? String == "0", "\(untrusted)")
        let onlyApple = try totals(roots + ["--evidence", "apple"])
        #expect(onlyApple["net"] as? String == "9.99" && onlyApple["purchases"] as? Int == 2, "\(onlyApple)")
        let table = try cli(["report", path, "--view", "revenue", "--format", "csv"] + roots)
        #expect(table.stdout.split(separator: "\n").first?.hasSuffix(",apple net") == true, "\(table.stdout)")
        let html = try cli(["report", path, "--view", "revenue", "--format", "html"] + roots)
        #expect(html.status == 0 && html.stdout.contains("<dt>Apple-evidenced net</dt><dd>9.99 (90%)</dd>"), "\(html.stdout.prefix(3000))")
        // replay: each transaction's evidence; timeline: each signed event's.
        let replay = try cli(["replay", path, "--json"] + roots)
        let state = try #require(try JSONSerialization.jsonObject(with: Data(replay.stdout.utf8)) as? [String: Any])
        let evidence = Dictionary(
            uniqueKeysWithValues: ((state["transactions"] as? [[String: Any]]) ?? []).map {
                ($0["transaction"] as! String, ($0["evidence"] as? String ?? "-") + " " + ($0["evidenceReason"] as? String ?? ""))
            })
        #expect(evidence["t5"] == "apple " && evidence["t2"] == "apple " && evidence["t1"] == "apple ")
        #expect(evidence["t3"]?.hasPrefix("invalid the event states otherwise than its signed transaction: price is 0.99") == true, "\(evidence)")
        let timeline = try cli(["timeline", path, "--transaction", "t3"] + roots)
        #expect(timeline.stdout.contains("Apple's signature: invalid"), "\(timeline.stdout)")
        let trustedTimeline = try cli(["timeline", path, "--transaction", "t1"] + roots)
        #expect(trustedTimeline.stdout.components(separatedBy: "signed by Apple").count == 3, "\(trustedTimeline.stdout)")
        // The commands that write count the evidence under the roots once they are done.
        let rebuilt = try cli(["rebuild", path] + roots)
        #expect(rebuilt.stdout.contains("4 signed transactions: 3 apple, 0 xcode, 1 invalid"), "\(rebuilt.stdout)")
        let untrustedRebuild = try cli(["rebuild", path, "--json"])
        #expect(untrustedRebuild.stdout.contains(#""evidence":{"apple":0,"xcode":0,"invalid":4}"#), "\(untrustedRebuild.stdout)")
        let exported = try cli(["export", path]).stdout
        try exported.write(toFile: dir.path("again.jsonl"), atomically: true, encoding: .utf8)
        let imported = try cli(["import", dir.path("again.ledger"), dir.path("again.jsonl")] + roots)
        #expect(imported.status == 0 && imported.stdout.contains("\n4 signed transactions: 3 apple, 0 xcode, 1 invalid"), "\(imported.stdout)")
        // A root file that is no certificate is named, and nothing is printed.
        try "not a certificate".write(toFile: dir.path("bad.pem"), atomically: true, encoding: .utf8)
        let bad = try cli(["report", path, "--view", "revenue", "--apple-root", dir.path("bad.pem")])
        #expect(bad.status == 2 && bad.stderr.contains("bad.pem") && bad.stdout.isEmpty, "\(bad.stderr)")
    }

    /// What an outside attacker got past the first version: a price left to the catalog, one
    /// Apple transaction on several purchases, no store id, a refund's statement on a purchase,
    /// an erased marker as input, a purchase dated far from Apple's date.
    @Test func applesStatementVouchesForOneTransactionAtItsOwnPrice() async throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let at = Self.signedAt
        func jws(_ id: String, price: Int64 = 9990, revoked: Int64? = nil) throws -> String {
            try f.chain.sign(SigningChain.payload(transaction: id, product: "gems", price: price, currency: "USD", signedDate: at, revocationDate: revoked))
        }
        func purchase(_ t: String, store: String?, _ signed: String, at time: Int64 = at + 1000) -> Event {
            Event(
                at: Timestamp(millisecondsSinceEpoch: time),
                .transactionPurchased(transaction: t, product: "gems", user: "m1", storeTransactionId: store, terms: PurchaseTerms(signedTransaction: signed)))
        }
        let first = try jws("2000000010")
        let registered = Event(
            at: Timestamp(millisecondsSinceEpoch: at),
            .productRegistered(ProductRegistration(product: "gems", kind: .consumable, price: "999.99", currency: "USD", downloadable: false)))
        try ledger.append(contentsOf: [
            purchase("a1", store: "2000000010", first),  // its own: apple
            purchase("a2", store: "2000000010", first),  // the same Apple transaction again
            purchase("a3", store: nil, try jws("2000000011")),  // nothing ties it to its transaction
            purchase("a4", store: "2000000012", try jws("2000000012", revoked: at)),  // a refund's statement
            purchase("a5", store: "2000000013", try jws("2000000013"), at: at + 400 * 86_400_000),  // a year later
            registered,  // the catalog says 999.99 now
            purchase("a6", store: "2000000014", try jws("2000000014")),  // Apple says 9.99
        ])
        let judged = try await ledger.appleEvidence(verifier: AppleSignatureVerifier(roots: try f.chain.roots))
        func level(_ t: String) -> String { judged[t].map { $0.evidence.description } ?? "unsigned" }
        #expect(level("a1") == "apple")
        #expect(level("a2") == "invalid: its signed transaction (the same Apple transaction) already vouches for transaction a1")
        #expect(level("a3") == "invalid: the transaction has no storeTransactionId, so nothing ties its signed transaction to it")
        #expect(level("a4").hasPrefix("invalid: the event states otherwise than its signed transaction: revocation is not revoked"), "\(level("a4"))")
        #expect(level("a5").hasPrefix("invalid: the event's time is 9600 hours from its signed transaction's purchaseDate"), "\(level("a5"))")
        #expect(level("a6") == "invalid: the event states otherwise than its signed transaction: price is 999.99 in the event, 9.99 in its signed transaction")
        let flagged = try ledger.events(from: 10, limit: 100).filter { $0.anomaly == .signedFieldsDiffer }.map { $0.event.body.transactionID ?? "" }
        #expect(flagged == ["a4", "a6"])
        #expect(try ledger.verify(all: true).isValid)
        // A rebuild finds the same (the first holder of an Apple transaction keeps it).
        try ledger.rebuildProjections()
        #expect(try await ledger.appleEvidence(verifier: AppleSignatureVerifier(roots: try f.chain.roots)).mapValues(\.evidence) == judged.mapValues(\.evidence))

        // What an erased one reads as is no input: JSON Lines leave it out, the library refuses it.
        try """
        {"type":"transactionPurchased","at":"2026-05-28T20:40:00Z","transaction":"m1","product":"gems","storeTransactionId":"9","signedTransaction":"[erased 0011223344aa]"}

        """.write(toFile: dir.path("marker.jsonl"), atomically: true, encoding: .utf8)
        #expect(try ledger.importJSONLines(from: try JSONLinesReader(path: dir.path("marker.jsonl"))).stored == 1)
        #expect(try ledger.events(inStream: "transaction:m1").first?.event.body.signedTransaction == nil)
        #expect(throws: LedgerError.self) { try ledger.append(purchase("m2", store: "9", "[erased 0011223344aa]")) }
    }

    /// A restore whose original belongs to a user forgotten since: the original's store id reads
    /// as erased, is not compared, and the ledger still verifies.
    @Test func forgettingTheOriginalsBuyerLeavesARestoreVerifying() throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let at = Self.signedAt
        let restore = try f.chain.sign(
            SigningChain.payload(transaction: "2000000020", original: "2000000003", product: "gems", price: 9990, currency: "USD", signedDate: at))
        try ledger.append(
            Event(
                at: Timestamp(millisecondsSinceEpoch: at + 1000),
                .transactionRestored(
                    transaction: "r1", originalTransaction: "t3", product: "gems", user: "u9", storeTransactionId: "2000000020",
                    terms: PurchaseTerms(signedTransaction: restore))))
        _ = try ledger.forget(user: "u2")
        let report = try ledger.verify(all: true)
        #expect(report.isValid, "\(report.problems)")
    }

    /// A ledger bound to its app: Apple's signature on another app's transaction is invalid, and
    /// binding a ledger that holds signatures checks them again; another app's id is refused.
    @Test func aLedgerBoundToItsAppRefusesAnotherAppsSignatures() async throws {
        let dir = try TemporaryDirectory()
        let f = try Fixture()
        let (ledger, _) = try f.ledger(dir)
        let path = dir.path("signed.ledger")
        let roots = AppleSignatureVerifier(roots: try f.chain.roots)
        #expect(try await ledger.appleEvidence(verifier: roots)["t2"]?.evidence == .apple)
        // The fixture's transactions were signed for com.example.app.
        var other = testConfiguration()
        other.appleBundleID = "com.example.other"
        let bound = try Ledger(path: path, configuration: other)
        #expect(try await bound.appleEvidence(verifier: roots)["t2"]?.evidence.reason == "signed for the app com.example.app, not com.example.other")
        #expect(try bound.verify(all: true).isValid)
        var mine = testConfiguration()
        mine.appleBundleID = "com.example.app"
        #expect(throws: LedgerError.self) { _ = try Ledger(path: path, configuration: mine) }
        let refused = try cli(["import", path, dir.path("signed.ledger.jsonl"), "--apple-bundle-id", "com.example.app"])
        #expect(refused.status == 2 && refused.stderr.contains("for the app com.example.other, not com.example.app"), "\(refused.stderr)")
        // A new ledger bound to the right app: apple.
        let right = dir.path("right.ledger")
        #expect(try cli(["import", right, dir.path("signed.ledger.jsonl"), "--apple-bundle-id", "com.example.app"]).status == 0)
        #expect(try await Ledger(path: right).appleEvidence(verifier: roots)["t2"]?.evidence == .apple)
    }
}
