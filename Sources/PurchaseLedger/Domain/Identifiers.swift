import Foundation

/// The one rule for ids: **every id is stored in Unicode NFC form.**
///
/// Swift compares Strings by canonical equivalence, so a precomposed `é` and `e` followed by a
/// combining accent are one id to the reducer. SQLite, the JSON state and every report compare
/// bytes. Normalizing each id once, where events come in, makes both views agree: the log, the
/// projections, the reports, export and `replay --json` all hold the same bytes for one id.
///
/// Ids are the transaction, original transaction, store transaction, download, product, related
/// product, content and user fields, and a standalone download's url. Free text (destinations,
/// content URLs, messages, reasons, titles, checksums) is stored exactly as given.
///
/// ```swift
/// Identifier.normalize("cafe\u{301}")   // "café" (one precomposed scalar)
/// ```
public enum Identifier {
    /// FNV-1a of the id's UTF-8 bytes: stable across runs and platforms, unlike `Hasher` (snapshot
    /// page boundaries, the fleet benchmark's device split).
    package static func stableHash(_ id: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in id.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }

    /// `id` in NFC form. ASCII ids (every id a store produces) are returned as they are.
    public static func normalize(_ id: String) -> String {
        isASCII(id) ? id : id.precomposedStringWithCanonicalMapping
    }

    /// Whether every byte of `s` is ASCII, eight at a time: `utf8.allSatisfy` took a closure call
    /// a byte, 3.6% of an import's main thread (callgrind, 100,000 events).
    static func isASCII(_ s: String) -> Bool {
        var s = s
        return s.withUTF8 { bytes in
            guard var p = bytes.baseAddress else { return true }
            let end = p + bytes.count
            var seen: UInt64 = 0
            while end - p >= 8 {
                seen |= UnsafeRawPointer(p).loadUnaligned(as: UInt64.self)
                p += 8
            }
            while p < end {
                seen |= UInt64(p.pointee)
                p += 1
            }
            return seen & 0x8080_8080_8080_8080 == 0
        }
    }

    static func normalize(_ id: String?) -> String? {
        id.map(normalize)
    }
}

extension Event {
    /// The event with every id in NFC form (``Identifier``). ``Ledger`` applies it to each event
    /// it is given, so the caller need not.
    public func normalizingIDs() -> Event {
        Event(at: at, body.normalizingIDs())
    }
}

extension EventBody {
    /// The body with every id field in NFC form; free-text fields are left as they are.
    public func normalizingIDs() -> EventBody {
        let n = Identifier.normalize as (String) -> String
        let o = Identifier.normalize as (String?) -> String?
        // Exhaustive on purpose: a new event with an id field must be added here.
        switch self {
        case .productRegistered(var r):
            r.product = n(r.product)
            r.relatedProducts = r.relatedProducts.map(n)
            r.contents = r.contents.map { ContentSpec(content: n($0.content), contentVersion: $0.contentVersion, contentLength: $0.contentLength) }
            return .productRegistered(r)
        case .contentVersionPublished(let p, let c, let v):
            return .contentVersionPublished(product: n(p), content: n(c), contentVersion: v)
        case .paymentQueued(let t, let p, let q, let u):
            return .paymentQueued(transaction: n(t), product: n(p), quantity: q, user: o(u))
        case .transactionDeferred(let t):
            return .transactionDeferred(transaction: n(t))
        case .transactionPurchased(let t, let p, let u, let s, let d, let terms):
            return .transactionPurchased(
                transaction: n(t), product: o(p), user: o(u), storeTransactionId: o(s), downloads: d.map(Self.normalizing), terms: terms)
        case .transactionFailed(let t, let error):
            return .transactionFailed(transaction: n(t), error: error)
        case .transactionRestored(let t, let original, let p, let u, let s, let d, let terms):
            return .transactionRestored(
                transaction: n(t), originalTransaction: n(original), product: n(p), user: o(u),
                storeTransactionId: o(s), downloads: d.map(Self.normalizing), terms: terms)
        case .transactionRevoked(let t, let reason, let signed):
            return .transactionRevoked(transaction: n(t), reason: reason, signedTransaction: signed)
        case .transactionFinished(let t, let discard):
            return .transactionFinished(transaction: n(t), discardContent: discard)
        case .downloadStarted(let d):
            return .downloadStarted(download: n(d))
        case .downloadProgressed(let d, let p, let b, let r):
            return .downloadProgressed(download: n(d), progress: p, bytesWritten: b, timeRemaining: r)
        case .downloadPaused(let d):
            return .downloadPaused(download: n(d))
        case .downloadResumed(let d):
            return .downloadResumed(download: n(d))
        case .downloadCancelled(let d, let reason):
            return .downloadCancelled(download: n(d), reason: reason)
        case .downloadFinished(let d, let url):
            return .downloadFinished(download: n(d), contentURL: url)
        case .downloadFailed(let d, let error):
            return .downloadFailed(download: n(d), error: error)
        case .contentCopiedOut(let d, let destination, let checksum, let bytes):
            return .contentCopiedOut(download: n(d), destination: destination, checksum: checksum, bytesCopied: bytes)
        case .contentDeleted(let p):
            return .contentDeleted(product: n(p))
        case .restoreStarted(let u):
            return .restoreStarted(user: o(u))
        case .restoreCompleted:
            return .restoreCompleted
        case .restoreFailed(let error):
            return .restoreFailed(error: error)
        case .contentRegistered(let url, let d, let length):
            return .contentRegistered(url: n(url), download: n(d), contentLength: length)
        case .assetPackPublished(let pack, let v, let unlockedBy):
            return .assetPackPublished(pack: n(pack), version: v, unlockedBy: unlockedBy.map(n))
        case .assetPackBegan(let pack, let v):
            return .assetPackBegan(pack: n(pack), version: v)
        case .assetPackProgressed(let pack, let v, let progress):
            return .assetPackProgressed(pack: n(pack), version: v, progress: progress)
        case .assetPackPaused(let pack, let v):
            return .assetPackPaused(pack: n(pack), version: v)
        case .assetPackFinished(let pack, let v):
            return .assetPackFinished(pack: n(pack), version: v)
        case .assetPackFailed(let pack, let v, let error):
            return .assetPackFailed(pack: n(pack), version: v, error: error)
        case .assetPackRemoved(let pack):
            return .assetPackRemoved(pack: n(pack))
        case .assetPackOpened(let pack, let v):
            return .assetPackOpened(pack: n(pack), version: v)
        case .storePaymentPromoted(let product, let accepted):
            return .storePaymentPromoted(product: n(product), accepted: accepted)
        case .personalDataErased:
            return self
        case .appleTransactionReceived(let jws, let source, let user):
            return .appleTransactionReceived(signedTransaction: jws, source: source, user: o(user))
        case .appleNotificationReceived(let jws, let user):
            return .appleNotificationReceived(signedPayload: jws, user: o(user))
        case .appleHistoryCompleted(let revision, let user):
            return .appleHistoryCompleted(revision: revision, user: o(user))
        case .storeProductViewPresented(let v, let item, let style, let affiliate, let campaign, let provider):
            return .storeProductViewPresented(
                view: n(v), item: item, style: style, affiliateToken: o(affiliate), campaignToken: o(campaign), providerToken: o(provider))
        case .storeProductViewLoaded(let v):
            return .storeProductViewLoaded(view: n(v))
        case .storeProductViewFailed(let v, let error):
            return .storeProductViewFailed(view: n(v), error: error)
        case .storeProductViewDismissed(let v):
            return .storeProductViewDismissed(view: n(v))
        }
    }

    private static func normalizing(_ specs: [DownloadSpec]) -> [DownloadSpec] {
        // The common case allocates nothing: every id already ASCII.
        if specs.allSatisfy({ $0.download.utf8.allSatisfy { $0 < 0x80 } && $0.content.utf8.allSatisfy { $0 < 0x80 } }) { return specs }
        return specs.map {
            DownloadSpec(
                download: Identifier.normalize($0.download), content: Identifier.normalize($0.content),
                contentVersion: $0.contentVersion, contentLength: $0.contentLength)
        }
    }
}
