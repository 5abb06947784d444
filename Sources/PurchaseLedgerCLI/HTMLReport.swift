import Foundation
import PurchaseLedger

/// A report as one self-contained HTML page: no network, no scripts. Summary figures, revenue over
/// time as an SVG chart, the report's table, and each transaction's life drawn as an SVG timeline.
struct HTMLReport {
    let table: ReportTable
    let from: Timestamp?
    let to: Timestamp?
    var summary: Summary
    /// Timelines drawn at most (each needs the transaction's events).
    static let maxTimelines = 40

    /// The page's figures and charts, from a ledger or from a fleet store.
    struct Summary {
        var revenue: [RevenueLine]
        var daily: [DailyRevenue]
        var counts: [(String, String)]
        var timelines: [String: [Ledger.TimelineEntry]] = [:]
        var source: String
    }

    init(ledger: Ledger, table: ReportTable, from: Timestamp?, to: Timestamp?) throws {
        var summary = try Summary(ledger: ledger, from: from, to: to)
        summary.timelines = try ledger.timelines(transactions: Set(table.transactions.prefix(Self.maxTimelines)))
        self.init(table: table, from: from, to: to, summary: summary)
    }

    init(table: ReportTable, from: Timestamp?, to: Timestamp?, summary: Summary) {
        self.table = table
        self.from = from
        self.to = to
        self.summary = summary
    }

    func render() throws -> String {
        var html = head()
        for row in table.rows { html += Self.row(row) }
        html += foot(rows: table.rows.count, truncatedAt: nil, totals: table.totals)
        html += timelines(Array(table.transactions.prefix(Self.maxTimelines)), of: table.transactions.count)
        return html + Self.end
    }

    /// The page up to the table's first row: figures, charts, the table's title and header.
    func head() -> String {
        let revenue = summary.revenue, daily = summary.daily
        let totals = RevenueTotal.totals(of: revenue)
        var figures = summary.counts
        for total in totals { figures += Self.figures(total) }

        var html = """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>\(esc(table.title))</title>
            <style>
            body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px 32px;color:#1d1d1f;background:#fff}
            h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}.sub{color:#666;margin:0 0 16px}
            .figures{display:flex;flex-wrap:wrap;gap:12px}.figure{border:1px solid #e2e2e2;border-radius:8px;padding:10px 14px;min-width:120px}
            .figure b{display:block;font-size:22px}.figure span{color:#666;font-size:12px}
            table{border-collapse:collapse;font-size:12px;width:100%}th,td{padding:4px 6px;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
            th{background:#f6f6f6;position:sticky;top:0}tfoot th{position:static;border-top:2px solid #bbb}.charts{display:flex;flex-wrap:wrap;gap:16px}
            .timeline{margin:10px 0 18px}.timeline h3{font-size:13px;margin:0 0 4px}.note{background:#fff4d6;border:1px solid #f0c36d;padding:6px 10px}
            .legend span{display:inline-block;margin-right:14px;font-size:12px}.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
            </style></head><body>
            <h1>\(esc(table.title))</h1>
            <p class="sub">\(esc(rangeText())) · generated from \(esc(summary.source)); prices are registered prices in currency units</p>
            <div class="figures">\(figures.map { "<div class=\"figure\"><b>\(esc($0.1))</b><span>\(esc($0.0))</span></div>" }.joined())</div>

            """
        html += "<h2>Revenue over time</h2>\n<div class=\"charts\">\n"
        let currencies = Array(Set(daily.map(\.currency))).sorted()
        if currencies.isEmpty { html += "<p>No purchases in this period.</p>\n" }
        for currency in currencies { html += revenueChart(daily.filter { $0.currency == currency }, currency: currency) }
        html += "</div>\n"
        html += "<h2>\(esc(table.title))</h2>\n"
        html += "<table><thead><tr>"
        html += table.columns.map { "<th>\(esc($0))</th>" }.joined() + "</tr></thead><tbody>\n"
        return html
    }

    /// One row of the table.
    static func row(_ cells: [String]) -> String {
        // Appended into one string: a string per cell, joined, was a tenth of a 100,000-row page.
        var html = "<tr>"
        html.reserveCapacity(cells.count * 24)
        for cell in cells {
            html.append("<td>")
            appendEscaped(cell, to: &html)
            html.append("</td>")
        }
        html.append("</tr>\n")
        return html
    }

    /// The table's end: its totals, how many rows it has, and whether `--limit` cut it.
    func foot(rows: Int, truncatedAt: Int?, totals: [[String]]) -> String {
        var html = "</tbody>"
        if !totals.isEmpty {
            html += "<tfoot>" + totals.map { "<tr class=\"total\">" + $0.map { "<th>\(esc($0))</th>" }.joined() + "</tr>" }.joined(separator: "\n") + "</tfoot>"
        }
        html += "</table>\n<p class=\"sub\">\(rows) row\(rows == 1 ? "" : "s")</p>\n"
        if let cut = truncatedAt {
            html += "<p class=\"note\">The report stops at --limit \(cut) rows: more rows match. Run it again with a higher --limit to see them all.</p>\n"
        }
        return html
    }

    /// The timelines of `first` (the first transactions of the `total` in the table) that
    /// `summary` has.
    func timelines(_ first: [String], of total: Int) -> String {
        let timelines = summary.timelines
        let ids = first.filter { timelines[$0] != nil }
        guard !ids.isEmpty else { return "" }
        var html =
            "<h2>Timelines</h2>\n<p class=\"legend\"><span><i style=\"background:#c7c7cc\"></i>waiting</span><span><i style=\"background:#0a84ff\"></i>active</span><span><i style=\"background:#ff9f0a\"></i>paused</span><span><i style=\"background:#30d158\"></i>finished</span><span><i style=\"background:#ff3b30\"></i>failed / cancelled</span><span>! anomaly</span><span>✕ cancelled by the ledger</span></p>\n"
        if total > ids.count {
            html += "<p class=\"sub\">The first \(ids.count) of \(total) transactions.</p>\n"
        }
        for id in ids { if let entries = timelines[id] { html += timeline(id, entries) } }
        return html
    }

    static let end = "</body></html>"

    /// The summary figures of one currency's revenue total.
    private static func figures(_ t: RevenueTotal) -> [(String, String)] {
        var figures: [(String, String)] = [("net revenue \(t.currency)", "\(t.net)"), ("gross \(t.currency)", "\(t.gross)")]
        if t.refunds > 0 { figures.append(("refunds \(t.currency)", "\(t.refunds)")) }
        figures.append(("units sold in \(t.currency)", String(t.units)))
        return figures
    }

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
        let width = 560.0, height = 200.0, left = 56.0, bottom = 24.0, top = 20.0
        let values = days.map { NSDecimalNumber(decimal: $0.net).doubleValue }
        let maxValue = max(values.max() ?? 1, 1)
        let barWidth = (width - left - 8) / Double(max(days.count, 1))
        var svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" role=\"img\"><title>Daily net revenue in \(esc(currency))</title>"
        svg += "<text x=\"\(left)\" y=\"14\" font-size=\"12\" font-weight=\"600\">\(esc(currency)) per day</text>"
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
                "<rect x=\"\(f(x + 1))\" y=\"\(f(height - bottom - h))\" width=\"\(f(max(barWidth - 2, 1)))\" height=\"\(f(h))\" fill=\"#0a84ff\"><title>\(day.day.description.prefix(10)): \(day.net) \(esc(currency))</title></rect>"
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
    /// A ledger's figures and charts (the timelines are added once the rows are known).
    init(ledger: Ledger, from: Timestamp?, to: Timestamp?) throws {
        // The totals and the chart from one query, as the fleet's page does.
        let days = try ledger.revenue(from: from, to: to, groupBy: .day)
        var counts = (transactions: 0, owned: 0, revoked: 0, failed: 0, lost: 0)
        for entry in try ledger.purchaseHistory(PurchaseHistoryQuery(from: from, to: to, limit: .max)) {
            counts.transactions += 1
            if entry.transaction.grantsOwnership { counts.owned += 1 }
            if entry.transaction.revoked { counts.revoked += 1 }
            if entry.transaction.state == .failed { counts.failed += 1 }
            if entry.contentLost { counts.lost += 1 }
        }
        self.init(
            revenue: RevenueLine.acrossPeriods(days), daily: DailyRevenue.perDay(days),
            counts: [
                ("transactions", String(counts.transactions)), ("purchased or restored", String(counts.owned)),
                ("revoked", String(counts.revoked)), ("failed", String(counts.failed)), ("with content lost", String(counts.lost)),
            ],
            source: "the ledger's projections")
    }
}
