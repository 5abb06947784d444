import Foundation
import PurchaseLedger

/// Runs work on a thread of its own, in the order it was given, while the caller goes on: a
/// fleet report reads and decodes the next rows while the ones before are formatted and written
/// (each about half of a 100,000-row report's time). Work goes in batches of 256; at most 16
/// batches wait, so memory stays flat however many rows come. Used from one task at a time.
final class OrderedWriter: @unchecked Sendable {  // unchecked: `batch` is touched by the one task that adds; the queue runs only what it is handed
    struct Batch: @unchecked Sendable {  // Run on the writer's queue only.
        var work: [() -> Void] = []
    }

    let queue = DispatchQueue(label: "purchase-ledger.report-writer")
    let slots = DispatchSemaphore(value: 16)
    var batch = Batch()

    func add(_ work: @escaping () -> Void) {
        batch.work.append(work)
        if batch.work.count == 256 { flush() }
    }

    func flush() {
        guard !batch.work.isEmpty else { return }
        let ready = batch
        batch = Batch()
        slots.wait()
        queue.async { [slots] in
            for work in ready.work { work() }
            slots.signal()
        }
    }

    /// Runs what is left and waits for all of it.
    func finish() {
        flush()
        queue.sync {}
    }
}

/// Writes a report's rows as they come, so that memory stays flat in the number of rows: a CSV
/// line or a JSON object at a time; a table in blocks of 1,000 rows whose columns are as wide as
/// the widest cell so far. An HTML page is the exception: it leads with its rows' count, so it
/// holds their HTML (about 600 bytes a history row) until the last one. It takes one row more than `--limit` to know
/// whether the limit cut the report, and writes at most `--limit`.
final class RowStream: @unchecked Sendable {  // Used by one command, from one task at a time.
    let format: ReportCommand.Format
    let columns: [String]
    let limit: Int
    let console = Console.current
    let html: HTMLReport?
    /// An HTML page's rows, held until its head (which leads with their count) is written.
    private var htmlRows = ""
    /// Which columns hold a value in some row (an HTML page leaves the others out).
    private var filled: [Bool]
    private let layout: HTMLReport.Layout
    private(set) var count = 0
    private(set) var truncated = false
    /// The first transactions, whose timelines an HTML page draws.
    private(set) var firstTransactions: [String] = []
    var block: [[String]] = []
    var widths: [Int]

    init(_ command: ReportCommand, columns: [String], html: HTMLReport?) {
        format = command.format
        self.columns = columns
        limit = command.limit
        self.html = html
        widths = columns.map(\.width)
        filled = Array(repeating: false, count: columns.count)
        layout = HTMLReport.Layout(columns)
        switch format {
        case .csv: console.printData(csvLine(columns))
        case .json: console.write("{\"rows\":[")
        case .html: break
        case .table: break
        }
    }

    func add(_ cells: @autoclosure () -> [String], json: @autoclosure () -> String, transaction: String?) {
        guard count < limit else {
            truncated = true
            return
        }
        count += 1
        if let transaction, firstTransactions.count < HTMLReport.maxTimelines, !firstTransactions.contains(transaction) {
            firstTransactions.append(transaction)
        }
        switch format {
        case .csv: console.printData(csvLine(cells()))
        case .json: console.write((count == 1 ? "" : ",\n") + json())
        case .html: htmlRows += layout.row(cells(), filled: &filled)
        case .table:
            // A line break in a cell (a signed field can hold one) would start a row of its own.
            block.append(cells().map { $0.contains(where: \.isNewline) ? Self.oneLine($0) : $0 })
            if block.count == 1000 { flushBlock() }
        }
    }

    /// `text` with its line breaks and tabs written as `\n`, `\r` and `\t`.
    static func oneLine(_ text: String) -> String {
        var out = ""
        for c in text.unicodeScalars {
            switch c {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default: out.unicodeScalars.append(c)
            }
        }
        return out
    }

    func flushBlock() {
        // Each cell's width once, for the columns' widths and for its padding.
        let cellWidths = block.map { $0.map(\.width) }
        for row in cellWidths { for (i, width) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], width) } }
        var text: [UInt8] = []
        if count <= block.count {
            var header: [UInt8] = []
            appendPadded(columns, widths: columns.map(\.width), to: &header)
            text.append(contentsOf: console.bold(String(decoding: header, as: UTF8.self)).utf8)
        }
        // The block's lines as bytes, in one string: a string appended to cell by cell (a cell,
        // then its spaces) was a quarter of a 100,000-row table's time.
        text.reserveCapacity(text.count + block.count * (widths.reduce(0, +) + 2 * widths.count + 1))
        for (row, rowWidths) in zip(block, cellWidths) {
            if !text.isEmpty { text.append(0x0A) }
            appendPadded(row, widths: rowWidths, to: &text)
        }
        if !text.isEmpty { console.print(String(decoding: text, as: UTF8.self)) }
        block.removeAll(keepingCapacity: true)
    }

    /// Appends the row's line (no line break): each cell but the last padded to its column's
    /// width, two spaces apart. `cellWidths` are the cells' own widths.
    func appendPadded(_ row: [String], widths cellWidths: [Int], to line: inout [UInt8]) {
        for (i, cell) in row.enumerated() {
            line.append(contentsOf: cell.utf8)
            guard i < row.count - 1 else { break }
            line.append(contentsOf: repeatElement(UInt8(ascii: " "), count: max(0, (i < widths.count ? widths[i] : 0) - cellWidths[i]) + 2))
        }
    }

    /// Ends the report: the row count, and a note when `--limit` cut it. `timelines` gives the
    /// HTML page the timelines of its first transactions.
    func finish(timelines: ([String]) throws -> [String: [Ledger.TimelineEntry]]) rethrows {
        let note = "note: the report stops at --limit \(limit) rows; more rows match (raise --limit to see them)"
        switch format {
        case .csv:
            if truncated { console.error(note) }
        case .json:
            console.print("],\"truncated\":\(truncated)" + (truncated ? ",\"limit\":\(limit)" : "") + "}")
        case .html:
            guard var html else { return }
            html.summary.timelines = try timelines(firstTransactions)
            html.firstTransactions = firstTransactions
            // The rows in pieces of about 64 KiB, cut after a row: never a second copy of them all.
            console.write(html.pageHead(count: count, filled: filled, truncatedAt: truncated ? limit : nil))
            var start = htmlRows.utf8.startIndex
            while start < htmlRows.utf8.endIndex {
                var end = htmlRows.utf8.index(start, offsetBy: 1 << 16, limitedBy: htmlRows.utf8.endIndex) ?? htmlRows.utf8.endIndex
                while end < htmlRows.utf8.endIndex && htmlRows.utf8[htmlRows.utf8.index(before: end)] != UInt8(ascii: "\n") {
                    end = htmlRows.utf8.index(after: end)
                }
                console.write(String(htmlRows[start..<end]))
                start = end
            }
            htmlRows = ""
            console.print(html.pageTail(count: count, filled: filled, truncatedAt: truncated ? limit : nil))
        case .table:
            flushBlock()
            console.print("\(count) row\(count == 1 ? "" : "s")" + (truncated ? " (cut by --limit)" : ""))
            if truncated { console.error(note) }
        }
    }
}
