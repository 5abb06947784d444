/// Lowercase hexadecimal: links and hashes in checkpoints, JSON and the fleet store.
package enum Hex {
    private static let digits = Array("0123456789abcdef".utf8)

    package static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// 16 bytes as a UUID's text, lowercase (`8-4-4-4-12` digits).
    package static func uuid(_ bytes: UnsafeRawBufferPointer) -> String {
        precondition(bytes.count == 16, "a UUID is 16 bytes")
        var out: (UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &out) { text in
            var at = 0
            for i in 0..<16 {
                if i == 4 || i == 6 || i == 8 || i == 10 {
                    text[at] = UInt8(ascii: "-")
                    at += 1
                }
                text[at] = digits[Int(bytes[i] >> 4)]
                text[at + 1] = digits[Int(bytes[i] & 0x0F)]
                at += 2
            }
            return String(decoding: UnsafeRawBufferPointer(rebasing: text[..<at]), as: UTF8.self)
        }
    }

    /// The bytes of an even number of hex digits (either case), or nil.
    package static func decode(_ text: String) -> [UInt8]? {
        let chars = Array(text.utf8)
        guard chars.count % 2 == 0 else { return nil }
        func value(_ c: UInt8) -> UInt8? {
            switch c {
            case 48...57: c - 48
            case 97...102: c - 87
            case 65...70: c - 55
            default: nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity(chars.count / 2)
        var i = 0
        while i < chars.count {
            guard let high = value(chars[i]), let low = value(chars[i + 1]) else { return nil }
            out.append(high << 4 | low)
            i += 2
        }
        return out
    }
}
