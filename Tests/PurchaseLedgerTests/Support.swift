import CustomDump
import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// A fresh directory per test, removed afterwards. Ledgers in it are real SQLite files.
final class TemporaryDirectory: Sendable {
    let url: URL

    init() throws {
        url = FileManager.default.temporaryDirectory.appending(path: "purchase-ledger-tests-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    func path(_ name: String) -> String { url.appending(path: name).path }

    deinit { try? FileManager.default.removeItem(at: url) }
}

/// A configuration with a fixed clock (deterministic recordedAt) and small blocks, so tests seal
/// blocks and write snapshots without thousands of events.
func testConfiguration(blockSize: Int = 8, snapshotInterval: Int = 16, codec: BlockCodec = .lz4Dictionary) -> LedgerConfiguration {
    var c = LedgerConfiguration()
    c.clock = { Timestamp(millisecondsSinceEpoch: 1_700_000_000_000) }
    c.blockSize = blockSize
    c.snapshotInterval = snapshotInterval
    c.maxSnapshots = 1000
    // Small ledgers with many snapshots: the tests that count snapshots expect every one kept
    // (snapshotsStayWithinTheirShareOfTheFile sets a share).
    c.maxSnapshotShare = 1
    c.blockCodec = codec
    c.durability = .normal
    // A few personal values per sealed block: every test that records some reaches the blocks.
    c.personalValuesPerBlock = 4
    return c
}

/// Decodes JSON lines, failing the test on a malformed one.
func events(_ lines: String...) throws -> [Event] {
    try lines.map { try JSONLines.decode($0) }
}

func event(_ line: String) throws -> Event {
    try JSONLines.decode(line)
}

/// Builds contract events tersely: `E.purchased("t1", downloads: ["t1-d1"])`.
enum E {
    static func at(_ second: Int) -> Timestamp { Timestamp(millisecondsSinceEpoch: 1_709_280_000_000 + Int64(second) * 1000) }

    /// A store product view of `item` presented (`storeProductViewPresented`).
    static func viewPresented(
        _ view: String, item: String = "1234567890", style: ProductViewStyle = .sheet, campaign: String? = nil, at: Int = 2
    ) -> Event {
        Event(at: E.at(at), .storeProductViewPresented(view: view, item: item, style: style, campaignToken: campaign))
    }
    static func viewLoaded(_ view: String, at: Int = 3) -> Event { Event(at: E.at(at), .storeProductViewLoaded(view: view)) }
    static func viewFailed(_ view: String, code: Int64 = 0, at: Int = 3) -> Event {
        Event(at: E.at(at), .storeProductViewFailed(view: view, error: StoreError(domain: "SKErrorDomain", code: code, message: "Cannot connect to iTunes Store")))
    }
    static func viewDismissed(_ view: String, at: Int = 4) -> Event { Event(at: E.at(at), .storeProductViewDismissed(view: view)) }

    static func product(
        _ id: String, kind: ProductKind = .nonConsumable, price: String = "4.99", contents: [(String, String)] = [], related: [String] = [], t: Int = 0
    ) -> Event {
        Event(
            at: at(t),
            .productRegistered(
                ProductRegistration(
                    product: id, kind: kind, price: price, currency: "USD", downloadable: !contents.isEmpty,
                    contents: contents.map { ContentSpec(content: $0.0, contentVersion: ContentVersion($0.1)!, contentLength: 1000) },
                    relatedProducts: related)))
    }

    static func queued(_ t: String, _ product: String = "p1", quantity: Int = 1, user: String? = "u1", at s: Int = 1) -> Event {
        Event(at: at(s), .paymentQueued(transaction: t, product: product, quantity: quantity, user: user))
    }

    static func purchased(_ t: String, product: String? = nil, downloads: [String] = [], content: String = "c1", version: String = "1.0", at s: Int = 2) -> Event {
        Event(
            at: at(s),
            .transactionPurchased(
                transaction: t, product: product, user: nil, storeTransactionId: "s-\(t)",
                downloads: downloads.isEmpty
                    ? nil
                    : downloads.map {
                        DownloadSpec(download: $0, content: content, contentVersion: ContentVersion(version)!, contentLength: 1000)
                    }))
    }

    static func restored(_ t: String, original: String, product: String = "p1", downloads: [String] = [], content: String = "c1", version: String = "1.0", at s: Int = 2) -> Event {
        Event(
            at: at(s),
            .transactionRestored(
                transaction: t, originalTransaction: original, product: product, user: "u1", storeTransactionId: "s-\(t)",
                downloads: downloads.isEmpty
                    ? nil
                    : downloads.map {
                        DownloadSpec(download: $0, content: content, contentVersion: ContentVersion(version)!, contentLength: 1000)
                    }))
    }

    static func deferred(_ t: String, at s: Int = 2) -> Event { Event(at: at(s), .transactionDeferred(transaction: t)) }
    static func failed(_ t: String, at s: Int = 2) -> Event {
        Event(at: at(s), .transactionFailed(transaction: t, error: StoreError(domain: "SKErrorDomain", code: 2, message: "The payment was cancelled.")))
    }
    static func revoked(_ t: String, at s: Int = 9) -> Event { Event(at: at(s), .transactionRevoked(transaction: t, reason: "refund")) }
    static func finished(_ t: String, discard: Bool = false, at s: Int = 8) -> Event { Event(at: at(s), .transactionFinished(transaction: t, discardContent: discard)) }
    static func start(_ d: String, at s: Int = 3) -> Event { Event(at: at(s), .downloadStarted(download: d)) }
    static func progress(_ d: String, _ p: Double, at s: Int = 4) -> Event {
        Event(at: at(s), .downloadProgressed(download: d, progress: p, bytesWritten: Int64(p * 1000), timeRemaining: nil))
    }
    static func pause(_ d: String, at s: Int = 4) -> Event { Event(at: at(s), .downloadPaused(download: d)) }
    static func resume(_ d: String, at s: Int = 4) -> Event { Event(at: at(s), .downloadResumed(download: d)) }
    static func cancel(_ d: String, at s: Int = 4) -> Event { Event(at: at(s), .downloadCancelled(download: d, reason: .user)) }
    static func done(_ d: String, at s: Int = 5) -> Event { Event(at: at(s), .downloadFinished(download: d, contentURL: "file:///cache/\(d)/")) }
    static func dlFailed(_ d: String, at s: Int = 5) -> Event {
        Event(at: at(s), .downloadFailed(download: d, error: StoreError(domain: "NSURLErrorDomain", code: -1005, message: "lost")))
    }
    static func copied(_ d: String, to destination: String? = nil, at s: Int = 6) -> Event {
        Event(at: at(s), .contentCopiedOut(download: d, destination: destination ?? "Documents/\(d)", checksum: nil, bytesCopied: 1000))
    }
    static func deleted(_ product: String, at s: Int = 10) -> Event { Event(at: at(s), .contentDeleted(product: product)) }
    static func published(_ product: String, _ content: String, _ version: String, at s: Int = 10) -> Event {
        Event(at: at(s), .contentVersionPublished(product: product, content: content, contentVersion: ContentVersion(version)!))
    }
    static func restoreStarted(at s: Int = 1) -> Event { Event(at: at(s), .restoreStarted(user: "u1")) }
    static func restoreCompleted(at s: Int = 3) -> Event { Event(at: at(s), .restoreCompleted) }
    static func restoreFailed(at s: Int = 3) -> Event {
        Event(at: at(s), .restoreFailed(error: StoreError(domain: "SKErrorDomain", code: 0, message: "unknown")))
    }
    static func registered(_ url: String, _ d: String, at s: Int = 1) -> Event { Event(at: at(s), .contentRegistered(url: url, download: d, contentLength: 10)) }
    static func packPublished(_ pack: String, _ version: Int, unlockedBy: [String] = [], at s: Int = 1) -> Event {
        Event(at: at(s), .assetPackPublished(pack: pack, version: version, unlockedBy: unlockedBy))
    }
    static func packBegan(_ pack: String, _ version: Int, at s: Int = 3) -> Event { Event(at: at(s), .assetPackBegan(pack: pack, version: version)) }
    static func packProgress(_ pack: String, _ version: Int, _ p: Double, at s: Int = 4) -> Event {
        Event(at: at(s), .assetPackProgressed(pack: pack, version: version, progress: p))
    }
    static func packPaused(_ pack: String, _ version: Int, at s: Int = 4) -> Event { Event(at: at(s), .assetPackPaused(pack: pack, version: version)) }
    static func packFinished(_ pack: String, _ version: Int, at s: Int = 5) -> Event { Event(at: at(s), .assetPackFinished(pack: pack, version: version)) }
    static func packFailed(_ pack: String, _ version: Int, at s: Int = 5) -> Event {
        Event(at: at(s), .assetPackFailed(pack: pack, version: version, error: StoreError(domain: "BAErrorDomain", code: 1, message: "network lost")))
    }
    static func packRemoved(_ pack: String, at s: Int = 7) -> Event { Event(at: at(s), .assetPackRemoved(pack: pack)) }
    static func packOpened(_ pack: String, _ version: Int, at s: Int = 6) -> Event { Event(at: at(s), .assetPackOpened(pack: pack, version: version)) }
}

/// Applies events with the reducer alone (plan + reduce), as an append does.
@discardableResult
func reduceAll(_ events: [Event], into state: inout LedgerState) throws -> [Outcome] {
    var outcomes: [Outcome] = []
    for e in events {
        for planned in Reducer.plan(state, e) {
            outcomes.append(try Reducer.reduce(&state, planned))
        }
    }
    return outcomes
}

/// Expects `body` to throw a rule violation naming `rule`.
func expectViolation(_ rule: Rule, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void) {
    do {
        try body()
        Issue.record("expected \(rule.name) to be violated", sourceLocation: sourceLocation)
    } catch let error as LedgerError {
        #expect(error.code == .ruleViolation, sourceLocation: sourceLocation)
        #expect(error.rule == rule, "got \(error)", sourceLocation: sourceLocation)
    } catch {
        Issue.record("unexpected error \(error)", sourceLocation: sourceLocation)
    }
}

/// Applies a command the reducer must refuse for `rule`: the refusal names the rule, and the
/// state is left as it was (a whole-state comparison, printed as a diff when it fails).
func expectRefused(
    _ rule: Rule, _ event: Event, in state: LedgerState,
    fileID: StaticString = #fileID, filePath: StaticString = #filePath, line: UInt = #line, column: UInt = #column
) {
    var after = state
    let location = SourceLocation(fileID: "\(fileID)", filePath: "\(filePath)", line: Int(line), column: Int(column))
    expectViolation(rule, sourceLocation: location) { _ = try Reducer.reduce(&after, event) }
    expectNoDifference(after, state, "a refused \(event.type.name) changes nothing", fileID: fileID, filePath: filePath, line: line, column: column)
}

/// The package root, from this file's path.
let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// One row of a state-machine table that docs/rules.md prints: the event type name, the states
/// (or phases) it is allowed from, and where it leads.
struct DocumentedTransition: Sendable, CustomTestStringConvertible {
    var event: String
    var from: Set<String>
    var to: String
    var testDescription: String { event }

    /// The rows of the table under `heading` in docs/rules.md whose event names start with
    /// `prefix`: read from the file, so the docs and the reducer cannot drift apart.
    static func table(under heading: String, eventsStartingWith prefix: String) -> [DocumentedTransition] {
        let docs = packageRoot.appending(path: "docs/rules.md")
        let text = (try? String(contentsOf: docs, encoding: .utf8)) ?? ""
        guard let start = text.range(of: heading) else { return [] }
        return text[start.upperBound...].split(separator: "\n").compactMap { line -> DocumentedTransition? in
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 3, cells[0].hasPrefix("`" + prefix) else { return nil }
            return DocumentedTransition(
                event: cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`")),
                from: Set(cells[1].split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }), to: cells[2])
        }
    }
}

/// Takes migration 0007 (personal values) back out of a ledger whose events hold their personal
/// values inline (written with `writesPersonalValuesInline`), as a version before it left it.
func undo0007(_ db: Database) throws {
    try db.execute(
        sql: """
            DROP TABLE personal_values;
            ALTER TABLE snapshots DROP COLUMN personal_refs;
            DELETE FROM sqlite_sequence WHERE name = 'personal_values';
            DELETE FROM ledger_info WHERE key IN ('personal_values_since', 'personal_erasures');
            DELETE FROM grdb_migrations WHERE identifier = '0007_personal_values';
            """)
}

/// Puts `transactions` and `downloads` back as the tables they were before migration 0012
/// (which made them views of `transaction_rows` and `download_rows`), with the statements of
/// the migrations that made them (0003, 0005), so the schema is exactly what a ledger before
/// 0012 has, and forgets that migration: a test makes a ledger of an older layout from a new
/// one, and the next writable open runs 0012 again. Leaves `owned_content_history_view` dropped
/// when `keepHistoryView` is false.
func undoCompactProjections(_ db: Database, keepHistoryView: Bool = true) throws {
    func statement(_ name: String, _ start: String) -> String { Migrations.statement(of: name, startingWith: start)! }
    let layout = "0003_projections_without_rowid", terms = embeddedMigrations.first { $0.name == "0005_transaction_terms" }!.sql
    let history = statement("0004_history_destination", "CREATE VIEW owned_content_history_view")
    try db.execute(sql: "DROP VIEW owned_content_history_view")
    try db.execute(sql: statement(layout, "CREATE TABLE transactions_new"))
    try db.execute(sql: "ALTER TABLE transactions_new RENAME TO plain_transactions")
    for alter in terms.components(separatedBy: ";").map({ $0.trimmingCharacters(in: .whitespacesAndNewlines) }) {
        guard let start = alter.range(of: "ALTER TABLE transactions ADD COLUMN") else { continue }
        try db.execute(sql: String(alter[start.lowerBound...]).replacingOccurrences(of: "ALTER TABLE transactions", with: "ALTER TABLE plain_transactions"))
    }
    try db.execute(sql: statement(layout, "CREATE TABLE downloads_new"))
    try db.execute(
        sql: """
            INSERT INTO plain_transactions SELECT * FROM transactions;
            INSERT INTO downloads_new SELECT * FROM downloads;
            DROP VIEW transactions; DROP TABLE transaction_rows; DROP VIEW downloads; DROP TABLE download_rows; DROP TABLE projection_texts;
            ALTER TABLE plain_transactions RENAME TO transactions;
            ALTER TABLE downloads_new RENAME TO downloads;
            DELETE FROM grdb_migrations WHERE identifier = '0012_compact_projections';
            """)
    try db.execute(sql: statement(layout, "CREATE INDEX transactions_by_user"))
    try db.execute(sql: statement(layout, "CREATE INDEX downloads_by_transaction"))
    try db.execute(sql: statement(layout, "CREATE UNIQUE INDEX downloads_by_url"))
    if keepHistoryView { try db.execute(sql: history) }
}
