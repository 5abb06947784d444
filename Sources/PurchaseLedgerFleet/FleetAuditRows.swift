import PostgresNIO
import PurchaseLedger

/// One projection table as the fleet audit compares it: the rows a replay of a ledger's stored
/// events gives against the rows the store holds for that ledger, in one canonical form both
/// sides can make without holding either side's rows for the whole fleet.
///
/// A row's canonical form is its fields as a binary `COPY` writes them (what a ship sent),
/// except that the store holds personal values the events hold only as refs: a personal column
/// counts only as NULL or not, and `transactions.user_id` only by which transactions share a user
/// (the replay's user refs against the store's values, labelled in the order the rows' keys
/// sort). A ledger's table digests to the SHA-256 of its rows so formed, in key order.
struct AuditTable: Sendable {
    let table: Projector.Table
    /// The columns the store holds: the table's, and for `transactions` the catalog's copy.
    let columns: [String]
    let types: [CopyBinary.ColumnType]
    /// Per column: compared as NULL or not only.
    let personal: [Bool]
    /// `transactions.user_id`'s place.
    let userAt: Int?

    /// The columns of the personal fields of events, per table: what erasure masks, and
    /// `downloads.url` and `product_views.error_message` (a registered URL and a store page's
    /// load error belong to no user, but the events hold them as refs).
    static let personalColumns: [String: Set<String>] = {
        var columns = ErasedRows.personalColumns.mapValues(Set.init)
        columns["downloads", default: []].insert("url")
        columns["product_views", default: []].insert("error_message")
        return columns
    }()

    init(_ table: Projector.Table, types serverTypes: [String: CopyBinary.ColumnType]) throws {
        self.table = table
        var columns = table.columns
        if table.name == Projector.Table.transactions.name { columns += FleetStore.catalogColumns.map(\.column) }
        self.columns = columns
        types = try columns.map { column in
            guard let type = serverTypes[column] else {
                throw FleetError(.notAFleetStore, "the fleet store's \(table.name) table has no column \(column)")
            }
            return type
        }
        let personalNames = Self.personalColumns[table.name] ?? []
        let userAt = table.name == Projector.Table.transactions.name ? columns.firstIndex(of: "user_id") : nil
        self.userAt = userAt
        personal = columns.enumerated().map { i, name in personalNames.contains(name) && i != userAt }
    }

    /// `SELECT ledger_id, <columns> FROM <table>`, ordered by ledger.
    var selectAll: String {
        "SELECT ledger_id::text, \(columns.joined(separator: ", ")) FROM \(table.name) ORDER BY ledger_id"
    }

    /// The same for one ledger (`$1`).
    var selectOne: String {
        "SELECT ledger_id::text, \(columns.joined(separator: ", ")) FROM \(table.name) WHERE ledger_id = $1::uuid"
    }

    /// One row in canonical form: its fields, and its user (nil: no user column; `.some(nil)`:
    /// NULL). `userErased`: the user is one the store erased from this ledger, so the value must
    /// be exactly its marker, `[erased <ref>]`, not merely group like the events' user.
    struct Row {
        var fields: [UInt8]
        var keyLength: Int
        var user: [UInt8]??
        var userErased = false
    }

    /// The ref in an erased user's marker (`[erased 12]`), or nil.
    static func erasedRef(_ text: [UInt8]) -> Int64? {
        let prefix = Array(PersonalValues.erasedPrefix.utf8)
        guard text.count > prefix.count + 1, text.starts(with: prefix), text.last == UInt8(ascii: "]") else { return nil }
        return Int64(String(decoding: text[prefix.count..<(text.count - 1)], as: UTF8.self))
    }

    /// A row of a replay (``DetachedReplay/rows()``, with the catalog's columns for
    /// `transactions`).
    /// `erased`: the refs of the users the store erased from this ledger (`erased_users`).
    func canonical(replayed row: [ColumnValue], erased: Set<Int64> = []) -> Row {
        var out = CopyBinary(fieldsOnly: ())
        var user: [UInt8]?? = .none
        var userErased = false
        var keyLength = 0
        for (i, value) in row.enumerated() {
            if i == userAt {
                let text = value.string.map { Array($0.utf8) }
                user = .some(text)
                userErased = text.flatMap(Self.erasedRef).map(erased.contains) ?? false
            } else if personal[i] {
                out.field(!value.isNull)
            } else if !out.field(value, as: types[i]) {
                // A value the column cannot hold (a ship would have been refused): it differs
                // from whatever the store holds.
                out.field(bytes: Array("not storable: \(value)".utf8))
            }
            if i + 1 == table.keyColumns { keyLength = out.buffer.readableBytes }
        }
        return Row(fields: Array(out.buffer.readableBytesView), keyLength: keyLength, user: user, userErased: userErased)
    }

    /// A row the store holds (`selectAll`'s: the ledger id first).
    func canonical(stored row: PostgresRow, erased: Set<Int64> = []) -> Row {
        var out = CopyBinary(fieldsOnly: ())
        var user: [UInt8]?? = .none
        var userErased = false
        var keyLength = 0
        for (index, cell) in row.enumerated() where index > 0 {
            let i = index - 1
            if i == userAt {
                let text = cell.bytes.map { Array($0.readableBytesView) }
                user = .some(text)
                userErased = text.flatMap(Self.erasedRef).map(erased.contains) ?? false
            } else if personal[i] {
                out.field(cell.bytes != nil)
            } else {
                out.field(raw: cell.bytes)
            }
            if i + 1 == table.keyColumns { keyLength = out.buffer.readableBytes }
        }
        return Row(fields: Array(out.buffer.readableBytesView), keyLength: keyLength, user: user, userErased: userErased)
    }

    /// The digest of one ledger's rows of this table, in any order.
    static func digest(_ rows: [Row]) -> [UInt8] {
        var bytes: [UInt8] = []
        var labels: [[UInt8]: Int32] = [:]
        for row in rows.sorted(by: { $0.fields.lexicographicallyPrecedes($1.fields) }) {
            bytes += row.fields
            if case .some(.some(let user)) = row.user, row.userErased {
                // An erased user's marker, exactly: -2, then its bytes.
                withUnsafeBytes(of: Int32(-2).bigEndian) { bytes += $0 }
                withUnsafeBytes(of: Int32(user.count).bigEndian) { bytes += $0 }
                bytes += user
            } else if case .some(let user) = row.user {
                let label: Int32 =
                    user.map { user in
                        if let known = labels[user] { return known }
                        labels[user] = Int32(labels.count)
                        return Int32(labels.count - 1)
                    } ?? -1
                withUnsafeBytes(of: label.bigEndian) { bytes += $0 }
            }
        }
        return HashChain.sha256(bytes)
    }

    /// A value of a stored row, for a message.
    static func value(_ cell: PostgresCell) -> String {
        guard cell.bytes != nil else { return "NULL" }
        if let n = try? cell.decode(Int64.self) { return String(n) }
        if let flag = try? cell.decode(Bool.self) { return String(flag) }
        if let d = try? cell.decode(Double.self) { return String(d) }
        if let text = try? cell.decode(String.self) { return String(reflecting: text) }
        return "(a value of type \(cell.dataType))"
    }
}

extension FleetStore {
    /// Where one ledger's rows of `table` differ from a replay of its stored events, through
    /// seq `head`: the first row missing, extra or different (the first different column; a
    /// personal column says only which side is empty), in key order.
    func projectionDifference(ledger: String, head: Int64, table: AuditTable, erased: Set<Int64>) async throws -> String {
        var replay = DetachedReplay()
        for e in try await storedEvents(through: [ledger: head])[ledger] ?? [] {
            try replay.apply(
                seq: e.seq, type: e.type, at: e.at, recordedAt: e.recorded, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger, version: e.version,
                payload: e.payload)
        }
        let projections = replay.rows()
        var replayed = projections.first { $0.table.name == table.table.name }?.rows ?? []
        if table.table.name == Projector.Table.transactions.name { replayed = FleetStore.withCatalog(replayed, of: projections) }
        var expected: [[UInt8]: (row: AuditTable.Row, values: [ColumnValue])] = [:]
        for values in replayed {
            let row = table.canonical(replayed: values, erased: erased)
            expected[Array(row.fields.prefix(row.keyLength))] = (row, values)
        }
        var stored: [[UInt8]: (row: AuditTable.Row, cells: PostgresRow)] = [:]
        var binds = PostgresBindings()
        binds.append(ledger)
        for try await cells in try await connection.query(PostgresQuery(unsafeSQL: table.selectOne, binds: binds), logger: logger) {
            let row = table.canonical(stored: cells, erased: erased)
            stored[Array(row.fields.prefix(row.keyLength))] = (row, cells)
        }
        let key = { (values: [ColumnValue]) in values.prefix(table.table.keyColumns).map(\.description).joined(separator: ", ") }
        for k in Set(expected.keys).union(stored.keys).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            switch (expected[k], stored[k]) {
            case (let e?, nil):
                return "\(table.table.name) has no row (\(key(e.values))), which a replay of the ledger's events gives: removed in the store"
            case (nil, let s?):
                let values = s.cells.enumerated().filter { $0.offset > 0 && $0.offset <= table.table.keyColumns }.map { AuditTable.value($0.element) }
                return "\(table.table.name) holds a row (\(values.joined(separator: ", "))) that a replay of the ledger's events does not give: added in the store"
            case (let e?, let s?):
                guard e.row.fields != s.row.fields else { continue }
                // The first column whose canonical field differs.
                for (i, column) in table.columns.enumerated() where i != table.userAt {
                    let cell = s.cells[s.cells.index(s.cells.startIndex, offsetBy: i + 1)]
                    let value = e.values[i]
                    if table.personal[i] {
                        if value.isNull != (cell.bytes == nil) {
                            return "\(table.table.name) row (\(key(e.values))): \(column) is \(cell.bytes == nil ? "empty" : "set") in the store, "
                                + "but \(value.isNull ? "empty" : "set") in a replay of the ledger's events: altered in the store"
                        }
                        continue
                    }
                    var mine = CopyBinary(fieldsOnly: ())
                    if !mine.field(value, as: table.types[i]) { mine.field(bytes: []) }
                    var theirs = CopyBinary(fieldsOnly: ())
                    theirs.field(raw: cell.bytes)
                    if mine.buffer != theirs.buffer {
                        return "\(table.table.name) row (\(key(e.values))): \(column) is \(AuditTable.value(cell)) in the store, "
                            + "\(value.description) in a replay of the ledger's events: altered in the store"
                    }
                }
            case (nil, nil):
                continue
            }
        }
        return
            "\(table.table.name): user_id does not group the transactions by user as the ledger's events do, or holds a value where the store erased the user: altered in the store"
    }
}
