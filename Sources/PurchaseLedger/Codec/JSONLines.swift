/// The JSON Lines interchange format of the contract: one event per line.
///
/// Decoding is strict about what the contract fixes (types, ranges, dotted versions, UTC times)
/// and lenient where it says so (unknown keys ignored, `null` means absent, blank lines skipped).
///
/// ```swift
/// let event = try JSONLines.decode(#"{"type":"restoreStarted","at":"2024-03-01T09:15:02Z","user":"u1"}"#)
/// ```
public enum JSONLines {
    /// Decodes one line. Throws ``LedgerError/Code/malformedInput`` naming the field at fault.
    public static func decode(_ line: String) throws(LedgerError) -> Event {
        try decode(bytes: Array(line.utf8))
    }

    /// A decoded line: the event, and whether the line says the ledger appended it itself (an
    /// export's automatic cancellation, which an import leaves to the ledger to append again).
    struct Line {
        var event: Event
        var appendedByLedger: Bool
    }

    static func decode(bytes: [UInt8]) throws(LedgerError) -> Event {
        try decodeLine(bytes).event
    }

    static func decodeLine(_ bytes: [UInt8]) throws(LedgerError) -> Line {
        let tape: JSONTape
        do {
            tape = try JSONTape(bytes)
        } catch {
            throw .malformed("invalid JSON: \(error.message) at byte \(error.offset + 1)")
        }
        guard tape.tokens[0].kind == .object else { throw .malformed("a line must be a JSON object") }
        let f = Fields(tape: tape, object: 0)
        let typeName = try f.string("type")
        guard let type = EventType(name: typeName) else {
            throw .malformed("unknown event type \"\(typeName)\"")
        }
        let atText = try f.string("at")
        guard let at = RFC3339.parse(Array(atText.utf8)) else {
            throw .malformed(RFC3339.failure(atText, "field `at`"))
        }
        let body = try decodeBody(type, f)
        return Line(event: Event(at: at, body), appendedByLedger: (try? f.optionalBool("appendedByLedger")) == true)
    }

    private static func decodeBody(_ type: EventType, _ f: Fields) throws(LedgerError) -> EventBody {
        switch type {
        case .productRegistered:
            let kindName = try f.string("kind")
            guard let kind = ProductKind(rawValue: kindName) else {
                throw .malformed("field `kind` must be consumable, nonConsumable, autoRenewable or nonRenewing")
            }
            let price = normalizedPrice(try f.string("price"))
            if let wrong = priceProblem(price) { throw .malformed("field `price` \(wrong)") }
            let currency = try f.string("currency")
            guard PurchaseTerms.isUpperLetters(currency, count: 3) else {
                throw .malformed("field `currency` must be an ISO 4217 code such as USD")
            }
            var contents: [ContentSpec] = []
            for (k, item) in try f.optionalArray("contents").enumerated() {
                let g = try f.object(item, "contents[\(k)]")
                contents.append(
                    ContentSpec(
                        content: try g.string("content"), contentVersion: try g.version("contentVersion"),
                        contentLength: try g.length("contentLength")))
            }
            var related: [String] = []
            for (k, item) in try f.optionalArray("relatedProducts").enumerated() {
                guard let s = f.string(item: item) else { throw .malformed("field `relatedProducts[\(k)]` must be a string") }
                try InputLimits.check(s, key: "product", name: "`relatedProducts[\(k)]`")
                related.append(s)
            }
            return .productRegistered(
                ProductRegistration(
                    product: try f.string("product"), kind: kind, price: price, currency: currency,
                    downloadable: try f.bool("downloadable"), contents: contents, relatedProducts: related,
                    title: try f.optionalString("title")))
        case .contentVersionPublished:
            return .contentVersionPublished(
                product: try f.string("product"), content: try f.string("content"),
                contentVersion: try f.version("contentVersion"))
        case .paymentQueued:
            let quantity = try f.optionalInt("quantity") ?? 1
            guard (1...10).contains(quantity) else { throw .malformed("field `quantity` must be an integer in 1...10") }
            return .paymentQueued(
                transaction: try f.string("transaction"), product: try f.string("product"),
                quantity: Int(quantity), user: try f.optionalString("user"))
        case .transactionDeferred:
            return .transactionDeferred(transaction: try f.string("transaction"))
        case .transactionPurchased:
            return .transactionPurchased(
                transaction: try f.string("transaction"), product: try f.optionalString("product"),
                user: try f.optionalString("user"), storeTransactionId: try f.optionalString("storeTransactionId"),
                downloads: try downloads(f), terms: try terms(f))
        case .transactionFailed:
            return .transactionFailed(transaction: try f.string("transaction"), error: try f.storeError("error"))
        case .transactionRestored:
            return .transactionRestored(
                transaction: try f.string("transaction"), originalTransaction: try f.string("originalTransaction"),
                product: try f.string("product"), user: try f.optionalString("user"),
                storeTransactionId: try f.optionalString("storeTransactionId"), downloads: try downloads(f), terms: try terms(f))
        case .transactionRevoked:
            return .transactionRevoked(transaction: try f.string("transaction"), reason: try f.string("reason"), signedTransaction: try signed(f))
        case .transactionFinished:
            return .transactionFinished(transaction: try f.string("transaction"), discardContent: try f.optionalBool("discardContent") ?? false)
        case .downloadStarted:
            return .downloadStarted(download: try f.string("download"))
        case .downloadProgressed:
            let progress = try f.double("progress")
            guard progress >= 0 && progress <= 1 else { throw .malformed("field `progress` must be a number in 0...1") }
            let remaining = try f.optionalDouble("timeRemaining")
            if let remaining, remaining < 0 && remaining != -1 {
                throw .malformed("field `timeRemaining` must be seconds >= 0, or -1 for unknown")
            }
            let bytes = try f.optionalInt("bytesWritten")
            if let bytes, bytes < 0 { throw .malformed("field `bytesWritten` must not be negative") }
            return .downloadProgressed(download: try f.string("download"), progress: progress, bytesWritten: bytes, timeRemaining: remaining)
        case .downloadPaused:
            return .downloadPaused(download: try f.string("download"))
        case .downloadResumed:
            return .downloadResumed(download: try f.string("download"))
        case .downloadCancelled:
            let reason: CancelReason
            if let name = try f.optionalString("reason") {
                guard let r = CancelReason(rawValue: name) else { throw .malformed("field `reason` must be user or transactionFinished") }
                reason = r
            } else {
                reason = .user
            }
            return .downloadCancelled(download: try f.string("download"), reason: reason)
        case .downloadFinished:
            return .downloadFinished(download: try f.string("download"), contentURL: try f.string("contentURL"))
        case .downloadFailed:
            return .downloadFailed(download: try f.string("download"), error: try f.storeError("error"))
        case .contentCopiedOut:
            let bytes = try f.optionalInt("bytesCopied")
            if let bytes, bytes < 0 { throw .malformed("field `bytesCopied` must not be negative") }
            return .contentCopiedOut(
                download: try f.string("download"), destination: try f.string("destination"),
                checksum: try f.optionalString("checksum"), bytesCopied: bytes)
        case .contentDeleted:
            return .contentDeleted(product: try f.string("product"))
        case .restoreStarted:
            return .restoreStarted(user: try f.optionalString("user"))
        case .restoreCompleted:
            return .restoreCompleted
        case .restoreFailed:
            return .restoreFailed(error: try f.storeError("error"))
        case .contentRegistered:
            let length = try f.optionalInt("contentLength")
            if let length, length < 0 { throw .malformed("field `contentLength` must not be negative") }
            return .contentRegistered(url: try f.string("url"), download: try f.string("download"), contentLength: length)
        case .assetPackPublished:
            var unlockedBy: [String] = []
            for (k, item) in try f.optionalArray("unlockedBy").enumerated() {
                guard let product = f.string(item: item) else { throw .malformed("field `unlockedBy[\(k)]` must be a string") }
                try InputLimits.check(product, key: "product", name: "`unlockedBy[\(k)]`")
                unlockedBy.append(product)
            }
            return .assetPackPublished(pack: try f.string("pack"), version: try f.packVersion(), unlockedBy: unlockedBy)
        case .assetPackBegan:
            return .assetPackBegan(pack: try f.string("pack"), version: try f.packVersion())
        case .assetPackProgressed:
            let progress = try f.double("progress")
            guard progress >= 0 && progress <= 1 else { throw .malformed("field `progress` must be a number in 0...1") }
            return .assetPackProgressed(pack: try f.string("pack"), version: try f.packVersion(), progress: progress)
        case .assetPackPaused:
            return .assetPackPaused(pack: try f.string("pack"), version: try f.packVersion())
        case .assetPackFinished:
            return .assetPackFinished(pack: try f.string("pack"), version: try f.packVersion())
        case .assetPackFailed:
            return .assetPackFailed(pack: try f.string("pack"), version: try f.packVersion(), error: try f.storeError("error"))
        case .assetPackRemoved:
            return .assetPackRemoved(pack: try f.string("pack"))
        case .assetPackOpened:
            return .assetPackOpened(pack: try f.string("pack"), version: try f.packVersion())
        case .storePaymentPromoted:
            return .storePaymentPromoted(product: try f.string("product"), accepted: try f.bool("accepted"))
        case .personalDataErased:
            return .personalDataErased(refs: try f.integers("refs"))
        case .appleTransactionReceived:
            let name = try f.string("source")
            guard let source = AppleSource(rawValue: name) else { throw .malformed("field `source` must be history or transactionInfo") }
            let jws = try f.string("signedTransaction")
            if !SignedTransaction.isMarker(jws), let problem = SignedTransaction.problem(jws: jws) { throw .malformed(problem) }
            return .appleTransactionReceived(signedTransaction: jws, source: source, user: try f.optionalString("user"))
        case .appleNotificationReceived:
            return .appleNotificationReceived(signedPayload: try f.string("signedPayload"), user: try f.optionalString("user"))
        case .appleHistoryCompleted:
            return .appleHistoryCompleted(revision: try f.string("revision"), user: try f.optionalString("user"))
        case .storeProductViewPresented:
            let item = try f.string("item")
            guard ProductViewSummary.isAppleID(item) else {
                throw .malformed("field `item` must be a positive integer in digits (the item's Apple ID), not \(item.debugDescription.prefix(40))")
            }
            let name = try f.string("style")
            guard let style = ProductViewStyle(rawValue: name) else { throw .malformed("field `style` must be sheet or overlay") }
            return .storeProductViewPresented(
                view: try f.string("view"), item: item, style: style, affiliateToken: try f.optionalString("affiliateToken"),
                campaignToken: try f.optionalString("campaignToken"), providerToken: try f.optionalString("providerToken"))
        case .storeProductViewLoaded:
            return .storeProductViewLoaded(view: try f.string("view"))
        case .storeProductViewFailed:
            return .storeProductViewFailed(view: try f.string("view"), error: try f.storeError("error"))
        case .storeProductViewDismissed:
            return .storeProductViewDismissed(view: try f.string("view"))
        }
    }

    /// A line's `signedTransaction`, checked: a JWS, or nil. What an erased one reads as (an
    /// export of a ledger after `forget`) is left out: it vouches for nothing, and only `forget`
    /// makes one.
    private static func signed(_ f: Fields) throws(LedgerError) -> String? {
        guard let jws = try f.optionalString("signedTransaction"), !SignedTransaction.isErasedMarker(jws) else { return nil }
        if let problem = SignedTransaction.problem(jws: jws) { throw .malformed(problem) }
        return jws
    }

    /// The v2 fields of a purchase or restore (contract 5.1), checked.
    private static func terms(_ f: Fields) throws(LedgerError) -> PurchaseTerms {
        func named<T: RawRepresentable<String> & CaseIterable>(_ key: String, _ g: Fields, _: T.Type) throws(LedgerError) -> T? {
            guard let text = try g.optionalString(key) else { return nil }
            guard let value = T(rawValue: text) else {
                let names = T.allCases.map(\.rawValue)
                throw .malformed("field \(g.qualified(key)) must be \(names.dropLast().joined(separator: ", ")) or \(names.last!)")
            }
            return value
        }
        var terms = PurchaseTerms(
            price: try f.optionalString("price").map(normalizedPrice), currency: try f.optionalString("currency"), storefront: try f.optionalString("storefront"),
            environment: try named("environment", f, StoreEnvironment.self), ownership: try named("ownership", f, Ownership.self),
            unverified: try f.optionalString("unverified"), signedTransaction: try signed(f))
        if let item = try f.optionalItem("offer") {
            let g = try f.object(item, "offer")
            guard let type = try named("type", g, OfferType.self) else { throw .malformed("missing field \(g.qualified("type"))") }
            terms.offer = Offer(type: type, id: try g.optionalString("id"))
        }
        if let problem = terms.problem { throw .malformed(problem) }
        return terms
    }

    private static func downloads(_ f: Fields) throws(LedgerError) -> [DownloadSpec]? {
        guard let items = try f.optionalArrayOrNil("downloads") else { return nil }
        var specs: [DownloadSpec] = []
        for (k, item) in items.enumerated() {
            let g = try f.object(item, "downloads[\(k)]")
            specs.append(
                DownloadSpec(
                    download: try g.string("download"), content: try g.string("content"),
                    contentVersion: try g.version("contentVersion"), contentLength: try g.length("contentLength")))
        }
        return specs
    }

    /// The most a price may hold: 12 digits before the point (a unit price under a trillion) and
    /// 6 after (to the millionth; the App Store's own prices have 3). Every sum a report makes of
    /// such prices, times quantities, stays exact in `Decimal`'s 38 digits.
    static let priceDigits = (integer: 12, fraction: 6)

    /// Why `s` is not a price input takes (a message to follow the field's name), or nil.
    static func priceProblem(_ s: String) -> String? {
        guard isDecimal(s) else { return "must be a decimal string such as \"4.99\" (\"0\" for a free trial)" }
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        let integer = parts[0].drop { $0 == "0" }
        guard integer.count <= priceDigits.integer, parts.count == 1 || parts[1].count <= priceDigits.fraction else {
            return "must have at most \(priceDigits.integer) digits before the point and \(priceDigits.fraction) after (docs/json.md)"
        }
        return nil
    }

    /// `s` without the zeros that lead its integer part ("0004.99" is "4.99"; "0.99" stays): one
    /// spelling per amount, so a price is one revenue line however it was written.
    static func normalizedPrice(_ s: String) -> String {
        guard isDecimal(s), s.hasPrefix("0") else { return s }
        let trimmed = s.drop { $0 == "0" }
        return trimmed.isEmpty || trimmed.hasPrefix(".") ? "0" + trimmed : String(trimmed)
    }

    static func isDecimal(_ s: String) -> Bool {
        var sawDigit = false, sawDot = false, digitsAfterDot = 0
        for b in s.utf8 {
            if b >= 48 && b <= 57 {
                sawDigit = true
                if sawDot { digitsAfterDot += 1 }
            } else if b == 46 && !sawDot && sawDigit {
                sawDot = true
            } else {
                return false
            }
        }
        return sawDigit && (!sawDot || digitsAfterDot > 0)
    }

    // MARK: - Encoding

    /// One event as a JSON line (no newline). `seq`, `anomaly` and `appendedByLedger` are added
    /// when given, as `export` does.
    public static func encode(_ event: Event, seq: Int64? = nil, anomaly: Rule? = nil, appendedByLedger: Bool = false) -> String {
        var w = JSONWriter()
        write(event, seq: seq, anomaly: anomaly, appendedByLedger: appendedByLedger, to: &w)
        return w.string
    }

    static func write(_ event: Event, seq: Int64?, anomaly: Rule?, appendedByLedger: Bool, to w: inout JSONWriter) {
        w.beginObject()
        if let seq { w.field("seq", seq) }
        w.field("type", event.type.name)
        w.field("at", event.at.description)
        writeFields(event.body, to: &w)
        if let anomaly { w.field("anomaly", anomaly.name) }
        if appendedByLedger { w.field("appendedByLedger", true) }
        w.endObject()
    }

    static func writeFields(_ body: EventBody, to w: inout JSONWriter) {
        func opt(_ k: String, _ v: String?) { if let v { w.field(k, v) } }
        func opt(_ k: String, _ v: Int64?) { if let v { w.field(k, v) } }
        func error(_ e: StoreError) {
            w.key("error"); w.beginObject(); w.field("domain", e.domain); w.field("code", e.code); w.field("message", e.message); w.endObject()
        }
        func downloads(_ specs: [DownloadSpec]?) {
            guard let specs else { return }
            w.key("downloads"); w.beginArray()
            for s in specs {
                w.beginObject(); w.field("download", s.download); w.field("content", s.content)
                w.field("contentVersion", s.contentVersion.text); w.field("contentLength", s.contentLength); w.endObject()
            }
            w.endArray()
        }
        func terms(_ t: PurchaseTerms) {
            opt("price", t.price); opt("currency", t.currency); opt("storefront", t.storefront)
            opt("environment", t.environment?.rawValue); opt("ownership", t.ownership?.rawValue)
            if let offer = t.offer {
                w.key("offer"); w.beginObject(); w.field("type", offer.type.rawValue)
                if let id = offer.id { w.field("id", id) }
                w.endObject()
            }
            opt("unverified", t.unverified)
            opt("signedTransaction", t.signedTransaction)
        }
        switch body {
        case .productRegistered(let p):
            w.field("product", p.product); w.field("kind", p.kind.rawValue); w.field("price", p.price)
            w.field("currency", p.currency); w.field("downloadable", p.downloadable)
            if !p.contents.isEmpty {
                w.key("contents"); w.beginArray()
                for c in p.contents {
                    w.beginObject(); w.field("content", c.content); w.field("contentVersion", c.contentVersion.text)
                    w.field("contentLength", c.contentLength); w.endObject()
                }
                w.endArray()
            }
            if !p.relatedProducts.isEmpty {
                w.key("relatedProducts"); w.beginArray()
                for r in p.relatedProducts { w.value(r) }
                w.endArray()
            }
            opt("title", p.title)
        case .contentVersionPublished(let product, let content, let version):
            w.field("product", product); w.field("content", content); w.field("contentVersion", version.text)
        case .paymentQueued(let t, let product, let quantity, let user):
            w.field("transaction", t); w.field("product", product); w.field("quantity", quantity); opt("user", user)
        case .transactionDeferred(let t):
            w.field("transaction", t)
        case .transactionPurchased(let t, let product, let user, let store, let specs, let paid):
            w.field("transaction", t); opt("product", product); opt("user", user); opt("storeTransactionId", store); downloads(specs)
            terms(paid)
        case .transactionFailed(let t, let e):
            w.field("transaction", t); error(e)
        case .transactionRestored(let t, let original, let product, let user, let store, let specs, let paid):
            w.field("transaction", t); w.field("originalTransaction", original); w.field("product", product)
            opt("user", user); opt("storeTransactionId", store); downloads(specs)
            terms(paid)
        case .transactionRevoked(let t, let reason, let signed):
            w.field("transaction", t); w.field("reason", reason); opt("signedTransaction", signed)
        case .transactionFinished(let t, let discard):
            w.field("transaction", t); if discard { w.field("discardContent", true) }
        case .downloadStarted(let d), .downloadPaused(let d), .downloadResumed(let d):
            w.field("download", d)
        case .downloadProgressed(let d, let progress, let bytes, let remaining):
            w.field("download", d); w.field("progress", progress); opt("bytesWritten", bytes)
            if let remaining { w.field("timeRemaining", remaining) }
        case .downloadCancelled(let d, let reason):
            w.field("download", d); w.field("reason", reason.rawValue)
        case .downloadFinished(let d, let url):
            w.field("download", d); w.field("contentURL", url)
        case .downloadFailed(let d, let e):
            w.field("download", d); error(e)
        case .contentCopiedOut(let d, let destination, let checksum, let bytes):
            w.field("download", d); w.field("destination", destination); opt("checksum", checksum); opt("bytesCopied", bytes)
        case .contentDeleted(let product):
            w.field("product", product)
        case .restoreStarted(let user):
            opt("user", user)
        case .restoreCompleted:
            break
        case .restoreFailed(let e):
            error(e)
        case .contentRegistered(let url, let d, let length):
            w.field("url", url); w.field("download", d); opt("contentLength", length)
        case .assetPackPublished(let pack, let version, let unlockedBy):
            w.field("pack", pack); w.field("version", version)
            w.key("unlockedBy"); w.array(unlockedBy)
        case .assetPackBegan(let pack, let version), .assetPackPaused(let pack, let version), .assetPackFinished(let pack, let version),
            .assetPackOpened(let pack, let version):
            w.field("pack", pack); w.field("version", version)
        case .assetPackProgressed(let pack, let version, let progress):
            w.field("pack", pack); w.field("version", version); w.field("progress", progress)
        case .assetPackFailed(let pack, let version, let e):
            w.field("pack", pack); w.field("version", version); error(e)
        case .assetPackRemoved(let pack):
            w.field("pack", pack)
        case .storePaymentPromoted(let product, let accepted):
            w.field("product", product); w.field("accepted", accepted)
        case .personalDataErased(let refs):
            w.key("refs"); w.beginArray()
            for ref in refs { w.value(ref) }
            w.endArray()
        case .appleTransactionReceived(let jws, let source, let user):
            w.field("signedTransaction", jws); w.field("source", source.rawValue); opt("user", user)
        case .appleNotificationReceived(let jws, let user):
            w.field("signedPayload", jws); opt("user", user)
        case .appleHistoryCompleted(let revision, let user):
            w.field("revision", revision); opt("user", user)
        case .storeProductViewPresented(let view, let item, let style, let affiliate, let campaign, let provider):
            w.field("view", view); w.field("item", item); w.field("style", style.rawValue)
            opt("affiliateToken", affiliate); opt("campaignToken", campaign); opt("providerToken", provider)
        case .storeProductViewLoaded(let view), .storeProductViewDismissed(let view):
            w.field("view", view)
        case .storeProductViewFailed(let view, let e):
            w.field("view", view); error(e)
        }
    }
}

/// Typed access to a JSON object's fields, with errors that name the field.
private struct Fields {
    let tape: JSONTape
    /// The object's token in `tape`.
    let object: Int
    var prefix = ""

    /// The token of `key`'s value; nil when absent or null. A key given twice is malformed.
    private func get(_ key: String) throws(LedgerError) -> Int? {
        let (value, repeated) = tape.member(object, key)
        if repeated { throw .malformed("field \(name(key)) is given twice in one object") }
        guard let v = value, tape.tokens[v].kind != .null else { return nil }
        return v
    }

    private func name(_ key: String) -> String { "`\(prefix)\(key)`" }

    /// The key as errors name it: `` `offer.type` ``.
    func qualified(_ key: String) -> String { name(key) }

    /// The token of `key`'s value, of any kind; nil when absent or null.
    func optionalItem(_ key: String) throws(LedgerError) -> Int? { try get(key) }

    /// A field that must be there, read by `read` (one of the `optional...` readers).
    @inline(__always) private func required<T>(_ key: String, _ read: (String) throws(LedgerError) -> T?) throws(LedgerError) -> T {
        guard let v = try read(key) else { throw .malformed("missing field \(name(key))") }
        return v
    }

    func string(_ key: String) throws(LedgerError) -> String { try required(key, optionalString) }

    func optionalString(_ key: String) throws(LedgerError) -> String? {
        guard let v = try get(key) else { return nil }
        guard let s = string(item: v) else { throw .malformed("field \(name(key)) must be a string") }
        try InputLimits.check(s, key: key, name: name(key))
        return s
    }

    /// The text of token `item`, when it is a string.
    func string(item: Int) -> String? {
        tape.tokens[item].kind == .string ? tape.string(item) : nil
    }

    func bool(_ key: String) throws(LedgerError) -> Bool { try required(key, optionalBool) }

    func optionalBool(_ key: String) throws(LedgerError) -> Bool? {
        guard let v = try get(key) else { return nil }
        guard tape.tokens[v].kind == .bool else { throw .malformed("field \(name(key)) must be true or false") }
        return tape.tokens[v].flag
    }

    func optionalInt(_ key: String) throws(LedgerError) -> Int64? {
        guard let v = try get(key) else { return nil }
        let t = tape.tokens[v]
        guard t.kind == .number else { throw .malformed("field \(name(key)) must be an integer") }
        if let i = t.integer { return i }
        let d = t.double
        // 1.0 and 1e3 are integers written another way; 1.5 and 1e30 are not.
        guard d == d.rounded(), abs(d) < 9.0e18 else { throw .malformed("field \(name(key)) must be an integer") }
        return Int64(d)
    }

    func length(_ key: String) throws(LedgerError) -> Int64 {
        let v = try required(key, optionalInt)
        guard v >= 0 else { throw .malformed("field \(name(key)) must not be negative") }
        return v
    }

    /// `version`: an asset pack's version, a whole number in 0...2147483647.
    func packVersion() throws(LedgerError) -> Int {
        let v = try required("version", optionalInt)
        guard (0...Int64(Int32.max)).contains(v) else { throw .malformed("field \(name("version")) must be a whole number in 0...2147483647") }
        return Int(v)
    }

    func double(_ key: String) throws(LedgerError) -> Double { try required(key, optionalDouble) }

    func optionalDouble(_ key: String) throws(LedgerError) -> Double? {
        guard let v = try get(key) else { return nil }
        guard tape.tokens[v].kind == .number else { throw .malformed("field \(name(key)) must be a number") }
        return tape.tokens[v].double
    }

    func version(_ key: String) throws(LedgerError) -> ContentVersion {
        let text = try string(key)
        guard let version = ContentVersion(text) else {
            throw .malformed("field \(name(key)) must be dotted integers such as 1, 1.2 or 2.0.13")
        }
        return version
    }

    func storeError(_ key: String) throws(LedgerError) -> StoreError {
        guard let v = try get(key) else { throw .malformed("missing field \(name(key))") }
        let g = try object(v, key)
        guard let code = try g.optionalInt("code") else { throw .malformed("missing field \(g.name("code"))") }
        return StoreError(domain: try g.string("domain"), code: code, message: try g.string("message"))
    }

    /// An array of integers.
    func integers(_ key: String) throws(LedgerError) -> [Int64] {
        var values: [Int64] = []
        for item in try optionalArray(key) {
            guard tape.tokens[item].kind == .number, let i = tape.tokens[item].integer else {
                throw .malformed("field \(name(key)) must be an array of integers")
            }
            values.append(i)
        }
        return values
    }

    /// The tokens of the array's items.
    func optionalArray(_ key: String) throws(LedgerError) -> [Int] {
        try optionalArrayOrNil(key) ?? []
    }

    func optionalArrayOrNil(_ key: String) throws(LedgerError) -> [Int]? {
        guard let v = try get(key) else { return nil }
        guard tape.tokens[v].kind == .array else { throw .malformed("field \(name(key)) must be an array") }
        return tape.items(v)
    }

    /// Token `item` as an object, its fields named `path.field` in errors.
    func object(_ item: Int, _ path: String) throws(LedgerError) -> Fields {
        guard tape.tokens[item].kind == .object else { throw .malformed("field `\(prefix)\(path)` must be an object") }
        return Fields(tape: tape, object: item, prefix: prefix + path + ".")
    }
}
