/// The largest values an event may hold, in UTF-8 bytes, enforced where events come in (JSON
/// Lines and ``Ledger/append(contentsOf:)``): a refused event names its line (or batch index) and
/// field, and nothing is written. They bound what one event costs in memory, in the file and in a
/// fleet store, whoever wrote the input.
///
/// | what | limit |
/// |---|---|
/// | an id (transaction, original and store transaction, download, product, related product, content, user, a registered URL, asset pack) | 1,024 bytes |
/// | free text (title, destination, content URL, error domain and message, reason, checksum) | 4,096 bytes |
/// | a signed transaction (`signedTransaction`, a JWS with its certificates) | 16,384 bytes |
/// | a signed notification (`signedPayload`: a JWS holding signed transaction and renewal info) | 65,536 bytes |
/// | one JSON Lines line | 1 MiB |
public enum InputLimits {
    /// The most UTF-8 bytes an id may hold: 1,024.
    public static let idBytes = 1024
    /// The most UTF-8 bytes a free-text field may hold: 4,096.
    public static let textBytes = 4096
    /// The most UTF-8 bytes a signed transaction may hold: 16,384 (Apple's are about 5,000, most
    /// of them the three certificates).
    public static let signedBytes = 16384
    /// The most UTF-8 bytes a signed notification may hold: 65,536 (Apple's hold a signed
    /// transaction and a signed renewal info, each with its certificates, inside their own).
    public static let notificationBytes = 65536
    /// The most bytes one JSON Lines line may hold: 1 MiB, refused before the rest of it is read.
    public static let lineBytes = 1 << 20

    /// The JSON keys whose values are ids.
    static let idKeys: Set<String> = [
        "transaction", "originalTransaction", "storeTransactionId", "download", "product", "content", "user", "url", "offerId", "id", "pack",
        "revision", "view", "item", "affiliateToken", "campaignToken", "providerToken",
    ]

    /// `name` is built only for the error: building it for every field cost an import 4%.
    @inline(__always)
    static func check(_ value: String, key: String, name: @autoclosure () -> String) throws(LedgerError) {
        let count = value.utf8.count
        guard count > idBytes else { return }
        try refuse(count, key: key, name: name())
    }

    private static func refuse(_ count: Int, key: String, name: String) throws(LedgerError) {
        let (limit, kind) =
            idKeys.contains(key)
            ? (idBytes, "an id")
            : key == "signedTransaction"
                ? (signedBytes, "a signed transaction") : key == "signedPayload" ? (notificationBytes, "a signed notification") : (textBytes, "free text")
        guard count > limit else { return }
        throw LedgerError.malformed("field \(name) is \(count) bytes; at most \(limit) are allowed (\(kind), docs/json.md)")
    }

    /// The same checks for an event given to the library as for a JSON line: every text field
    /// within its limit and free of NUL (which JSON input cannot carry), and the values
    /// ``storedValueProblem(_:)`` checks. Direct, field by field: going through the event's JSON
    /// form cost a fsync-less append a fifth of its speed.
    ///
    /// `refusingErasedUsers`: refuse a user id that reads as an erased user's (`[erased ...`),
    /// which only `forget` makes. Off for events that come from a ledger (an export's JSON Lines,
    /// an extract), where an erasure left them.
    static func check(_ event: Event, refusingErasedUsers: Bool = true) throws(LedgerError) {
        if let wrong = storedValueProblem(event.body) { throw .malformed(wrong) }
        // What an erased signed transaction reads as is no input: only forget makes one.
        if let jws = event.body.signedTransaction, let wrong = SignedTransaction.problem(jws: jws) { throw .malformed(wrong) }
        if event.body.signedTransaction == nil, let jws = event.body.signedDocument, SignedTransaction.isMarker(jws) {
            throw .malformed("Apple's record is \(jws.prefix(40)), not a signed document: only forget and redaction make one")
        }
        // Input only (a ledger written before these limits still verifies): prices within their
        // range and scale, one spelling per amount (JSON input is normalised as it is read; the
        // library is told).
        for price in event.body.prices {
            if let wrong = JSONLines.priceProblem(price) { throw .malformed("field `price` \(wrong)") }
            if JSONLines.normalizedPrice(price) != price {
                throw .malformed("field `price` \(price.debugDescription.prefix(40)) has leading zeros: write \(JSONLines.normalizedPrice(price).prefix(40))")
            }
        }
        var failure: LedgerError?
        event.body.forEachText { key, name, value in
            guard failure == nil else { return }
            if value.utf8.contains(0) {
                failure = .malformed("field `\(name)` holds a NUL character")
                return
            }
            // Nor is what an erased user's id reads as: taken for a user, a report, a support
            // engineer or the fleet's reconciliation (which takes any user id starting so for an
            // erased one) would read a live user as erased.
            if refusingErasedUsers, key == "user", value.hasPrefix(PersonalValues.erasedPrefix) {
                failure = .malformed("field `\(name)` is \(value.prefix(40)), what an erased user's id reads as: only forget makes one")
                return
            }
            do throws(LedgerError) { try check(value, key: key, name: "`\(name)`") } catch { failure = error }
        }
        if let failure { throw failure }
    }
}

extension InputLimits {
    /// What, in an event decoded from the file, the importer would have refused: a progress that
    /// is NaN or outside 0...1, an infinite or negative time remaining, a negative length, a price
    /// that is not a decimal, a currency that is not three capitals, a quantity outside 1...10.
    /// Such a value can only come from an edited file (its links recomputed): `verify` reports it
    /// as damage with its seq, and `export` refuses to write it (JSON has no NaN).
    package static func storedValueProblem(_ body: EventBody) -> String? {
        func lengths(_ specs: [DownloadSpec]?) -> String? {
            specs?.first { $0.contentLength < 0 }.map { "download \($0.download) has a negative contentLength" }
        }
        switch body {
        case .downloadProgressed(_, let progress, let bytes, let remaining):
            if !(progress >= 0 && progress <= 1) { return "progress \(progress) is not a number in 0...1" }
            if let remaining, !remaining.isFinite || (remaining < 0 && remaining != -1) { return "timeRemaining \(remaining) is not seconds >= 0 or -1" }
            if let bytes, bytes < 0 { return "bytesWritten \(bytes) is negative" }
        case .productRegistered(let r):
            if !JSONLines.isDecimal(r.price) { return "price \(r.price.debugDescription.prefix(40)) is not a decimal" }
            if !PurchaseTerms.isUpperLetters(r.currency, count: 3) {
                return "currency \(r.currency.debugDescription.prefix(40)) is not an ISO 4217 code"
            }
            if let bad = r.contents.first(where: { $0.contentLength < 0 }) { return "content \(bad.content) has a negative contentLength" }
        case .paymentQueued(_, _, let quantity, _):
            if !(1...10).contains(quantity) { return "quantity \(quantity) is not in 1...10" }
        case .transactionPurchased(_, _, _, _, let downloads, let terms), .transactionRestored(_, _, _, _, _, let downloads, let terms):
            if let problem = terms.problem { return problem }
            return lengths(downloads)
        case .transactionRevoked(_, _, let signed):
            guard let signed, !SignedTransaction.isErasedMarker(signed) else { return nil }
            return SignedTransaction.problem(jws: signed)
        case .contentCopiedOut(_, _, _, let bytes):
            if let bytes, bytes < 0 { return "bytesCopied \(bytes) is negative" }
        case .contentRegistered(_, _, let length):
            if let length, length < 0 { return "contentLength \(length) is negative" }
        case .assetPackProgressed(_, let version, let progress):
            if !(progress >= 0 && progress <= 1) { return "progress \(progress) is not a number in 0...1" }
            if !(0...Int(Int32.max)).contains(version) { return "asset pack version \(version) is not in 0...2147483647" }
        case .assetPackPublished(_, let version, _), .assetPackBegan(_, let version), .assetPackPaused(_, let version),
            .assetPackFinished(_, let version), .assetPackFailed(_, let version, _), .assetPackOpened(_, let version):
            if !(0...Int(Int32.max)).contains(version) { return "asset pack version \(version) is not in 0...2147483647" }
        // What an erased or redacted record reads as is kept (the event is Apple's record of
        // something; the library refuses one as input).
        case .appleTransactionReceived(let jws, _, _):
            return SignedTransaction.isMarker(jws) ? nil : SignedTransaction.problem(jws: jws)
        case .appleNotificationReceived(let jws, _):
            guard !SignedTransaction.isMarker(jws) else { return nil }
            do throws(SignedTransaction.FormError) {
                _ = try SignedTransaction(jws: jws)
            } catch {
                return "field `signedPayload` is not a signed notification: \(error.message)"
            }
        case .appleHistoryCompleted(let revision, _):
            if revision.isEmpty { return "field `revision` is empty" }
        case .storeProductViewPresented(_, let item, _, _, _, _):
            if !ProductViewSummary.isAppleID(item) {
                return "field `item` \(item.debugDescription.prefix(40)) is not a positive integer (an App Store item's Apple ID, in digits)"
            }
        default:
            return nil
        }
        return nil
    }
}

extension EventBody {
    /// Calls `body` with each text field: its JSON key (which decides its limit), its name as
    /// errors give it (`downloads[0].content`), and its value. Exhaustive on purpose: a new text
    /// field must be added here to be checked.
    func forEachText(_ body: (_ key: String, _ name: String, _ value: String) -> Void) {
        func error(_ e: StoreError, _ prefix: String = "error.") {
            body("domain", prefix + "domain", e.domain)
            body("message", prefix + "message", e.message)
        }
        func specs(_ downloads: [DownloadSpec]?) {
            for (i, d) in (downloads ?? []).enumerated() {
                body("download", "downloads[\(i)].download", d.download)
                body("content", "downloads[\(i)].content", d.content)
            }
        }
        func optional(_ key: String, _ value: String?) { if let value { body(key, key, value) } }
        func paid(_ terms: PurchaseTerms) {
            optional("price", terms.price)
            optional("currency", terms.currency)
            optional("storefront", terms.storefront)
            if let id = terms.offer?.id { body("offerId", "offer.id", id) }
            optional("unverified", terms.unverified)
            optional("signedTransaction", terms.signedTransaction)
        }
        /// What a purchase and a restore both carry.
        func arrival(_ user: String?, _ storeID: String?, _ downloads: [DownloadSpec]?, _ terms: PurchaseTerms) {
            optional("user", user)
            optional("storeTransactionId", storeID)
            specs(downloads)
            paid(terms)
        }
        switch self {
        case .productRegistered(let r):
            body("product", "product", r.product)
            body("price", "price", r.price)
            body("currency", "currency", r.currency)
            optional("title", r.title)
            for (i, c) in r.contents.enumerated() { body("content", "contents[\(i)].content", c.content) }
            for (i, p) in r.relatedProducts.enumerated() { body("product", "relatedProducts[\(i)]", p) }
        case .contentVersionPublished(let product, let content, _):
            body("product", "product", product)
            body("content", "content", content)
        case .paymentQueued(let t, let p, _, let u):
            body("transaction", "transaction", t)
            body("product", "product", p)
            optional("user", u)
        case .transactionDeferred(let t), .transactionFinished(let t, _):
            body("transaction", "transaction", t)
        case .transactionPurchased(let t, let p, let u, let s, let d, let terms):
            body("transaction", "transaction", t)
            optional("product", p)
            arrival(u, s, d, terms)
        case .transactionFailed(let t, let e):
            body("transaction", "transaction", t)
            error(e)
        case .transactionRestored(let t, let original, let p, let u, let s, let d, let terms):
            body("transaction", "transaction", t)
            body("originalTransaction", "originalTransaction", original)
            body("product", "product", p)
            arrival(u, s, d, terms)
        case .transactionRevoked(let t, let reason, let signed):
            body("transaction", "transaction", t)
            body("reason", "reason", reason)
            optional("signedTransaction", signed)
        case .downloadStarted(let d), .downloadPaused(let d), .downloadResumed(let d), .downloadCancelled(let d, _), .downloadProgressed(let d, _, _, _):
            body("download", "download", d)
        case .downloadFinished(let d, let url):
            body("download", "download", d)
            body("contentURL", "contentURL", url)
        case .downloadFailed(let d, let e):
            body("download", "download", d)
            error(e)
        case .contentCopiedOut(let d, let destination, let checksum, _):
            body("download", "download", d)
            body("destination", "destination", destination)
            optional("checksum", checksum)
        case .contentDeleted(let p):
            body("product", "product", p)
        case .restoreStarted(let u):
            optional("user", u)
        case .restoreCompleted:
            break
        case .restoreFailed(let e):
            error(e)
        case .contentRegistered(let url, let d, _):
            body("url", "url", url)
            body("download", "download", d)
        case .assetPackPublished(let pack, _, let unlockedBy):
            body("pack", "pack", pack)
            for (i, p) in unlockedBy.enumerated() { body("product", "unlockedBy[\(i)]", p) }
        case .assetPackBegan(let pack, _), .assetPackProgressed(let pack, _, _), .assetPackPaused(let pack, _), .assetPackFinished(let pack, _),
            .assetPackRemoved(let pack), .assetPackOpened(let pack, _):
            body("pack", "pack", pack)
        case .assetPackFailed(let pack, _, let e):
            body("pack", "pack", pack)
            error(e)
        case .storePaymentPromoted(let product, _):
            body("product", "product", product)
        case .personalDataErased:
            break
        case .appleTransactionReceived(let jws, _, let user):
            body("signedTransaction", "signedTransaction", jws)
            optional("user", user)
        case .appleNotificationReceived(let jws, let user):
            body("signedPayload", "signedPayload", jws)
            optional("user", user)
        case .appleHistoryCompleted(let revision, let user):
            body("revision", "revision", revision)
            optional("user", user)
        case .storeProductViewPresented(let view, let item, _, let affiliate, let campaign, let provider):
            body("view", "view", view)
            body("item", "item", item)
            optional("affiliateToken", affiliate)
            optional("campaignToken", campaign)
            optional("providerToken", provider)
        case .storeProductViewLoaded(let view), .storeProductViewDismissed(let view):
            body("view", "view", view)
        case .storeProductViewFailed(let view, let e):
            body("view", "view", view)
            error(e)
        }
    }
}

extension EventBody {
    /// The prices the event states: a registration's, or a purchase's or restore's own.
    var prices: [String] {
        switch self {
        case .productRegistered(let r): [r.price]
        case .transactionPurchased(_, _, _, _, _, let terms), .transactionRestored(_, _, _, _, _, _, let terms): terms.price.map { [$0] } ?? []
        default: []
        }
    }
}
