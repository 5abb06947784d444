package import Foundation

/// One value of a projection row, as either store holds it: what ``RecordSchema/row(_:)`` makes,
/// what SQLite binds (`Persistence/RawBind.swift`) and what the fleet copies into PostgreSQL.
/// Each store converts it in its own module; the codec knows neither.
///
/// Numbers compare as SQLite compares them: an integer equals a float that holds it exactly.
package enum ColumnValue: Sendable, Hashable, CustomStringConvertible {
    case null
    case int64(Int64)
    case double(Double)
    case string(String)
    case blob(Data)

    package static func == (lhs: ColumnValue, rhs: ColumnValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.int64(let l), .int64(let r)): l == r
        case (.double(let l), .double(let r)): l == r
        case (.int64(let l), .double(let r)): Int64(exactly: r) == l
        case (.double(let l), .int64(let r)): r == Int64(exactly: l)
        case (.string(let l), .string(let r)): l == r
        case (.blob(let l), .blob(let r)): l == r
        default: false
        }
    }

    package func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        // 1 == 1.0, so both hash as the float.
        case .int64(let n): hasher.combine(Double(n))
        case .double(let d): hasher.combine(d)
        case .string(let text): hasher.combine(text)
        case .blob(let data): hasher.combine(data)
        }
    }

    /// NULL, a number, a quoted string or `Data(n bytes)`: how `verify` names a row's key.
    package var description: String {
        switch self {
        case .null: "NULL"
        case .int64(let n): String(n)
        case .double(let d): String(d)
        case .string(let text): String(reflecting: text)
        case .blob(let data): "Data(\(data.description))"
        }
    }

    /// Whether the value is NULL.
    package var isNull: Bool { if case .null = self { true } else { false } }

    /// The text, or nil for any other kind of value (a blob as UTF-8 text, as SQLite reads it).
    package var string: String? {
        switch self {
        case .string(let text): text
        case .blob(let data): String(data: data, encoding: .utf8)
        case .null, .int64, .double: nil
        }
    }

    /// The integer: an integer, or a float that holds one exactly.
    package var int64: Int64? {
        switch self {
        case .int64(let n): n
        case .double(let d): Int64(exactly: d)
        case .null, .string, .blob: nil
        }
    }

    /// The number, an integer or a float.
    package var double: Double? {
        switch self {
        case .int64(let n): Double(n)
        case .double(let d): d
        case .null, .string, .blob: nil
        }
    }
}

/// A Swift value a projection column holds as it is.
package protocol ColumnConvertible {
    var columnValue: ColumnValue { get }
}

extension String: ColumnConvertible {
    package var columnValue: ColumnValue { .string(self) }
}

extension Int64: ColumnConvertible {
    package var columnValue: ColumnValue { .int64(self) }
}

extension Int: ColumnConvertible {
    package var columnValue: ColumnValue { .int64(Int64(self)) }
}

extension Double: ColumnConvertible {
    package var columnValue: ColumnValue { .double(self) }
}

extension Bool: ColumnConvertible {
    package var columnValue: ColumnValue { .int64(self ? 1 : 0) }
}

extension Data: ColumnConvertible {
    package var columnValue: ColumnValue { .blob(self) }
}

extension Optional: ColumnConvertible where Wrapped: ColumnConvertible {
    package var columnValue: ColumnValue { self?.columnValue ?? .null }
}
