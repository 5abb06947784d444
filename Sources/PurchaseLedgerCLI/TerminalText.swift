import ArgumentParser
import Foundation

/// Text from a ledger made safe to print: on a terminal, in a log, in a spreadsheet.
public enum TerminalText {
    /// `text` with every character that a terminal would act on written as `\uXXXX` instead:
    /// C0 controls but newline and tab, DEL, C1 controls (U+0080...U+009F, which some terminals
    /// read as escape sequences) and the bidirectional controls that reorder what is shown
    /// (U+061C, U+200E, U+200F, U+202A...U+202E, U+2066...U+2069). With `keepingColours`, the
    /// console's own colour sequences (`ESC [ 0/1/2/31/32/33 m`) stay: they change a colour and
    /// nothing else.
    ///
    /// The `\uXXXX` form is also a valid JSON escape, so JSON output keeps its meaning.
    public static func escape(_ text: String, keepingColours: Bool = false, keepingCarriageReturns: Bool = false) -> String {
        // Fast path: bytes that cannot start anything escaped. 0xC2 leads U+0080...U+00BF, 0xD8
        // U+061C's block, 0xE2 U+2000...U+2FFF.
        var copy = text
        let clean = copy.withUTF8 { utf8 in
            suspects.withUnsafeBufferPointer { suspects in
                // One table lookup a byte: the comparisons for each were a twentieth of a 110 MB
                // JSON report's time.
                for b in utf8 {
                    let suspect = suspects[Int(b)]
                    if suspect == 1 || suspect == 2 && !keepingCarriageReturns { return false }
                }
                return true
            }
        }
        if clean { return text }
        var out = String.UnicodeScalarView()
        let scalars = Array(text.unicodeScalars)
        var i = 0
        while i < scalars.count {
            let scalar = scalars[i]
            if scalar == "\u{1B}" && keepingColours, let length = colourSequence(scalars, at: i) {
                out.append(contentsOf: scalars[i..<i + length])
                i += length
                continue
            }
            if needsEscape(scalar) && !(keepingCarriageReturns && scalar == "\r") {
                let hex = String(scalar.value, radix: 16)
                out.append(contentsOf: ("\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex).unicodeScalars)
            } else {
                out.append(scalar)
            }
            i += 1
        }
        return String(out)
    }

    /// For each byte: 1 if it may start something escaped, 2 for a carriage return (escaped
    /// unless kept), else 0.
    private static let suspects: [UInt8] = {
        var table = [UInt8](repeating: 0, count: 256)
        for b in 0..<0x20 where b != 0x09 && b != 0x0A { table[b] = 1 }
        table[0x0D] = 2
        for b in [0x7F, 0xC2, 0xD8, 0xE2] { table[b] = 1 }
        return table
    }()

    static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: false
        case 0x00..<0x20, 0x7F..<0xA0: true
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    /// The length of one of the console's colour sequences starting at `i`, or nil.
    private static func colourSequence(_ scalars: [Unicode.Scalar], at i: Int) -> Int? {
        for code in ["0", "1", "2", "31", "32", "33"] {
            let sequence = Array("\u{1B}[\(code)m".unicodeScalars)
            if i + sequence.count <= scalars.count && Array(scalars[i..<i + sequence.count]) == sequence { return sequence.count }
        }
        return nil
    }
}

/// One CSV line (no line break) of `cells`, each as ``csvField(_:)`` writes it: built in one
/// string (through an array of fields and `joined`, a tenth of the writing of a 100,000-row
/// report).
func csvLine(_ cells: [String]) -> String {
    var line = ""
    line.reserveCapacity(cells.count * 12)
    for (i, cell) in cells.enumerated() {
        if i > 0 { line.append(",") }
        line.append(csvField(cell))
    }
    return line
}

/// A CSV field, RFC 4180, that a spreadsheet will not run: quoted when it holds a comma, quote,
/// CR or LF (quotes inside doubled); and a field starting with `=`, `+`, `-`, `@`, tab or CR
/// that is not a plain number gets a leading `'` (OWASP's rule for CSV injection), so
/// `=HYPERLINK(...)` is shown as text. `-1.99` stays a number.
func csvField(_ s: String) -> String {
    var s = s
    if let first = s.utf8.first,
        first == UInt8(ascii: "=") || first == UInt8(ascii: "+") || first == UInt8(ascii: "-") || first == UInt8(ascii: "@") || first == 0x09 || first == 0x0D,
        !isPlainNumber(s)
    {
        s = "'" + s
    }
    // Over the UTF-8 bytes, not the characters: these four are ASCII, and walking grapheme
    // clusters showed in the profile of a large report.
    guard s.utf8.contains(where: { $0 == UInt8(ascii: ",") || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\r") })
    else { return s }
    return "\"" + s.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// `-12`, `-0.99`, `-1005`: a minus, digits, at most one point with digits after it.
private func isPlainNumber(_ s: String) -> Bool {
    let bytes = Array(s.utf8)
    guard bytes.count >= 2, bytes[0] == UInt8(ascii: "-") else { return false }
    var seenPoint = false, digitsAfterPoint = 0
    for (i, b) in bytes.enumerated().dropFirst() {
        if b == UInt8(ascii: ".") {
            guard !seenPoint, i > 1 else { return false }
            seenPoint = true
        } else if b >= 0x30 && b <= 0x39 {
            if seenPoint { digitsAfterPoint += 1 }
        } else {
            return false
        }
    }
    return !seenPoint || digitsAfterPoint > 0
}

/// Range checks for numeric options: a value out of range is a usage error that names the option
/// and the range, never a trap further in.
enum NumberOption {
    static func check<N: BinaryInteger>(_ name: String, _ value: N?, _ range: ClosedRange<N>) throws {
        guard let value, !range.contains(value) else { return }
        throw ValidationError("\(name) \(value) is out of range: give \(range.lowerBound)...\(range.upperBound)")
    }
}
