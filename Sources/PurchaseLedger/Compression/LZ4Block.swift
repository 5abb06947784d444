/// The LZ4 block format in Swift: the codec on platforms without liblz4 (iOS, macOS, tvOS,
/// watchOS, visionOS), byte-compatible with it both ways, dictionaries included.
///
/// - The decoder accepts and rejects exactly what liblz4 1.9.4's `LZ4_decompress_safe` /
///   `LZ4_decompress_safe_usingDict` accept and reject, and produces the same bytes: it follows
///   the same decisions (its fast loop, its shortcut, its end-of-block checks) position by
///   position, with every read and write bounds-checked. The test suite checks this against liblz4
///   on valid, random and mutated blocks.
/// - The encoder is a hash-chain matcher in the spirit of LZ4HC (several candidates per position,
///   one step of lazy evaluation, matches extended backwards), writing standard blocks that any
///   LZ4 decoder reads. A dictionary is the 64 KiB of history that matches may reach into.
///
/// Format (lz4_Block_format.md): sequences of a token (literal length, match length - 4), the
/// literals, a 2-byte little-endian offset and extra length bytes (255 = more follow); the last
/// sequence has literals only; the last 5 bytes are literals and the last match starts at least
/// 12 bytes before the end.
enum LZ4Block {
    static let minMatch = 4
    /// The last match must start this many bytes before the end of the block.
    static let mfLimit = 12
    /// The last bytes of a block are always literals.
    static let lastLiterals = 5
    static let maxDistance = 65535

    // MARK: - Decoding

    /// Decodes `src` into `dst` (its whole capacity is the expected size), with `dict` as the
    /// history before the block. Returns the number of bytes produced, or -1 for input liblz4
    /// rejects. Never reads or writes outside the three buffers.
    static func decode(_ src: UnsafeRawBufferPointer, into dst: UnsafeMutableRawBufferPointer, dictionary dict: UnsafeRawBufferPointer) -> Int {
        let iend = src.count, oend = dst.count
        if oend == 0 { return (iend == 1 && src[0] == 0) ? 0 : -1 }
        if iend == 0 { return -1 }
        guard let s = src.baseAddress?.assumingMemoryBound(to: UInt8.self),
            let d = dst.baseAddress?.assumingMemoryBound(to: UInt8.self)
        else { return -1 }
        let dictSize = dict.count
        let checkOffset = dictSize < 65536
        var ip = 0, op = 0
        // liblz4's fast loop runs while 64 bytes of output are left; it has no shortcut.
        var fast = oend - op >= 64

        @inline(__always) func readOffset() -> Int { Int(s[ip]) | Int(s[ip + 1]) << 8 }

        while true {
            guard ip < iend else { return -1 }
            let token = Int(s[ip])
            ip += 1
            var length = token >> 4
            var offset = 0
            var literalsDone = false

            if fast {
                if length == 15 {
                    guard let extra = readLength(s, &ip, limit: iend - 15, iend: iend, initialCheck: true) else { return -1 }
                    length += extra
                    if op + length > oend - 32 || ip + length > iend - 32 {
                        fast = false
                    } else {
                        // Both buffers have 32 bytes past the run: copy in whole words.
                        wildCopy(d + op, s + ip, length)
                        ip += length
                        op += length
                        literalsDone = true
                    }
                } else if ip > iend - 17 {
                    fast = false
                } else {
                    // At most 14 literals; 16 bytes are readable and, 64 bytes from the end, writable.
                    copy16(d + op, s + ip)
                    ip += length
                    op += length
                    literalsDone = true
                }
            } else if length != 15 && ip < iend - 16 && op <= oend - 32 {
                // liblz4's shortcut: short literals, then a short match far enough back. 16 bytes
                // are readable (ip < iend - 16) and writable (op <= oend - 32).
                copy16(d + op, s + ip)
                op += length
                ip += length
                let nibble = token & 15
                offset = readOffset()
                ip += 2
                if nibble != 15 && offset >= 8 && offset <= op {
                    // At most 18 bytes from at least 8 back; exactly 18 are written (8 + 8 + 2), the
                    // most the output has room for here (op <= oend - 18).
                    copy18(d + op, UnsafePointer(d + (op - offset)))
                    op += nibble + minMatch
                    continue
                }
                // The match is decoded the general way below.
                length = nibble
                literalsDone = true
                if length == 15 {
                    guard let extra = readLength(s, &ip, limit: iend - 4, iend: iend, initialCheck: false) else { return -1 }
                    length += extra
                }
                length += minMatch
                guard
                    let next = safeMatch(
                        s: s, d: d, dict: dict, ip: ip, op: op, offset: offset, length: length,
                        oend: oend, checkOffset: checkOffset)
                else { return -1 }
                op = next
                continue
            } else if length == 15 {
                guard let extra = readLength(s, &ip, limit: iend - 15, iend: iend, initialCheck: true) else { return -1 }
                length += extra
            }

            if !literalsDone {
                // liblz4's safe literal copy: past these limits this must be the last sequence.
                let end = op + length
                if end > oend - mfLimit || ip + length > iend - (2 + 1 + lastLiterals) {
                    guard ip + length == iend, end <= oend else { return -1 }
                    copy(d + op, s + ip, length)
                    op = end
                    return op
                }
                copy(d + op, s + ip, length)
                ip += length
                op = end
            }

            guard ip + 2 <= iend else { return -1 }
            offset = readOffset()
            ip += 2
            length = token & 15

            if fast {
                if length == 15 {
                    if checkOffset && offset > op + dictSize { return -1 }
                    guard let extra = readLength(s, &ip, limit: iend - 4, iend: iend, initialCheck: false) else { return -1 }
                    length += extra + minMatch
                    if op + length >= oend - 64 { fast = false }
                } else {
                    length += minMatch
                    if op + length >= oend - 64 {
                        fast = false
                    } else if offset <= op && offset >= 8 {
                        // 64 bytes from the end: whole words, each from bytes already written.
                        wildCopy(d + op, UnsafePointer(d + (op - offset)), length)
                        op += length
                        continue
                    }
                }
            } else {
                if length == 15 {
                    guard let extra = readLength(s, &ip, limit: iend - 4, iend: iend, initialCheck: false) else { return -1 }
                    length += extra
                }
                length += minMatch
            }
            guard
                let next = safeMatch(
                    s: s, d: d, dict: dict, ip: ip, op: op, offset: offset, length: length,
                    oend: oend, checkOffset: checkOffset)
            else { return -1 }
            op = next
        }
    }

    /// A match through liblz4's general path: offset check, a match reaching into the dictionary,
    /// or one inside the block that must leave the last 5 bytes to literals. Returns the new
    /// output position, or nil for an error.
    @inline(__always)
    private static func safeMatch(
        s: UnsafePointer<UInt8>, d: UnsafeMutablePointer<UInt8>, dict: UnsafeRawBufferPointer,
        ip: Int, op: Int, offset: Int, length: Int, oend: Int, checkOffset: Bool
    ) -> Int? {
        let dictSize = dict.count
        if checkOffset && offset > op + dictSize { return nil }
        if offset > op {
            // Starts in the dictionary (only possible with one, given the check above).
            guard dictSize > 0, let dictBase = dict.baseAddress?.assumingMemoryBound(to: UInt8.self),
                offset - op <= dictSize
            else { return nil }
            if op + length > oend - lastLiterals { return nil }
            let fromDict = offset - op
            if length <= fromDict {
                copy(d + op, dictBase + (dictSize - fromDict), length)
                return op + length
            }
            copy(d + op, dictBase + (dictSize - fromDict), fromDict)
            var o = op + fromDict
            let rest = length - fromDict
            if rest > o {
                // Overlaps what it writes: byte by byte.
                var from = 0
                for _ in 0..<rest { d[o] = d[from]; o += 1; from += 1 }
            } else {
                copy(d + o, UnsafePointer(d), rest)
                o += rest
            }
            return o
        }
        let end = op + length
        if end > oend - lastLiterals { return nil }
        copyMatch(d, at: op, offset: offset, length: length)
        return end
    }

    /// The extra bytes of a length, as liblz4 1.9.4's `read_variable_length` reads them: 255
    /// means more follow; reading past `limit` is an error, and so, for a literal length
    /// (`initialCheck`), is starting at it.
    @inline(__always)
    private static func readLength(_ s: UnsafePointer<UInt8>, _ ip: inout Int, limit: Int, iend: Int, initialCheck: Bool) -> Int? {
        if initialCheck && ip >= limit { return nil }
        var length = 0
        while true {
            guard ip < iend else { return nil }
            let byte = Int(s[ip])
            ip += 1
            length += byte
            if ip > limit { return nil }
            if byte != 255 { return length }
        }
    }

    /// Copies `count` bytes in 8-byte words: up to 7 bytes past `to + count` are written, and read
    /// past `from + count`. Callers guarantee both are inside their buffers, and, within one
    /// buffer, that `from` is at least 8 bytes before `to`.
    @inline(__always)
    private static func wildCopy(_ to: UnsafeMutablePointer<UInt8>, _ from: UnsafePointer<UInt8>, _ count: Int) {
        let t = UnsafeMutableRawPointer(to), f = UnsafeRawPointer(from)
        var i = 0
        repeat {
            t.storeBytes(of: f.loadUnaligned(fromByteOffset: i, as: UInt64.self), toByteOffset: i, as: UInt64.self)
            i &+= 8
        } while i < count
    }

    @inline(__always)
    private static func copy18(_ to: UnsafeMutablePointer<UInt8>, _ from: UnsafePointer<UInt8>) {
        let t = UnsafeMutableRawPointer(to), f = UnsafeRawPointer(from)
        t.storeBytes(of: f.loadUnaligned(as: UInt64.self), as: UInt64.self)
        t.storeBytes(of: f.loadUnaligned(fromByteOffset: 8, as: UInt64.self), toByteOffset: 8, as: UInt64.self)
        t.storeBytes(of: f.loadUnaligned(fromByteOffset: 16, as: UInt16.self), toByteOffset: 16, as: UInt16.self)
    }

    @inline(__always)
    private static func copy16(_ to: UnsafeMutablePointer<UInt8>, _ from: UnsafePointer<UInt8>) {
        let t = UnsafeMutableRawPointer(to), f = UnsafeRawPointer(from)
        t.storeBytes(of: f.loadUnaligned(as: UInt64.self), as: UInt64.self)
        t.storeBytes(of: f.loadUnaligned(fromByteOffset: 8, as: UInt64.self), toByteOffset: 8, as: UInt64.self)
    }

    @inline(__always)
    private static func copy(_ to: UnsafeMutablePointer<UInt8>, _ from: UnsafePointer<UInt8>, _ count: Int) {
        if count > 0 { UnsafeMutableRawPointer(to).copyMemory(from: from, byteCount: count) }
    }

    /// Copies a match inside the output: `length` bytes from `offset` back, the source overlapping
    /// what is written when `offset < length`. Offset 0 (invalid, but accepted by liblz4) writes
    /// zeros, as liblz4 does.
    @inline(__always)
    private static func copyMatch(_ d: UnsafeMutablePointer<UInt8>, at op: Int, offset: Int, length: Int) {
        if offset == 0 {
            (d + op).update(repeating: 0, count: length)
        } else if offset >= length {
            UnsafeMutableRawPointer(d + op).copyMemory(from: d + (op - offset), byteCount: length)
        } else if offset >= 8 {
            // Non-overlapping chunks of `offset` bytes.
            var done = 0
            while done < length {
                let n = min(offset, length - done)
                UnsafeMutableRawPointer(d + op + done).copyMemory(from: d + (op - offset + done), byteCount: n)
                done += n
            }
        } else {
            var o = op, from = op - offset
            let end = op + length
            while o < end { d[o] = d[from]; o += 1; from += 1 }
        }
    }

    // MARK: - Encoding

    /// The largest block `compress` may produce for `count` input bytes (liblz4's bound).
    static func bound(_ count: Int) -> Int { count + count / 255 + 16 }

    /// Compresses `input` as one block. With a dictionary, matches may reach into its last 64 KiB;
    /// the same dictionary is needed to decode. `attempts` is how many earlier positions with the
    /// same hash are tried per position (more: slower, smaller).
    static func compress(_ input: UnsafeRawBufferPointer, dictionary: UnsafeRawBufferPointer, attempts: Int = 32) -> [UInt8] {
        let history = min(dictionary.count, maxDistance + 1)
        let total = history + input.count
        // The dictionary's tail and the input side by side: one window for the matcher.
        let window = UnsafeMutableRawBufferPointer.allocate(byteCount: max(total, 1) + 8, alignment: 8)
        defer { window.deallocate() }
        if history > 0 { window.baseAddress!.copyMemory(from: dictionary.baseAddress! + (dictionary.count - history), byteCount: history) }
        if input.count > 0 { (window.baseAddress! + history).copyMemory(from: input.baseAddress!, byteCount: input.count) }
        let w = UnsafePointer(window.baseAddress!.assumingMemoryBound(to: UInt8.self))
        var encoder = Encoder(window: w, start: history, end: total, attempts: attempts)
        return encoder.run()
    }

    private struct Encoder {
        static let hashLog = 16
        let w: UnsafePointer<UInt8>
        let start: Int
        let end: Int
        let attempts: Int
        /// Newest position of each hash, and for each position (mod 64 Ki) the distance to the
        /// previous one with the same hash (65535: none within reach).
        var heads: [Int32]
        var chain: [UInt16]
        var nextToInsert = 0
        var out: [UInt8] = []

        init(window: UnsafePointer<UInt8>, start: Int, end: Int, attempts: Int) {
            w = window
            self.start = start
            self.end = end
            self.attempts = max(1, attempts)
            heads = [Int32](repeating: -1, count: 1 << Self.hashLog)
            chain = [UInt16](repeating: 0xFFFF, count: 1 << 16)
            out.reserveCapacity(LZ4Block.bound(end - start))
        }

        @inline(__always) func read32(_ p: Int) -> UInt32 { UnsafeRawPointer(w + p).loadUnaligned(as: UInt32.self) }
        @inline(__always) func read64(_ p: Int) -> UInt64 { UnsafeRawPointer(w + p).loadUnaligned(as: UInt64.self) }
        @inline(__always) func hash(_ p: Int) -> Int { Int((read32(p) &* 2_654_435_761) >> UInt32(32 - Self.hashLog)) }

        /// Indexes every position before `target` (those with 4 bytes to hash).
        @inline(__always) mutating func insert(upTo target: Int) {
            let last = min(target, end - minMatch + 1)
            while nextToInsert < last {
                let p = nextToInsert
                let h = hash(p)
                let previous = Int(heads[h])
                chain[p & 0xFFFF] = previous < 0 ? 0xFFFF : UInt16(min(p - previous, 0xFFFF))
                heads[h] = Int32(p)
                nextToInsert += 1
            }
        }

        /// Bytes equal at `a` and `b`, up to `limit` (for `a`).
        @inline(__always) func count(_ a: Int, _ b: Int, limit: Int) -> Int {
            var n = 0
            while a + n + 8 <= limit {
                let x = read64(a + n) ^ read64(b + n)
                if x != 0 { return n + (x.littleEndian.trailingZeroBitCount >> 3) }
                n += 8
            }
            while a + n < limit && w[a + n] == w[b + n] { n += 1 }
            return n
        }

        /// The longest earlier match for `p` (length, position), length 0 when none of at least 4.
        @inline(__always) mutating func bestMatch(_ p: Int, limit: Int) -> (Int, Int) {
            insert(upTo: p)
            var candidate = Int(heads[hash(p)])
            var best = (0, 0)
            var tries = attempts
            let first = read32(p)
            while candidate >= 0, p - candidate <= maxDistance, tries > 0 {
                tries -= 1
                if read32(candidate) == first, w[candidate + best.0] == w[p + best.0] || best.0 == 0 {
                    let length = minMatch + count(p + minMatch, candidate + minMatch, limit: limit)
                    if length > best.0 { best = (length, candidate) }
                    if p + length >= limit { break }
                }
                let delta = Int(chain[candidate & 0xFFFF])
                if delta == 0xFFFF { break }
                candidate -= delta
            }
            return best.0 >= minMatch ? best : (0, 0)
        }

        mutating func run() -> [UInt8] {
            let matchLimit = end - lastLiterals
            let lastMatchStart = end - mfLimit
            var anchor = start
            var ip = start
            if end - start > mfLimit {
                while ip <= lastMatchStart {
                    var (length, ref) = bestMatch(ip, limit: matchLimit)
                    if length == 0 {
                        ip += 1
                        continue
                    }
                    // One step of lazy evaluation: a longer match one byte later wins.
                    while ip + 1 <= lastMatchStart {
                        let (next, nextRef) = bestMatch(ip + 1, limit: matchLimit)
                        guard next > length + 1 else { break }
                        ip += 1
                        (length, ref) = (next, nextRef)
                    }
                    // Extend backwards over literals not yet written.
                    while ip > anchor, ref > 0, w[ip - 1] == w[ref - 1] {
                        ip -= 1
                        ref -= 1
                        length += 1
                    }
                    emit(literalsFrom: anchor, to: ip, offset: ip - ref, matchLength: length)
                    ip += length
                    anchor = ip
                }
            }
            emit(literalsFrom: anchor, to: end, offset: 0, matchLength: 0)
            return out
        }

        @inline(__always) mutating func emit(literalsFrom from: Int, to: Int, offset: Int, matchLength: Int) {
            let literals = to - from
            let matchCode = matchLength == 0 ? 0 : matchLength - minMatch
            out.append(UInt8(min(literals, 15) << 4 | min(matchCode, 15)))
            if literals >= 15 { appendLength(literals - 15) }
            out.append(contentsOf: UnsafeBufferPointer(start: w + from, count: literals))
            guard matchLength > 0 else { return }
            out.append(UInt8(offset & 0xFF))
            out.append(UInt8(offset >> 8))
            if matchCode >= 15 { appendLength(matchCode - 15) }
        }

        @inline(__always) mutating func appendLength(_ value: Int) {
            var rest = value
            while rest >= 255 {
                out.append(255)
                rest -= 255
            }
            out.append(UInt8(rest))
        }
    }
}
