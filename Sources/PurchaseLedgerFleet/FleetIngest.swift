import Foundation
import NIOCore
import PostgresNIO
public import PurchaseLedger

/// The head a fleet store holds of a ledger after an upload (or before one).
public struct IngestHead: Sendable, Hashable {
    /// The ledger's id.
    public var ledgerID: String
    /// Its last stored seq (0: none).
    public var seq: Int64
    /// The chain link after that seq (empty when the store holds no event of it).
    public var link: [UInt8]
    /// Events this upload stored (0 for a resend of events already held).
    public var stored: Int

    public init(ledgerID: String, seq: Int64, link: [UInt8], stored: Int) {
        self.ledgerID = ledgerID
        self.seq = seq
        self.link = link
        self.stored = stored
    }
}

/// Why a fleet store refused an upload; nothing of it was stored. Each kind is an HTTP status of
/// the ingest protocol (docs/ingest.md).
public struct IngestRefusal: Error, Sendable, CustomStringConvertible {
    public enum Kind: String, Sendable {
        /// The body is not an upload of this protocol, or names another ledger than its path. 400.
        case malformed
        /// The head statement's signature is not its key's. 403.
        case badSignature
        /// The store holds the ledger id under another identity key, or the key cannot own the
        /// id (a key-derived id another key derives). 403.
        case keyMismatch
        /// The upload forks from the history the store holds (an event at a held seq differs). 409.
        case fork
        /// The upload starts past the store's head (events missing between). 409.
        case gap
        /// The events are refused: a broken chain, the rules, a personal value that is not its
        /// commitment's, a payload that does not decode. 422.
        case refused
    }

    public var kind: Kind
    public var message: String
    /// The seq concerned, when one is.
    public var seq: Int64?
    /// The store's head for the ledger when the upload was refused.
    public var head: IngestHead?

    public var description: String { "\(kind.rawValue): \(message)" + (seq.map { " (seq \($0))" } ?? "") }
}

extension FleetStore {
    /// The head the store holds of ledger `id` (seq 0 and no link when it holds none).
    public func ingestHead(ofLedger id: String) async throws -> IngestHead {
        let id = id.lowercased()
        guard let head = try await shippedHead(ofLedger: id), head.seq > 0 else { return IngestHead(ledgerID: id, seq: 0, link: [], stored: 0) }
        return IngestHead(ledgerID: id, seq: head.seq, link: head.link, stored: 0)
    }

    /// Stores an upload (``LedgerUpload``, sent by a device through the ingest service) in one
    /// PostgreSQL transaction, through the same path as ``ship(_:)``: its head statement must be
    /// signed by the identity key the store holds for the ledger (the first upload records the
    /// key; a key-derived id only with the key that derives it), its events must continue the
    /// held history (a resend of held events changes nothing and answers the same head), chain
    /// to the signed head, pass the rules as recorded, and carry the personal values their
    /// events committed to. The projections, evidence and values after them are replayed here
    /// from the stored events and the new ones, never taken from the device.
    ///
    /// Throws ``IngestRefusal`` (nothing written) or a ``FleetError``.
    public func ingest(_ upload: LedgerUpload, appleBundleID: String? = nil) async throws -> IngestHead {
        let id = upload.ledgerID.lowercased()
        guard UUID(uuidString: id) != nil else {
            throw IngestRefusal(kind: .malformed, message: "the head names ledger \(id.debugDescription.prefix(60)), not a ledger id (a UUID)")
        }
        let key = upload.head.publicKey
        guard upload.head.isSigned(by: key) else {
            throw IngestRefusal(kind: .badSignature, message: "the head statement's signature is not its public key's")
        }
        if LedgerIdentity.hasDerivedForm(id), LedgerIdentity.id(derivedFrom: key) != id {
            throw IngestRefusal(kind: .keyMismatch, message: "ledger id \(id) is derived from another identity key than the one that signed this head")
        }
        return try await run {
            try await transaction {
                try await ingestLocked(upload, id: id, key: key.rawRepresentation, appleBundleID: appleBundleID)
            }
        }
    }

    private func ingestLocked(_ upload: LedgerUpload, id: String, key: [UInt8], appleBundleID: String?) async throws -> IngestHead {
        // The chain's mode, recorded with a new row as ship records it (never updated after).
        let chainMode = Ingest.startsPlainChain(upload).map { $0 ? "sha256" : "hmac-sha256" }
        let rows = try await connection.query(
            """
            INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at, public_key, chain)
            VALUES (\(id)::uuid, 'uploaded', 0, \(ByteBuffer(bytes: Shipment.genesis)), now(), now(), \(ByteBuffer(bytes: key)), \(chainMode))
            ON CONFLICT (ledger_id) DO UPDATE SET last_shipped_at = ledgers.last_shipped_at
            RETURNING last_seq, last_link, xmax = 0 AS inserted, public_key, chain
            """, logger: logger
        ).collect()
        guard let row = rows.first else { throw FleetError(.server, "\(address): the ledgers row of \(id) was not returned") }
        let (seq, linkBuffer, inserted, heldKey, chain) = try row.decode((Int64, ByteBuffer, Bool, ByteBuffer?, String?).self)
        let link = Array(buffer: linkBuffer)
        let current = IngestHead(ledgerID: id, seq: seq, link: seq > 0 ? link : [], stored: 0)
        // A refusal rolls the transaction back: the row a new ledger's lock made goes with it.
        func refuse(_ kind: IngestRefusal.Kind, _ message: String, seq: Int64? = nil) async throws -> Never {
            throw IngestRefusal(kind: kind, message: message, seq: seq, head: current)
        }
        if let heldKey, Array(buffer: heldKey) != key {
            try await refuse(
                .keyMismatch, "the store holds ledger \(id) under another identity key: this device claims an id that is not its own (an id conflict)")
        }
        // Events past the head (written by someone with the shipping credential): refused as ship refuses them.
        var past: Int64?
        for try await row in try await connection.query(
            "SELECT min(seq) FROM events WHERE ledger_id = \(id)::uuid AND seq > \(seq)", logger: logger)
        {
            past = try row.decode(Int64?.self)
        }
        if let past {
            try await refuse(
                .refused,
                "the store holds events of this ledger past its head, from seq \(past), that no upload stored; the store's owner removes them: DELETE FROM events WHERE ledger_id = '\(id)' AND seq >= \(past);",
                seq: past)
        }
        let held = try await heldLedger(id, through: seq, plainChain: (chain ?? (inserted ? chainMode : nil)).map { $0 == "sha256" }, upload: upload)
        let plan: Ingest.Plan?
        do {
            plan = try Ingest.plan(upload, held: held, bundleID: appleBundleID)
        } catch {
            let kind: IngestRefusal.Kind =
                switch error.kind {
                case .fork: .fork
                case .gap: .gap
                case .refused: .refused
                }
            try await refuse(kind, error.message, seq: error.seq)
        }
        guard let plan else {
            // Nothing new (a resend): a row this call made for a ledger the store held no event of is not kept.
            if inserted { try await connection.query("SELECT forget_unshipped_ledgers(\([id])::text[]::uuid[])", logger: logger) }
            return current
        }
        let shipment = plan.shipment
        if let field = shipment.textHoldingNUL() {
            try await refuse(.refused, "\(field) holds a NUL byte, which PostgreSQL text cannot store")
        }
        try await store([(id, shipment)], heads: [id: (key, upload.head.json)], unclaimed: heldKey == nil && !inserted ? [id] : [])
        return IngestHead(ledgerID: id, seq: shipment.lastSeq, link: shipment.lastLink, stored: shipment.events.count)
    }

    /// What the store holds of ledger `id` up to `seq`: its events, personal values, the signing
    /// headers, the refs of users it erased (and of the upload's user ids the store erased
    /// elsewhere, which it knows by a keyed digest only).
    private func heldLedger(_ id: String, through seq: Int64, plainChain: Bool?, upload: LedgerUpload?) async throws -> Ingest.Held {
        var frames: [UploadedFrame] = []
        frames.reserveCapacity(Int(seq))
        if seq > 0 {
            for try await row in try await connection.query(
                """
                SELECT seq, type, at_ns, recorded_ns, anomaly, appended_by_ledger, version, payload, link
                FROM events WHERE ledger_id = \(id)::uuid AND seq <= \(seq) ORDER BY seq
                """, logger: logger)
            {
                let (seq, typeName, at, recorded, anomaly, appended, version, payload, link) = try row.decode(
                    (Int64, String, Int64, Int64, String?, Bool, Int64, ByteBuffer, ByteBuffer).self)
                guard let type = EventType(name: typeName), seq == Int64(frames.count) + 1 else {
                    throw FleetError(.server, "\(address): the stored events of ledger \(id) are damaged at seq \(seq) (run the fleet audit)")
                }
                frames.append(
                    UploadedFrame(
                        seq: seq, type: type, anomaly: anomaly.flatMap { Rule(name: $0) }, appendedByLedger: appended, at: at, recorded: recorded,
                        version: version, payload: Array(buffer: payload), link: Array(buffer: link)))
            }
            guard frames.count == Int(seq) else {
                throw FleetError(.server, "\(address): the store holds \(frames.count) events of ledger \(id), not the \(seq) its head says (run the fleet audit)")
            }
        }
        var values: [PersonalValueRow] = []
        for try await row in try await connection.query(
            "SELECT ref, owner, salt, value FROM personal_values WHERE ledger_id = \(id)::uuid ORDER BY ref", logger: logger)
        {
            let (ref, owner, salt, value) = try row.decode((Int64, Int64, ByteBuffer?, ByteBuffer).self)
            values.append(PersonalValueRow(ref: ref, owner: owner, salt: salt.map { Array(buffer: $0) }, value: Array(buffer: value)))
        }
        var headers: [String] = []
        for try await row in try await connection.query("SELECT header FROM signing_headers", logger: logger) {
            headers.append(try row.decode(String.self))
        }
        var erased = Set<Int64>()
        for try await row in try await connection.query("SELECT user_ref FROM erased_users WHERE ledger_id = \(id)::uuid", logger: logger) {
            erased.insert(try row.decode(Int64.self))
        }
        // The upload's user ids (a user id's row is its own owner) the store erased elsewhere.
        var users: [String: Int64] = [:]
        for row in upload?.values ?? [] where row.owner == row.ref {
            let user = String(decoding: row.value, as: UTF8.self)
            if !user.utf8.contains(0) { users[user] = row.ref }
        }
        if !users.isEmpty {
            for try await row in try await connection.query("SELECT erased_subjects_among(\(users.keys.sorted())::text[])", logger: logger) {
                if let ref = users[try row.decode(String.self)] { erased.insert(ref) }
            }
        }
        return Ingest.Held(frames: frames, values: values, signingHeaders: headers, plainChain: plainChain, erasedUsers: erased)
    }
}

extension FleetStore {
    /// Ledger `id` as the store holds it, for ``Ledger/writePulledCopy(_:to:)``: its events up to
    /// its head, its personal values (masked where the store erased a user: those rows are
    /// gone), the signing headers its events name, its key and its last signed head. Nil when the
    /// store holds no event of it. One read-only snapshot of the store.
    public func pull(ledgerID id: String) async throws -> PulledLedger? {
        let id = id.lowercased()
        guard UUID(uuidString: id) != nil else { return nil }
        return try await run {
            try await transaction { () -> PulledLedger? in
                try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
                let rows = try await connection.query(
                    "SELECT last_seq, public_key, head_statement FROM ledgers WHERE ledger_id = \(id)::uuid", logger: logger
                ).collect()
                guard let row = rows.first else { return nil }
                let (seq, key, statement) = try row.decode((Int64, ByteBuffer?, String?).self)
                guard seq > 0 else { return nil }
                let held = try await heldLedger(id, through: seq, plainChain: nil, upload: nil)
                let publicKey = try key.map { try CheckpointPublicKey(rawRepresentation: Array(buffer: $0)) }
                let source = "\(address) at \(Timestamp.now)"
                return PulledLedger(
                    ledgerID: id, frames: held.frames, values: held.values, signingHeaders: held.signingHeaders, publicKey: publicKey,
                    headStatement: statement, source: source)
            }
        }
    }

    /// The ids of the ledgers holding transactions of `user` (their projection rows name the
    /// user), in id order: what `pull --user` pulls.
    public func ledgers(ofUser user: String) async throws -> [String] {
        let user = Identifier.normalize(user)
        return try await fetchRows("SELECT DISTINCT ledger_id::text AS id FROM transactions WHERE user_id = \(user) ORDER BY 1").compactMap { $0.string("id") }
    }
}

/// One bearer token of the ingest service, as `token list` shows it (the token itself is never
/// kept: only its SHA-256).
public struct IngestToken: Sendable, Hashable {
    public var name: String
    public var createdAt: Timestamp
    public var revokedAt: Timestamp?
}

extension FleetStore {
    /// Makes a new bearer token for the ingest service named `name` (unique) and returns it: 32
    /// random bytes as `plt_` and base64url. Only its SHA-256 is stored, so this is the one time
    /// it can be read.
    public func createToken(name: String) async throws -> String {
        let name = name.trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty, name.count <= 100, !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw FleetError(.server, "a token's name is 1 to 100 characters, no control characters")
        }
        var random = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: 0...255, using: &random) }
        let token =
            "plt_"
            + Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let digest = ByteBuffer(bytes: Self.tokenDigest(token))
        let inserted = try await run {
            try await connection.query(
                "INSERT INTO ingest_tokens (name, digest) VALUES (\(name), \(digest)) ON CONFLICT (name) DO NOTHING RETURNING 1", logger: logger
            ).collect().count
        }
        guard inserted == 1 else { throw FleetError(.server, "a token named \(name) exists already (revoked or not): choose another name") }
        return token
    }

    /// Revokes the token named `name`: the service refuses it from its next request. False when
    /// no such token exists (or it was revoked already).
    @discardableResult
    public func revokeToken(name: String) async throws -> Bool {
        try await run {
            try await connection.query(
                "UPDATE ingest_tokens SET revoked_at = now() WHERE name = \(name) AND revoked_at IS NULL RETURNING 1", logger: logger
            ).collect().count == 1
        }
    }

    /// Every token, by name.
    public func tokens() async throws -> [IngestToken] {
        try await fetchRows(
            """
            SELECT name, (extract(epoch FROM created_at) * 1000)::int8 AS created_ms, (extract(epoch FROM revoked_at) * 1000)::int8 AS revoked_ms
            FROM ingest_tokens ORDER BY name
            """
        ).map { row in
            IngestToken(
                name: row.string("name") ?? "", createdAt: Timestamp(millisecondsSinceEpoch: row.int64("created_ms") ?? 0),
                revokedAt: row.int64("revoked_ms").map { Timestamp(millisecondsSinceEpoch: $0) })
        }
    }

    /// The name of the live token `token` is, or nil (unknown or revoked).
    public func tokenName(_ token: String) async throws -> String? {
        guard token.hasPrefix("plt_"), token.count < 200 else { return nil }
        let digest = ByteBuffer(bytes: Self.tokenDigest(token))
        return try await run {
            var name: String?
            for try await row in try await connection.query(
                "SELECT name FROM ingest_tokens WHERE digest = \(digest) AND revoked_at IS NULL", logger: logger)
            {
                name = try row.decode(String.self)
            }
            return name
        }
    }

    static func tokenDigest(_ token: String) -> [UInt8] {
        HashChain.sha256(Array(token.utf8))
    }
}
