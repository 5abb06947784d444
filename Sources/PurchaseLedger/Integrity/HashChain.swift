import Crypto
import GRDB

/// The hash chain over the log: `link(n) = SHA-256(link(n-1) || frame(n))`, with `frame(n)` the
/// event's canonical uncompressed encoding (docs/format.md), so re-compressing stored blocks never
/// changes a link. `link(0)`, the genesis, binds the ledger id: SHA-256 of
/// `"purchase-ledger genesis v1"`, a zero byte and the id (`ledger_info.genesis` = `ledger-id`), so
/// an id changed in place breaks the chain at event 1. Ledgers made before that (no `genesis`
/// row) start from 32 zero bytes.
///
/// With a secret key the link is `HMAC-SHA-256(key, link(n-1) || frame(n))`: someone who edits an
/// event and recomputes plain SHA-256 links is still caught.
package struct HashChain: Sendable {
    package static let genesis = [UInt8](repeating: 0, count: 32)

    /// What a link that does not match at `seq` means.
    static func breakMessage(at seq: Int64) -> String {
        "the hash chain breaks at event \(seq): it, or an event before it, was edited, removed, inserted or moved"
            + (seq == 1 ? ", or the ledger id in ledger_info was changed (the chain starts from it)" : "")
    }

    /// ``breakMessage(at:)`` for an event read from the log: one whose block keeps its
    /// commitments elided (docs/format.md) also names the personal values it introduces, whose
    /// commitments were made again from what is stored beside the log.
    static func breakMessage(at entry: EventStore.Entry) -> String {
        var message = breakMessage(at: entry.event.seq)
        if entry.commitmentsMadeAgain {
            let refs = PayloadCodec.introductions(in: entry.payload).map { String($0.0) }.joined(separator: ", ")
            message += ", or a personal value it introduces (ref \(refs)), or its owner's salt, was edited or deleted beside the log"
        }
        return message
    }

    /// The genesis of a ledger created with id `id`.
    package static func genesis(ledgerID id: String) -> [UInt8] {
        sha256(Array("purchase-ledger genesis v1".utf8) + [0] + Array(id.utf8))
    }

    /// The genesis of the ledger in `db`: bound to its id when it was created so, else zeros.
    static func genesis(_ db: Database) throws -> [UInt8] {
        guard try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'genesis'") == "ledger-id" else { return genesis }
        guard let id = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'ledger_id'") else {
            throw LedgerError.corrupt("ledger_info says the chain starts from the ledger id, and holds none: the file was altered", seq: 1)
        }
        return genesis(ledgerID: id)
    }

    /// The HMAC state with the key already hashed in (nil: plain SHA-256), copied for each link:
    /// keying a new HMAC for every event (a `SymmetricKey`, two padded key blocks, two hashers)
    /// cost more than hashing the event (a keyed 100,000-event `verify` 0.47 -> 0.35 s). A
    /// copy-on-write value, only ever copied, never changed in place, so sharing it between
    /// threads is safe although Crypto does not mark it `Sendable`.
    nonisolated(unsafe) private let keyed: HMAC<SHA256>?

    /// Whether the chain is keyed (HMAC-SHA-256), not plain SHA-256.
    package var isKeyed: Bool { keyed != nil }

    package init(key: [UInt8]?) {
        keyed = key.map { HMAC<SHA256>(key: SymmetricKey(data: $0)) }
    }

    /// The link after `previous` of an event stored as these fields (its canonical frame,
    /// docs/format.md): for a reader that holds an event's columns, not the event (the fleet's audit).
    /// `anomaly` and `appendedByLedger` give the frame's flags as the ledger stores them.
    package func link(
        after previous: [UInt8], seq: Int64, type: EventType, anomaly: Rule?, appendedByLedger: Bool, at: Int64, recorded: Int64, version: Int64,
        payload: [UInt8]
    ) -> [UInt8] {
        var w = BinaryWriter(capacity: payload.count + 32)
        FrameCodec.canonical(
            seq: seq, type: UInt64(type.rawValue), flags: (appendedByLedger ? 1 : 0) | UInt64(anomaly?.code ?? 0) << 1, at: at, recorded: recorded,
            version: version, payload: payload, into: &w)
        return link(after: previous, frame: w.bytes)
    }

    package func link(after previous: [UInt8], frame: [UInt8]) -> [UInt8] {
        if var mac = keyed {
            previous.withUnsafeBytes { mac.update(data: $0) }
            frame.withUnsafeBytes { mac.update(data: $0) }
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

    package static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: bytes))
    }
}
