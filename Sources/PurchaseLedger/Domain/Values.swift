/// A point in time, as the event's `at` gave it: nanoseconds since 1970-01-01T00:00:00Z.
///
/// Times are kept exactly as recorded; device clocks jump, so nothing assumes they are ordered.
public struct Timestamp: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    /// Nanoseconds since 1970-01-01T00:00:00Z (negative before it).
    public var nanosecondsSinceEpoch: Int64

    /// The time `nanosecondsSinceEpoch` ns after 1970-01-01T00:00:00Z.
    public init(nanosecondsSinceEpoch: Int64) {
        self.nanosecondsSinceEpoch = nanosecondsSinceEpoch
    }

    /// The time `millisecondsSinceEpoch` ms after 1970-01-01T00:00:00Z. A value outside the range a
    /// `Timestamp` holds (1677...2262) wraps around instead of trapping.
    public init(millisecondsSinceEpoch: Int64) {
        self.nanosecondsSinceEpoch = millisecondsSinceEpoch &* 1_000_000
    }

    /// Earlier first, by nanoseconds since 1970.
    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool {
        lhs.nanosecondsSinceEpoch < rhs.nanosecondsSinceEpoch
    }

    /// RFC 3339 in UTC: at least millisecond precision, more digits only when the value has them.
    public var description: String { RFC3339.format(self) }

    /// Decodes an RFC 3339 UTC string (`2024-03-01T09:15:02.137Z`); throws `DecodingError` for
    /// anything else.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = RFC3339.parse(Array(text.utf8)) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an RFC 3339 UTC time: \(text)"))
        }
        self = value
    }

    /// Encodes as its RFC 3339 UTC string (``description``).
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

/// A content version: dotted non-negative integers such as `1`, `1.2` or `2.0.13`.
///
/// Two versions compare part by part as numbers, missing parts counting as zero, so `1.10` is newer
/// than `1.9` and `1` equals `1.0` when compared. The text is kept as written.
public struct ContentVersion: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The version exactly as written (`1.10`, `2.0.13`).
    public let text: String

    /// Fails unless `text` is dotted integers.
    public init?(_ text: String) {
        guard ContentVersion.isValid(text) else { return nil }
        self.text = text
    }

    /// The version as written (``text``).
    public var description: String { text }

    /// A whole-number version (an asset pack's).
    public init(_ version: Int) {
        text = String(version)
    }

    static func isValid(_ text: String) -> Bool {
        var sawDigit = false
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): sawDigit = true
            case UInt8(ascii: "."):
                guard sawDigit else { return false }
                sawDigit = false
            default: return false
            }
        }
        return sawDigit
    }

    /// Numeric comparison, part by part: negative when `self` is older than `other`. Missing parts
    /// count as 0 (`1.2` equals `1.2.0`), and parts are numbers of any size.
    public func compare(_ other: ContentVersion) -> Int {
        if text == other.text { return 0 }
        var a = text, b = other.text
        return a.withUTF8 { x in b.withUTF8 { y in ContentVersion.compare(x, y) } }
    }

    /// Whether `self` is a later version than `other`, compared part by part as numbers (``compare(_:)``).
    public func isNewer(than other: ContentVersion) -> Bool { compare(other) > 0 }

    private static func compare(_ x: UnsafeBufferPointer<UInt8>, _ y: UnsafeBufferPointer<UInt8>) -> Int {
        let dot = UInt8(ascii: "."), zero = UInt8(ascii: "0")
        // i and j are the starts of the next parts; past the end (count + 1) once a side is used up.
        var i = 0, j = 0
        while i <= x.count || j <= y.count {
            var xEnd = i, yEnd = j
            while xEnd < x.count && x[xEnd] != dot { xEnd += 1 }
            while yEnd < y.count && y[yEnd] != dot { yEnd += 1 }
            var p = i, q = j
            while p < xEnd && x[p] == zero { p += 1 }
            while q < yEnd && y[q] == zero { q += 1 }
            let xDigits = max(0, xEnd - p), yDigits = max(0, yEnd - q)
            if xDigits != yDigits { return xDigits < yDigits ? -1 : 1 }
            for k in 0..<xDigits where x[p + k] != y[q + k] { return x[p + k] < y[q + k] ? -1 : 1 }
            i = max(i, xEnd) + 1
            j = max(j, yEnd) + 1
        }
        return 0
    }

    /// Decodes a dotted-integers string; throws `DecodingError` for anything else.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = ContentVersion(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a dotted version: \(text)"))
        }
        self = value
    }

    /// Encodes as its ``text``.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(text)
    }
}

/// An error the store reported (`SKErrorDomain` 2, "The payment was cancelled.").
public struct StoreError: Sendable, Hashable, Codable {
    /// The error's domain, such as `SKErrorDomain` (the `NSError` domain StoreKit gave).
    public var domain: String
    /// The error's code in its domain.
    public var code: Int64
    /// The store's description of the error, as reported.
    public var message: String

    /// An error with the domain, code and message the store reported.
    public init(domain: String, code: Int64, message: String) {
        self.domain = domain
        self.code = code
        self.message = message
    }
}

/// The four kinds of in-app product.
public enum ProductKind: String, Sendable, Hashable, Codable, CaseIterable {
    case consumable, nonConsumable, autoRenewable, nonRenewing
}

/// One file of hosted content a product delivers.
public struct ContentSpec: Sendable, Hashable, Codable {
    /// The content id (`content`).
    public var content: String
    /// The version of the content the product delivers (`contentVersion`).
    public var contentVersion: ContentVersion
    /// The content's size in bytes (`contentLength`).
    public var contentLength: Int64

    /// A content file of `contentLength` bytes at `contentVersion`.
    public init(content: String, contentVersion: ContentVersion, contentLength: Int64) {
        self.content = content
        self.contentVersion = contentVersion
        self.contentLength = contentLength
    }
}

/// One download the store attached to a purchased or restored transaction.
public struct DownloadSpec: Sendable, Hashable, Codable {
    /// The download's id (`download`), unique in the ledger.
    public var download: String
    /// The content id it delivers (`content`).
    public var content: String
    /// The version of that content (`contentVersion`).
    public var contentVersion: ContentVersion
    /// The content's size in bytes (`contentLength`).
    public var contentLength: Int64

    /// The download `download` of `content` at `contentVersion`, `contentLength` bytes.
    public init(download: String, content: String, contentVersion: ContentVersion, contentLength: Int64) {
        self.download = download
        self.content = content
        self.contentVersion = contentVersion
        self.contentLength = contentLength
    }
}

/// Why a download was cancelled: by the user, or by the ledger when its transaction finished early.
public enum CancelReason: String, Sendable, Hashable, Codable, CaseIterable {
    case user, transactionFinished
}

/// A product as the store registered it.
public struct ProductRegistration: Sendable, Hashable, Codable {
    /// The product id (`product`).
    public var product: String
    /// Consumable, non-consumable, auto-renewable or non-renewing (`kind`).
    public var kind: ProductKind
    /// The price as the store gave it, a decimal string in `currency` units ("4.99"), never a float.
    public var price: String
    /// The ISO 4217 code of ``price`` (`USD`).
    public var currency: String
    /// Whether the product has hosted content to download (StoreKit's `isDownloadable`).
    public var downloadable: Bool
    /// The content files it delivers; registering publishes their versions.
    public var contents: [ContentSpec]
    /// Products related to this one: owning either grants the other, not transitively
    /// (``LedgerState/owns(product:)``).
    public var relatedProducts: [String]
    /// The product's display name, when the store gave one.
    public var title: String?

    /// A registration as `productRegistered` carries it (docs/json.md).
    public init(
        product: String, kind: ProductKind, price: String, currency: String, downloadable: Bool,
        contents: [ContentSpec] = [], relatedProducts: [String] = [], title: String? = nil
    ) {
        self.product = product
        self.kind = kind
        self.price = price
        self.currency = currency
        self.downloadable = downloadable
        self.contents = contents
        self.relatedProducts = relatedProducts
        self.title = title
    }
}
