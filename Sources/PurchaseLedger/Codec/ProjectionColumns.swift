/// Where the columns of one query's rows are, found by name once.
///
/// GRDB finds a column by name again at every read, lowercasing the name and every column's
/// name to compare them: decoding the transactions and downloads of a 100,000-row history report
/// by name spent about 1 s there. ``StatementColumns`` resolves the positions once per statement
/// and reads every row by position.
struct ColumnPositions: Sendable {
    private let positions: [String: Int]

    /// The positions of the columns `names` (by lowercase name; the first of a repeated name, as
    /// GRDB reads it).
    init(names: some Sequence<String>) {
        var positions: [String: Int] = [:]
        for (i, name) in names.enumerated() {
            let name = name.lowercased()
            if positions[name] == nil { positions[name] = i }
        }
        self.positions = positions
    }

    subscript(_ columnName: String) -> Int? { positions[columnName] }
}

/// The columns of one projection row, read by name (lowercase) or by position: the current row
/// of a SQLite statement (`StatementColumns`, in `Persistence/Projections`), a PostgreSQL row (the
/// fleet store's, in its own module), or a row of values (``ValueColumns``). The record
/// decoders are generic over it, so each reader's calls are specialized, not dispatched.
package protocol ProjectionColumns {
    /// Where `column` is in the result (nil: it is not).
    func position(_ column: String) -> Int?
    func string(at position: Int) -> String?
    func int64(at position: Int) -> Int64?
    func double(at position: Int) -> Double?
    /// Where a declaration's columns were found in this result, kept for its next rows (nil:
    /// found again for each row).
    var positionCache: PositionCache? { get }
}

extension ProjectionColumns {
    package func string(_ column: String) -> String? { position(column).flatMap { string(at: $0) } }
    package func int64(_ column: String) -> Int64? { position(column).flatMap { int64(at: $0) } }
    package func double(_ column: String) -> Double? { position(column).flatMap { double(at: $0) } }
    package func bool(_ column: String) -> Bool { (int64(column) ?? 0) != 0 }
    package func int(_ column: String) -> Int? { int64(column).map { Int(truncatingIfNeeded: $0) } }

    /// The positions of `columns` (a declaration's, named by `key`), found once per result.
    func positions(_ key: ObjectIdentifier, of columns: [ProjectionColumn]) -> [Int?] {
        if let known = positionCache?.lists[key] { return known }
        let found = columns.map { position($0.name) }
        positionCache?.lists[key] = found
        return found
    }
}

/// Where declarations' columns are in one result, found at its first row and kept for the rest.
package final class PositionCache: @unchecked Sendable {  // unchecked: used by the one task that reads its result
    var lists: [ObjectIdentifier: [Int?]] = [:]

    package init() {}
}
