package import GRDB
package import PostgresNIO
import PurchaseLedger
import PurchaseLedgerFleet

extension FleetStore {
    /// A query's rows as GRDB rows, for tests that compare them with a ledger's own rows or read
    /// them as GRDB reads SQLite's (`row["seq"] as Int64`). The fleet module itself links no GRDB.
    package func fetch(_ query: PostgresQuery) async throws -> [Row] {
        try await fetchRows(query).map { row in
            let values = row.values.map { $0.databaseValue as (any DatabaseValueConvertible)? }
            return Row(Dictionary(zip(row.names, values), uniquingKeysWith: { first, _ in first }))
        }
    }
}
