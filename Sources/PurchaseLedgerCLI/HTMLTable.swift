import Foundation

extension HTMLReport {
    /// How a report's columns are laid out on a page: one heading per group of columns, each cell
    /// styled by what it holds. Ids, amounts and counts never wrap; a time wraps only between its
    /// date and its time; only free text (downloads, errors, messages) wraps where words end. The
    /// history views' 20 columns fold into 10 headings, so the table fits a 1280-pixel page.
    struct Layout {
        /// One heading: its `main` columns' values side by side, then each non-empty `extras`
        /// column under them, small, with its name.
        struct Group {
            var title: String
            var main: [Int]
            var extras: [(label: String, index: Int)]
            var kind: Kind
            var numeric: Bool { kind == .number }
            var columns: [Int] { main + extras.map(\.index) }
        }

        enum Kind { case id, time, number, text }

        let groups: [Group]

        /// Columns folded under another's heading where a view has them all (the history views).
        static let folds: [(title: String, main: [String], extras: [String])] = [
            ("transaction", ["transaction"], ["store id", "original"]),
            ("product", ["product"], ["kind"]),
            ("paid", ["price", "currency"], ["storefront", "paid as", "offer"]),
            ("outcome", ["outcome"], ["deferred", "finished", "revoked"]),
        ]

        static let numbers: Set<String> = [
            "qty", "price", "purchases", "units", "refunded units", "gross", "refunds", "net", "count", "share", "progress", "attempts",
            "events", "code",
        ]
        static let times: Set<String> = ["purchased", "deferred", "finished", "last activity", "since"]
        static let texts: Set<String> = ["downloads", "error", "message", "revoked"]
        /// Folded columns that wrap between words (the others stay on one line).
        static let wrappingExtras: Set<String> = ["storefront", "paid as", "offer"]

        static func kind(_ column: String) -> Kind {
            numbers.contains(column) ? .number : times.contains(column) ? .time : texts.contains(column) ? .text : .id
        }

        init(_ columns: [String]) {
            let index = Dictionary(columns.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
            let folds = Self.folds.filter { fold in (fold.main + fold.extras).allSatisfy { index[$0] != nil } }
            let folded = Set(folds.flatMap { $0.main.dropFirst() + $0.extras })
            var groups: [Group] = []
            for (i, column) in columns.enumerated() where !folded.contains(column) {
                if let fold = folds.first(where: { $0.main.first == column }) {
                    let kind: Kind = fold.main.allSatisfy { Self.kind($0) == .number } || fold.title == "paid" ? .number : Self.kind(column)
                    groups.append(
                        Group(title: fold.title, main: fold.main.map { index[$0]! }, extras: fold.extras.map { ($0, index[$0]!) }, kind: kind))
                } else {
                    groups.append(Group(title: column, main: [i], extras: [], kind: Self.kind(column)))
                }
            }
            self.groups = groups
        }

        /// One row (`cell`: `td`, or `th` for a total), and which columns hold a value.
        func row(_ cells: [String], filled: inout [Bool], cell: String = "td") -> String {
            var html = "<tr>"
            html.reserveCapacity(cells.count * 32)
            for group in groups {
                switch group.kind {
                case .text: html += "<\(cell) class=\"text\">"
                case .number: html += "<\(cell) class=\"num\">"
                case .time: html += "<\(cell) class=\"t\">"
                case .id: html += "<\(cell)>"
                }
                var first = true
                for i in group.main where i < cells.count && !cells[i].isEmpty {
                    filled[i] = true
                    if !first { html += " " }
                    first = false
                    Self.append(cells[i], kind: group.kind, to: &html)
                }
                for (label, i) in group.extras where i < cells.count && !cells[i].isEmpty {
                    filled[i] = true
                    let kind = Self.wrappingExtras.contains(label) ? .text : Self.kind(label)
                    // The name may go on a line of its own; the value stays whole (or wraps as text).
                    html += "<div class=\"x t\"><span>"
                    html += label
                    html += "</span> "
                    // An id (a store id, an original transaction) on one line, like an id cell.
                    if kind == .id { html += "<span class=\"nw\">" }
                    Self.append(cells[i], kind: kind, to: &html)
                    if kind == .id { html += "</span>" }
                    html += "</div>"
                }
                html += "</\(cell)>"
            }
            return html + "</tr>\n"
        }

        /// A value, escaped. A time (`2024-03-01T00:06:42.470Z`) may go on two lines, its date and
        /// its time, and nowhere else. Free text wraps between words, never inside a word with a
        /// hyphen (`pack042-part1`: a browser would break an id there), and a path after a slash; a list of downloads
        /// (`a; b`) shows one per line.
        static func append(_ value: String, kind: Kind, to html: inout String) {
            if kind == .text {
                for (n, item) in value.components(separatedBy: "; ").enumerated() {
                    if n > 0 { html += ";<br>" }
                    for (m, word) in item.split(separator: " ", omittingEmptySubsequences: false).enumerated() {
                        if m > 0 { html += " " }
                        // A time wraps between its date and its time, like a time cell.
                        if word.count == 24, word.dropFirst(10).first == "T" {
                            append(String(word), kind: .time, to: &html)
                            continue
                        }
                        // A path breaks after a slash; each of its parts, like any word, stays whole.
                        for (k, part) in word.split(separator: "/", omittingEmptySubsequences: false).enumerated() {
                            if k > 0 { html += "/<wbr>" }
                            let keep = part.contains("-") && part.count <= 40
                            if keep { html += "<span class=\"nw\">" }
                            appendEscaped(String(part), to: &html)
                            if keep { html += "</span>" }
                        }
                    }
                }
            } else if kind == .time, let t = value.firstIndex(of: "T"), value.count >= 20 {
                html += "<span class=\"nw\">"
                appendEscaped(String(value[..<t]), to: &html)
                html += "</span> <span class=\"nw\">"
                appendEscaped(String(value[value.index(after: t)...]), to: &html)
                html += "</span>"
            } else {
                appendEscaped(value, to: &html)
            }
        }
    }
}
