import Foundation
import Crypto

/// One document of Apple's server side, as `apple-import` reads it (docs/reconciling.md):
///
/// - a page of the App Store Server API's transaction history (`GET /inApps/v2/history/{id}`):
///   `{"revision", "hasMore", "bundleId", "environment", "signedTransactions": [JWS...]}`;
/// - a transaction's info (`GET /inApps/v1/transactions/{id}`): `{"signedTransactionInfo": JWS}`;
/// - an App Store Server Notification V2 body: `{"signedPayload": JWS}`.
public enum AppleDocument: Sendable, Hashable {
    case historyPage(revision: String?, hasMore: Bool, signedTransactions: [String])
    case transactionInfo(signedTransaction: String)
    case notification(signedPayload: String)

    /// The documents of a file's bytes: one JSON document, or JSON Lines (one per line, blank
    /// lines skipped), each placed at its file and line. Throws ``AppleImportError`` naming the line.
    public static func parse(_ bytes: [UInt8], file: String) throws(AppleImportError) -> [PlacedAppleDocument] {
        if let whole = try? JSONTape(bytes) {
            return [PlacedAppleDocument(file: file, line: 1, document: try document(whole, file: file, line: 1))]
        }
        var found: [PlacedAppleDocument] = []
        var line = 0
        for text in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false) {
            line += 1
            guard text.contains(where: { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\t") }) else { continue }
            let tape: JSONTape
            do { tape = try JSONTape(Array(text)) } catch {
                throw AppleImportError(file: file, line: line, message: "not JSON (\(error.message), byte \(error.offset))")
            }
            found.append(PlacedAppleDocument(file: file, line: line, document: try document(tape, file: file, line: line)))
        }
        guard !found.isEmpty else { throw AppleImportError(file: file, line: nil, message: "holds no document") }
        return found
    }

    private static func document(_ tape: JSONTape, file: String, line: Int) throws(AppleImportError) -> AppleDocument {
        func fail(_ message: String) -> AppleImportError { AppleImportError(file: file, line: line, message: message) }
        guard tape.tokens.first?.kind == .object else { throw fail("not a JSON object") }
        func string(_ key: String) throws(AppleImportError) -> String? {
            guard let i = tape.member(0, key).value, tape.tokens[i].kind != .null else { return nil }
            guard tape.tokens[i].kind == .string else { throw fail("field `\(key)` is not a string") }
            return tape.string(i)
        }
        if let list = tape.member(0, "signedTransactions").value {
            guard tape.tokens[list].kind == .array else { throw fail("field `signedTransactions` is not an array") }
            var jws: [String] = []
            for item in tape.items(list) {
                guard tape.tokens[item].kind == .string else { throw fail("field `signedTransactions` holds something other than strings") }
                jws.append(tape.string(item))
            }
            guard let more = tape.member(0, "hasMore").value, tape.tokens[more].kind == .bool else {
                throw fail("a history page without `hasMore` (true or false)")
            }
            let revision = try string("revision")
            // Apple's revision is a short token; it is not signed, so it is held to that.
            if let revision, revision.utf8.count > 512 || revision.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
                throw fail("field `revision` is not a revision token (over 512 bytes, or a control character)")
            }
            return .historyPage(revision: revision, hasMore: tape.tokens[more].flag, signedTransactions: jws)
        }
        if let jws = try string("signedTransactionInfo") { return .transactionInfo(signedTransaction: jws) }
        if let jws = try string("signedPayload") { return .notification(signedPayload: jws) }
        throw fail("not a history page, a transaction's info or a notification (no `signedTransactions`, `signedTransactionInfo` or `signedPayload`)")
    }
}

/// One of Apple's documents, with where it came from (for errors).
public struct PlacedAppleDocument: Sendable, Hashable {
    public var file: String
    public var line: Int
    public var document: AppleDocument

    public init(file: String, line: Int, document: AppleDocument) {
        self.file = file
        self.line = line
        self.document = document
    }
}

/// Why Apple's documents were refused: the file, the line and the reason. Nothing was written.
public struct AppleImportError: Error, Sendable, Hashable, CustomStringConvertible {
    public var file: String
    public var line: Int?
    public var message: String
    public var description: String { "\(file)\(line.map { ":\($0)" } ?? ""): \(message)" }

    /// An error about `file` (at `line`, when one) saying `message`.
    public init(file: String, line: Int?, message: String) {
        self.file = file
        self.line = line
        self.message = message
    }
}

/// What an App Store Server Notification V2 says, from its verified `signedPayload`.
public struct AppleNotification: Sendable, Hashable {
    public var uuid: String
    /// `notificationType`: `REFUND`, `REVOKE`, `ONE_TIME_CHARGE`, `DID_RENEW`, `REFUND_REVERSED`...
    public var type: String
    public var subtype: String?
    public var bundleId: String?
    public var environment: String?
    /// `data.signedTransactionInfo`, when the notification carries one.
    public var signedTransaction: String?
    public var signedDate: Int64?

    /// The notification of a JWS's payload; throws naming what is missing.
    package init(payloadOf signed: SignedTransaction) throws(SignedTransaction.FormError) {
        let segment = try SignedTransaction.parts(ofJWS: signed.jws).payload
        guard let payload = Base64URL.decode(segment) else { throw .init(message: "its payload is not base64url") }
        let tape: JSONTape
        do { tape = try JSONTape(payload) } catch { throw .init(message: "its payload is not JSON (\(error.message))") }
        guard tape.tokens.first?.kind == .object else { throw .init(message: "its payload is not a JSON object") }
        func string(_ object: Int, _ key: String) throws(SignedTransaction.FormError) -> String? {
            guard let i = tape.member(object, key).value, tape.tokens[i].kind != .null else { return nil }
            guard tape.tokens[i].kind == .string else { throw .init(message: "its payload's \(key) is not a string") }
            return tape.string(i)
        }
        guard let uuid = try string(0, "notificationUUID") else { throw .init(message: "its payload has no notificationUUID") }
        guard let type = try string(0, "notificationType") else { throw .init(message: "its payload has no notificationType") }
        self.uuid = uuid
        self.type = type
        subtype = try string(0, "subtype")
        signedDate = signed.claims.signedDate
        if let data = tape.member(0, "data").value {
            guard tape.tokens[data].kind == .object else { throw .init(message: "its payload's data is not an object") }
            bundleId = try string(data, "bundleId")
            environment = try string(data, "environment")
            signedTransaction = try string(data, "signedTransactionInfo")
        }
    }
}

/// One statement of Apple's about a transaction, as a ledger holds it: its claims, the event
/// that recorded it, and where it came from.
public struct AppleRecord: Sendable, Hashable {
    public enum Origin: Sendable, Hashable {
        case history
        case transactionInfo
        /// A notification's `signedTransactionInfo`.
        case notification(uuid: String, type: String, subtype: String?)
    }

    public var claims: SignedTransaction.Claims
    public var origin: Origin
    /// The seq of the event that recorded it.
    public var seq: Int64
    /// The ledger's user the import matched, if any.
    public var user: String?
    /// The signed documents that make it Apple's (a notification's and the transaction's inside
    /// it), checked again whenever it is compared: an event of Apple's is only as good as them.
    var documents: [String] = []
    /// When it was recorded (its event's time).
    var recordedAt: Timestamp = Timestamp(millisecondsSinceEpoch: 0)

    /// A record of `claims` from `origin`, numbered `seq`, of `user`: as a fleet store holds one
    /// (its signatures verified when it was stored).
    package init(claims: SignedTransaction.Claims, origin: Origin, seq: Int64, user: String?) {
        self.claims = claims
        self.origin = origin
        self.seq = seq
        self.user = user
    }

    init(claims: SignedTransaction.Claims, origin: Origin, seq: Int64, user: String?, documents: [String], recordedAt: Timestamp) {
        self.init(claims: claims, origin: origin, seq: seq, user: user)
        self.documents = documents
        self.recordedAt = recordedAt
    }

    /// The digest that identifies a statement: its facts and its `signedDate`.
    package static func statementDigest(of claims: SignedTransaction.Claims) -> [UInt8] {
        Array(SHA256.hash(data: Array((contentKey(of: claims) + "|\(claims.signedDate ?? 0)").utf8)))
    }

    /// Equal for two statements of the same facts (Apple signs the same transaction again, with
    /// a new `signedDate`, at each request): what makes an import idempotent.
    static func contentKey(of c: SignedTransaction.Claims) -> String {
        let parts: [String?] = [
            c.transactionId, c.originalTransactionId, c.bundleId, c.productId, c.purchaseDate.map(String.init), c.quantity.map(String.init), c.type,
            c.inAppOwnershipType, c.environment, c.storefront, c.price.map(String.init), c.currency, c.offerType.map(String.init),
            c.revocationDate.map(String.init), c.revocationReason.map(String.init),
        ]
        return parts.map { $0.map { "\($0.utf8.count):\($0)" } ?? "-" }.joined(separator: "|")
    }

    /// What an event of Apple's says, in a line (`1001: refunded 2026-05-28T20:26:39.500Z, by
    /// the REFUND notification n-1`); nil for another event, or one whose record is erased.
    public static func statement(in e: RecordedEvent) -> String? {
        if case .appleHistoryCompleted(let revision, let user) = e.event.body {
            return "the history of \(user ?? "an unnamed user") is complete (revision \(revision))"
        }
        guard let record = records(in: e).first else { return nil }
        let c = record.claims
        var text = (c.transactionId ?? "-") + ": "
        if let revoked = c.revocationDate {
            text += (c.inAppOwnershipType == "FAMILY_SHARED" ? "revoked " : "refunded ") + Timestamp(millisecondsSinceEpoch: revoked).description
        } else {
            text += Reconciliation.describe(c)
        }
        switch record.origin {
        case .history: text += ", listed by a history page"
        case .transactionInfo: text += ", by its transaction info"
        case .notification(let uuid, let type, let subtype): text += ", by the \(type)\(subtype.map { "/" + $0 } ?? "") notification \(uuid)"
        }
        return text
    }

    /// The records an event of Apple's holds (none for another event, or an erased one).
    static func records(in e: RecordedEvent) -> [AppleRecord] {
        switch e.event.body {
        case .appleTransactionReceived(let jws, let source, let user):
            guard let signed = try? SignedTransaction(jws: jws) else { return [] }
            return [
                AppleRecord(
                    claims: signed.claims, origin: source == .history ? .history : .transactionInfo, seq: e.seq, user: user, documents: [jws],
                    recordedAt: e.event.at)
            ]
        case .appleNotificationReceived(let jws, let user):
            guard let signed = try? SignedTransaction(jws: jws), let n = try? AppleNotification(payloadOf: signed),
                let inner = n.signedTransaction, let transaction = try? SignedTransaction(jws: inner)
            else { return [] }
            return [
                AppleRecord(
                    claims: transaction.claims, origin: .notification(uuid: n.uuid, type: n.type, subtype: n.subtype), seq: e.seq, user: user,
                    documents: [jws, inner], recordedAt: e.event.at)
            ]
        default:
            return []
        }
    }
}
