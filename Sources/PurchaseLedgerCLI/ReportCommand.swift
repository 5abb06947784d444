import ArgumentParser
import Foundation
import PurchaseLedger

extension ProductKind: ExpressibleByArgument {}

struct ReportCommand: ParsableCommand {
    enum Format: String, ExpressibleByArgument, CaseIterable {
        case table, csv, json, html
    }

    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Purchase history: what was bought, when, for how much, and what was delivered.",
        discussion: """
            Sorted by purchase date. Prices are the registered prices, per unit, in the currency's units.

            Examples:
              purchase-ledger report user.ledger --user u-03322
              purchase-ledger report user.ledger --from 2024-03-01T00:00:00Z --to 2024-04-01T00:00:00Z --format csv > march.csv
              purchase-ledger report user.ledger --format html > history.html
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "Only this user's transactions.") var user: String?
    @Option(help: "Only this product's transactions.") var product: String?
    @Option(help: "Purchased at or after this RFC 3339 time.") var from: String?
    @Option(help: "Purchased before this RFC 3339 time.") var to: String?
    @Option(parsing: .upToNextOption, help: "Only these product kinds.") var kind: [ProductKind] = []
    @Option(help: "table, csv, json or html.") var format: Format = .table
    @Option(help: "At most this many transactions.") var limit: Int = 100_000

    func run() throws {
        let console = Console.current
        let ledger = try options.open()
        let query = PurchaseHistoryQuery(user: user, product: product, from: try from.map(Timestamp.parse), to: try to.map(Timestamp.parse),
                                         kinds: kind, limit: limit)
        let entries = try ledger.purchaseHistory(query)
        switch format {
        case .table:
            var rows = [["purchased", "transaction", "user", "product", "kind", "qty", "price", "outcome", "finished", "downloads"]]
            for e in entries {
                let t = e.transaction
                rows.append([(t.purchasedAt ?? t.queuedAt)?.description ?? "-", t.transaction, t.user ?? "-", t.product, e.kind?.rawValue ?? "-",
                             String(t.quantity), e.price.map { "\($0) \(e.currency ?? "")" } ?? "-", e.outcome + (e.isRestore ? "" : ""),
                             t.finished ? "yes" : "no", downloadSummary(e)])
            }
            console.print(table(rows, console: console))
            console.print("\(entries.count) transaction\(entries.count == 1 ? "" : "s")")
        case .csv:
            let header = ["transaction", "store_transaction_id", "original_transaction", "user", "product", "kind", "quantity", "price", "currency",
                          "queued_at", "purchased_at", "finished_at", "revoked_at", "outcome", "error", "restore", "downloads", "content_lost"]
            console.print(header.joined(separator: ","))
            for e in entries {
                let t = e.transaction
                let fields: [String] = [t.transaction, t.storeTransactionId ?? "", t.originalTransaction ?? "", t.user ?? "", t.product, e.kind?.rawValue ?? "",
                              String(t.quantity), e.price ?? "", e.currency ?? "", t.queuedAt?.description ?? "", t.purchasedAt?.description ?? "",
                              t.finishedAt?.description ?? "", t.revokedAt?.description ?? "", e.outcome,
                              t.error.map { "\($0.domain) \($0.code): \($0.message)" } ?? "", e.isRestore ? "true" : "false",
                              downloadSummary(e), e.contentLost ? "true" : "false"]
                console.print(fields.map(csvField).joined(separator: ","))
            }
        case .json:
            console.print("[" + entries.map(entryJSON).joined(separator: ",\n") + "]")
        case .html:
            console.print(html(entries, query: query))
        }
    }

    func downloadSummary(_ e: PurchaseHistoryEntry) -> String {
        e.downloads.map { d in
            "\(d.content ?? d.download) \(d.contentVersion?.text ?? "") \(d.started ? d.state.rawValue : "not started")"
                + (d.copiedOut ? " copied" : "") + (d.lost ? " LOST" : "") + (d.discarded ? " discarded" : "")
        }.joined(separator: "; ")
    }

    func entryJSON(_ e: PurchaseHistoryEntry) -> String {
        let t = StateJSON.encode(e.transaction)
        let downloads = e.downloads.map { StateJSON.encode($0) }.joined(separator: ",")
        func q(_ s: String?) -> String { s.map(jsonString) ?? "null" }
        return "{\"transaction\":\(t),\"kind\":\(q(e.kind?.rawValue)),\"price\":\(q(e.price)),\"currency\":\(q(e.currency)),\"outcome\":\(q(e.outcome)),\"restore\":\(e.isRestore),\"purchasedAt\":\(q(e.transaction.purchasedAt?.description)),\"finishedAt\":\(q(e.transaction.finishedAt?.description)),\"revokedAt\":\(q(e.transaction.revokedAt?.description)),\"contentLost\":\(e.contentLost),\"downloads\":[\(downloads)]}"
    }

    func html(_ entries: [PurchaseHistoryEntry], query: PurchaseHistoryQuery) -> String {
        func esc(_ s: String) -> String {
            s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
        }
        let purchased = entries.filter { $0.transaction.grantsOwnership }.count
        let revoked = entries.filter { $0.transaction.revoked }.count
        let lost = entries.filter(\.contentLost).count
        var rows = ""
        for e in entries {
            let t = e.transaction
            rows += "<tr><td>\(esc((t.purchasedAt ?? t.queuedAt)?.description ?? "-"))</td><td>\(esc(t.transaction))</td><td>\(esc(t.user ?? "-"))</td><td>\(esc(t.product))</td><td>\(esc(e.price.map { "\($0) \(e.currency ?? "")" } ?? "-"))</td><td class=\"\(esc(e.outcome))\">\(esc(e.outcome))</td><td>\(esc(downloadSummary(e)))</td></tr>\n"
        }
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>Purchase history</title>
            <style>
            body{font:14px system-ui,sans-serif;margin:2em;color:#222}
            table{border-collapse:collapse;width:100%}th,td{padding:4px 8px;border-bottom:1px solid #ddd;text-align:left}
            th{background:#f4f4f4}.revoked,.failed{color:#b00}.figures span{display:inline-block;margin-right:2em;font-size:18px}
            </style></head><body>
            <h1>Purchase history</h1>
            <p class="figures"><span>\(entries.count) transactions</span><span>\(purchased) purchased or restored</span><span>\(revoked) revoked</span><span>\(lost) with lost content</span></p>
            <table><thead><tr><th>purchased</th><th>transaction</th><th>user</th><th>product</th><th>price</th><th>outcome</th><th>downloads</th></tr></thead>
            <tbody>
            \(rows)</tbody></table></body></html>
            """
    }
}

/// RFC 4180: quote fields holding a comma, quote, CR or LF; double the quotes inside.
func csvField(_ s: String) -> String {
    guard s.contains(where: { $0 == "," || $0 == "\"" || $0 == "\n" || $0 == "\r" }) else { return s }
    return "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}
