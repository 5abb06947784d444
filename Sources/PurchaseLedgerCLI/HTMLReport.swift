import Foundation
import PurchaseLedger

/// A report as one self-contained HTML page: no network, no scripts. It leads with its own subject:
/// the view's title, how many rows it has and what they are. Only the revenue view adds figures
/// (one group per currency) and charts of net revenue per day. Then the table, with a sticky
/// header, and each listed transaction's life drawn as an SVG timeline.
///
/// The table fits a 1280-pixel page: ids, times and amounts never break (an id split across lines
/// misreads), only long text cells wrap; the history views fold related columns under one heading
/// (a transaction's store and original ids under it, a price with its currency and terms, an
/// outcome with its times), and a column empty in every row is left out, named under the table.
struct HTMLReport {
    let table: ReportTable
    let from: Timestamp?
    let to: Timestamp?
    var summary: Summary
    /// What the rows are, for the line under the title.
    var subject = Subject(one: "row", many: "rows", about: "")
    /// Timelines drawn at most (each needs the transaction's events).
    static let maxTimelines = 40

    /// The page's figures and charts, from a ledger or from a fleet store.
    struct Summary {
        var revenue: [RevenueLine]
        var daily: [DailyRevenue]
        var timelines: [String: [Ledger.TimelineEntry]] = [:]
        var source: String
        /// Whether the revenue counted what Apple's signature vouches for (a ledger's page).
        var appleJudged = false
    }

    /// The rows a view lists: "2,429 transactions: paid, not refunded, ...".
    struct Subject {
        var one: String
        var many: String
        var about: String
        /// The revenue view: figures per currency and charts lead the page.
        var revenue = false
        /// Rows with amounts: the subtitle says what they are.
        var money = false

        func count(_ n: Int) -> String {
            n.formatted(.number.grouping(.automatic).locale(Locale(identifier: "en_US"))) + " " + (n == 1 ? one : many)
        }
    }

    init(ledger: Ledger, table: ReportTable, from: Timestamp?, to: Timestamp?, subject: Subject, apple: AppleChains? = nil, onlyApple: Bool = false) throws {
        var summary = try Summary(ledger: ledger, from: from, to: to, apple: apple, onlyApple: onlyApple)
        summary.timelines = try ledger.timelines(transactions: Set(table.transactions.prefix(Self.maxTimelines)))
        self.init(table: table, from: from, to: to, summary: summary, subject: subject)
    }

    init(table: ReportTable, from: Timestamp?, to: Timestamp?, summary: Summary, subject: Subject) {
        self.table = table
        self.from = from
        self.to = to
        self.summary = summary
        self.subject = subject
    }

    /// The whole page of a table held in memory (the views made of totals).
    func render() throws -> String {
        let layout = Layout(table.columns)
        var rows = ""
        var filled = Array(repeating: false, count: table.columns.count)
        for row in table.rows { rows += layout.row(row, filled: &filled) }
        return page(rows: rows, count: table.rows.count, filled: filled, truncatedAt: nil)
    }

    /// The page, its rows' HTML given: head, figures, the table, its foot and the timelines.
    /// `filled` says which columns hold a value in some row (the others are left out).
    func page(rows: String, count: Int, filled: [Bool], truncatedAt: Int?) -> String {
        pageHead(count: count, filled: filled, truncatedAt: truncatedAt) + rows + pageTail(count: count, filled: filled, truncatedAt: truncatedAt)
    }

    /// The page up to its first row; a page `--limit` cut says so in its lead.
    func pageHead(count: Int, filled: [Bool], truncatedAt: Int?) -> String {
        let layout = Layout(table.columns)
        return head(count: count, cut: truncatedAt != nil, hidden: hidden(layout, count: count, filled: filled), layout: layout)
    }

    /// The page after its last row.
    func pageTail(count: Int, filled: [Bool], truncatedAt: Int?) -> String {
        let layout = Layout(table.columns)
        let hidden = hidden(layout, count: count, filled: filled).map { layout.groups[$0].title }
        return foot(count: count, truncatedAt: truncatedAt, hidden: hidden, layout: layout)
            + timelines(Array((table.transactions.isEmpty ? firstTransactions : table.transactions).prefix(Self.maxTimelines)), of: count)
            + Self.end
    }

    /// The groups of columns empty in every row (none when there is no row: the header stays).
    private func hidden(_ layout: Layout, count: Int, filled: [Bool]) -> [Int] {
        guard count > 0 else { return [] }
        return layout.groups.indices.filter { !layout.groups[$0].columns.contains { filled.indices.contains($0) && filled[$0] } }
    }

    /// Transactions whose timelines a streamed page draws (set by the stream).
    var firstTransactions: [String] = []

    /// The page up to the table's first row.
    private func head(count: Int, cut: Bool, hidden: [Int], layout: Layout) -> String {
        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
            <title>\(esc(table.title))</title>
            <style>
            body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:20px 24px;color:#1d1d1f;background:#fff}
            h1{font-size:22px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
            .lead{font-size:15px;margin:0 0 2px}.lead b{font-size:17px}.sub{color:#666;margin:0 0 14px;font-size:12px}
            .currencies{display:flex;flex-wrap:wrap;gap:10px;margin:0 0 12px}.currency{border:1px solid #e2e2e2;border-radius:8px;padding:8px 14px}
            .currency h3{margin:0 0 4px;font-size:13px}.currency dl{display:grid;grid-template-columns:auto auto;gap:0 14px;margin:0}
            .currency dt{color:#666}.currency dd{margin:0;text-align:right;font-weight:600;font-variant-numeric:tabular-nums;white-space:nowrap}
            .charts{display:flex;flex-wrap:wrap;gap:8px 16px;margin:0 0 8px}
            table{border-collapse:collapse;font-size:12px;width:100%}
            th,td{padding:3px 5px;border-bottom:1px solid #eee;text-align:left;vertical-align:top;white-space:nowrap}
            thead th{background:#f3f3f3;position:sticky;top:0;z-index:1;white-space:normal}tfoot th{border-top:2px solid #bbb;background:#fafafa}
            .num{text-align:right;font-variant-numeric:tabular-nums}td.text{white-space:normal;min-width:9em;max-width:32em;overflow-wrap:normal}
            td .x{color:#666;font-size:11px}.x span{color:#999}.t{white-space:normal}.nw{white-space:nowrap}
            .timeline{margin:10px 0 18px}.timeline h3{font-size:13px;margin:0 0 4px}.note{background:#fff4d6;border:1px solid #f0c36d;padding:6px 10px}
            .legend span{display:inline-block;margin-right:14px;font-size:12px}.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}

            """
        // Columns empty in every row: left out (named under the table).
        for group in hidden { html += "table.rows tr>:nth-child(\(group + 1)){display:none}\n" }
        html += """
            </style></head><body>
            <h1>\(esc(table.title))</h1>
            <p class="lead">\(cut ? "the first " : "")<b>\(esc(subject.count(count)))</b>\(subject.about.isEmpty ? "" : ": " + esc(subject.about))\(cut ? " (cut by --limit: more match)" : "")</p>
            <p class="sub">\(esc(subtitle()))</p>

            """
        if subject.revenue { html += revenueFigures() }
        html += "<table class=\"rows\"><thead><tr>"
        html += layout.groups.map { "<th\($0.numeric ? " class=\"num\"" : "")>\(esc($0.title))</th>" }.joined() + "</tr></thead><tbody>\n"
        return html
    }

    /// Where the rows come from, the period, and what the amounts are.
    private func subtitle() -> String {
        var parts = [rangeText(), "from \(summary.source)"]
        if subject.money { parts.append("amounts are what each purchase was paid, per unit, in its own currency") }
        if subject.revenue {
            parts.append("revenue counts production purchases owned by who paid them, refunds deducted; currencies are never added together")
        }
        return parts.joined(separator: " · ")
    }

    /// The revenue view's lead: each currency's totals, then net revenue per day.
    private func revenueFigures() -> String {
        let totals = RevenueTotal.totals(of: summary.revenue)
        var html = "<section class=\"currencies\">"
        for t in totals {
            html += "<div class=\"currency\"><h3>\(esc(t.currency))</h3><dl>"
            html += "<dt>net revenue</dt><dd>\(esc(MoneyText.text(t.net, currency: t.currency)))</dd>"
            html += "<dt>gross</dt><dd>\(esc(MoneyText.text(t.gross, currency: t.currency)))</dd>"
            html += "<dt>refunds</dt><dd>\(esc(MoneyText.text(t.refunds, currency: t.currency)))</dd>"
            html += "<dt>units sold</dt><dd>\(t.units)</dd>"
            if summary.appleJudged {
                let share = t.net == 0 ? "" : " (" + NSDecimalNumber(decimal: t.appleNet / t.net * 100).intValue.description + "%)"
                html += "<dt>Apple-evidenced net</dt><dd>\(esc(MoneyText.text(t.appleNet, currency: t.currency) + share))</dd>"
            }
            html += "</dl></div>"
        }
        if totals.isEmpty { html += "<p>No purchases in this period.</p>" }
        html += "</section>\n"
        let currencies = Array(Set(summary.daily.map(\.currency))).sorted()
        if !currencies.isEmpty {
            html += "<div class=\"charts\">\n"
            for currency in currencies { html += revenueChart(summary.daily.filter { $0.currency == currency }, currency: currency) }
            html += "</div>\n"
        }
        return html
    }

    /// The table's end: its totals, and under it the columns left out and whether `--limit` cut it.
    private func foot(count: Int, truncatedAt: Int?, hidden: [String], layout: Layout) -> String {
        var html = "</tbody>"
        if !table.totals.isEmpty {
            var filled = Array(repeating: true, count: table.columns.count)
            html += "<tfoot>" + table.totals.map { layout.row($0, filled: &filled, cell: "th") }.joined() + "</tfoot>"
        }
        html += "</table>\n<p class=\"sub\">\(esc(subject.count(count)))"
        if !hidden.isEmpty { html += " · left out, empty in every row: " + esc(hidden.joined(separator: ", ")) }
        html += "</p>\n"
        if let cut = truncatedAt {
            html += "<p class=\"note\">The report stops at --limit \(cut) rows: more rows match. Run it again with a higher --limit to see them all.</p>\n"
        }
        return html
    }

    /// The timelines of `first` (the first transactions of the `total` in the table) that
    /// `summary` has.
    private func timelines(_ first: [String], of total: Int) -> String {
        let timelines = summary.timelines
        let ids = first.filter { timelines[$0] != nil }
        guard !ids.isEmpty else { return "" }
        var html =
            "<h2>Timelines</h2>\n<p class=\"legend\"><span><i style=\"background:#c7c7cc\"></i>waiting</span><span><i style=\"background:#0a84ff\"></i>active</span><span><i style=\"background:#ff9f0a\"></i>paused</span><span><i style=\"background:#30d158\"></i>finished</span><span><i style=\"background:#ff3b30\"></i>failed / cancelled</span><span>! anomaly</span><span>✕ cancelled by the ledger</span></p>\n"
        if total > ids.count {
            html += "<p class=\"sub\">The first \(ids.count) of \(total) rows' transactions.</p>\n"
        }
        for id in ids { if let entries = timelines[id] { html += timeline(id, entries) } }
        return html
    }

    static let end = "</body></html>"

    private func rangeText() -> String {
        switch (from, to) {
        case (nil, nil): "all time"
        case (let f?, nil): "from \(f)"
        case (nil, let t?): "until \(t)"
        case (let f?, let t?): "\(f) to \(t)"
        }
    }

    /// Daily net revenue of one currency as SVG bars.
    private func revenueChart(_ days: [DailyRevenue], currency: String) -> String {
        let width = 380.0, height = 150.0, left = 56.0, bottom = 24.0, top = 20.0
        let values = days.map { NSDecimalNumber(decimal: $0.net).doubleValue }
        let maxValue = max(values.max() ?? 1, 1)
        let barWidth = (width - left - 8) / Double(max(days.count, 1))
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\"><title>Daily net revenue in \(esc(currency))</title>"
        svg += "<text x=\"\(left)\" y=\"14\" font-size=\"12\" font-weight=\"600\">\(esc(currency)) net revenue per day</text>"
        for tick in 0...4 {
            let v = maxValue * Double(tick) / 4
            let y = height - bottom - (height - bottom - top) * Double(tick) / 4
            svg +=
                "<line x1=\"\(left)\" x2=\"\(width)\" y1=\"\(f(y))\" y2=\"\(f(y))\" stroke=\"#eee\"/><text x=\"\(left - 6)\" y=\"\(f(y + 4))\" font-size=\"10\" text-anchor=\"end\" fill=\"#666\">\(String(format: maxValue < 10 ? "%.2f" : "%.0f", v))</text>"
        }
        for (i, day) in days.enumerated() {
            let h = (height - bottom - top) * values[i] / maxValue
            let x = left + Double(i) * barWidth
            svg +=
                "<rect x=\"\(f(x + 1))\" y=\"\(f(height - bottom - h))\" width=\"\(f(max(barWidth - 2, 1)))\" height=\"\(f(h))\" fill=\"#0a84ff\"><title>\(day.day.description.prefix(10)): \(esc(MoneyText.text(day.net, currency: currency))) \(esc(currency))</title></rect>"
            if i == 0 || i == days.count - 1 || i % max(days.count / 5, 1) == 0 {
                svg +=
                    "<text x=\"\(f(x + barWidth / 2))\" y=\"\(f(height - 8))\" font-size=\"10\" text-anchor=\"middle\" fill=\"#666\">\(day.day.description.dropFirst(5).prefix(5))</text>"
            }
        }
        return svg + "</svg>\n"
    }

    /// One transaction's life: its events on a line, each download's states as bars under it.
    private func timeline(_ id: String, _ entries: [Ledger.TimelineEntry]) -> String {
        guard let last = entries.last else { return "" }
        let downloads = last.downloads.map(\.download)
        let times = entries.map { Double($0.event.event.at.nanosecondsSinceEpoch) / 1e9 }
        let start = times.min()!, end = max(times.max()!, start + 1)
        let left = 150.0, width = 900.0, rowHeight = 22.0
        let height = 28 + rowHeight * Double(downloads.count + 1)
        func x(_ t: Double) -> Double { left + (width - left - 20) * (t - start) / (end - start) }
        let t = last.transaction
        var svg =
            "<div class=\"timeline\"><h3>\(esc(id)) · \(esc(t?.product ?? "")) · \(esc(t.map { $0.state.rawValue + ($0.finished ? ", finished" : "") + ($0.revoked ? ", revoked" : "") } ?? ""))</h3>"
        svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\"><title>Timeline of \(esc(id))</title>"
        svg +=
            "<text x=\"4\" y=\"\(f(rowHeight))\" font-size=\"11\">transaction</text><line x1=\"\(left)\" x2=\"\(width - 20)\" y1=\"\(f(rowHeight - 4))\" y2=\"\(f(rowHeight - 4))\" stroke=\"#ccc\"/>"
        // Download state spans.
        for (row, download) in downloads.enumerated() {
            let y = rowHeight * Double(row + 1) + 8
            svg += "<text x=\"4\" y=\"\(f(y + 12))\" font-size=\"11\">\(esc(download))</text>"
            var current: (state: DownloadStatus, since: Double)?
            for (i, entry) in entries.enumerated() {
                guard let d = entry.downloads.first(where: { $0.download == download }), d.started else { continue }
                let now = times[i]
                if let c = current, c.state != d.state || i == entries.count - 1, [.waiting, .active, .paused].contains(c.state) {
                    svg += bar(x(c.since), x(now), y, color(c.state), "\(download) \(c.state.rawValue)")
                }
                let changed = current?.state != d.state
                if changed { current = (d.state, now) }
                if changed, d.state == .finished || d.state == .failed || d.state == .cancelled {
                    svg +=
                        "<circle cx=\"\(f(x(now)))\" cy=\"\(f(y + 8))\" r=\"4\" fill=\"\(color(d.state))\"><title>\(esc(download)) \(d.state.rawValue)\(d.lost ? ", content lost" : "")</title></circle>"
                }
            }
            if let c = current, [.waiting, .active, .paused].contains(c.state) {
                svg += bar(x(c.since), x(end), y, color(c.state), "\(download) \(c.state.rawValue) until the end")
            }
        }
        // Transaction events, anomalies and automatic cancellations.
        for (i, entry) in entries.enumerated() {
            let e = entry.event
            let px = x(times[i])
            if e.event.body.transactionID == id {
                let finish = e.event.type == .transactionFinished
                svg +=
                    finish
                    ? "<line x1=\"\(f(px))\" x2=\"\(f(px))\" y1=\"6\" y2=\"\(f(height - 4))\" stroke=\"#1d1d1f\" stroke-dasharray=\"3 2\"><title>finished at \(e.event.at)</title></line>"
                    : "<circle cx=\"\(f(px))\" cy=\"\(f(rowHeight - 4))\" r=\"4\" fill=\"#1d1d1f\"><title>\(e.event.type.name) at \(e.event.at)</title></circle>"
            }
            if let rule = e.anomaly {
                svg +=
                    "<text x=\"\(f(px))\" y=\"\(f(rowHeight - 8))\" font-size=\"14\" font-weight=\"700\" fill=\"#ff9f0a\" text-anchor=\"middle\">!<title>anomaly \(rule.name) at seq \(e.seq)</title></text>"
            }
            if e.appendedByLedger, let d = e.event.body.downloadID, let row = downloads.firstIndex(of: d) {
                svg +=
                    "<text x=\"\(f(px))\" y=\"\(f(rowHeight * Double(row + 1) + 20))\" font-size=\"13\" fill=\"#ff3b30\" text-anchor=\"middle\">✕<title>cancelled by the ledger: the transaction finished early</title></text>"
            }
        }
        return svg + "</svg></div>\n"
    }

    private func bar(_ x1: Double, _ x2: Double, _ y: Double, _ fill: String, _ label: String) -> String {
        "<rect x=\"\(f(x1))\" y=\"\(f(y + 2))\" width=\"\(f(max(x2 - x1, 2)))\" height=\"12\" fill=\"\(fill)\" rx=\"2\"><title>\(esc(label))</title></rect>"
    }

    private func color(_ state: DownloadStatus) -> String {
        switch state {
        case .waiting: "#c7c7cc"
        case .active: "#0a84ff"
        case .paused: "#ff9f0a"
        case .finished: "#30d158"
        case .failed, .cancelled: "#ff3b30"
        }
    }

    private func f(_ v: Double) -> String { String(format: "%.1f", v) }
}

/// `s` with `&`, `<`, `>` and `"` escaped for HTML text and attribute values. One pass over the
/// UTF-8 bytes, and none at all for the common text with nothing to escape: four Foundation
/// replacements per cell took a quarter of a 35,000-row page's time.
func esc(_ s: String) -> String {
    var out = ""
    appendEscaped(s, to: &out)
    return out
}

/// Appends `s` to `html` with `&`, `<`, `>` and `"` written as entities. A 100,000-row page
/// escapes about two million cells, nearly all with nothing to escape: those are found by one
/// pass over their bytes and appended whole.
func appendEscaped(_ s: String, to html: inout String) {
    var s = s
    let escaped = s.withUTF8 { bytes -> Bool in
        var plain = 0  // bytes before this one are appended
        var escaped = false
        for i in bytes.indices {
            let entity: StaticString
            switch bytes[i] {
            case UInt8(ascii: "&"): entity = "&amp;"
            case UInt8(ascii: "<"): entity = "&lt;"
            case UInt8(ascii: ">"): entity = "&gt;"
            case UInt8(ascii: "\""): entity = "&quot;"
            default: continue
            }
            html.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[plain..<i]), as: UTF8.self))
            html.append(entity.description)
            plain = i + 1
            escaped = true
        }
        if escaped { html.append(String(decoding: UnsafeBufferPointer(rebasing: bytes[plain...]), as: UTF8.self)) }
        return escaped
    }
    if !escaped { html.append(s) }
}

extension HTMLReport.Summary {
    /// A ledger's revenue figures and chart (the timelines are added once the rows are known).
    /// `apple`: the chains judged Apple's, so the figures say how much of each currency's net
    /// Apple's signature vouches for.
    init(ledger: Ledger, from: Timestamp?, to: Timestamp?, apple: AppleChains?, onlyApple: Bool = false) throws {
        let days = try ledger.revenue(from: from, to: to, groupBy: .day, apple: apple, onlyApple: onlyApple)
        self.init(revenue: RevenueLine.acrossPeriods(days), daily: DailyRevenue.perDay(days), source: "the ledger's projections")
        appleJudged = apple != nil
    }
}
