import Crypto
import Foundation

/// The personal data in events (contract 5.3), declared field by field: what `export --redact`
/// and `extract --redact` replace. Every text field an event can hold is either here or in
/// ``nonPersonal``; a test fails when a new one is in neither.
public enum PersonalData {
    /// JSON keys (as ``EventBody`` names its text fields) of personal values: user ids,
    /// destinations, content URLs, registered URLs, error messages, revocation reasons, store
    /// transaction ids and original transaction ids.
    public static let personal: Set<String> = [
        "user", "destination", "contentURL", "url", "message", "reason", "storeTransactionId", "originalTransaction",
        "signedTransaction", "signedPayload",
    ]
    /// Text fields that are not personal: ids the app chooses (it must not put personal data in
    /// them), the catalog, error domains, checksums, money, offers and asset pack ids.
    public static let nonPersonal: Set<String> = [
        "transaction", "download", "product", "content", "title", "domain", "checksum", "price", "currency", "storefront", "offerId",
        "unverified", "pack", "revision", "view", "item", "affiliateToken", "campaignToken", "providerToken",
    ]

    /// Calls `visit` with every personal value of `body` (`isUser`: a user id). The event codec
    /// stores exactly these as refs (a test checks every event type).
    static func forEachValue(in body: EventBody, _ visit: (_ value: String, _ isUser: Bool) throws -> Void) rethrows {
        // Exhaustive on purpose: a new event with a personal field must be added here.
        switch body {
        case .paymentQueued(_, _, _, let user), .restoreStarted(let user):
            if let user { try visit(user, true) }
        case .transactionPurchased(_, _, let user, let store, _, let terms):
            if let user { try visit(user, true) }
            if let store { try visit(store, false) }
            if let signed = terms.signedTransaction { try visit(String(SignedTransaction.split(jws: signed).body), false) }
        case .transactionRestored(_, let original, _, let user, let store, _, let terms):
            try visit(original, false)
            if let user { try visit(user, true) }
            if let store { try visit(store, false) }
            if let signed = terms.signedTransaction { try visit(String(SignedTransaction.split(jws: signed).body), false) }
        case .transactionFailed(_, let error), .downloadFailed(_, let error), .restoreFailed(let error), .assetPackFailed(_, _, let error),
            .storeProductViewFailed(_, let error):
            try visit(error.message, false)
        case .transactionRevoked(_, let reason, let signed):
            try visit(reason, false)
            if let signed { try visit(String(SignedTransaction.split(jws: signed).body), false) }
        case .downloadFinished(_, let url), .contentRegistered(let url, _, _):
            try visit(url, false)
        case .contentCopiedOut(_, let destination, _, _):
            try visit(destination, false)
        case .productRegistered, .contentVersionPublished, .transactionDeferred, .transactionFinished, .downloadStarted,
            .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .contentDeleted, .restoreCompleted,
            .assetPackPublished, .assetPackBegan, .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackRemoved,
            .assetPackOpened, .storePaymentPromoted, .personalDataErased, .storeProductViewPresented, .storeProductViewLoaded,
            .storeProductViewDismissed:
            break
        case .appleTransactionReceived(let jws, _, let user), .appleNotificationReceived(let jws, let user):
            if let user { try visit(user, true) }
            try visit(String(SignedTransaction.split(jws: jws).body), false)
        case .appleHistoryCompleted(_, let user):
            if let user { try visit(user, true) }
        }
    }

    /// The user id the personal values of `body` belong to, in `state` (the state the event
    /// left): the event's own user id, else its transaction's, else that of the transaction its
    /// download belongs to. Nil for values of no user (a registered download, an asset pack, a
    /// restore's error): `forget` does not reach those.
    static func owner(of body: EventBody, in state: LedgerState) -> String? {
        var own: String?
        forEachValue(in: body) { value, isUser in if isUser { own = value } }
        if let own { return own }
        // A restore's failure (its message may name the account) is the user's who started it.
        if case .restoreFailed = body { return state.restoreUser }
        if let t = body.transactionID { return state.transactions[t]?.user }
        if let d = body.downloadID, let t = state.downloads[d]?.transaction { return state.transactions[t]?.user }
        return nil
    }
}

/// Replaces every personal field of events with a keyed pseudonym, so a user's ledger can be
/// attached to a bug report. A pseudonym is `HMAC-SHA-256(secret, kind || 0x00 || value)`, cut to
/// 64 bits: the same value always gets the same pseudonym within one ledger (support can follow
/// one user; the rules see the same equalities, so the redacted log replays to the same outcomes),
/// and without the secret it cannot be computed from a guess of the value. The secret is the
/// ledger's own (``Ledger/redactor()``), so the same events in two ledgers get different
/// pseudonyms. Free text (error messages, revocation reasons) is replaced whole by a pseudonym of
/// the same kind: nothing of it is kept but whether two texts were equal.
///
/// ```swift
/// let redactor = try ledger.redactor()
/// try ledger.forEachEvent { e in print(JSONLines.encode(redactor.redact(e.event), seq: e.seq)); return true }
/// ```
public struct Redactor: Sendable {
    // A SymmetricKey is immutable once made; Crypto does not mark it Sendable.
    nonisolated(unsafe) private let key: SymmetricKey

    /// `secret`: at least 16 bytes, kept away from what is redacted.
    public init(secret: [UInt8]) {
        key = SymmetricKey(data: secret)
    }

    /// A new random secret, for a redaction whose pseudonyms need not match any other's.
    public static func randomSecret() -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
    }

    func digest(_ kind: String, _ value: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array(kind.utf8) + [0] + Array(value.utf8), using: key)
        return Hex.encode(Array(mac.prefix(8)))
    }

    /// A user id: `user-<digest>` (16 hex digits).
    public func pseudonym(user: String) -> String { "user-" + digest("user", user) }
    /// A copy-out destination: `redacted/<digest>`.
    public func pseudonym(destination: String) -> String { "redacted/" + digest("destination", destination) }
    /// A content or registered URL: `redacted://<digest>/` (still a URL, never a path).
    public func pseudonym(url: String) -> String { "redacted://" + digest("url", url) + "/" }
    /// A store transaction id: `store-<digest>`.
    public func pseudonym(storeTransaction id: String) -> String { "store-" + digest("store", id) }
    /// A restore's original transaction id: `original-<digest>`.
    public func pseudonym(transaction id: String) -> String { "original-" + digest("original", id) }
    /// Free text, replaced whole.
    public func pseudonym(text: String) -> String { "[redacted " + digest("text", text) + "]" }

    /// The event with every personal field (``PersonalData/personal``) replaced.
    public func redact(_ event: Event) -> Event {
        var e = event
        let u = { (user: String?) in user.map(pseudonym(user:)) }
        let s = { (id: String?) in id.map(pseudonym(storeTransaction:)) }
        let error = { (e: StoreError) in StoreError(domain: e.domain, code: e.code, message: pseudonym(text: e.message)) }
        // Exhaustive on purpose: a new event with a personal field must be added here.
        switch event.body {
        case .paymentQueued(let t, let p, let q, let user):
            e.body = .paymentQueued(transaction: t, product: p, quantity: q, user: u(user))
        case .transactionPurchased(let t, let p, let user, let store, let d, var terms):
            // A signature cannot be pseudonymised: it would let anyone confirm a guessed store id.
            terms.signedTransaction = nil
            e.body = .transactionPurchased(transaction: t, product: p, user: u(user), storeTransactionId: s(store), downloads: d, terms: terms)
        case .transactionRestored(let t, let o, let p, let user, let store, let d, var terms):
            terms.signedTransaction = nil
            e.body = .transactionRestored(
                transaction: t, originalTransaction: pseudonym(transaction: o), product: p, user: u(user), storeTransactionId: s(store),
                downloads: d, terms: terms)
        case .transactionFailed(let t, let err):
            e.body = .transactionFailed(transaction: t, error: error(err))
        case .transactionRevoked(let t, let reason, _):
            e.body = .transactionRevoked(transaction: t, reason: pseudonym(text: reason))
        case .downloadFinished(let d, let url):
            e.body = .downloadFinished(download: d, contentURL: pseudonym(url: url))
        case .downloadFailed(let d, let err):
            e.body = .downloadFailed(download: d, error: error(err))
        case .contentCopiedOut(let d, let destination, let c, let b):
            e.body = .contentCopiedOut(download: d, destination: pseudonym(destination: destination), checksum: c, bytesCopied: b)
        case .restoreStarted(let user):
            e.body = .restoreStarted(user: u(user))
        case .restoreFailed(let err):
            e.body = .restoreFailed(error: error(err))
        case .contentRegistered(let url, let d, let length):
            e.body = .contentRegistered(url: pseudonym(url: url), download: d, contentLength: length)
        case .assetPackFailed(let pack, let version, let err):
            e.body = .assetPackFailed(pack: pack, version: version, error: error(err))
        case .storeProductViewFailed(let view, let err):
            e.body = .storeProductViewFailed(view: view, error: error(err))
        case .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewDismissed:
            break
        case .productRegistered, .contentVersionPublished, .transactionDeferred, .transactionFinished, .downloadStarted,
            .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .contentDeleted, .restoreCompleted,
            .assetPackPublished, .assetPackBegan, .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackRemoved,
            .assetPackOpened, .storePaymentPromoted, .personalDataErased:
            break
        // Apple's statement cannot be pseudonymised either: it is replaced whole.
        case .appleTransactionReceived(let jws, let source, let user):
            e.body = .appleTransactionReceived(signedTransaction: pseudonym(text: jws), source: source, user: u(user))
        case .appleNotificationReceived(let jws, let user):
            e.body = .appleNotificationReceived(signedPayload: pseudonym(text: jws), user: u(user))
        case .appleHistoryCompleted(let revision, let user):
            e.body = .appleHistoryCompleted(revision: revision, user: u(user))
        }
        return e
    }
}
