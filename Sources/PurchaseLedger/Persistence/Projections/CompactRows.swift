import Foundation
import GRDB

extension Projector {
    /// How a table stored compactly (migration 0012: `transaction_rows` behind the view
    /// `transactions`, `download_rows` behind `downloads`) holds a row: the view gives the row
    /// back as the projection's columns say it, and only writers see this.
    ///
    /// - A **coded** column (a text that repeats from row to row: a product id, a state, a price,
    ///   a currency, a content id; never a personal value) holds the number of its text in
    ///   `projection_texts`, 1 or 2 bytes instead of up to 30 or more.
    /// - A **relative** time (a transaction's purchase, failure, finish and revocation; a
    ///   download's last activity, finish and copy-out) holds its difference from the row's first
    ///   time (queued, started), 2 to 4 bytes instead of 6 for times seconds to hours apart, or
    ///   itself when that time is NULL.
    ///
    /// On the shared 1,000,000-event workload the two tables take 23.9 MB instead of 32.7.
    struct CompactRow: Sendable {
        /// Positions of the coded columns in the table's columns.
        let coded: [Int]
        /// Positions of the relative times, each with the position of the time it is relative to.
        let relative: [(time: Int, to: Int)]

        init(_ declared: [ProjectionColumn], coded: [String], relative: [(time: String, to: String)]) {
            func position(_ name: String, _ type: ColumnType) -> Int {
                guard let i = declared.firstIndex(where: { $0.name == name }), declared[i].type == type else {
                    preconditionFailure("a compact projection table declares no \(type) column \(name)")
                }
                return i
            }
            self.coded = coded.map { position($0, .text) }
            self.relative = relative.map { (position($0.time, .integer), position($0.to, .integer)) }
        }

        /// `row` as the table stores it: texts replaced by their codes (made in `texts` when new),
        /// times by their differences.
        func store(_ row: inout [ColumnValue], _ texts: ProjectionTexts, _ db: Database) throws {
            for (time, base) in relative {
                if case .int64(let t) = row[time], case .int64(let b) = row[base] { row[time] = .int64(t &- b) }
            }
            for i in coded {
                switch row[i] {
                case .string(let text): row[i] = .int64(try texts.code(text, db))
                case .null: break
                case .int64, .double, .blob:
                    throw LedgerError(.storage, "a projection row holds a value that is not text in a column of texts")
                }
            }
        }
    }

    /// The codes of `projection_texts`, read or made as rows are written, each text told apart by
    /// its bytes. No writer changes or deletes a code once committed, so the codes read stay
    /// right for as long as the connection lives; one made in a transaction that is rolled back
    /// is gone with it, so ``forgetMade()`` must run after a rollback
    /// (``LedgerFile/immediateTransaction(_:_:_:)`` does).
    final class ProjectionTexts: @unchecked Sendable {  // unchecked: used only under the writer's lock
        // By their bytes, as SQLite tells texts apart: Swift's `String` takes canonically
        // equivalent texts as equal ("é" and "e" + U+0301), and keyed by it the second of two
        // such error domains was stored with the first one's code, its bytes lost.
        private var codes: [ExactText: Int64] = [:]
        private var made: [ExactText] = []

        func code(_ text: String, _ db: Database) throws -> Int64 {
            let text = ExactText(id: text)
            if let code = codes[text] { return code }
            let code: Int64
            if let found = try Int64.fetchOne(db.cachedStatement(sql: "SELECT code FROM projection_texts WHERE text = ?"), arguments: [text.id]) {
                code = found
            } else {
                try db.cachedStatement(sql: "INSERT INTO projection_texts (text) VALUES (?)").execute(arguments: [text.id])
                code = db.lastInsertedRowID
                made.append(text)
            }
            codes[text] = code
            return code
        }

        /// Forgets the codes this made: after a rollback they are not in the file.
        func forgetMade() {
            for text in made { codes[text] = nil }
            made = []
        }

        /// Keeps the codes this made: their transaction committed.
        func keepMade() { made = [] }
    }
}

extension Projector {
    /// The views migration 0012 made, by name.
    static let compactViews = ["transactions", "downloads", "owned_content_history_view"]

    /// Makes each view of migration 0012 again where the file's differs from its statement or is
    /// missing (changed or dropped with sqlite3): a view holds no data, so `rebuild` can. An
    /// object of another kind under its name (a table put in its place) is left for `verify` to
    /// name. Returns the views made again.
    static func restoreViews(_ db: Database) throws -> [String] {
        guard try Migrations.applied("0012_compact_projections", db) else { return [] }
        var restored: [String] = []
        for view in compactViews {
            guard let statement = Migrations.statement(of: "0012_compact_projections", startingWith: "CREATE VIEW \(view) AS") else {
                preconditionFailure("migration 0012 makes the view \(view)")
            }
            let stored = try Row.fetchOne(db, sql: "SELECT type, sql FROM sqlite_master WHERE name = ?", arguments: [view])
            if let stored, stored["type"] as String != "view" || stored["sql"] as String == statement { continue }
            try db.execute(sql: "DROP VIEW IF EXISTS \(view)")
            try db.execute(sql: statement)
            restored.append(view)
        }
        return restored
    }
}
