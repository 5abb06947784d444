import Crypto
import Foundation
import GRDB

/// An Ed25519 key that signs checkpoints. Keep it outside the ledger and the device (a server, a
/// CI secret, an operator's keychain): whoever holds it can vouch for a ledger's history.
///
/// Its file form (``fileText``) is one line, `purchase-ledger signing key ed25519 <base64 of the
/// 32-byte seed>`; the public key's, `purchase-ledger public key ed25519 <base64 of 32 bytes>`.
public struct CheckpointSigningKey: Sendable {
    /// The 32-byte seed (Crypto's key types are not `Sendable`; they are made from it on use).
    let seed: [UInt8]
    /// The public half, for whoever checks the checkpoints it signs.
    public let publicKey: CheckpointPublicKey

    /// A new random key.
    public init() {
        let key = Curve25519.Signing.PrivateKey()
        seed = Array(key.rawRepresentation)
        publicKey = CheckpointPublicKey(validated: Array(key.publicKey.rawRepresentation))
    }

    /// A key from its file form.
    public init(fileText: String) throws(LedgerError) {
        try self.init(seed: try KeyFile.decode(fileText, kind: "signing key"))
    }

    /// A key from its 32-byte seed.
    init(seed raw: [UInt8]) throws(LedgerError) {
        do {
            let key = try Curve25519.Signing.PrivateKey(rawRepresentation: raw)
            seed = raw
            publicKey = CheckpointPublicKey(validated: Array(key.publicKey.rawRepresentation))
        } catch {
            throw .malformed("not an Ed25519 signing key (32 bytes): \(error)")
        }
    }

    /// Its file form: one line, `purchase-ledger signing key ed25519 <base64 of the seed>`, and a
    /// newline. Whoever reads it can sign: keep it secret.
    public var fileText: String { KeyFile.encode(seed, kind: "signing key") }

    func signature(for message: [UInt8]) throws -> [UInt8] {
        Array(try Curve25519.Signing.PrivateKey(rawRepresentation: seed).signature(for: Data(message)))
    }
}

/// The public half of a ``CheckpointSigningKey``: checks checkpoints, signs nothing.
public struct CheckpointPublicKey: Sendable, Hashable {
    /// The key's 32 bytes, checked to be an Ed25519 public key.
    let raw: [UInt8]

    init(validated raw: [UInt8]) {
        self.raw = raw
    }

    /// A key from its file form; throws `malformedInput` for anything else.
    public init(fileText: String) throws(LedgerError) {
        try self.init(raw: KeyFile.decode(fileText, kind: "public key"))
    }

    init(raw: [UInt8]) throws(LedgerError) {
        guard (try? Curve25519.Signing.PublicKey(rawRepresentation: raw)) != nil else {
            throw .malformed("not an Ed25519 public key (32 bytes)")
        }
        self.raw = raw
    }

    /// Its file form: one line, `purchase-ledger public key ed25519 <base64 of 32 bytes>`, and a newline.
    public var fileText: String { KeyFile.encode(raw, kind: "public key") }

    /// The key's 32 bytes.
    public var rawRepresentation: [UInt8] { raw }

    /// A key from its 32 bytes; throws when they are not an Ed25519 public key.
    public init(rawRepresentation: [UInt8]) throws(LedgerError) {
        try self.init(raw: rawRepresentation)
    }

    /// Whether `signature` is this key's over `message`.
    func isValid(_ signature: [UInt8], for message: [UInt8]) -> Bool {
        (try? Curve25519.Signing.PublicKey(rawRepresentation: raw))?.isValidSignature(Data(signature), for: Data(message)) ?? false
    }
}

private enum KeyFile {
    static func encode(_ raw: [UInt8], kind: String) -> String {
        "purchase-ledger \(kind) ed25519 \(Data(raw).base64EncodedString())\n"
    }

    static func decode(_ text: String, kind: String) throws(LedgerError) -> [UInt8] {
        let prefix = "purchase-ledger \(kind) ed25519 "
        let line = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard line.hasPrefix(prefix), let data = Data(base64Encoded: String(line.dropFirst(prefix.count))), data.count == 32 else {
            throw .malformed("not a purchase-ledger \(kind) file (one line: \(prefix)<base64 of 32 bytes>)")
        }
        return Array(data)
    }
}

/// A signed statement of a ledger's history: "ledger L had `seq` events, and the hash chain's link
/// after the last of them was `link`", signed with Ed25519 at time `at`. Kept outside the file (in
/// a ticket, a log, the fleet), it lets anyone holding the public key check later that the file
/// still extends that history: a file rolled back to an older copy, truncated, or rewritten, even
/// with every link recomputed, no longer matches it. It covers the history up to `seq`, not what
/// comes after.
///
/// Its JSON form (docs/format.md): `{"checkpoint": "purchase-ledger checkpoint v1", "ledger":
/// UUID, "seq": N, "link": hex, "at": RFC 3339, "publicKey": base64, "signature": base64}`. The
/// signature is over the UTF-8 bytes of ``signedText``.
public struct Checkpoint: Sendable, Equatable {
    /// The format's name: the first line of ``signedText`` and the JSON's `checkpoint` field.
    public static let version = "purchase-ledger checkpoint v1"
    /// The id of the ledger signed (``LedgerIdentity/id``; `ledger` in JSON).
    public var ledgerID: String
    /// The ledger's last seq when signed: the history covered (`seq`).
    public var seq: Int64
    /// The hash chain's 32-byte link at ``seq`` (`link`, 64 hex digits in JSON).
    public var link: [UInt8]
    /// When it was signed (`at`).
    public var at: Timestamp
    /// The public key of the key that signed it (`publicKey`, base64 in JSON).
    public var publicKey: CheckpointPublicKey
    /// The 64-byte Ed25519 signature over ``signedText`` (`signature`, base64 in JSON).
    public var signature: [UInt8]

    /// What is signed: `purchase-ledger checkpoint v1`, then `ledger`, `seq`, `link` (hex) and `at`
    /// (RFC 3339), one `name value` per line, each line ending in a newline.
    public var signedText: String {
        "\(Self.version)\nledger \(ledgerID)\nseq \(seq)\nlink \(Hex.encode(link))\nat \(at)\n"
    }

    /// Its JSON form, one object with the fields above (docs/format.md).
    public var json: String {
        JSONWriter.object { w in
            w.field("checkpoint", Self.version)
            w.field("ledger", ledgerID)
            w.field("seq", seq)
            w.field("link", Hex.encode(link))
            w.field("at", at.description)
            w.field("publicKey", Data(publicKey.raw).base64EncodedString())
            w.field("signature", Data(signature).base64EncodedString())
        }
    }

    /// Reads the JSON form; the signature is checked by ``Ledger/verify(against:publicKey:)``.
    public init(json: String) throws(LedgerError) {
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] else {
            throw .malformed("a checkpoint is one JSON object")
        }
        func text(_ key: String) throws(LedgerError) -> String {
            guard let value = object[key] as? String else { throw .malformed("the checkpoint has no `\(key)` string") }
            return value
        }
        guard try text("checkpoint") == Self.version else { throw .malformed("not a \(Self.version) (field `checkpoint`)") }
        ledgerID = try text("ledger")
        guard let seq = object["seq"] as? Int, seq >= 0 else { throw .malformed("the checkpoint's `seq` must be an integer >= 0") }
        self.seq = Int64(seq)
        guard let link = Hex.decode(try text("link")), link.count == 32 else { throw .malformed("the checkpoint's `link` must be 64 hex digits") }
        self.link = link
        at = try Timestamp.parse(try text("at"))
        guard let key = Data(base64Encoded: try text("publicKey")) else { throw .malformed("the checkpoint's `publicKey` is not base64") }
        publicKey = try CheckpointPublicKey(raw: Array(key))
        guard let signature = Data(base64Encoded: try text("signature")), signature.count == 64 else {
            throw .malformed("the checkpoint's `signature` must be 64 bytes of base64")
        }
        self.signature = Array(signature)
    }

    init(ledgerID: String, seq: Int64, link: [UInt8], at: Timestamp, key: CheckpointSigningKey) throws {
        self.ledgerID = ledgerID
        self.seq = seq
        self.link = link
        self.at = at
        publicKey = key.publicKey
        signature = []
        signature = try key.signature(for: Array(signedText.utf8))
    }

    /// Whether `signature` is `key`'s over ``signedText``.
    public func isSigned(by key: CheckpointPublicKey) -> Bool {
        key == publicKey && key.isValid(signature, for: Array(signedText.utf8))
    }
}

/// Why a ledger does not extend a checkpoint.
public struct CheckpointMismatch: Error, Sendable, CustomStringConvertible {
    /// The seq concerned: where the file ends, or the checkpoint's seq.
    public var seq: Int64?
    /// What does not match, in a sentence.
    public var message: String
    /// The message, after `seq N: ` when it names a seq.
    public var description: String { (seq.map { "seq \($0): " } ?? "") + message }
}

extension Ledger {
    /// Signs the ledger's history as it is now: its id, last seq and the chain's link there. The
    /// chain is recomputed from the first event (a file whose stored links do not match its
    /// events throws ``LedgerError/Code/corruptData`` with the seq: nothing damaged is vouched
    /// for). Writes nothing.
    ///
    /// ```swift
    /// let checkpoint = try ledger.checkpoint(signingKey: key)
    /// upload(checkpoint.json)        // kept by the server, beside the shipped ledger
    /// ```
    public func checkpoint(signingKey: CheckpointSigningKey, at time: Timestamp = .now) throws -> Checkpoint {
        guard let identity = try identity() else {
            throw LedgerError(.io, "this ledger has no id yet (made by an older version and opened read-only); open it for writing once")
        }
        // Signing vouches for the id too: never for one this file cannot prove (verify reports it).
        guard !identity.contradictsItsKey else {
            throw LedgerError(
                .idConflict,
                "the ledger id \(identity.id) is not derived from this file's identity key"
                    + (identity.publicKey == nil ? " (the file has none: it was deleted)" : "")
                    + ": the id (or the key) in ledger_info was replaced; nothing was signed")
        }
        let id = identity.id
        let walked = try read { db in try ChainWalk.walk(db, chain: chain, stopAt: nil) }
        return try Checkpoint(ledgerID: id, seq: walked.last, link: walked.head, at: time, key: signingKey)
    }

    /// Checks that this file extends `checkpoint`: signed by `publicKey`, the same ledger id, at
    /// least `checkpoint.seq` events, and the chain's link at that seq equal to the checkpoint's.
    /// The chain is recomputed from the first event to the last, and every stored link checked,
    /// so damage after the checkpoint is found too. Throws ``CheckpointMismatch`` naming the seq
    /// when the file does not extend it; ``LedgerError`` when the file is damaged.
    public func verify(against checkpoint: Checkpoint, publicKey: CheckpointPublicKey) throws {
        guard checkpoint.isSigned(by: publicKey) else {
            throw CheckpointMismatch(
                message: "the checkpoint's signature does not verify with this public key: the checkpoint was altered, or signed with another key")
        }
        let id = try identity()?.id
        guard id == checkpoint.ledgerID else {
            throw CheckpointMismatch(message: "the checkpoint is of ledger \(checkpoint.ledgerID); this file is ledger \(id ?? "(no id)")")
        }
        try verifyExtends(seq: checkpoint.seq, link: checkpoint.link, witness: "the checkpoint's", since: " since \(checkpoint.at)")
    }

    /// Checks that this file has at least `seq` events and the chain's link `link` at that seq,
    /// recomputing the chain over the whole log: what a checkpoint, or a fleet store that holds the
    /// ledger (`witness` names it in messages), says of its history. Throws ``CheckpointMismatch``.
    package func verifyExtends(seq: Int64, link expected: [UInt8], witness: String, since: String = "") throws {
        let (walked, genesis) = try read { db in (try ChainWalk.walk(db, chain: chain, stopAt: seq), try HashChain.genesis(db)) }
        let last = walked.last
        guard let link = seq == 0 ? genesis : walked.atStop, last >= seq else {
            throw CheckpointMismatch(
                seq: last,
                message: "the file ends at seq \(last), before \(witness) seq \(seq): events were removed from its end, or an older copy of the file was put back")
        }
        guard link == expected else {
            throw CheckpointMismatch(
                seq: seq,
                message:
                    "the hash chain at seq \(seq) is not \(witness): the history up to that seq was rewritten\(since) (the links were recomputed, so only a record kept outside the file shows it)"
            )
        }
    }
}

/// One pass over the log recomputing the hash chain and checking every stored link.
enum ChainWalk {
    /// The last seq, the chain's link there, and the link at `stopAt` (nil when the log is
    /// shorter). Damage (a missing event, a link that does not match) throws with its seq.
    static func walk(_ db: Database, chain: HashChain, stopAt: Int64?) throws -> (last: Int64, head: [UInt8], atStop: [UInt8]?) {
        var previous = try HashChain.genesis(db)
        var expected: Int64 = 1
        var atStop: [UInt8]?
        try EventStore.scan(db, integrity: true) { entry in
            let e = entry.event
            guard e.seq == expected else {
                throw LedgerError.corrupt(
                    e.seq > expected ? "event \(expected) is missing" : "event \(e.seq) appears again or out of order", seq: min(e.seq, expected))
            }
            let link = chain.link(after: previous, frame: FrameCodec.canonical(e, payload: entry.payload))
            guard entry.link?.matches(link) ?? true else {
                throw LedgerError.corrupt(
                    HashChain.breakMessage(at: entry), seq: e.seq)
            }
            previous = link
            if e.seq == stopAt { atStop = link }
            expected += 1
            return true
        }
        return (expected - 1, previous, atStop)
    }
}
