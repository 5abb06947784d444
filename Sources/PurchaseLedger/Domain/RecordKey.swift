import Foundation

/// A record id as a dictionary key: equal exactly when the ids are equal as Strings, but hashed
/// with a multiply-rotate hash over the UTF-8 bytes instead of String's SipHash. Replays look up
/// a record several times per event, and hashing was the largest part of each lookup.
///
/// A String compares equal to another with the same canonical (NFC) form, so the hash is taken
/// over that form: ASCII ids (all the ids a store produces) are their own NFC form and are
/// hashed as they are; others are normalized first.
struct RecordKey: Hashable, Sendable {
    var id: String

    @inline(__always) init(_ id: String) { self.id = id }

    static func == (a: RecordKey, b: RecordKey) -> Bool { a.id == b.id }

    func hash(into hasher: inout Hasher) { hasher.combine(_rawHashValue(seed: 0)) }

    func _rawHashValue(seed: Int) -> Int {
        let hash = id.utf8.withContiguousStorageIfAvailable { RecordKey.hash($0, seed: UInt64(bitPattern: Int64(seed))) }
        if let hash { return hash }
        var copy = id
        return copy.withUTF8 { RecordKey.hash($0, seed: UInt64(bitPattern: Int64(seed))) }
    }

    private static func hash(_ bytes: UnsafeBufferPointer<UInt8>, seed: UInt64) -> Int {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return Int(truncatingIfNeeded: finish(seed ^ 0x9E37_79B9_7F4A_7C15)) }
        let raw = UnsafeRawPointer(base)
        var h = seed ^ (UInt64(bytes.count) &* 0x9E37_79B9_7F4A_7C15)
        var nonASCII: UInt64 = 0
        let count = bytes.count
        if count >= 8 {
            // Whole words, then the last 8 bytes (overlapping the previous word when the count is
            // not a multiple of 8).
            var i = 0
            while i + 8 < count {
                let word = raw.loadUnaligned(fromByteOffset: i, as: UInt64.self)
                nonASCII |= word
                h = ((h ^ word) &* 0xBF58_476D_1CE4_E5B9).rotated(31)
                i += 8
            }
            let last = raw.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self)
            nonASCII |= last
            h = (h ^ last) &* 0xBF58_476D_1CE4_E5B9
        } else {
            var word: UInt64 = 0
            for i in 0..<count { word |= UInt64(bytes[i]) << UInt64(8 * i) }
            nonASCII = word
            h = (h ^ word) &* 0xBF58_476D_1CE4_E5B9
        }
        if nonASCII & 0x8080_8080_8080_8080 != 0 { return nonASCIIHash(bytes, seed: seed) }
        return Int(truncatingIfNeeded: finish(h))
    }

    /// The hash of the NFC form, for ids with non-ASCII characters.
    private static func nonASCIIHash(_ bytes: UnsafeBufferPointer<UInt8>, seed: UInt64) -> Int {
        var nfc = String(decoding: bytes, as: UTF8.self).precomposedStringWithCanonicalMapping
        let asciiOnly = nfc.utf8.allSatisfy { $0 < 0x80 }
        return nfc.withUTF8 { normalized in
            if asciiOnly { return hash(normalized, seed: seed) }
            // Hash the bytes as they are (they are already NFC), without normalizing again.
            var h = seed ^ 0x2545_F491_4F6C_DD1D
            for byte in normalized { h = (h ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
            return Int(truncatingIfNeeded: finish(h))
        }
    }

    /// A final avalanche (the MurmurHash3 64-bit finalizer), so every input bit moves the low
    /// bits the hash table uses. (Also `Projector.RowHash`'s.)
    @inline(__always) static func finish(_ value: UInt64) -> UInt64 {
        var h = value
        h ^= h >> 33
        h &*= 0xFF51_AFD7_ED55_8CCD
        h ^= h >> 33
        h &*= 0xC4CE_B9FE_1A85_EC53
        h ^= h >> 33
        return h
    }
}

private extension UInt64 {
    @inline(__always) func rotated(_ n: UInt64) -> UInt64 { (self << n) | (self >> (64 - n)) }
}
