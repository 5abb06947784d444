import Crypto

/// The hash chain over the log: `link(n) = SHA-256(link(n-1) || frame(n))`, with `link(0)` all
/// zeros and `frame(n)` the event's canonical uncompressed encoding (docs/format.md), so
/// re-compressing stored blocks never changes a link.
///
/// With a secret key the link is `HMAC-SHA-256(key, link(n-1) || frame(n))`: someone who edits an
/// event and recomputes plain SHA-256 links is still caught.
struct HashChain: Sendable {
    static let genesis = [UInt8](repeating: 0, count: 32)

    /// Kept as bytes: Crypto's `SymmetricKey` is not `Sendable`.
    private let key: [UInt8]?

    init(key: [UInt8]?) {
        self.key = key
    }

    func link(after previous: [UInt8], frame: [UInt8]) -> [UInt8] {
        if let key {
            var mac = HMAC<SHA256>(key: SymmetricKey(data: key))
            mac.update(data: previous)
            mac.update(data: frame)
            return mac.finalize().withUnsafeBytes { Array($0) }
        }
        var hasher = SHA256()
        hasher.update(data: previous)
        hasher.update(data: frame)
        // Copied as one block: `Array(digest)` iterates the digest byte by byte.
        return hasher.finalize().withUnsafeBytes { Array($0) }
    }

    /// A value stored in the ledger that tells whether a key is the ledger's key, without
    /// revealing the key.
    static func keyCheck(_ key: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Array("purchase-ledger chain key check v1".utf8), using: SymmetricKey(data: key)))
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: bytes))
    }
}
