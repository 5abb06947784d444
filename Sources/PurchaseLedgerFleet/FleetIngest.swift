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
        try await ingest([upload], appleBundleID: appleBundleID)[0].get()
    }

    /// Stores several uploads as ``ingest(_:appleBundleID:)`` stores one, those of distinct
    /// ledgers in one PostgreSQL transaction (one statement per table for all of them, as `ship`
    /// stores a batch): what a service does with the uploads that arrive together. Each gets its
    /// own outcome; a refused one writes nothing and the others are stored. Two uploads of one
    /// ledger go one after the other. Server errors throw.
    public func ingest(_ uploads: [LedgerUpload], appleBundleID: String? = nil) async throws -> [Result<IngestHead, IngestRefusal>] {
        var outcomes = [Result<IngestHead, IngestRefusal>?](repeating: nil, count: uploads.count)
        var pending: [(index: Int, id: String, upload: LedgerUpload)] = []
        for (index, upload) in uploads.enumerated() {
            let id = upload.ledgerID.lowercased()
            let key = upload.head.publicKey
            if UUID(uuidString: id) == nil {
                outcomes[index] = .failure(
                    IngestRefusal(kind: .malformed, message: "the head names ledger \(id.debugDescription.prefix(60)), not a ledger id (a UUID)"))
            } else if !upload.head.isSigned(by: key) {
                outcomes[index] = .failure(IngestRefusal(kind: .badSignature, message: "the head statement's signature is not its public key's"))
            } else if LedgerIdentity.hasDerivedForm(id), LedgerIdentity.id(derivedFrom: key) != id {
                outcomes[index] = .failure(
                    IngestRefusal(kind: .keyMismatch, message: "ledger id \(id) is derived from another identity key than the one that signed this head"))
            } else {
                pending.append((index, id, upload))
            }
        }
        // Rounds of distinct ledgers: a ledger's second upload waits for its first.
        while !pending.isEmpty {
            var seen = Set<String>()
            var round: [(index: Int, id: String, upload: LedgerUpload)] = []
            var later: [(index: Int, id: String, upload: LedgerUpload)] = []
            for entry in pending {
                if seen.insert(entry.id).inserted { round.append(entry) } else { later.append(entry) }
            }
            pending = later
            do {
                let results = try await run { try await transaction { try await ingestLocked(round, appleBundleID: appleBundleID) } }
                for (entry, result) in zip(round, results) { outcomes[entry.index] = result }
            } catch let error as FleetError where error.code == .server && round.count > 1 {
                // A value the server refused rolls back the whole round: each upload alone, so only
                // the one that holds it is refused, with the server's reason.
                for entry in round {
                    do {
                        let result = try await run { try await transaction { try await ingestLocked([entry], appleBundleID: appleBundleID) } }
                        outcomes[entry.index] = result[0]
                    } catch let error as FleetError where error.code == .server {
                        outcomes[entry.index] = .failure(IngestRefusal(kind: .refused, message: "the fleet store refused a value: \(error.message)"))
                    }
                }
            } catch let error as FleetError where error.code == .server {
                outcomes[round[0].index] = .failure(IngestRefusal(kind: .refused, message: "the fleet store refused a value: \(error.message)"))
            }
        }
        return outcomes.map { $0! }
    }

    private func ingestLocked(_ round: [(index: Int, id: String, upload: LedgerUpload)], appleBundleID: String?) async throws -> [Result<IngestHead, IngestRefusal>] {
        // Lock (or create) every ledger's row, in id order so concurrent rounds never deadlock; a
        // new row records the key and the chain's mode, as ship records them (never updated after).
        let ordered = round.sorted { $0.id < $1.id }
        let ids = ordered.map(\.id)
        let modes = ordered.map { Ingest.startsPlainChain($0.upload).map { $0 ? "sha256" : "hmac-sha256" } ?? "" }
        let keys = ordered.map { Self.hex($0.upload.head.publicKey.rawRepresentation) }
        var rows: [String: (seq: Int64, link: [UInt8], inserted: Bool, key: [UInt8]?, chain: String?)] = [:]
        for try await row in try await connection.query(
            """
            INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at, public_key, chain)
            SELECT k.id::uuid, 'uploaded', 0, \(ByteBuffer(bytes: Shipment.genesis)), now(), now(), decode(k.key, 'hex'), nullif(k.chain, '')
            FROM unnest(\(ids)::text[], \(keys)::text[], \(modes)::text[]) AS k(id, key, chain)
            ORDER BY k.id
            ON CONFLICT (ledger_id) DO UPDATE SET last_shipped_at = ledgers.last_shipped_at
            RETURNING ledger_id::text, last_seq, last_link, xmax = 0 AS inserted, public_key, chain
            """, logger: logger)
        {
            let (id, seq, link, inserted, key, chain) = try row.decode((String, Int64, ByteBuffer, Bool, ByteBuffer?, String?).self)
            rows[id] = (seq, Array(buffer: link), inserted, key.map { Array(buffer: $0) }, chain)
        }
        // Events past a head (written by someone with the shipping credential, or the ledger's own
        // when the head was moved back): refused, naming the blocks that hold them.
        let past = try await blocksPastHead(of: ids)
        let held = try await heldLedgers(
            rows.filter { $0.value.seq > 0 }.mapValues(\.seq), users: round.flatMap { $0.upload.values.filter { $0.owner == $0.ref }.map { ($0.ref, $0.value) } })
        var results: [String: Result<IngestHead, IngestRefusal>] = [:]
        var accepted: [(ledger: String, shipment: Shipment)] = []
        var heads: [String: (key: [UInt8], statement: String)] = [:]
        var unclaimed: [String] = []
        var refusedNew: [String] = []
        for (entry, mode) in zip(ordered, modes) {
            let id = entry.id, upload = entry.upload
            guard let row = rows[id] else { throw FleetError(.server, "\(address): the ledgers row of \(id) was not returned") }
            let current = IngestHead(ledgerID: id, seq: row.seq, link: row.seq > 0 ? row.link : [], stored: 0)
            func refuse(_ kind: IngestRefusal.Kind, _ message: String, seq: Int64? = nil) {
                results[id] = .failure(IngestRefusal(kind: kind, message: message, seq: seq, head: current))
                if row.inserted { refusedNew.append(id) }
            }
            let key = upload.head.publicKey.rawRepresentation
            if let heldKey = row.key, heldKey != key {
                refuse(.keyMismatch, "the store holds ledger \(id) under another identity key: this device claims an id that is not its own (an id conflict)")
                continue
            }
            if row.key == nil && row.seq > 0 {
                // Shipped before keys were kept: only a ship from its device (or the owner) may
                // claim the key, never a holder of an app's token.
                refuse(
                    .keyMismatch,
                    "the store holds ledger \(id) without an identity key (shipped before keys were kept): ship it once from its device with `purchase-ledger ship`, which records its key, before it uploads"
                )
                continue
            }
            if let (blocks, chain) = past[id] {
                // Named for deletion: blocks off the ledger's chain (overlapping it, or past a gap),
                // and blocks of it that do not decode or hold an event the upload holds otherwise.
                // Never a block of the chain that also holds events up to the head, nor one whose
                // events the upload does not reach: the head was moved back over the device's own
                // events, and one `ship` from the device keeps them and moves it on.
                var uploaded: [Int64: UploadedFrame] = [:]
                for frame in upload.frames { uploaded[frame.seq] = frame }
                let foreign = blocks.filter { block in
                    if chain.contains(block.firstSeq) && block.firstSeq <= row.seq { return false }
                    guard let events = try? block.events(), chain.contains(block.firstSeq) else { return true }
                    return events.contains { e in e.seq > row.seq && uploaded[e.seq].map { !$0.isSameEvent(as: e) } ?? false }
                }
                let first = max(blocks.map(\.firstSeq).min()!, row.seq + 1)
                if foreign.isEmpty {
                    refuse(
                        .refused,
                        "the store holds this ledger's own events past its head, from seq \(first) (its head was moved back): "
                            + "ship the ledger once from its device with `purchase-ledger ship`, which keeps them and moves the head past them",
                        seq: first)
                } else {
                    refuse(
                        .refused,
                        "the store holds events of this ledger past its head, from seq \(max(foreign.map(\.firstSeq).min()!, row.seq + 1)), that are not this device's; "
                            + "the store's owner removes them: DELETE FROM event_blocks WHERE ledger_id = '\(id)' AND first_seq IN (\(foreign.map { String($0.firstSeq) }.joined(separator: ", ")));",
                        seq: first)
                }
                continue
            }
            var ledger = held.ledgers[id] ?? Ingest.Held(frames: [], values: [], signingHeaders: [], plainChain: nil, erasedUsers: [])
            ledger.signingHeaders = held.signingHeaders
            // The chain's mode: as recorded; for a row that records none (shipped before 0007), from
            // the held events themselves (the first recomputes from a genesis or it is keyed).
            var chain = row.chain ?? (row.inserted && !mode.isEmpty ? mode : nil)
            if chain == nil, let first = ledger.frames.first {
                chain = Ingest.isPlainChainStart(first, ledgerID: id) ? "sha256" : "hmac-sha256"
            }
            ledger.plainChain = chain.map { $0 == "sha256" }
            ledger.erasedUsers.formUnion(upload.values.filter { $0.owner == $0.ref && held.erasedSubjects.contains($0.value) }.map(\.ref))
            do {
                guard let plan = try Ingest.plan(upload, held: ledger, bundleID: appleBundleID) else {
                    // Nothing new (a resend): a row made for a ledger the store held no event of is not kept.
                    if row.inserted { refusedNew.append(id) }
                    results[id] = .success(current)
                    continue
                }
                if let field = plan.shipment.textHoldingNUL() {
                    refuse(.refused, "\(field) holds a NUL byte, which PostgreSQL text cannot store")
                    continue
                }
                accepted.append((id, plan.shipment))
                heads[id] = (key, upload.head.json)
                if row.key == nil && !row.inserted { unclaimed.append(id) }
                results[id] = .success(IngestHead(ledgerID: id, seq: plan.shipment.lastSeq, link: plan.shipment.lastLink, stored: plan.shipment.events.count))
            } catch {
                let kind: IngestRefusal.Kind =
                    switch error.kind {
                    case .fork: .fork
                    case .gap: .gap
                    case .refused: .refused
                    }
                refuse(kind, error.message, seq: error.seq)
            }
        }
        if !refusedNew.isEmpty {
            // Nothing of a refused new ledger stays, not even the row the lock made.
            try await connection.query("SELECT forget_unshipped_ledgers(\(refusedNew)::text[]::uuid[])", logger: logger)
        }
        if !accepted.isEmpty { try await store(accepted, heads: heads, unclaimed: unclaimed) }
        return round.map { results[$0.id]! }
    }

    /// What the store holds of ledgers `heads` (id -> head seq) up to their heads: their events, personal values and
    /// erased users' refs; the store's signing headers; and which of `users` (ref, user id
    /// bytes) the store erased elsewhere (it knows them by a keyed digest only).
    private func heldLedgers(_ heads: [String: Int64], users: [(Int64, [UInt8])]) async throws -> (
        ledgers: [String: Ingest.Held], signingHeaders: [String], erasedSubjects: Set<[UInt8]>
    ) {
        var ledgers: [String: Ingest.Held] = [:]
        let ids = heads.keys.sorted()
        if !ids.isEmpty {
            let empty = Ingest.Held(frames: [], values: [], signingHeaders: [], plainChain: nil, erasedUsers: [])
            for (id, frames) in try await storedEvents(through: heads) {
                ledgers[id, default: empty].frames = frames
            }
            for try await row in try await connection.query(
                "SELECT ledger_id::text, ref, owner, salt, value FROM personal_values WHERE ledger_id = ANY(\(ids)::text[]::uuid[]) ORDER BY 1, 2",
                logger: logger)
            {
                let (id, ref, owner, salt, value) = try row.decode((String, Int64, Int64, ByteBuffer?, ByteBuffer).self)
                ledgers[id]?.values.append(PersonalValueRow(ref: ref, owner: owner, salt: salt.map { Array(buffer: $0) }, value: Array(buffer: value)))
            }
            for try await row in try await connection.query(
                "SELECT ledger_id::text, user_ref FROM erased_users WHERE ledger_id = ANY(\(ids)::text[]::uuid[])", logger: logger)
            {
                let (id, ref) = try row.decode((String, Int64).self)
                ledgers[id]?.erasedUsers.insert(ref)
            }
        }
        var headers: [String] = []
        for try await row in try await connection.query("SELECT header FROM signing_headers", logger: logger) {
            headers.append(try row.decode(String.self))
        }
        // The uploads' user ids (a user id's row is its own owner) the store erased elsewhere.
        var erased = Set<[UInt8]>()
        let asked = Array(Set(users.map { String(decoding: $0.1, as: UTF8.self) }.filter { !$0.utf8.contains(0) })).sorted()
        if !asked.isEmpty {
            for try await row in try await connection.query("SELECT erased_subjects_among(\(asked)::text[])", logger: logger) {
                erased.insert(Array(try row.decode(String.self).utf8))
            }
        }
        return (ledgers, headers, erased)
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
                let held = try await heldLedgers([id: seq], users: [])
                let ledger = held.ledgers[id] ?? Ingest.Held(frames: [], values: [], signingHeaders: [], plainChain: nil, erasedUsers: [])
                let publicKey = try key.map { try CheckpointPublicKey(rawRepresentation: Array(buffer: $0)) }
                let source = "\(address) at \(Timestamp.now)"
                return PulledLedger(
                    ledgerID: id, frames: ledger.frames, values: ledger.values, signingHeaders: held.signingHeaders, publicKey: publicKey,
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
