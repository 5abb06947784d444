public import Foundation
import GRDB

/// Revenue of one product at one price over a period: the price each purchase was paid, fixed
/// when it was purchased (contract 5.1), so a line never changes after the fact.
public struct RevenueLine: Sendable, Hashable {
    /// The period when grouped (``RevenuePeriod``): `2024-03-01`, `2024-W09` or `2024-03`; nil otherwise.
    public var period: String?
    /// The storefront, when split by storefront (`""` for purchases that did not say); nil otherwise.
    public var storefront: String?
    /// The product id.
    public var product: String
    /// The ISO 4217 code of ``price`` and the amounts.
    public var currency: String
    /// The unit price paid, a decimal string in currency units ("0" for a free trial).
    public var price: String
    /// Production and purchased, unless the report includes every environment
    /// (`allEnvironments`): then sandbox, Xcode and family-shared purchases have lines of their
    /// own, which ``countsAsRevenue`` says are not revenue.
    public var environment: StoreEnvironment = .production
    /// Purchased, unless the report includes every environment; see ``environment``.
    public var ownership: Ownership = .purchased
    /// Purchases (restores are not payments), and units sold (quantities summed).
    public var purchases: Int
    /// Units sold: the purchases' quantities summed.
    public var units: Int
    /// Units of purchases later revoked (refunds, family-sharing revocations...).
    public var refundedUnits: Int
    /// ``price`` times ``units``, in currency units.
    public var gross: Decimal
    /// ``price`` times ``refundedUnits``, in currency units.
    public var refunds: Decimal
    /// Of ``units`` and ``refundedUnits``, those of purchases Apple's signature vouches for
    /// (evidence `apple`: docs/rules.md); 0 when the report was not asked to judge them.
    public var appleUnits = 0
    public var appleRefundedUnits = 0
    /// ``price`` times ``appleUnits`` and times ``appleRefundedUnits``.
    public var appleGross: Decimal = 0
    public var appleRefunds: Decimal = 0
}

/// All the revenue of one currency: the sum of its ``RevenueLine``s. Lines that are not revenue
/// (sandbox, Xcode, family-shared) are summed apart, into totals of their own environment and
/// ownership, never into the revenue's.
public struct RevenueTotal: Sendable, Hashable {
    /// The ISO 4217 code of the amounts.
    public var currency: String
    /// The environment of the lines it sums (production for the revenue's own total).
    public var environment: StoreEnvironment = .production
    /// The ownership of the lines it sums (purchased for the revenue's own total).
    public var ownership: Ownership = .purchased
    /// Purchases summed over the lines (restores are not payments).
    public var purchases: Int
    /// Units sold, summed over the lines.
    public var units: Int
    /// Units of purchases later revoked, summed over the lines.
    public var refundedUnits: Int
    /// The lines' gross amounts summed, in currency units.
    public var gross: Decimal
    /// The lines' refunds summed, in currency units.
    public var refunds: Decimal
    /// The lines' Apple-evidenced units, refunded units and amounts summed.
    public var appleUnits = 0
    public var appleRefundedUnits = 0
    public var appleGross: Decimal = 0
    public var appleRefunds: Decimal = 0

    /// One total per currency, sorted by currency: the revenue first, then the totals of lines
    /// that are not revenue (per environment and ownership), marked as such. Amounts in
    /// different currencies are never added.
    public static func totals(of lines: [RevenueLine]) -> [RevenueTotal] {
        var byKey: [String: RevenueTotal] = [:]
        for line in lines {
            let key = [line.currency, line.environment.rawValue, line.ownership.rawValue].joined(separator: " ")
            byKey[
                key,
                default: RevenueTotal(
                    currency: line.currency, environment: line.environment, ownership: line.ownership, purchases: 0, units: 0, refundedUnits: 0,
                    gross: 0, refunds: 0)
            ]
            .add(line)
        }
        return byKey.values.sorted { a, b in
            (a.countsAsRevenue ? 0 : 1, a.currency, a.environment.rawValue, a.ownership.rawValue)
                < (b.countsAsRevenue ? 0 : 1, b.currency, b.environment.rawValue, b.ownership.rawValue)
        }
    }
}

/// What a ``RevenueLine`` and a ``RevenueTotal`` count, and whether it is revenue.
public protocol RevenueAmounts {
    var environment: StoreEnvironment { get }
    var ownership: Ownership { get }
    /// Purchases (restores are not payments), and units sold (quantities summed).
    var purchases: Int { get set }
    var units: Int { get set }
    /// Units of purchases later revoked (refunds, family-sharing revocations...).
    var refundedUnits: Int { get set }
    var gross: Decimal { get set }
    var refunds: Decimal { get set }
    /// The same for the purchases Apple's signature vouches for (evidence `apple`).
    var appleUnits: Int { get set }
    var appleRefundedUnits: Int { get set }
    var appleGross: Decimal { get set }
    var appleRefunds: Decimal { get set }
}

extension RevenueAmounts {
    /// ``gross`` minus ``refunds``, in currency units.
    public var net: Decimal { gross - refunds }
    /// The part of ``net`` Apple's signature vouches for.
    public var appleNet: Decimal { appleGross - appleRefunds }

    /// Whether totals add it: production purchases their buyer paid for.
    public var countsAsRevenue: Bool { environment == .production && ownership == .purchased }

    /// Adds `other`'s counts and amounts (of the same currency) to these.
    public mutating func add(_ other: some RevenueAmounts) {
        purchases += other.purchases
        units += other.units
        refundedUnits += other.refundedUnits
        gross += other.gross
        refunds += other.refunds
        appleUnits += other.appleUnits
        appleRefundedUnits += other.appleRefundedUnits
        appleGross += other.appleGross
        appleRefunds += other.appleRefunds
    }
}

extension RevenueLine: RevenueAmounts {}
extension RevenueTotal: RevenueAmounts {}

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
    /// Revenue per product, currency and price of the purchases made in `from..<to` (all time
    /// when nil), each at the price it was paid (fixed at purchase: its event's own price, else
    /// the registration in force then); split by period when `groupBy` is given, and by
    /// storefront when `byStorefront`. Only production purchases their buyer paid for, unless
    /// `allEnvironments`: then sandbox, Xcode and family-shared purchases come too, on lines of
    /// their own (``RevenueLine/countsAsRevenue`` is false). Restores are not payments. Sorted by
    /// period, then currency, then net revenue, largest first. ``RevenueTotal/totals(of:)`` sums
    /// them per currency.
    ///
    /// ```swift
    /// let march = try ledger.revenue(from: Timestamp.parse("2024-03-01T00:00:00Z"), to: Timestamp.parse("2024-04-01T00:00:00Z"))
    /// for total in RevenueTotal.totals(of: march) { print(total.currency, total.net) }
    /// let weekly = try ledger.revenue(groupBy: .week)   // one line per week, product and price
    /// ```
    ///
    /// `apple`: the chains judged Apple's (``AppleChains``): each line then also counts the units
    /// and amounts Apple's signature vouches for, and with `onlyApple` counts nothing else.
    public func revenue(
        from: Timestamp? = nil, to: Timestamp? = nil, groupBy: RevenuePeriod? = nil, byStorefront: Bool = false, allEnvironments: Bool = false,
        apple: AppleChains? = nil, onlyApple: Bool = false
    ) throws -> [RevenueLine] {
        let rows = try readProjections { db in
            // A ledger from before migration 0008 has no evidence: nothing of it is Apple's.
            let judged = try db.tableExists("transaction_evidence") ? apple : nil
            let sql = RevenueGroup.sql(
                byDay: groupBy != nil, byStorefront: byStorefront, allEnvironments: allEnvironments, dialect: .sqlite,
                apple: judged.map { RevenueGroup.AppleEvidence(trusted: $0.trusted, only: onlyApple) }
                    ?? (onlyApple ? RevenueGroup.AppleEvidence(trusted: [], only: true) : nil))
            return try Row.fetchAll(db, sql: sql, arguments: [from.map(Projector.ms) ?? Int64.min, to.map(Projector.ms) ?? Int64.max])
        }
        return RevenueLine.lines(rows.map { RevenueGroup(columns: RowColumns($0)) }, groupBy: groupBy)
    }
}

/// One group of purchases as SQL sums them (SQLite or the fleet's PostgreSQL): a day, a product,
/// a price, a storefront, an environment and an ownership; the Swift side makes
/// ``RevenueLine``s of them.
package struct RevenueGroup {
    /// What differs between the stores' SQL for ``sql(byDay:byStorefront:allEnvironments:dialect:)``:
    /// each store gives its own (``sqlite`` here, the fleet's PostgreSQL in its own module).
    package struct Dialect: Sendable {
        /// The purchase's day (floor division of `t.purchased_at_ms` by 86,400,000).
        package var day: String
        /// The two parameters bounding the purchase time.
        package var low: String, high: String
        /// What follows a count or a sum to make it a 64-bit integer.
        package var integerCast: String

        /// How a transaction row `t` joins its evidence row `e`, and a byte string's literal.
        package var evidenceJoin: String
        package var bytesPrefix: String, bytesSuffix: String

        package init(
            day: String, low: String, high: String, integerCast: String, evidenceJoin: String = "e.transaction_id = t.transaction_id",
            bytesPrefix: String = "X'", bytesSuffix: String = "'"
        ) {
            (self.day, self.low, self.high, self.integerCast) = (day, low, high, integerCast)
            (self.evidenceJoin, self.bytesPrefix, self.bytesSuffix) = (evidenceJoin, bytesPrefix, bytesSuffix)
        }

        /// SQLite's: `?` parameters, and integer sums as they are.
        package static let sqlite = Dialect(
            day: "t.purchased_at_ms / 86400000 - (t.purchased_at_ms % 86400000 < 0)", low: "?", high: "?", integerCast: "")
    }

    /// The one query both stores sum purchases with, from each transaction's own fixed price
    /// (no catalog join: a registration made later never changes it). Its two parameters bound
    /// the purchase time, in ms.
    /// Which purchases Apple's signature vouches for, in SQLite: a `transaction_evidence` row
    /// `signed` whose chain is one of `trusted` (digests, judged with the roots); `only` counts no
    /// other purchase.
    package struct AppleEvidence: Sendable {
        package var trusted: Set<[UInt8]>
        package var only: Bool

        package init(trusted: Set<[UInt8]>, only: Bool) {
            (self.trusted, self.only) = (trusted, only)
        }

        /// The condition, over the evidence row `e` (hex literals of digests the code made).
        func condition(_ dialect: Dialect) -> String {
            guard !trusted.isEmpty else { return "1 = 0" }
            let literals = trusted.map { dialect.bytesPrefix + Hex.encode($0) + dialect.bytesSuffix }.sorted()
            return "(e.level = 'signed' AND e.signing_header IN (" + literals.joined(separator: ", ") + "))"
        }
    }

    package static func sql(byDay: Bool, byStorefront: Bool, allEnvironments: Bool, dialect: Dialect, apple: AppleEvidence? = nil) -> String {
        let vouched = apple?.condition(dialect) ?? "1 = 0"
        let day = byDay ? dialect.day : "0"
        let (low, high, int) = (dialect.low, dialect.high, dialect.integerCast)
        // Without every environment the two columns are constants, and the groups fewer.
        let (environment, ownership, marks) =
            allEnvironments
            ? ("coalesce(t.environment, 'production')", "coalesce(t.ownership, 'purchased')", ", t.environment, t.ownership")
            : ("'production'", "'purchased'", "")
        return """
            SELECT \(day) AS day, \(byStorefront ? "coalesce(t.storefront, '')" : "NULL") AS storefront,
                   t.product, t.currency, t.price, \(environment) AS environment, \(ownership) AS ownership,
                   count(*)\(int) AS purchases, sum(t.quantity)\(int) AS units,
                   sum(CASE WHEN t.revoked THEN t.quantity ELSE 0 END)\(int) AS refunded,
                   sum(CASE WHEN \(vouched) THEN t.quantity ELSE 0 END)\(int) AS apple_units,
                   sum(CASE WHEN \(vouched) AND t.revoked THEN t.quantity ELSE 0 END)\(int) AS apple_refunded
            FROM transactions t\(vouched == "1 = 0" ? "" : " LEFT JOIN transaction_evidence e ON \(dialect.evidenceJoin)")
            WHERE t.state = 'purchased' AND t.price IS NOT NULL AND t.purchased_at_ms >= \(low) AND t.purchased_at_ms < \(high)
            \(allEnvironments ? "" : "AND t.environment IS NULL AND t.ownership IS NULL")\(apple?.only == true ? " AND \(vouched)" : "")
            GROUP BY \(byDay ? "1, " : "")\(byStorefront ? "2, " : "")t.product, t.currency, t.price\(marks)
            """
    }

    package var day: Int64
    package var storefront: String?
    package var environment: StoreEnvironment = .production
    package var ownership: Ownership = .purchased
    package var product: String
    package var currency: String
    package var price: String
    package var purchases: Int
    package var units: Int
    package var refundedUnits: Int
    package var appleUnits = 0
    package var appleRefundedUnits = 0

    /// A group as both stores' revenue queries return it, in SQLite and in PostgreSQL (columns
    /// day, storefront, product, currency, price, environment, ownership, purchases, units,
    /// refunded).
    package init(columns row: some ProjectionColumns) {
        self.init(
            day: row.int64("day") ?? 0, product: row.string("product") ?? "", currency: row.string("currency") ?? "",
            price: row.string("price") ?? "", purchases: row.int("purchases") ?? 0, units: row.int("units") ?? 0,
            refundedUnits: row.int("refunded") ?? 0)
        storefront = row.string("storefront")
        appleUnits = row.int("apple_units") ?? 0
        appleRefundedUnits = row.int("apple_refunded") ?? 0
        environment = row.string("environment").flatMap(StoreEnvironment.init(rawValue:)) ?? .production
        ownership = row.string("ownership").flatMap(Ownership.init(rawValue:)) ?? .purchased
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
        // A group's price as a Decimal, parsed once per distinct price, and its period's label
        // made once per day (a fleet's page has thousands of groups over a hundred days).
        var prices: [String: Decimal] = [:]
        var labels: [Int64: String] = [:]
        let posix = Locale(identifier: "en_US_POSIX")
        return merged(
            groups.map { group in
                let unitPrice = prices[group.price] ?? Decimal(string: group.price, locale: posix) ?? 0
                prices[group.price] = unitPrice
                var period: String?
                if let groupBy {
                    period = labels[group.day] ?? groupBy.label(ofDay: group.day)
                    labels[group.day] = period
                }
                var line = RevenueLine(
                    period: period, storefront: group.storefront, product: group.product, currency: group.currency,
                    price: group.price, environment: group.environment, ownership: group.ownership, purchases: group.purchases, units: group.units,
                    refundedUnits: group.refundedUnits, gross: unitPrice * Decimal(group.units), refunds: unitPrice * Decimal(group.refundedUnits))
                line.appleUnits = group.appleUnits
                line.appleRefundedUnits = group.appleRefundedUnits
                line.appleGross = unitPrice * Decimal(group.appleUnits)
                line.appleRefunds = unitPrice * Decimal(group.appleRefundedUnits)
                return line
            })
    }

    /// `lines` of several periods as the same report without periods gives them: one line per
    /// storefront, product, currency, price and kind of money. An HTML page takes its totals from
    /// its daily figures this way, with one query instead of two.
    public static func acrossPeriods(_ lines: [RevenueLine]) -> [RevenueLine] {
        merged(
            lines.map { line in
                var line = line
                line.period = nil
                return line
            })
    }

    /// `lines` with the same period, storefront, product, currency, price and kind of money
    /// added into one, sorted.
    private static func merged(_ lines: [RevenueLine]) -> [RevenueLine] {
        struct Key: Hashable {
            var period, storefront: String?
            var product, currency, price: String
            var environment: StoreEnvironment
            var ownership: Ownership
        }
        var merged: [Key: RevenueLine] = [:]
        for var line in lines {
            let key = Key(
                period: line.period, storefront: line.storefront, product: line.product, currency: line.currency, price: line.price,
                environment: line.environment, ownership: line.ownership)
            if let before = merged[key] { line.add(before) }
            merged[key] = line
        }
        return sorted(merged.values)
    }

    /// Sorted by period, then what counts as revenue first, storefront, currency, then net
    /// revenue, largest first (then product, price and kind of money, so the order is total).
    /// Indices are sorted, each line's net computed once: a fleet's page sorts thousands of
    /// lines, and moving them and their `Decimal`s through tuples showed in its profile.
    private static func sorted(_ lines: some Sequence<RevenueLine>) -> [RevenueLine] {
        let lines = Array(lines)
        let nets = lines.map(\.net)
        func precedes(_ i: Int, _ j: Int) -> Bool {
            let (a, b) = (lines[i], lines[j])
            if a.period != b.period { return (a.period ?? "") < (b.period ?? "") }
            if a.countsAsRevenue != b.countsAsRevenue { return a.countsAsRevenue }
            if a.storefront != b.storefront { return (a.storefront ?? "") < (b.storefront ?? "") }
            if a.currency != b.currency { return a.currency < b.currency }
            if nets[i] != nets[j] { return nets[i] > nets[j] }
            if a.product != b.product { return a.product < b.product }
            if a.price != b.price { return a.price < b.price }
            if a.environment != b.environment { return a.environment.rawValue < b.environment.rawValue }
            return a.ownership.rawValue < b.ownership.rawValue
        }
        return lines.indices.sorted(by: precedes).map { lines[$0] }
    }
}
