public import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

extension ProductKind: ExpressibleByArgument {}
extension RevenuePeriod: ExpressibleByArgument {}

/// One report view as rows: rendered as a table, CSV, JSON or HTML.
struct ReportTable {
    var title: String
    var columns: [String]
    var rows: [[String]]
    /// Each row as a JSON object (docs/json.md), written when asked for: only `--format json`
    /// prints it, and writing it for every row took a sixth of a 100,000-row report's time.
    var json: [String] { makeJSON() }
    let makeJSON: () -> [String]
    /// Transactions whose timelines the HTML page draws.
    var transactions: [String]
    /// Total rows (the revenue view's per-currency totals), shown after the rows, with their JSON.
    var totals: [[String]]
    var totalsJSON: [String]?

    init(
        title: String, columns: [String], rows: [[String]], json: @autoclosure @escaping () -> [String], transactions: [String] = [],
        totals: [[String]] = [], totalsJSON: [String]? = nil
    ) {
        self.title = title
        self.columns = columns
        self.rows = rows
        makeJSON = json
        self.transactions = transactions
        self.totals = totals
        self.totalsJSON = totalsJSON
    }
}

struct ReportCommand: AsyncParsableCommand {
    enum Format: String, ExpressibleByArgument, CaseIterable {
        case table, csv, json, html
    }

    enum View: String, ExpressibleByArgument, CaseIterable {
        case history, revenue, undelivered, stuck, unfinished, failures, divergence
        case productViews = "product-views"
    }

    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Purchase-history reports: history, revenue, undelivered, stuck, unfinished, failures, divergence, product-views.",
        discussion: """
            history: what was bought, when, for how much, what was delivered (sorted by purchase date). \
            revenue: per product, currency and price paid, refunds deducted, then a total per currency (gross, \
            refunds, net, units); --group-by day, week or month splits it by purchase date, --group-by storefront by \
            storefront. Only production purchases their buyer paid for count; --all-environments adds sandbox, \
            Xcode and family-shared purchases on lines of their own, totalled apart. undelivered: paid, not refunded, hosted \
            content never copied out. stuck: started downloads with no progress for --idle seconds, as of \
            --as-of (default: the latest download activity of the ledger, or of the whole fleet). \
            unfinished: transactions the store keeps redelivering. failures: payment failures by error code. \
            divergence: where the device's record and Apple's (stored by `apple-import`) disagree, one row each. \
            product-views: the App Store pages the app showed (SKStoreProductViewController, SKOverlay) per item \
            and style: presented, loaded, failed, dismissed without loading, median and p95 time to load, campaign \
            tokens (--from and --to select by presentation time). \
            Prices are per unit, in the currency's units, as paid: fixed when the transaction was purchased or \
            restored (its own price, else the product's registration then), never changed by a later registration.

            Examples:
              purchase-ledger report user.ledger --user u-03322
              purchase-ledger report user.ledger --view revenue --format csv \\
                  --from 2024-03-01T00:00:00Z --to 2024-04-01T00:00:00Z
              purchase-ledger report user.ledger --view revenue --group-by month \\
                  --format json | jq .totals
              purchase-ledger report user.ledger --view undelivered --format html \\
                  > undelivered.html
              purchase-ledger report user.ledger --view product-views

            Over a fleet store (ledgers shipped with `purchase-ledger ship`), give its URL instead of a \
            file: the same views, computed by PostgreSQL over every ledger, with a device column where rows \
            come from several ledgers.
              purchase-ledger report postgres://ledger@db.internal:5432/fleet \\
                  --view revenue --group-by month
              purchase-ledger report postgres://ledger@db.internal:5432/fleet \\
                  --user u-03322
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "history, revenue, undelivered, stuck, unfinished, failures, divergence or product-views.") var view: View = .history
    @Option(help: "Only this user's transactions (history).") var user: String?
    @Option(help: "Only this product's transactions (history).") var product: String?
    @Option(help: "Purchased at or after this RFC 3339 time.") var from: String?
    @Option(help: "Purchased before this RFC 3339 time.") var to: String?
    @Option(parsing: .upToNextOption, help: "Only these product kinds (history).") var kind: [ProductKind] = []
    @Option(help: "Seconds without progress that make a download stuck.") var idle: Int = 3600
    @Option(
        name: .customLong("as-of"),
        help: "stuck: idle as of this RFC 3339 time (default: the latest download activity of the ledger, or of the whole fleet).")
    var asOf: String?
    @Option(help: "table, csv, json or html.") var format: Format = .table
    @Option(help: "At most this many rows.") var limit: Int = 100_000
    @Option(
        name: .customLong("group-by"),
        help: "Split the revenue view by day, week (ISO, from Monday) or month of purchase, in UTC, or by storefront.")
    var grouping: RevenueGrouping?
    @Flag(name: .customLong("all-environments"), help: "Revenue: add sandbox, Xcode and family-shared purchases, marked and totalled apart.")
    var allEnvironments = false
    @Option(
        help: ArgumentHelp(
            "Revenue: any (every purchase; Apple-evidenced amounts in a column of their own) or apple (only purchases Apple's signature vouches for).",
            valueName: "evidence"))
    var evidence: EvidenceFilter = .any
    @OptionGroup var appleRoots: AppleRootOptions

    enum EvidenceFilter: String, ExpressibleByArgument, CaseIterable {
        case any, apple
    }

    enum RevenueGrouping: String, ExpressibleByArgument, CaseIterable {
        case day, week, month, storefront
    }

    /// The period the revenue view is split by, if any.
    var groupBy: RevenuePeriod? { grouping.flatMap { RevenuePeriod(rawValue: $0.rawValue) } }
    var byStorefront: Bool { grouping == .storefront }

    func validate() throws {
        if grouping != nil && view != .revenue {
            throw ValidationError("--group-by applies to the revenue view only (add --view revenue)")
        }
        if asOf != nil && view != .stuck {
            throw ValidationError("--as-of applies to the stuck view only (add --view stuck)")
        }
        // Checked before anything is printed: the stuck table's title names it.
        if let asOf { _ = try Timestamp.parse(asOf) }
        if allEnvironments && view != .revenue {
            throw ValidationError("--all-environments applies to the revenue view only (add --view revenue)")
        }
        if evidence != .any && view != .revenue {
            throw ValidationError("--evidence applies to the revenue view only (add --view revenue)")
        }
        // A store product view belongs to no user, product or kind of product.
        if view == .productViews && (user != nil || product != nil || !kind.isEmpty) {
            throw ValidationError("--user, --product and --kind do not apply to the product-views view (its rows are App Store items, which belong to no user)")
        }
        // Seconds as a Duration must not overflow (about 292 years of nanoseconds).
        try NumberOption.check("--idle", idle, 0...(Int(Int64.max / 1_000_000_000) - 1))
        try NumberOption.check("--limit", limit, 1...Int(Int32.max))
    }

    func run() async throws {
        let fromTime = try from.map(Timestamp.parse)
        let toTime = try to.map(Timestamp.parse)
        if FleetAddress.isURL(options.ledger) {
            return try await runFleet(from: fromTime, to: toTime)
        }
        if view == .stuck && format == .table { Console.current.print(rowTitle) }
        let ledger = try options.open()
        // A user the ledger never held is a usage error (exit 2), as in every command; one with no
        // row in the period or view asked is an answer.
        if let user, try ledger.transactions(user: user).isEmpty {
            throw LedgerError.make(.malformedInput, "no transaction in this ledger names the user given with --user")
        }
        if streamsRows {
            // Apple's records count only when they verify with the roots.
            let divergences = view == .divergence ? try await ledger.divergences(verifier: appleRoots.verifier()) : []
            try streamRows(ledger, from: fromTime, to: toTime, divergences: divergences)
            return try printUserSummary(ledger)
        }
        // Apple's signatures: the ledger's chains judged with the roots, once, for the revenue view.
        let chains = view == .revenue ? try await AppleChains.judged(in: ledger, verifier: appleRoots.verifier()) : nil
        // A ledger without any signed transaction shows no evidence column (StoreKit 1 apps).
        let table = try makeTable(fetch(ledger, from: fromTime, to: toTime, apple: chains), evidence: (chains?.chains ?? 0) > 0)
        try print(table, from: fromTime, to: toTime) {
            try HTMLReport(
                ledger: ledger, table: table, from: fromTime, to: toTime, subject: htmlSubject, apple: (chains?.chains ?? 0) > 0 || evidence == .apple ? chains : nil,
                onlyApple: evidence == .apple
            ).render()
        }
    }

    /// Under a table of one user's history: what they own and spent.
    func printUserSummary(_ ledger: Ledger) throws {
        let console = Console.current
        if let user, view == .history, format == .table {
            let summary = try ledger.userSummary(user)
            console.print("")
            console.print(console.bold("\(user)") + " owns: " + (summary.ownedProducts.isEmpty ? "nothing" : summary.ownedProducts.joined(separator: ", ")))
            for (content, update) in summary.ownedContent {
                console.print("  \(content.product) \(content.content) \(content.contentVersion) in \(content.destination)\(update ? " (update available)" : "")")
            }
            let spent = summary.netSpent.keys.sorted().map { "\(MoneyText.text(summary.netSpent[$0]!, currency: $0)) \($0)" }.joined(separator: ", ")
            let refunded = summary.refunded.keys.sorted().map { "\(MoneyText.text(summary.refunded[$0]!, currency: $0)) \($0)" }.joined(separator: ", ")
            console.print("  spent, net of refunds: \(spent.isEmpty ? "nothing" : spent)" + (refunded.isEmpty ? "" : "; refunded: \(refunded)"))
        }
    }

    /// The same views over a fleet store, computed by PostgreSQL; rows of several devices say
    /// which ledger they come from (the `device` column).
    func runFleet(from: Timestamp?, to: Timestamp?) async throws {
        if view == .stuck && format == .table { Console.current.print(rowTitle) }
        let (data, summary, chains) = try await fleetData(from: from, to: to)
        guard let data else { return }
        let table = makeTable(data, evidence: (chains?.chains ?? 0) > 0)
        try print(table, from: from, to: to) {
            try HTMLReport(table: table, from: from, to: to, summary: summary!, subject: htmlSubject).render()
        }
    }

    /// Streams the row views (nil data); fetches the aggregate ones, with the HTML summary.
    func fleetData(from: Timestamp?, to: Timestamp?) async throws -> (ReportData?, HTMLReport.Summary?, AppleChains?) {
        let fleet = try await FleetStore.connect(options.ledger)
        do {
            if let user, try await fleet.purchaseHistory(PurchaseHistoryQuery(user: user, limit: 1)).isEmpty {
                throw LedgerError.make(.malformedInput, "no transaction in this fleet store names the user given with --user")
            }
            // Apple's signatures: the store's chains judged with the roots, once, for the revenue view.
            let chains = view == .revenue ? try await fleet.appleChains(verifier: appleRoots.verifier()) : nil
            let judged = (chains?.chains ?? 0) > 0 || evidence == .apple ? chains : nil
            var summary: HTMLReport.Summary?
            if format == .html {
                // The totals from the daily lines: one revenue query over the fleet, not two.
                let days = try await fleet.revenue(from: from, to: to, groupBy: .day, apple: judged, onlyApple: evidence == .apple)
                let (ledgers, events) = try await fleet.shippedTotals()
                summary = HTMLReport.Summary(
                    revenue: RevenueLine.acrossPeriods(days), daily: DailyRevenue.perDay(days),
                    source: "the fleet store \(fleet.address) (\(ledgers) ledger\(ledgers == 1 ? "" : "s"), \(events) event\(events == 1 ? "" : "s"))")
                summary?.appleJudged = judged != nil
            }
            if streamsRows {
                // Rows are written as the server sends them: memory stays flat (HTML: see RowStream).
                let stream = RowStream(
                    self, columns: rowColumns(fleet: true), html: summary.map { HTMLReport(table: emptyTable, from: from, to: to, summary: $0, subject: htmlSubject) })
                // Rows are formatted and written on a thread of their own while the next
                // ones are read and decoded.
                let writer = OrderedWriter()
                let add = { (e: FleetHistoryEntry) throws in
                    writer.add {
                        stream.add(historyCells(e.entry, device: e.ledgerID), json: historyJSON(e.entry, device: e.ledgerID), transaction: e.entry.transaction.transaction)
                    }
                }
                do {
                    switch view {
                    case .history: try await fleet.forEachHistoryEntry(historyQuery(from: from, to: to), add)
                    case .undelivered: try await fleet.forEachUndelivered(limit: limit + 1, add)
                    case .stuck:
                        try await fleet.forEachStuckDownload(idle: .seconds(idle), asOf: try asOf.map(Timestamp.parse), limit: limit + 1) { d in
                            writer.add {
                                stream.add(stuckCells(d.download, device: d.ledgerID), json: stuckJSON(d.download, device: d.ledgerID), transaction: d.download.transaction)
                            }
                        }
                    case .unfinished:
                        try await fleet.forEachUnfinishedTransaction(limit: limit + 1) { t in
                            writer.add {
                                stream.add(
                                    unfinishedCells(t.transaction, device: t.ledgerID), json: unfinishedJSON(t.transaction, device: t.ledgerID),
                                    transaction: t.transaction.transaction)
                            }
                        }
                    case .divergence:
                        // Apple's records were verified when `apple-import` stored them.
                        for d in try await fleet.divergences() where user == nil || d.user == user {
                            writer.add { stream.add(divergenceCells(d, fleet: true), json: divergenceJSON(d), transaction: d.transaction ?? "") }
                        }
                    case .revenue, .failures, .productViews: break
                    }
                } catch {
                    writer.finish()
                    throw error
                }
                writer.finish()
                await fleet.close()
                stream.finish { _ in [:] }
                return (nil, nil, nil)
            }
            let data = try await fetch(fleet, from: from, to: to, apple: judged)
            await fleet.close()
            return (data, summary, chains)
        } catch {
            await fleet.close()
            throw error
        }
    }

    /// The views written row by row (a ``RowStream``): all but the two made of totals.
    var streamsRows: Bool { view != .revenue && view != .failures && view != .productViews }

    /// A table with a streamed view's title and columns and no rows: what an HTML page's head needs.
    var emptyTable: ReportTable {
        ReportTable(title: rowTitle, columns: rowColumns(fleet: FleetAddress.isURL(options.ledger)), rows: [], json: [])
    }

    /// A streamed view of a ledger, written through a ``RowStream`` as the fleet's are.
    func streamRows(_ ledger: Ledger, from: Timestamp?, to: Timestamp?, divergences: [Divergence] = []) throws {
        var summary: HTMLReport.Summary?
        if format == .html { summary = try HTMLReport.Summary(ledger: ledger, from: from, to: to, apple: nil) }
        let stream = RowStream(self, columns: rowColumns(fleet: false), html: summary.map { HTMLReport(table: emptyTable, from: from, to: to, summary: $0, subject: htmlSubject) })
        switch view {
        case .history, .undelivered:
            let entries = view == .history ? try ledger.purchaseHistory(historyQuery(from: from, to: to)) : try ledger.undelivered(limit: limit + 1)
            for e in entries {
                stream.add(historyCells(e, device: nil), json: historyJSON(e, device: nil), transaction: e.transaction.transaction)
            }
        case .stuck:
            for d in try ledger.stuckDownloads(idle: .seconds(idle), asOf: try asOf.map(Timestamp.parse)).prefix(limit + 1) {
                stream.add(stuckCells(d, device: nil), json: stuckJSON(d, device: nil), transaction: d.transaction)
            }
        case .unfinished:
            for t in try ledger.unfinishedTransactions().prefix(limit + 1) {
                stream.add(unfinishedCells(t, device: nil), json: unfinishedJSON(t, device: nil), transaction: t.transaction)
            }
        case .divergence:
            for d in divergences where user == nil || d.user == user {
                stream.add(divergenceCells(d, fleet: false), json: divergenceJSON(d), transaction: d.transaction ?? "")
            }
        case .revenue, .failures, .productViews: break
        }
        try stream.finish { ids in try ledger.timelines(transactions: Set(ids)) }
    }

    /// What the view's rows are, for the HTML page's line under its title.
    var htmlSubject: HTMLReport.Subject {
        switch view {
        case .history:
            HTMLReport.Subject(
                one: "transaction", many: "transactions", about: "what was bought, when, for how much, how it ended and what was delivered",
                money: true)
        case .undelivered:
            HTMLReport.Subject(
                one: "transaction", many: "transactions", about: "paid for and not refunded, with hosted content never copied out", money: true)
        case .stuck: HTMLReport.Subject(one: "download", many: "downloads", about: "started, then no progress for \(idle) s")
        case .unfinished:
            HTMLReport.Subject(one: "transaction", many: "transactions", about: "never finished, so the store redelivers each at every launch")
        case .revenue:
            HTMLReport.Subject(
                one: "revenue line", many: "revenue lines",
                about: "per product, currency and price paid" + (grouping.map { ", by \($0.rawValue)" } ?? ""), revenue: true, money: true)
        case .failures: HTMLReport.Subject(one: "kind of payment failure", many: "kinds of payment failure", about: "by error domain and code")
        case .productViews:
            HTMLReport.Subject(one: "item and style", many: "items and styles", about: "store product views presented, by item and sheet or overlay")
        case .divergence:
            HTMLReport.Subject(one: "disagreement", many: "disagreements", about: "between the device's record and Apple's signed one")
        }
    }

    var rowTitle: String {
        switch view {
        case .history: "Purchase history"
        case .undelivered: "Paid but never delivered"
        case .stuck:
            // What "idle" is measured against, which differs between a file and a fleet by default.
            "Stuck downloads: no progress for \(idle) s as of "
                + (asOf ?? (FleetAddress.isURL(options.ledger) ? "the latest download activity of the whole fleet" : "the ledger's latest download activity"))
        case .unfinished: "Never finished (redelivered at every launch)"
        case .divergence: "Where the device and Apple disagree"
        case .revenue, .failures, .productViews: ""
        }
    }

    /// A streamed view's columns; `device` first over a fleet store.
    func rowColumns(fleet: Bool) -> [String] {
        switch view {
        case .stuck: (fleet ? ["device"] : []) + ["download", "transaction", "content", "state", "progress", "last activity", "attempts"]
        case .unfinished: (fleet ? ["device"] : []) + ["transaction", "user", "product", "state", "since", "events"]
        case .divergence:
            (fleet ? ["device"] : []) + ["kind", "transaction", "apple transaction", "user", "product", "device says", "apple says", "device seq", "apple seq"]
        default: historyColumns(fleet: fleet)
        }
    }

    func divergenceCells(_ d: Divergence, fleet: Bool) -> [String] {
        (fleet ? [d.ledger ?? ""] : []) + [
            d.kind.rawValue, d.transaction ?? "", d.appleTransaction ?? "", d.user ?? "", d.product ?? "", d.device,
            d.apple + (d.notification.map { " (notification \($0))" } ?? ""), d.deviceSeq.map(String.init) ?? "", d.appleSeq.map(String.init) ?? "",
        ]
    }

    func divergenceJSON(_ d: Divergence) -> String {
        JSONWriter.object { w in
            if let ledger = d.ledger { w.field("ledger", ledger) }
            w.field("kind", d.kind.rawValue)
            w.field("transaction", d.transaction)
            w.field("appleTransaction", d.appleTransaction)
            w.field("user", d.user)
            w.field("product", d.product)
            w.field("device", d.device)
            w.field("apple", d.apple)
            w.field("deviceSeq", d.deviceSeq)
            w.field("appleSeq", d.appleSeq)
            if let n = d.notification { w.field("notification", n) }
            if let h = d.history { w.field("history", h) }
        }
    }

    func stuckCells(_ d: DownloadRecord, device: String?) -> [String] {
        (device.map { [$0] } ?? []) + [
            d.download, d.transaction ?? "", d.content ?? d.url ?? "", d.state.rawValue,
            String(format: "%.0f%%", d.progress * 100), d.lastActivityAt?.description ?? "", String(d.attempts),
        ]
    }

    func stuckJSON(_ d: DownloadRecord, device: String?) -> String {
        JSONWriter.object { w in
            if let device { w.field("ledger", device) }
            w.key("download")
            StateJSON.write(d, to: &w)
            w.field("lastActivityAt", d.lastActivityAt?.description)
            w.field("attempts", d.attempts)
        }
    }

    func unfinishedCells(_ t: TransactionRecord, device: String?) -> [String] {
        (device.map { [$0] } ?? []) + [t.transaction, t.user ?? "", t.product, t.state.rawValue, (t.purchasedAt ?? t.failedAt)?.description ?? "", String(t.events)]
    }

    func unfinishedJSON(_ t: TransactionRecord, device: String?) -> String {
        JSONWriter.object { w in
            if let device { w.field("ledger", device) }
            w.key("transaction")
            StateJSON.write(t, to: &w)
            w.field("since", (t.purchasedAt ?? t.failedAt)?.description)
            w.field("events", t.events)
        }
    }

    func print(_ table: ReportTable, from: Timestamp?, to: Timestamp?, html: () throws -> String) throws {
        let console = Console.current
        switch format {
        case .table:
            var rows = [table.columns] + table.rows
            if !table.totals.isEmpty { rows += [table.columns.map { String(repeating: "-", count: $0.count) }] + table.totals }
            console.print(textTable(rows, console: console))
            console.print("\(table.rows.count) row\(table.rows.count == 1 ? "" : "s")")
        case .csv:
            // A view with totals marks each row in a first column: `row` (a product line) or `total`.
            let marked = table.totalsJSON != nil
            console.printData(csvLine((marked ? ["kind"] : []) + table.columns))
            for row in table.rows { console.printData(csvLine((marked ? ["row"] : []) + row)) }
            for row in table.totals { console.printData(csvLine(["total"] + row)) }
        case .json:
            // One row per line, so a large report stays readable and diffable.
            func lines(_ rows: [String]) -> String { "[" + rows.joined(separator: ",\n") + "]" }
            console.printJSON { w in
                w.key("rows")
                w.raw(lines(table.json))
                if let totals = table.totalsJSON {
                    w.key("totals")
                    w.raw(lines(totals))
                }
                // The views made of totals are never cut (the row views stream: RowStream).
                w.field("truncated", false)
            }
        case .html:
            console.print(try html())
        }
    }

    /// What the views made of totals show, from a ledger or a fleet store (the other views are
    /// written row by row: ``streamRows(_:from:to:)``).
    enum ReportData {
        case revenue([RevenueLine])
        case failures([FailureRate])
        case productViews([ProductViewSummary])
    }

    func fetch(_ ledger: Ledger, from: Timestamp?, to: Timestamp?, apple: AppleChains?) throws -> ReportData {
        view == .revenue
            ? .revenue(
                try ledger.revenue(
                    from: from, to: to, groupBy: groupBy, byStorefront: byStorefront, allEnvironments: allEnvironments, apple: apple,
                    onlyApple: evidence == .apple))
            : view == .productViews ? .productViews(try ledger.productViewSummary(from: from, to: to)) : .failures(try ledger.failureRates(from: from, to: to))
    }

    func fetch(_ fleet: FleetStore, from: Timestamp?, to: Timestamp?, apple: AppleChains?) async throws -> ReportData {
        view == .revenue
            ? .revenue(
                try await fleet.revenue(
                    from: from, to: to, groupBy: groupBy, byStorefront: byStorefront, allEnvironments: allEnvironments, apple: apple,
                    onlyApple: evidence == .apple))
            : view == .productViews
                ? .productViews(try await fleet.productViewSummary(from: from, to: to)) : .failures(try await fleet.failureRates(from: from, to: to))
    }

    func historyQuery(from: Timestamp?, to: Timestamp?) -> PurchaseHistoryQuery {
        // One row more than asked for: whether it comes says whether --limit cut the report.
        PurchaseHistoryQuery(user: user, product: product, from: from, to: to, kinds: kind, limit: limit + 1)
    }

    /// `evidence`: the revenue lines counted what Apple's signature vouches for (a ledger's
    /// report): a column and JSON members of their own say it.
    func makeTable(_ data: ReportData, evidence: Bool = false) -> ReportTable {
        /// One JSON row.
        func row(_ body: (inout JSONWriter) -> Void) -> String { JSONWriter.object { w in body(&w) } }
        switch data {
        case .revenue(let lines):
            /// The members a revenue line and a currency's total share (the environment, ownership
            /// and whether it is revenue when every environment is shown), amounts as exact
            /// decimal strings.
            func amounts(_ w: inout JSONWriter, _ a: some RevenueAmounts) {
                if allEnvironments {
                    w.field("environment", a.environment.rawValue)
                    w.field("ownership", a.ownership.rawValue)
                    w.field("revenue", a.countsAsRevenue)
                }
                w.field("purchases", a.purchases)
                w.field("units", a.units)
                w.field("refundedUnits", a.refundedUnits)
                w.field("gross", "\(a.gross)")
                w.field("refunds", "\(a.refunds)")
                w.field("net", "\(a.net)")
                if evidence {
                    w.field("appleUnits", a.appleUnits)
                    w.field("appleNet", "\(a.appleNet)")
                }
            }
            /// The cells of the same figures.
            func cells(_ a: some RevenueAmounts, _ currency: String) -> [String] {
                (allEnvironments ? [a.environment.rawValue, a.ownership.rawValue] : [])
                    + [String(a.purchases), String(a.units), String(a.refundedUnits)]
                    + [a.gross, a.refunds, a.net].map { MoneyText.text($0, currency: currency) }
                    + (evidence ? [MoneyText.text(a.appleNet, currency: currency)] : [])
            }
            let totals = RevenueTotal.totals(of: lines)
            // Leading columns: the period and the storefront when split by them; the environment
            // and ownership (after the price) when every environment is shown.
            let lead = (groupBy.map { [$0.rawValue] } ?? []) + (byStorefront ? ["storefront"] : [])
            let blank = Array(repeating: "", count: lead.count)
            return ReportTable(
                title: grouping.map { "Revenue by \($0.rawValue)" } ?? "Revenue",
                columns: lead + ["product", "currency", "price"] + (allEnvironments ? ["environment", "ownership"] : [])
                    + ["purchases", "units", "refunded units", "gross", "refunds", "net"] + (evidence ? ["apple net"] : []),
                rows: lines.map {
                    (groupBy == nil ? [] : [$0.period ?? ""]) + (byStorefront ? [$0.storefront ?? ""] : []) + [
                        $0.product, $0.currency, MoneyText.text($0.price, currency: $0.currency),
                    ]
                        + cells($0, $0.currency)
                },
                json: lines.map {
                    let line = $0
                    return row { w in
                        if groupBy != nil { w.field("period", line.period) }
                        if byStorefront { w.field("storefront", line.storefront) }
                        w.field("product", line.product)
                        w.field("currency", line.currency)
                        w.field("price", line.price)
                        amounts(&w, line)
                    }
                },
                totals: totals.map {
                    blank + [$0.countsAsRevenue ? "TOTAL" : "NOT REVENUE", $0.currency, ""] + cells($0, $0.currency)
                },
                totalsJSON: totals.map {
                    let total = $0
                    return row { w in
                        w.field("currency", total.currency)
                        amounts(&w, total)
                    }
                })
        case .productViews(let views):
            return ReportTable(
                title: "Store product views",
                columns: ["item", "style", "presented", "loaded", "failed", "dismissed without loading", "median load ms", "p95 load ms", "campaign tokens"],
                rows: views.map {
                    [
                        $0.item, $0.style.rawValue, String($0.presented), String($0.loaded), String($0.failed), String($0.dismissedWithoutLoading),
                        $0.medianLoadMilliseconds.map(String.init) ?? "", $0.p95LoadMilliseconds.map(String.init) ?? "", $0.campaignTokens.joined(separator: " "),
                    ]
                },
                json: views.map { v in
                    row { w in
                        w.field("item", v.item)
                        w.field("style", v.style.rawValue)
                        w.field("presented", v.presented)
                        w.field("loaded", v.loaded)
                        w.field("failed", v.failed)
                        w.field("dismissedWithoutLoading", v.dismissedWithoutLoading)
                        w.field("medianLoadMs", v.medianLoadMilliseconds)
                        w.field("p95LoadMs", v.p95LoadMilliseconds)
                        w.key("campaignTokens")
                        w.array(v.campaignTokens)
                    }
                })
        case .failures(let rates):
            return ReportTable(
                title: "Payment failures", columns: ["domain", "code", "message", "count", "share"],
                rows: rates.map { [$0.domain, String($0.code), $0.message, String($0.count), String(format: "%.2f%%", $0.share * 100)] },
                json: rates.map { rate in
                    row { w in
                        w.field("domain", rate.domain)
                        w.field("code", rate.code)
                        w.field("message", rate.message)
                        w.field("count", rate.count)
                        w.field("share", rate.share)
                    }
                })
        }
    }

    var historyTitle: String { view == .history ? "Purchase history" : "Paid but never delivered" }

    /// The history and undelivered views' columns; `device` first over a fleet store.
    func historyColumns(fleet: Bool) -> [String] {
        (fleet ? ["device"] : []) + [
            "purchased", "transaction", "store id", "original", "user", "product", "kind", "qty", "price", "currency",
            "storefront", "paid as", "offer", "outcome", "deferred", "finished", "revoked", "error", "downloads", "content lost",
        ]
    }

    func historyCells(_ e: PurchaseHistoryEntry, device: String?) -> [String] {
        // The fields as one value: read through the record's key-path subscript from another
        // module, each field cost a key-path call (a fifth of a 100,000-row fleet report).
        let t = e.transaction.fields
        let revoked: String = t.revokedAt.map { "\($0) (\(t.revocationReason ?? ""))" } ?? ""
        let error: String = t.error.map { "\($0.domain) \($0.code): \($0.message)" } ?? ""
        var cells: [String] = []
        cells.reserveCapacity(21)
        if let device { cells.append(device) }
        cells += [
            (t.purchasedAt ?? t.queuedAt)?.description ?? "", t.transaction, t.storeTransactionId ?? "", t.originalTransaction ?? "",
            t.user ?? "", t.product, e.kind?.rawValue ?? "", String(t.quantity), e.price.map { MoneyText.text($0, currency: e.currency ?? "") } ?? "", e.currency ?? "",
            t.paid.storefront ?? "", paidAs(t), t.paid.offer.map { [$0.type.rawValue, $0.id].compactMap { $0 }.joined(separator: " ") } ?? "",
            e.outcome, t.wasDeferred ? "yes" : "", t.finishedAt?.description ?? "", revoked, error, downloadSummary(e), e.contentLost ? "yes" : "",
        ]
        return cells
    }

    func historyJSON(_ e: PurchaseHistoryEntry, device: String?) -> String {
        JSONWriter.object { w in
            if let device { w.field("ledger", device) }
            w.key("transaction")
            StateJSON.write(e.transaction, to: &w)
            // The fields as one value, as in historyCells.
            let t = e.transaction.fields
            w.field("kind", e.kind?.rawValue)
            w.field("price", e.price)
            w.field("currency", e.currency)
            w.field("outcome", e.outcome)
            w.field("restore", e.isRestore)
            w.field("deferred", t.wasDeferred)
            w.field("queuedAt", t.queuedAt?.description)
            w.field("purchasedAt", t.purchasedAt?.description)
            w.field("finishedAt", t.finishedAt?.description)
            w.field("revokedAt", t.revokedAt?.description)
            w.field("contentLost", e.contentLost)
            w.key("downloads")
            w.array(e.downloads) { w, d in StateJSON.write(d, to: &w) }
        }
    }

    /// Empty for money as revenue counts it (production, purchased); else what it was:
    /// `sandbox`, `xcode`, `familyShared`, or both.
    func paidAs(_ t: TransactionRecord.Fields) -> String {
        guard t.state == .purchased || t.state == .restored else { return "" }
        return [t.paid.environment == .production ? nil : t.paid.environment.rawValue, t.paid.ownership == .purchased ? nil : t.paid.ownership.rawValue]
            .compactMap { $0 }.joined(separator: " ")
    }

    func downloadSummary(_ e: PurchaseHistoryEntry) -> String {
        var summary = ""
        for record in e.downloads {
            let d = record.fields
            if !summary.isEmpty { summary += "; " }
            summary += d.content ?? d.download
            summary += " "
            summary += d.contentVersion?.text ?? ""
            summary += d.started ? " " + d.state.rawValue : " not started"
            if d.copiedOut { summary += " copied to " + (d.destination ?? "") }
            if record.lost { summary += " LOST" }
            if d.discarded { summary += " discarded" }
        }
        return summary
    }
}
