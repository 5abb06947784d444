import Foundation

/// A parsed JSON value. Numbers keep their exact integer value when they have one. Built from a
/// ``JSONTape`` on request; JSON Lines decoding reads the tape itself and builds no tree.
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
}

/// A JSON text parsed into a flat list of tokens, in document order, with no value built:
/// a string is a range of the input (or, when it has escapes or non-ASCII bytes, its decoded
/// text, kept aside), a number its value, an array or object the index just past its contents.
/// Reading a line of JSON Lines then makes only the Strings its event keeps: keys are compared
/// as bytes, unused fields cost nothing, and there is no tree to free (the tree parser it
/// replaced spent about half of the reading thread's instructions building and freeing one).
struct JSONTape {
    enum Kind: UInt8 { case null, bool, number, string, array, object }

    struct Token {
        var kind: Kind
        /// bool: its value. string: whether its text is in `decoded` (at index `start`).
        var flag = false
        /// string: the byte after the opening quote, or the index in `decoded`.
        var start: Int32 = 0
        /// string: the closing quote's offset. array, object: the index of the token after the
        /// last one inside. Others: unused.
        var end: Int32 = 0
        var double: Double = 0
        /// number: set when the literal is an integer that fits in Int64.
        var integer: Int64? = nil
    }

    let bytes: [UInt8]
    private(set) var tokens: [Token] = []
    private(set) var decoded: [String] = []

    /// The index of the token after value `i` and everything inside it.
    func after(_ i: Int) -> Int {
        switch tokens[i].kind {
        case .array, .object: Int(tokens[i].end)
        default: i + 1
        }
    }

    /// The text of string token `i`.
    func string(_ i: Int) -> String {
        let t = tokens[i]
        if t.flag { return decoded[Int(t.start)] }
        // Plain ASCII, checked while parsing.
        return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[Int(t.start)..<Int(t.end)]), as: UTF8.self) }
    }

    /// The value of the member named `key` of object token `object`, or nil, and whether the
    /// object names `key` more than once (which the reader refuses: which one would count?).
    /// Keys are compared as UTF-8 bytes, length first. The whole object is scanned either way,
    /// so finding a repeated key costs nothing more.
    func member(_ object: Int, _ key: String) -> (value: Int?, repeated: Bool) {
        var key = key
        return key.withUTF8 { k in
            tokens.withUnsafeBufferPointer { tokens in
                bytes.withUnsafeBufferPointer { bytes in
                    var found: Int?
                    var repeated = false
                    var i = object + 1
                    let end = Int(tokens[object].end)
                    while i < end {
                        let name = tokens[i]
                        var matches = false
                        if name.flag {
                            matches = decoded[Int(name.start)].utf8.elementsEqual(k)
                        } else if Int(name.end - name.start) == k.count
                            && (k.isEmpty || memcmp(bytes.baseAddress! + Int(name.start), k.baseAddress!, k.count) == 0)
                        {
                            matches = true
                        }
                        if matches {
                            if found != nil { repeated = true }
                            found = i + 1
                        }
                        i = self.after(i + 1)
                    }
                    return (found, repeated)
                }
            }
        }
    }

    /// The items of array token `array`.
    func items(_ array: Int) -> [Int] {
        var items: [Int] = []
        var i = array + 1
        let end = Int(tokens[array].end)
        while i < end {
            items.append(i)
            i = after(i)
        }
        return items
    }

    /// Value `i` as a tree.
    func value(_ i: Int = 0) -> JSON {
        let t = tokens[i]
        switch t.kind {
        case .null: return .null
        case .bool: return .bool(t.flag)
        case .number: return .number(t.double, integer: t.integer)
        case .string: return .string(string(i))
        case .array: return .array(items(i).map { value($0) })
        case .object:
            var members: [(key: String, value: JSON)] = []
            var k = i + 1
            while k < Int(t.end) {
                members.append((string(k), value(k + 1)))
                k = after(k + 1)
            }
            return .object(members)
        }
    }

    /// Parses `bytes`: RFC 8259, nesting at most 64 deep, invalid UTF-8 and lone surrogates
    /// refused. Errors are plain sentences naming the byte offset.
    init(_ bytes: [UInt8]) throws(JSONParseError) {
        // Offsets are kept in 32 bits.
        guard bytes.count < Int32.max else { throw JSONParseError(message: "a JSON text over 2 GiB", offset: Int(Int32.max)) }
        self.bytes = bytes
        tokens.reserveCapacity(32)
        var failure: JSONParseError?
        bytes.withUnsafeBufferPointer { buffer in
            var parser = JSONParser(bytes: buffer, i: 0)
            do throws(JSONParseError) {
                parser.skipSpace()
                try parser.value(depth: 0, into: &self)
                parser.skipSpace()
                guard parser.i == buffer.count else { throw parser.fail("unexpected text after the JSON value") }
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    fileprivate mutating func append(_ token: Token) -> Int {
        tokens.append(token)
        return tokens.count - 1
    }

    fileprivate mutating func close(_ container: Int) {
        tokens[container].end = Int32(tokens.count)
    }

    fileprivate mutating func appendDecoded(_ text: String) -> Token {
        decoded.append(text)
        return Token(kind: .string, flag: true, start: Int32(decoded.count - 1))
    }
}

/// The strict JSON parser behind ``JSONTape``: RFC 8259, nesting at most 64 deep, invalid UTF-8
/// and lone surrogates refused. Errors are plain sentences naming the byte offset. It reads the
/// bytes through a pointer: indexing the array checked every byte's index (a third of the
/// reading thread's instructions went to scanning).
struct JSONParser {
    static let maxDepth = 64

    fileprivate let bytes: UnsafeBufferPointer<UInt8>
    fileprivate var i: Int

    /// `bytes` as a tree.
    static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSON {
        try JSONTape(bytes).value()
    }

    fileprivate func fail(_ message: String) -> JSONParseError {
        JSONParseError(message: message, offset: i)
    }

    /// Opens the object or array at `i` (its token, whose end ``JSONTape/close(_:)`` marks).
    @inline(__always) private mutating func open(_ kind: JSONTape.Kind, depth: Int, _ tape: inout JSONTape) throws(JSONParseError) -> Int {
        guard depth < JSONParser.maxDepth else { throw fail("nested deeper than \(JSONParser.maxDepth) levels") }
        i += 1
        return tape.append(JSONTape.Token(kind: kind))
    }

    /// Skips space; true, past it, when `closing` comes next (an empty object or array).
    /// Either way what follows starts at `i`.
    @inline(__always) private mutating func skipSpace(to closing: UInt8) -> Bool {
        skipSpace()
        guard i < bytes.count && bytes[i] == closing else { return false }
        i += 1
        return true
    }

    /// After a member or an element: true past a comma and the space after it (another follows
    /// at `i`), false past `closing`.
    @inline(__always) private mutating func next(in container: String, closedBy closing: UInt8) throws(JSONParseError) -> Bool {
        skipSpace()
        guard i < bytes.count else { throw fail("unexpected end of input in \(container)") }
        let b = bytes[i]
        i += 1
        if b == UInt8(ascii: ",") {
            skipSpace()
            return true
        }
        if b == closing { return false }
        i -= 1
        throw fail("expected ',' or '\(Character(Unicode.Scalar(closing)))' in \(container)")
    }

    fileprivate mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0A, 0x0D: i += 1
            default: return
            }
        }
    }

    fileprivate mutating func value(depth: Int, into tape: inout JSONTape) throws(JSONParseError) {
        guard i < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[i] {
        case UInt8(ascii: "{"):
            let object = try open(.object, depth: depth, &tape)
            defer { tape.close(object) }
            if skipSpace(to: UInt8(ascii: "}")) { return }
            repeat {
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a quoted key") }
                _ = tape.append(try string(&tape))
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':' after a key") }
                i += 1
                skipSpace()
                try value(depth: depth + 1, into: &tape)
            } while try next(in: "an object", closedBy: UInt8(ascii: "}"))
        case UInt8(ascii: "["):
            let array = try open(.array, depth: depth, &tape)
            defer { tape.close(array) }
            if skipSpace(to: UInt8(ascii: "]")) { return }
            repeat {
                try value(depth: depth + 1, into: &tape)
            } while try next(in: "an array", closedBy: UInt8(ascii: "]"))
        case UInt8(ascii: "\""):
            _ = tape.append(try string(&tape))
        case UInt8(ascii: "t"):
            try literal("true")
            _ = tape.append(JSONTape.Token(kind: .bool, flag: true))
        case UInt8(ascii: "f"):
            try literal("false")
            _ = tape.append(JSONTape.Token(kind: .bool, flag: false))
        case UInt8(ascii: "n"):
            try literal("null")
            _ = tape.append(JSONTape.Token(kind: .null))
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            _ = tape.append(try number())
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

    private mutating func number() throws(JSONParseError) -> JSONTape.Token {
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
            return JSONTape.Token(kind: .number, double: negative && value == 0 ? -0.0 : Double(value), integer: value)
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        guard let double = Double(text), double.isFinite else { throw fail("number out of range") }
        return JSONTape.Token(kind: .number, double: double, integer: isInteger ? Int64(text) : nil)
    }

    /// A string token: plain ASCII without escapes as a range of the input, anything else
    /// decoded into the tape's side texts.
    private mutating func string(_ tape: inout JSONTape) throws(JSONParseError) -> JSONTape.Token {
        i += 1
        let start = i
        var ascii = true
        // Fast path: no escapes; plain ASCII needs no UTF-8 validation.
        while i < bytes.count {
            // Eight bytes at a time while none is a quote, a backslash, a control character or
            // non-ASCII (each test below is exact: nonzero if and only if some byte matches).
            while bytes.count - i >= 8 {
                let x = UnsafeRawPointer(bytes.baseAddress! + i).loadUnaligned(as: UInt64.self)
                let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
                func hasZero(_ v: UInt64) -> UInt64 { (v &- ones) & ~v & highs }
                let special = hasZero(x ^ (ones &* 0x22)) | hasZero(x ^ (ones &* 0x5C)) | ((x &- ones &* 0x20) & ~x & highs) | (x & highs)
                if special != 0 { break }
                i += 8
            }
            guard i < bytes.count else { break }
            let b = bytes[i]
            if b == UInt8(ascii: "\"") {
                let token: JSONTape.Token
                if ascii {
                    token = JSONTape.Token(kind: .string, start: Int32(start), end: Int32(i))
                } else {
                    guard let valid = String(validating: bytes[start..<i], as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
                    token = tape.appendDecoded(valid)
                }
                i += 1
                return token
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
                return tape.appendDecoded(s)
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
    /// The UTF-8 text written so far.
    public private(set) var bytes: [UInt8] = []
    private var needsComma: [Bool] = []

    /// An empty writer.
    public init() { bytes.reserveCapacity(256) }

    /// The text written so far.
    public var string: String { String(decoding: bytes, as: UTF8.self) }

    /// Takes the text written so far out of the writer, which goes on where it was (inside the
    /// same objects and arrays): how a large document is written in pieces.
    package mutating func drain() -> String {
        defer { bytes.removeAll(keepingCapacity: true) }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The bytes written and not yet drained.
    package var byteCount: Int { bytes.count }

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

    /// A string value, its quotes, backslashes and control characters escaped.
    public mutating func value(_ s: String) { separate(); quote(s) }
    /// A string value, or `null` for nil.
    public mutating func value(_ s: String?) { if let s { value(s) } else { null() } }
    /// `true` or `false`.
    public mutating func value(_ b: Bool) { separate(); bytes.append(contentsOf: (b ? "true" : "false").utf8) }
    /// An integer value.
    public mutating func value(_ n: Int64) { separate(); digits(n) }
    /// An integer value.
    public mutating func value(_ n: Int) { value(Int64(n)) }
    /// An integer value, or `null` for nil.
    public mutating func value(_ n: Int64?) { if let n { value(n) } else { null() } }
    /// A number: a whole number below 1e15 as `N.0` (`1.0`), any other as the shortest decimal that
    /// reads back to the same double (`0.37`, `1e-05`). NaN and infinities have no JSON form: do not
    /// pass them.
    public mutating func value(_ d: Double) {
        separate()
        if d == d.rounded(), abs(d) < 1e15 {
            digits(Int64(d))
            bytes.append(contentsOf: ".0".utf8)
        } else {
            bytes.append(contentsOf: "\(d)".utf8)
        }
    }
    /// A `null` value.
    public mutating func null() { separate(); bytes.append(contentsOf: "null".utf8) }

    /// `n` in decimal, straight into ``bytes``.
    private mutating func digits(_ n: Int64) {
        if n < 0 { bytes.append(UInt8(ascii: "-")) }
        var m = n.magnitude
        let start = bytes.count
        repeat {
            bytes.append(UInt8(48 + m % 10))
            m /= 10
        } while m > 0
        bytes[start...].reverse()
    }

    /// A value that is already JSON text (a JSON Lines event, a number formatted by the caller),
    /// written as it is.
    public mutating func raw(_ json: String) { separate(); bytes.append(contentsOf: json.utf8) }

    /// A member `k` with a string value.
    public mutating func field(_ k: String, _ s: String) { key(k); value(s) }
    /// A member `k` with a string value, or `null` for nil.
    public mutating func field(_ k: String, _ s: String?) { key(k); value(s) }
    /// A member `k` with an integer value.
    public mutating func field(_ k: String, _ n: Int64) { key(k); value(n) }
    /// A member `k` with an integer value.
    public mutating func field(_ k: String, _ n: Int) { key(k); value(n) }
    /// A member `k` with `true` or `false`.
    public mutating func field(_ k: String, _ b: Bool) { key(k); value(b) }
    /// A member `k` with a number, written as `value(_ d: Double)` writes it.
    public mutating func field(_ k: String, _ d: Double) { key(k); value(d) }
    /// A member `k` with an integer value, or `null` for nil.
    public mutating func field(_ k: String, _ n: Int64?) { key(k); value(n) }

    private mutating func quote(_ s: String) {
        bytes.append(0x22)
        // Runs of bytes that need no escape are copied whole (a 100,000-row JSON report is
        // about 110 MB of such text).
        var text = s
        text.withUTF8 { utf8 in
            // Most text needs no escape: one scan, one copy.
            guard utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) else {
                bytes.append(contentsOf: utf8)
                return
            }
            var start = 0
            for (i, b) in utf8.enumerated() where b < 0x20 || b == 0x22 || b == 0x5C {
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<i]))
                escape(b)
                start = i + 1
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start...]))
        }
        bytes.append(0x22)
    }

    private mutating func escape(_ b: UInt8) {
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
}
