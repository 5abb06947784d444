import Foundation
import GRDB

/// Revenue of one product in one currency over a period.
public struct RevenueLine: Sendable, Hashable {
    /// The period when grouped (``RevenuePeriod``): `2024-03-01`, `2024-W09` or `2024-03`; nil otherwise.
    public var period: String?
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

/// All the revenue of one currency: the sum of its ``RevenueLine``s.
public struct RevenueTotal: Sendable, Hashable {
    public var currency: String
    public var purchases: Int
    public var units: Int
    public var refundedUnits: Int
    public var gross: Decimal
    public var refunds: Decimal
    public var net: Decimal { gross - refunds }

    /// One total per currency, sorted by currency. Amounts in different currencies are never added.
    public static func totals(of lines: [RevenueLine]) -> [RevenueTotal] {
        var byCurrency: [String: RevenueTotal] = [:]
        for line in lines {
            byCurrency[line.currency, default: RevenueTotal(currency: line.currency, purchases: 0, units: 0, refundedUnits: 0, gross: 0, refunds: 0)]
                .add(line)
        }
        return byCurrency.values.sorted { $0.currency < $1.currency }
    }

    private mutating func add(_ line: RevenueLine) {
        purchases += line.purchases
        units += line.units
        refundedUnits += line.refundedUnits
        gross += line.gross
        refunds += line.refunds
    }
}

/// How revenue lines are split over time, by purchase date in UTC.
public enum RevenuePeriod: String, Sendable, Hashable, CaseIterable {
    /// `2024-03-01`.
    case day
    /// ISO 8601 weeks, Monday to Sunday: `2024-W09` (the week-numbering year, which differs from the
    /// calendar year for a few days around New Year).
    case week
    /// `2024-03`.
    case month

    /// The label of the period holding day `day` (days since 1970-01-01, UTC).
    public func label(ofDay day: Int64) -> String {
        let (y, m, d) = RFC3339.civilFromDays(Int(day))
        switch self {
        case .day:
            return String(format: "%04d-%02d-%02d", y, m, d)
        case .month:
            return String(format: "%04d-%02d", y, m)
        case .week:
            // ISO weekday 1 (Monday)...7; 1970-01-01 was a Thursday.
            let weekday = Int((day % 7 + 7 + 3) % 7) + 1
            let thursday = day - Int64(weekday) + 4
            let (year, _, _) = RFC3339.civilFromDays(Int(thursday))
            let yearStart = Int64(RFC3339.daysFromCivil(year: year, month: 1, day: 1))
            return String(format: "%04d-W%02d", year, Int((thursday - yearStart) / 7) + 1)
        }
    }
}

extension Ledger {
    /// Revenue per product and currency of the purchases made in `from..<to` (all time when nil),
    /// at the registered prices; split by period when `groupBy` is given. Sorted by period, then
    /// currency, then net revenue, largest first. ``RevenueTotal/totals(of:)`` sums them per currency.
    ///
    /// ```swift
    /// let march = try ledger.revenue(from: Timestamp.parse("2024-03-01T00:00:00Z"), to: Timestamp.parse("2024-04-01T00:00:00Z"))
    /// for total in RevenueTotal.totals(of: march) { print(total.currency, total.net) }
    /// let weekly = try ledger.revenue(groupBy: .week)   // one line per week, product and currency
    /// ```
    public func revenue(from: Timestamp? = nil, to: Timestamp? = nil, groupBy: RevenuePeriod? = nil) throws -> [RevenueLine] {
        let rows = try read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT \(groupBy == nil ? "0" : "t.purchased_at_ms / 86400000 - (t.purchased_at_ms % 86400000 < 0)") AS day,
                           t.product, p.currency, p.price, count(*) AS purchases, sum(t.quantity) AS units,
                           sum(CASE WHEN t.revoked THEN t.quantity ELSE 0 END) AS refunded
                    FROM transactions t JOIN products p ON p.product = t.product
                    WHERE t.state = 'purchased' AND t.purchased_at_ms >= ? AND t.purchased_at_ms < ?
                    GROUP BY day, t.product, p.currency, p.price
                    """, arguments: [from.map(Projector.ms) ?? Int64.min, to.map(Projector.ms) ?? Int64.max])
        }
        return RevenueLine.lines(
            rows.map(RevenueGroup.init(row:)), groupBy: groupBy)
    }
}

/// One group of purchases as SQL sums them (SQLite or the fleet's PostgreSQL): a day, a product
/// and a price; the Swift side makes ``RevenueLine``s of them.
package struct RevenueGroup {
    package var day: Int64
    package var product: String
    package var currency: String
    package var price: String
    package var purchases: Int
    package var units: Int
    package var refundedUnits: Int

    /// A group as both stores' revenue queries return it, in SQLite and in PostgreSQL (columns
    /// day, product, currency, price, purchases, units, refunded).
    package init(row: Row) {
        self.init(
            day: row["day"], product: row["product"], currency: row["currency"], price: row["price"],
            purchases: row["purchases"], units: row["units"], refundedUnits: row["refunded"])
    }

    package init(day: Int64, product: String, currency: String, price: String, purchases: Int, units: Int, refundedUnits: Int) {
        self.day = day
        self.product = product
        self.currency = currency
        self.price = price
        self.purchases = purchases
        self.units = units
        self.refundedUnits = refundedUnits
    }
}

extension RevenueLine {
    /// Lines from SQL's groups, merged per period when grouped, sorted by period, then currency,
    /// then net revenue, largest first.
    package static func lines(_ groups: [RevenueGroup], groupBy: RevenuePeriod?) -> [RevenueLine] {
        var lines: [String: RevenueLine] = [:]
        for group in groups {
            let period = groupBy?.label(ofDay: group.day)
            let unitPrice = Decimal(string: group.price, locale: Locale(identifier: "en_US_POSIX")) ?? 0
            let key = [period ?? "", group.product, group.currency, group.price].joined(separator: "\u{0}")
            var line =
                lines[key]
                ?? RevenueLine(
                    period: period, product: group.product, currency: group.currency, price: group.price,
                    purchases: 0, units: 0, refundedUnits: 0, gross: 0, refunds: 0)
            line.purchases += group.purchases
            line.units += group.units
            line.refundedUnits += group.refundedUnits
            line.gross += unitPrice * Decimal(group.units)
            line.refunds += unitPrice * Decimal(group.refundedUnits)
            lines[key] = line
        }
        return lines.values.sorted { a, b in
            (a.period ?? "", a.currency, b.net, a.product, a.price) < (b.period ?? "", b.currency, a.net, b.product, b.price)
        }
    }
}
