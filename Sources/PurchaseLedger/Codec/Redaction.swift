import Crypto

/// Replaces user ids and destinations with stable pseudonyms, so a user's ledger can be attached
/// to a bug report. The same value always gets the same pseudonym (`user-1a2b3c4d`,
/// `redacted/5e6f7a8b`), so a redacted ledger replays to the same states apart from those fields.
public enum Redaction {
    public static func pseudonym(user: String) -> String { "user-" + digest("user", user) }
    public static func pseudonym(destination: String) -> String { "redacted/" + digest("destination", destination) }

    private static func digest(_ kind: String, _ value: String) -> String {
        let hash = SHA256.hash(data: Array("purchase-ledger redaction v1/\(kind)/\(value)".utf8))
        return hash.prefix(6).map { byte in
            let hex = Array("0123456789abcdef")
            return String([hex[Int(byte >> 4)], hex[Int(byte & 15)]])
        }.joined()
    }

    /// The event with its user ids and destinations replaced.
    public static func redact(_ event: Event) -> Event {
        var e = event
        let u = { (user: String?) in user.map(pseudonym(user:)) }
        switch event.body {
        case .paymentQueued(let t, let p, let q, let user):
            e.body = .paymentQueued(transaction: t, product: p, quantity: q, user: u(user))
        case .transactionPurchased(let t, let p, let user, let s, let d, let terms):
            e.body = .transactionPurchased(transaction: t, product: p, user: u(user), storeTransactionId: s, downloads: d, terms: terms)
        case .transactionRestored(let t, let o, let p, let user, let s, let d, let terms):
            e.body = .transactionRestored(
                transaction: t, originalTransaction: o, product: p, user: u(user), storeTransactionId: s, downloads: d, terms: terms)
        case .restoreStarted(let user):
            e.body = .restoreStarted(user: u(user))
        case .contentCopiedOut(let d, let destination, let c, let b):
            e.body = .contentCopiedOut(download: d, destination: pseudonym(destination: destination), checksum: c, bytesCopied: b)
        // Listed one by one: a new event with a user id or a destination must be added above.
        case .productRegistered, .contentVersionPublished, .transactionDeferred, .transactionFailed, .transactionRevoked,
            .transactionFinished, .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled,
            .downloadFinished, .downloadFailed, .contentDeleted, .restoreCompleted, .restoreFailed, .contentRegistered:
            break
        }
        return e
    }
}
