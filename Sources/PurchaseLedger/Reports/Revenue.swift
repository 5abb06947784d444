import Foundation
import GRDB

/// Revenue of one product in one currency over a period.
public struct RevenueLine: Sendable, Hashable {
    public var product: String
    public var currency: String
    /// The registered unit price, a decimal string in currency units.
    public var price: String
    /// Purchases (restores are not payments), and units sold (quantities summed).
    public var purchases: Int
    public var units: Int
    /// Units of purchases later revoked (refunds, family-sharing revocations...).
    public var refundedUnits: Int
    public var gross: Decimal
    public var refunds: Decimal
    public var net: Decimal { gross - refunds }
}

extension Ledger {
    /// Revenue per product and currency of the purchases made in `from..<to` (all time when nil),
    /// at the registered prices. Sorted by currency, then net revenue, largest first.
    public func revenue(from: Timestamp? = nil, to: Timestamp? = nil) throws -> [RevenueLine] {
        try read { db in
            let rows = try Row.fetchAll(db, sql: """
                SELECT t.product, p.currency, p.price, count(*) AS purchases, sum(t.quantity) AS units,
                       sum(CASE WHEN t.revoked THEN t.quantity ELSE 0 END) AS refunded
                FROM transactions t JOIN products p ON p.product = t.product
                WHERE t.state = 'purchased' AND t.purchased_at_ms >= ? AND t.purchased_at_ms < ?
                GROUP BY t.product, p.currency, p.price
                """, arguments: [from.map(Projector.ms) ?? Int64.min, to.map(Projector.ms) ?? Int64.max])
            return rows.map { row in
                let price = Decimal(string: row["price"], locale: Locale(identifier: "en_US_POSIX")) ?? 0
                let units: Int = row["units"]
                let refunded: Int = row["refunded"]
                return RevenueLine(product: row["product"], currency: row["currency"], price: row["price"], purchases: row["purchases"],
                                   units: units, refundedUnits: refunded, gross: price * Decimal(units), refunds: price * Decimal(refunded))
            }.sorted { ($0.currency, $1.net, $0.product) < ($1.currency, $0.net, $1.product) }
        }
    }
}
