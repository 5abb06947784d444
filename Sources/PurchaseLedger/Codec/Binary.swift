/// Appends the primitives of the on-disk format (docs/format.md): LEB128 varints, zigzag varints,
/// little-endian doubles, length-prefixed bytes, and tagged fields.
struct BinaryWriter {
    var bytes: [UInt8] = []

    init(capacity: Int = 128) { bytes.reserveCapacity(capacity) }

    enum Wire: UInt64 {
        case varint = 0
        case fixed64 = 1
        case bytes = 2
    }

    @inline(__always) mutating func varint(_ value: UInt64) {
        var v = value
        while v >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: v) | 0x80)
            v >>= 7
        }
        bytes.append(UInt8(v))
    }

    /// The bytes ``varint(_:)`` writes for `value`.
    @inline(__always) static func varintSize(_ value: UInt64) -> Int {
        var v = value
        var size = 1
        while v >= 0x80 {
            v >>= 7
            size += 1
        }
        return size
    }

    @inline(__always) mutating func zigzag(_ value: Int64) {
        varint(ZigZag.encode(value))
    }

    mutating func double(_ value: Double) {
        var bits = value.bitPattern.littleEndian
        withUnsafeBytes(of: &bits) { bytes.append(contentsOf: $0) }
    }

    mutating func lengthPrefixed(_ s: String) {
        var s = s
        s.withUTF8 { utf8 in
            varint(UInt64(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }

    mutating func lengthPrefixed(_ raw: [UInt8]) {
        varint(UInt64(raw.count))
        bytes.append(contentsOf: raw)
    }

    mutating func lengthPrefixed<Bytes: Collection<UInt8>>(bytes raw: Bytes) {
        varint(UInt64(raw.count))
        bytes.append(contentsOf: raw)
    }

    @inline(__always) mutating func key(_ field: UInt64, _ wire: Wire) { varint(field << 3 | wire.rawValue) }

    mutating func field(_ f: UInt64, _ s: String) { key(f, .bytes); lengthPrefixed(s) }
    mutating func field(_ f: UInt64, _ s: String?) { if let s { field(f, s) } }
    mutating func field(_ f: UInt64, unsigned v: UInt64) { key(f, .varint); varint(v) }
    mutating func field(_ f: UInt64, signed v: Int64) { key(f, .varint); zigzag(v) }
    mutating func field(_ f: UInt64, signed v: Int64?) { if let v { field(f, signed: v) } }
    mutating func field(_ f: UInt64, double v: Double) { key(f, .fixed64); double(v) }

    /// A nested message, length-prefixed.
    mutating func message(_ f: UInt64, _ body: (inout BinaryWriter) -> Void) {
        var inner = BinaryWriter(capacity: 64)
        body(&inner)
        key(f, .bytes)
        lengthPrefixed(inner.bytes)
    }
}

/// Reads what ``BinaryWriter`` wrote, with every length checked against the buffer: truncated or
/// corrupt input throws ``BinaryReader/Failure`` and never reads out of bounds.
package struct BinaryReader {
    package struct Failure: Error {
        var message: String
    }

    let base: UnsafeRawBufferPointer
    var offset: Int
    let end: Int

    package init(_ buffer: UnsafeRawBufferPointer, offset: Int = 0, end: Int? = nil) {
        base = buffer
        self.offset = offset
        self.end = end ?? buffer.count
    }

    var isAtEnd: Bool { offset >= end }

    @inline(__always) mutating func byte() throws(Failure) -> UInt8 {
        guard offset < end else { throw Failure(message: "truncated") }
        let b = base[offset]
        offset += 1
        return b
    }

    @inline(__always) mutating func varint() throws(Failure) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let b = try byte()
            if shift == 63 && b > 1 { throw Failure(message: "varint overflows 64 bits") }
            result |= UInt64(b & 0x7F) << shift
            if b < 0x80 { return result }
            shift += 7
            if shift > 63 { throw Failure(message: "varint too long") }
        }
    }

    @inline(__always) mutating func zigzag() throws(Failure) -> Int64 {
        ZigZag.decode(try varint())
    }

    mutating func int(max: Int) throws(Failure) -> Int {
        let v = try varint()
        guard v <= UInt64(max) else { throw Failure(message: "length \(v) out of range") }
        return Int(v)
    }

    mutating func double() throws(Failure) -> Double {
        guard end - offset >= 8 else { throw Failure(message: "truncated double") }
        var bits: UInt64 = 0
        for k in 0..<8 { bits |= UInt64(base[offset + k]) << (8 * UInt64(k)) }
        offset += 8
        // No writer stores NaN or an infinity (input refuses them: JSON has neither), so one read
        // back is damage, reported with its seq by whatever met it, never printed as `nan`.
        let value = Double(bitPattern: UInt64(littleEndian: bits))
        guard value.isFinite else { throw Failure(message: "a stored number is \(value), which no writer stores (NaN or infinite)") }
        return value
    }

    /// The range of a length-prefixed value, after checking it fits.
    mutating func span() throws(Failure) -> Range<Int> {
        // Read the length first: the bound is what is left after the length itself.
        let length = try varint()
        guard length <= UInt64(end - offset) else { throw Failure(message: "length \(length) runs past the end") }
        let start = offset
        offset += Int(length)
        return start..<offset
    }

    mutating func string() throws(Failure) -> String {
        let r = try span()
        guard !r.isEmpty, let start = base.baseAddress else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: start + r.lowerBound, count: r.count), as: UTF8.self)
    }

    /// The range of the next `count` bytes, after checking they are there.
    mutating func fixed(_ count: Int) throws(Failure) -> Range<Int> {
        guard end - offset >= count else { throw Failure(message: "truncated") }
        offset += count
        return (offset - count)..<offset
    }

    mutating func bytes() throws(Failure) -> [UInt8] {
        let r = try span()
        return Array(base[r])
    }

    /// Reads a field key: (field number, wire type).
    @inline(__always) mutating func key() throws(Failure) -> (UInt64, UInt64) {
        let k = try varint()
        return (k >> 3, k & 7)
    }

    /// Skips a field of an unknown number, so newer writers' fields never break older readers.
    mutating func skip(wire: UInt64) throws(Failure) {
        switch wire {
        case 0: _ = try varint()
        case 1:
            guard end - offset >= 8 else { throw Failure(message: "truncated") }
            offset += 8
        case 2: _ = try span()
        default: throw Failure(message: "unknown wire type \(wire)")
        }
    }

    /// A nested reader over a length-prefixed message.
    mutating func message() throws(Failure) -> BinaryReader {
        let r = try span()
        return BinaryReader(base, offset: r.lowerBound, end: r.upperBound)
    }
}

/// Signed integers as unsigned ones with the sign in the lowest bit (0, -1, 1, -2 ... become
/// 0, 1, 2, 3 ...), so small values of either sign make short varints. The one definition every
/// codec uses (payloads, frames, time deltas, snapshots).
enum ZigZag {
    @inline(__always) static func encode(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }
    @inline(__always) static func decode(_ value: UInt64) -> Int64 { Int64(bitPattern: (value >> 1) ^ (0 &- (value & 1))) }
}

/// A time in nanoseconds (or a difference of two), tagged in its 2 low bits: `zigzag(ms) << 2 | 1`
/// when it is whole milliseconds (the usual case, 1-3 bytes), `zigzag(ns) << 2` otherwise, and
/// `3` followed by a zigzag varint for values too large to shift (only hostile times make those).
/// The first varint is never 0 (a zero is whole milliseconds), so a field may use 0 for "no
/// time". The one time codec of log frames and snapshot records.
enum TimeCodec {
    static func write(_ ns: Int64, _ w: inout BinaryWriter) {
        let limit = Int64.max >> 3
        if ns % 1_000_000 == 0, abs(ns / 1_000_000) < limit {
            w.varint(ZigZag.encode(ns / 1_000_000) << 2 | 1)
        } else if ns > -limit && ns < limit {
            w.varint(ZigZag.encode(ns) << 2)
        } else {
            w.varint(3)
            w.zigzag(ns)
        }
    }

    static func read(_ r: inout BinaryReader) throws(BinaryReader.Failure) -> Int64 {
        try read(tag: try r.varint(), &r)
    }

    /// The time whose first varint, `tag`, was read already.
    static func read(tag raw: UInt64, _ r: inout BinaryReader) throws(BinaryReader.Failure) -> Int64 {
        switch raw & 3 {
        case 3: return try r.zigzag()
        case 2: throw BinaryReader.Failure(message: "bad time tag")
        default:
            let value = ZigZag.decode(raw >> 2)
            return raw & 3 == 1 ? value &* 1_000_000 : value
        }
    }
}
