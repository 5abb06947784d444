/// RFC 3339 times in UTC (`2024-03-01T09:15:02.137Z`), parsed and printed without Foundation.
enum RFC3339 {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+00:00|-00:00)`; nil for anything else, including
    /// other offsets (times must be UTC) and impossible dates.
    static func parse<C: Collection<UInt8>>(_ text: C) -> Timestamp? where C.Index == Int {
        let s = text
        var i = s.startIndex
        func digits(_ n: Int) -> Int? {
            guard s.endIndex - i >= n else { return nil }
            var value = 0
            for _ in 0..<n {
                let b = s[i]
                guard b >= 48 && b <= 57 else { return nil }
                value = value * 10 + Int(b - 48)
                i += 1
            }
            return value
        }
        func expect(_ c: UInt8...) -> Bool {
            guard i < s.endIndex, c.contains(s[i]) else { return false }
            i += 1
            return true
        }
        guard let year = digits(4), expect(45), let month = digits(2), expect(45), let day = digits(2),
            expect(84, 116, 32), let hour = digits(2), expect(58), let minute = digits(2), expect(58),
            let second = digits(2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour < 24, minute < 60, second < 60
        else { return nil }
        var nanos: Int64 = 0
        if i < s.endIndex && s[i] == 46 {
            i += 1
            var count = 0
            while i < s.endIndex, s[i] >= 48 && s[i] <= 57 {
                if count < 9 { nanos = nanos * 10 + Int64(s[i] - 48) }
                count += 1
                i += 1
            }
            guard count > 0 else { return nil }
            for _ in min(count, 9)..<9 { nanos *= 10 }
        }
        guard i < s.endIndex else { return nil }
        if s[i] == 90 || s[i] == 122 {
            i += 1
        } else if s[i] == 43 || s[i] == 45 {
            i += 1
            guard let h = digits(2), expect(58), let m = digits(2), h == 0, m == 0 else { return nil }
        } else {
            return nil
        }
        guard i == s.endIndex else { return nil }
        let days = Int64(daysFromCivil(year: year, month: month, day: day))
        let seconds = days * 86_400 + Int64(hour * 3600 + minute * 60 + second)
        // Nanoseconds since 1970 in 64 bits cover the years 1678 to 2262; others are refused.
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, overflow2) = scaled.addingReportingOverflow(nanos)
        guard !overflow, !overflow2 else { return nil }
        return Timestamp(nanosecondsSinceEpoch: total)
    }

    static func parse(_ text: String) -> Timestamp? {
        parse(Array(text.utf8))
    }

    static func format(_ t: Timestamp) -> String {
        let ns = t.nanosecondsSinceEpoch
        var seconds = ns / 1_000_000_000
        var fraction = ns % 1_000_000_000
        if fraction < 0 {
            fraction += 1_000_000_000
            seconds -= 1
        }
        var days = seconds / 86_400
        var rest = seconds % 86_400
        if rest < 0 {
            rest += 86_400
            days -= 1
        }
        let (y, m, d) = civilFromDays(Int(days))
        // Into the string's own storage: an array for each part showed in the profile of a
        // 100,000-row report.
        return String(unsafeUninitializedCapacity: 30) { out in
            var at = 0
            func put(_ v: Int, _ width: Int) {
                var x = v
                for k in stride(from: at + width - 1, through: at, by: -1) {
                    out[k] = UInt8(48 + x % 10)
                    x /= 10
                }
                at += width
            }
            func put(_ byte: UInt8) {
                out[at] = byte
                at += 1
            }
            put(y, 4); put(45); put(m, 2); put(45); put(d, 2); put(84)
            put(Int(rest / 3600), 2); put(58); put(Int(rest % 3600 / 60), 2); put(58); put(Int(rest % 60), 2)
            put(46)
            if fraction % 1_000_000 == 0 {
                put(Int(fraction / 1_000_000), 3)
            } else if fraction % 1000 == 0 {
                put(Int(fraction / 1000), 6)
            } else {
                put(Int(fraction), 9)
            }
            put(90)
            return at
        }
    }

    private static func isLeap(_ y: Int) -> Bool { (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Howard Hinnant's days_from_civil: days since 1970-01-01 of a proleptic Gregorian date.
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// Howard Hinnant's civil_from_days: the proleptic Gregorian date (year, month, day) of a day count.
    static func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

extension RFC3339 {
    /// The times a ledger can hold: nanoseconds since 1970 in 64 bits.
    static let supportedRange = "1677-09-21T00:12:43.145224192Z...2262-04-11T23:47:16.854775807Z"

    /// Why `text` does not parse: out of the supported range (a well-formed time of another
    /// year), or not an RFC 3339 UTC time at all. `what` names it (a field, or the text).
    static func failure(_ text: String, _ what: String) -> String {
        var bytes = Array(text.prefix(40).utf8)
        if bytes.count >= 4, bytes[0..<4].allSatisfy({ $0 >= 48 && $0 <= 57 }) {
            bytes.replaceSubrange(0..<4, with: Array("2000".utf8))
            if parse(bytes) != nil { return "\(what) is outside the supported range of times, \(supportedRange)" }
        }
        return "\(what) must be an RFC 3339 UTC time such as 2024-03-01T09:15:02.137Z"
    }
}

extension Timestamp {
    /// Parses an RFC 3339 UTC time such as `2024-03-01T09:15:02.137Z`.
    public static func parse(_ text: String) throws(LedgerError) -> Timestamp {
        guard let value = RFC3339.parse(text) else {
            throw .malformed(RFC3339.failure(text, "\"\(text.prefix(40))\""))
        }
        return value
    }
}
