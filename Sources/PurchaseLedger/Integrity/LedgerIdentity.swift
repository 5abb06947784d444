import Crypto
import Foundation
import GRDB

/// A ledger file's stable identity (``Ledger/identity()``).
///
/// A ledger is created with an Ed25519 **identity key** (`ledger_info.identity_key`, its 32-byte
/// seed) and its id is derived from the public half (``id(derivedFrom:)``): a UUID version 8
/// whose 122 free bits are the first bits of `SHA-256("purchase-ledger ledger id v1" || 0x00 ||
/// public key)`. Writing another ledger's id into a file proves nothing: the file's own key does
/// not derive it, and the rightful key cannot be made from the id. A fleet store accepts an id
/// only with the key that derives it, and each shipment's head signed by that key (docs/fleet.md).
///
/// Ledgers made by earlier versions keep the random UUID (version 4) they were given; they get an
/// identity key on their first writable open, which cannot derive their id: a fleet store binds
/// such an id to the first key shipped with it (trust on first use).
public struct LedgerIdentity: Sendable, Hashable {
    /// A lowercase UUID.
    public var id: String
    /// `created`, or `assigned on open at <time>` for a ledger made before identities existed.
    public var origin: String
    /// The public half of the ledger's identity key; nil for an old ledger only ever opened
    /// read-only (a writable open makes the key).
    public var publicKey: CheckpointPublicKey?

    /// Whether ``id`` is derived from ``publicKey``: the id is provably this file's.
    public var isProvenByKey: Bool {
        publicKey.map { Self.id(derivedFrom: $0) == id } ?? false
    }

    /// A key-derived id that this file's own key does not derive, or that no key of the file
    /// could (its identity key was deleted): the id (or the key) was copied in from another
    /// ledger. Every ledger given a key-derived id was created with its key, so an id of that
    /// form without one is never innocent. `verify` reports it, `checkpoint` refuses to sign under
    /// it, and a fleet store refuses it.
    public var contradictsItsKey: Bool {
        Self.hasDerivedForm(id) && !isProvenByKey
    }

    /// Whether `id` has the form of a key-derived id (UUID version 8): such an id is accepted
    /// only from the key that derives it, never on first use.
    public static func hasDerivedForm(_ id: String) -> Bool {
        guard let uuid = UUID(uuidString: id) else { return false }
        return uuid.uuid.6 >> 4 == 8
    }

    /// The ledger id that `key` derives.
    public static func id(derivedFrom key: CheckpointPublicKey) -> String {
        var bytes = Array(SHA256.hash(data: Array("purchase-ledger ledger id v1".utf8) + [0] + key.raw).prefix(16))
        bytes[6] = (bytes[6] & 0x0f) | 0x80
        bytes[8] = (bytes[8] & 0x3f) | 0x80
        let uuid = UUID(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
        return uuid.uuidString.lowercased()
    }

    static func read(_ db: Database) throws -> LedgerIdentity? {
        guard let id = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'ledger_id'") else { return nil }
        let origin = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'ledger_id_origin'") ?? "created"
        var publicKey = try identityKey(db)?.publicKey
        if publicKey == nil, let pulled = try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'identity_public_key'") {
            // A copy pulled from a fleet store holds the public half only.
            publicKey = try? CheckpointPublicKey(rawRepresentation: [UInt8](pulled))
        }
        return LedgerIdentity(id: id, origin: origin, publicKey: publicKey)
    }

    static func identityKey(_ db: Database) throws -> CheckpointSigningKey? {
        guard let seed = try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'identity_key'") else { return nil }
        do {
            return try CheckpointSigningKey(seed: Array(seed))
        } catch {
            throw LedgerError.corrupt("ledger_info.identity_key is not an Ed25519 key (32 bytes): the file was altered", seq: nil)
        }
    }
}

extension Ledger {
    /// The ledger's head at `seq` (link `link`) signed with its identity key: what a fleet store
    /// keeps to show that the ledger itself shipped that history. Nil for a ledger without a key.
    package func identityStatement(seq: Int64, link: [UInt8], at time: Timestamp = .now) throws -> Checkpoint? {
        try read { db in
            guard let id = try LedgerIdentity.read(db)?.id, let key = try LedgerIdentity.identityKey(db) else { return nil }
            return try Checkpoint(ledgerID: id, seq: seq, link: link, at: time, key: key)
        }
    }
}
