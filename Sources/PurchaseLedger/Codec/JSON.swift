/// A parsed JSON value. Numbers keep their exact integer value when they have one.
enum JSON: Equatable {
    case null
    case bool(Bool)
    /// `integer` is set when the literal is an integer that fits in Int64.
    case number(Double, integer: Int64?)
    case string(String)
    case array([JSON])
    case object([(key: String, value: JSON)])

    static func == (a: JSON, b: JSON) -> Bool {
        switch (a, b) {
        case (.null, .null): true
        case (.bool(let x), .bool(let y)): x == y
        case (.number(let x, let i), .number(let y, let j)): x == y && i == j
        case (.string(let x), .string(let y)): x == y
        case (.array(let x), .array(let y)): x == y
        case (.object(let x), .object(let y)): x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    subscript(key: String) -> JSON? {
        guard case .object(let members) = self else { return nil }
        return members.last(where: { $0.key == key })?.value
    }
}

/// A strict JSON parser over UTF-8 bytes: RFC 8259, nesting at most 64 deep, invalid UTF-8 and
/// lone surrogates refused. Errors are plain sentences naming the byte offset.
struct JSONParser {
    static let maxDepth = 64

    private let bytes: [UInt8]
    private var i: Int

    static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSON {
        var parser = JSONParser(bytes: bytes, i: 0)
        parser.skipSpace()
        let value = try parser.value(depth: 0)
        parser.skipSpace()
        guard parser.i == bytes.count else { throw parser.fail("unexpected text after the JSON value") }
        return value
    }

    private func fail(_ message: String) -> JSONParseError {
        JSONParseError(message: message, offset: i)
    }

    private mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(JSONParseError) -> JSON {
        guard i < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            guard depth < JSONParser.maxDepth else { throw fail("nested deeper than \(JSONParser.maxDepth) levels") }
            i += 1
            var members: [(key: String, value: JSON)] = []
            members.reserveCapacity(8)
            skipSpace()
            if i < bytes.count && bytes[i] == UInt8(ascii: "}") {
                i += 1
                return .object(members)
            }
            while true {
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a quoted key") }
                let key = try string()
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':' after a key") }
                i += 1
                skipSpace()
                members.append((key, try value(depth: depth + 1)))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end of input in an object") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
                throw fail("expected ',' or '}' in an object")
            }
        case UInt8(ascii: "["):
            guard depth < JSONParser.maxDepth else { throw fail("nested deeper than \(JSONParser.maxDepth) levels") }
            i += 1
            var items: [JSON] = []
            skipSpace()
            if i < bytes.count && bytes[i] == UInt8(ascii: "]") {
                i += 1
                return .array(items)
            }
            while true {
                skipSpace()
                items.append(try value(depth: depth + 1))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end of input in an array") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
                throw fail("expected ',' or ']' in an array")
            }
        case UInt8(ascii: "\""):
            return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return try number()
        default:
            throw fail("unexpected character")
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - i >= count else { throw fail("unexpected end of input") }
        for k in 0..<count where bytes[i + k] != word.utf8Start[k] {
            throw fail("invalid literal")
        }
        i += count
    }

    private mutating func number() throws(JSONParseError) -> JSON {
        let start = i
        var isInteger = true
        let negative = bytes[i] == UInt8(ascii: "-")
        if negative { i += 1 }
        guard i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 else { throw fail("invalid number") }
        // The integer part's value as it is scanned: most numbers are small integers, which need
        // no text and no strtod.
        var magnitude: Int64 = 0
        let digitsStart = i
        if bytes[i] == 48 {
            i += 1
        } else {
            while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 {
                magnitude = magnitude &* 10 &+ Int64(bytes[i] &- 48)
                i += 1
            }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            isInteger = false
            i += 1
            guard i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 else { throw fail("invalid number") }
            while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 { i += 1 }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            isInteger = false
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 else { throw fail("invalid number") }
            while i < bytes.count, bytes[i] >= 48, bytes[i] <= 57 { i += 1 }
        }
        if isInteger && i - digitsStart <= 18 {
            // At most 18 digits cannot overflow, and converting the exact integer rounds the way
            // strtod rounds its text.
            let value = negative ? -magnitude : magnitude
            return .number(negative && value == 0 ? -0.0 : Double(value), integer: value)
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        guard let double = Double(text), double.isFinite else { throw fail("number out of range") }
        return .number(double, integer: isInteger ? Int64(text) : nil)
    }

    private mutating func string() throws(JSONParseError) -> String {
        i += 1
        let start = i
        var ascii = true
        // Fast path: no escapes; plain ASCII needs no UTF-8 validation.
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                let s: String
                if ascii {
                    s = bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<i]), as: UTF8.self) }
                } else {
                    guard let valid = String(validating: bytes[start..<i], as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
                    s = valid
                }
                i += 1
                return s
            }
            if b >= 0x80 { ascii = false }
            if b == UInt8(ascii: "\\") { break }
            if b < 0x20 { throw fail("control character in a string") }
            i += 1
        }
        var out = Array(bytes[start..<i])
        while i < bytes.count {
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
                i += 1
                return s
            }
            if b < 0x20 { throw fail("control character in a string") }
            if b != UInt8(ascii: "\\") {
                out.append(b)
                i += 1
                continue
            }
            i += 1
            guard i < bytes.count else { break }
            let e = bytes[i]
            i += 1
            switch e {
            case UInt8(ascii: "\""): out.append(0x22)
            case UInt8(ascii: "\\"): out.append(0x5C)
            case UInt8(ascii: "/"): out.append(0x2F)
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hex4()
                if (0xD800...0xDBFF).contains(scalar) {
                    guard bytes.count - i >= 2, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                        throw fail("lone surrogate in a string")
                    }
                    i += 2
                    let low = try hex4()
                    guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone surrogate in a string") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(scalar) {
                    throw fail("lone surrogate in a string")
                } else if scalar == 0 {
                    // Ids, users and destinations never hold NUL; SQLite text would cut them there.
                    throw fail("NUL character in a string")
                }
                out.append(contentsOf: Array(String(Character(Unicode.Scalar(scalar)!)).utf8))
            default:
                throw fail("invalid escape in a string")
            }
        }
        throw fail("unterminated string")
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard bytes.count - i >= 4 else { throw fail("invalid \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let b = bytes[i]
            let d: UInt8
            switch b {
            case 48...57: d = b - 48
            case 65...70: d = b - 55
            case 97...102: d = b - 87
            default: throw fail("invalid \\u escape")
            }
            v = v << 4 | UInt32(d)
            i += 1
        }
        return v
    }
}

struct JSONParseError: Error {
    var message: String
    var offset: Int
}

/// Builds JSON text: keys in the order written, strings escaped, numbers exact. The one JSON
/// writer of the package: the state shape, JSON Lines, and every `--json` of the CLI.
///
/// ```swift
/// let line = JSONWriter.object { w in
///     w.field("valid", report.isValid)
///     w.key("problems")
///     w.array(report.problems) { w, p in w.object { w in w.field("seq", p.seq); w.field("message", p.message) } }
/// }
/// // {"valid":false,"problems":[{"seq":42,"message":"..."}]}
/// ```
public struct JSONWriter: Sendable {
    public private(set) var bytes: [UInt8] = []
    private var needsComma: [Bool] = []

    public init() { bytes.reserveCapacity(256) }

    /// The text written so far.
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    /// One JSON object, written by `body`, as text.
    public static func object(_ body: (inout JSONWriter) throws -> Void) rethrows -> String {
        var w = JSONWriter()
        try w.object(body)
        return w.string
    }

    /// An object whose members `body` writes.
    public mutating func object(_ body: (inout JSONWriter) throws -> Void) rethrows {
        beginObject()
        try body(&self)
        endObject()
    }

    /// An array with one value per item, each written by `body`.
    public mutating func array<S: Sequence>(_ items: S, _ body: (inout JSONWriter, S.Element) throws -> Void) rethrows {
        beginArray()
        for item in items { try body(&self, item) }
        endArray()
    }

    /// An array of strings.
    public mutating func array(_ strings: [String]) { array(strings) { w, s in w.value(s) } }

    // Unbalanced on their own: outside the package, `object {}` and `array {}` pair them.
    mutating func beginObject() { separate(); bytes.append(UInt8(ascii: "{")); needsComma.append(false) }
    mutating func endObject() { bytes.append(UInt8(ascii: "}")); needsComma.removeLast() }
    mutating func beginArray() { separate(); bytes.append(UInt8(ascii: "[")); needsComma.append(false) }
    mutating func endArray() { bytes.append(UInt8(ascii: "]")); needsComma.removeLast() }

    /// A member's key; its value is what is written next.
    public mutating func key(_ k: String) {
        separate()
        quote(k)
        bytes.append(UInt8(ascii: ":"))
        needsComma[needsComma.count - 1] = false
    }

    private mutating func separate() {
        guard let last = needsComma.last else { return }
        if last { bytes.append(UInt8(ascii: ",")) }
        needsComma[needsComma.count - 1] = true
    }

    public mutating func value(_ s: String) { separate(); quote(s) }
    public mutating func value(_ s: String?) { if let s { value(s) } else { null() } }
    public mutating func value(_ b: Bool) { separate(); bytes.append(contentsOf: Array((b ? "true" : "false").utf8)) }
    public mutating func value(_ n: Int64) { separate(); bytes.append(contentsOf: Array(String(n).utf8)) }
    public mutating func value(_ n: Int) { value(Int64(n)) }
    public mutating func value(_ n: Int64?) { if let n { value(n) } else { null() } }
    public mutating func value(_ d: Double) {
        separate()
        if d == d.rounded(), abs(d) < 1e15 {
            bytes.append(contentsOf: Array(String(Int64(d)).utf8))
            bytes.append(contentsOf: Array(".0".utf8))
        } else {
            bytes.append(contentsOf: Array("\(d)".utf8))
        }
    }
    public mutating func null() { separate(); bytes.append(contentsOf: Array("null".utf8)) }

    /// A value that is already JSON text (a JSON Lines event, a number formatted by the caller),
    /// written as it is.
    public mutating func raw(_ json: String) { separate(); bytes.append(contentsOf: json.utf8) }

    public mutating func field(_ k: String, _ s: String) { key(k); value(s) }
    public mutating func field(_ k: String, _ s: String?) { key(k); value(s) }
    public mutating func field(_ k: String, _ n: Int64) { key(k); value(n) }
    public mutating func field(_ k: String, _ n: Int) { key(k); value(n) }
    public mutating func field(_ k: String, _ b: Bool) { key(k); value(b) }
    public mutating func field(_ k: String, _ d: Double) { key(k); value(d) }
    public mutating func field(_ k: String, _ n: Int64?) { key(k); value(n) }

    private mutating func quote(_ s: String) {
        bytes.append(0x22)
        for b in s.utf8 {
            switch b {
            case 0x22: bytes.append(0x5C); bytes.append(0x22)
            case 0x5C: bytes.append(0x5C); bytes.append(0x5C)
            case 0x0A: bytes.append(0x5C); bytes.append(UInt8(ascii: "n"))
            case 0x0D: bytes.append(0x5C); bytes.append(UInt8(ascii: "r"))
            case 0x09: bytes.append(0x5C); bytes.append(UInt8(ascii: "t"))
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: [0x5C, UInt8(ascii: "u"), 48, 48, hex[Int(b >> 4)], hex[Int(b & 15)]])
            default: bytes.append(b)
            }
        }
        bytes.append(0x22)
    }
}
