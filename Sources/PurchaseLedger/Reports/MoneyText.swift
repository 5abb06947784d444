public import Foundation

/// Amounts as people read them: with their currency's decimals, ISO 4217's minor unit (2 for most
/// currencies, 0 for JPY or KRW, 3 for BHD or KWD), so 7498.5 USD reads `7498.50` and 371720 JPY
/// reads `371720`. Never fewer digits than the amount has: an amount is padded, never rounded.
///
/// Tables, CSV and HTML reports print amounts this way; JSON keeps the exact decimal strings.
///
/// ```swift
/// MoneyText.text(Decimal(string: "7498.5")!, currency: "USD")   // "7498.50"
/// MoneyText.text("120", currency: "JPY")                        // "120"
/// ```
public enum MoneyText {
    /// ISO 4217 currencies whose minor unit is not 2 digits (list of 2024).
    private static let minorUnits: [String: Int] = [
        "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0, "RWF": 0, "UGX": 0,
        "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
        "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
        "CLF": 4, "UYW": 4,
    ]

    /// The digits after the decimal point of `currency`'s minor unit (2 for a code not listed).
    public static func decimals(of currency: String) -> Int { minorUnits[currency.uppercased()] ?? 2 }

    /// `amount` with at least `currency`'s decimals.
    public static func text(_ amount: Decimal, currency: String) -> String {
        text("\(amount)", currency: currency)
    }

    /// A decimal string (`"4.9"`, `"-3"`) with at least `currency`'s decimals; anything that is not
    /// a plain decimal number, as it is.
    public static func text(_ amount: String, currency: String) -> String {
        let digits = decimals(of: currency)
        let body = amount.hasPrefix("-") ? amount.dropFirst() : amount[...]
        let parts = body.split(separator: ".", omittingEmptySubsequences: false)
        guard !body.isEmpty, parts.count <= 2, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCIIDigit) }) else { return amount }
        let fraction = parts.count == 2 ? parts[1] : ""
        guard fraction.count < digits else { return amount }
        return (parts.count == 2 ? amount : amount + ".") + String(repeating: "0", count: digits - fraction.count)
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
