import Crypto
import Foundation
import GRDB
import GRDBSQLite

/// How a ledger stores a signed transaction (a JWS, ``SignedTransaction``) in two parts
/// (docs/format.md, "Signed transactions"):
///
/// - its **header** (`alg` and the three certificates: about 4 KB, the same for every
///   transaction one chain signs) once per distinct chain, in `signing_headers`, keyed by the
///   SHA-256 of its text; the event's payload holds that digest, so the chain covers it;
/// - its **body** (payload and signature, with the dot between them), which holds the store's
///   transaction ids, as a personal value of the transaction's user: `forget` erases it. In
///   `personal_values` it is **packed**: the byte 0xFF (never the first byte of UTF-8 text), a
///   format byte 1, the payload's length and its LZ4 block's length (varints), the payload's
///   JSON as an LZ4 block against ``dictionary``, then the signature's bytes. The commitment
///   covers the body's text, as for every value.
package enum SignedParts {
    /// The first byte of a packed value.
    static let packedMarker: UInt8 = 0xFF
    static let packedFormat: UInt8 = 1

    /// The SHA-256 of a header's text: its key in `signing_headers` and in payloads.
    package static func digest(ofHeader header: Substring) -> [UInt8] {
        // The last header's digest is remembered: one chain signs an app's transactions, and the
        // encoder and the evidence both ask for each event's.
        var header = header
        let bytes = header.withUTF8 { Array($0) }
        return lastDigest.value(for: bytes) { Array(SHA256.hash(data: bytes)) }
    }

    private static let lastDigest = LastResult<[UInt8]>()

    /// `body` packed, or nil when it is not `payload.signature` in canonical base64url (then it
    /// is stored as its text, like any value).
    static func pack(_ body: String) -> [UInt8]? {
        // A payload starting with "{" is base64url starting with "e": anything else (a URL, a
        // path) is not looked at further.
        guard body.utf8.first == UInt8(ascii: "e") else { return nil }
        let parts = body.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count >= 16,
            let payload = parts[0].withContiguousStorageIfAvailable({ Base64URL.decode(UnsafeRawBufferPointer($0)) }) ?? nil,
            let signature = parts[1].withContiguousStorageIfAvailable({ Base64URL.decode(UnsafeRawBufferPointer($0)) }) ?? nil,
            payload.first == UInt8(ascii: "{"),
            let block = try? LZ4.compress(payload, dictionary: dictionary)
        else { return nil }
        var w = BinaryWriter(capacity: block.count + signature.count + 8)
        w.bytes.append(packedMarker)
        w.bytes.append(packedFormat)
        w.varint(UInt64(payload.count))
        w.varint(UInt64(block.count))
        w.bytes.append(contentsOf: block)
        w.bytes.append(contentsOf: signature)
        return w.bytes
    }

    /// The text of a stored value: packed, unpacked; otherwise its UTF-8.
    static func text(ofStored stored: UnsafeRawBufferPointer) throws(BinaryReader.Failure) -> String {
        guard stored.first == packedMarker else { return String(decoding: stored, as: UTF8.self) }
        var r = BinaryReader(stored)
        _ = try r.byte()
        guard try r.byte() == packedFormat else {
            throw BinaryReader.Failure(message: "a personal value packed in an unknown format")
        }
        let length = try r.varint()
        let blockLength = try r.varint()
        guard length <= UInt64(InputLimits.signedBytes), blockLength <= UInt64(stored.count) else {
            throw BinaryReader.Failure(message: "a packed personal value with impossible lengths")
        }
        let block = try r.fixed(Int(blockLength))
        let payload: [UInt8]
        do {
            payload = try LZ4.decompress(UnsafeRawBufferPointer(rebasing: stored[block]), originalSize: Int(length), dictionary: dictionary)
        } catch {
            throw BinaryReader.Failure(message: "a packed personal value does not decompress")
        }
        let signature = Array(stored[r.offset...])
        return Base64URL.encode(payload) + "." + Base64URL.encode(signature)
    }

    /// What an LZ4 block of a payload may reach back into: the names and common values of
    /// Apple's `JWSTransactionDecodedPayload`, so a payload's own bytes are mostly its values
    /// (docs/format.md prints it; changing it would make packed values unreadable: a new one
    /// needs a new format byte).
    static let dictionary: [UInt8] = Array(
        #"""
        {"appAccountToken":"","offerIdentifier":"","offerDiscountType":"FREE_TRIAL","PAY_AS_YOU_GO","PAY_UP_FRONT",\#
        "isUpgraded":true,"revocationDate":,"revocationReason":,"expiresDate":,"subscriptionGroupIdentifier":"",\#
        "webOrderLineItemId":"","type":"Auto-Renewable Subscription","Non-Renewing Subscription","Consumable",\#
        "offerType":,"environment":"Sandbox","Xcode","LocalTesting","FAMILY_SHARED","transactionReason":"RENEWAL",\#
        "deviceVerification":"","deviceVerificationNonce":"","appTransactionId":"","storefrontId":"143441",\#
        {"transactionId":"","originalTransactionId":"","bundleId":"","productId":"","purchaseDate":,\#
        "originalPurchaseDate":,"quantity":1,"type":"Non-Consumable","inAppOwnershipType":"PURCHASED","signedDate":,\#
        "environment":"Production","transactionReason":"PURCHASE","storefront":"USA","price":,"currency":"USD"}
        """#.utf8)
}

/// The headers of `signing_headers` as one read saw them, by digest: only rows whose text still
/// hashes to their key (an edited row reads as missing, and an event that refers to it as damage).
struct SigningHeaders: Sendable {
    private(set) var byDigest: [[UInt8]: String] = [:]

    static let none = SigningHeaders()

    init() {}

    /// Headers already checked against their digests.
    init(byDigest: [[UInt8]: String]) { self.byDigest = byDigest }

    static func read(_ db: Database) throws -> SigningHeaders {
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'signing_headers')")) == true
        else { return .none }
        var headers = SigningHeaders()
        for row in try Row.fetchAll(db.cachedStatement(sql: "SELECT digest, header FROM signing_headers")) {
            let digest = [UInt8]((row[0] as Data?) ?? Data())
            let header: String = row[1] ?? ""
            if SignedParts.digest(ofHeader: header[...]) == digest { headers.byDigest[digest] = header }
        }
        return headers
    }

    /// The digests of rows whose text no longer hashes to their key: `verify` names them.
    static func edited(_ db: Database) throws -> [[UInt8]] {
        guard try db.tableExists("signing_headers") else { return [] }
        return try Row.fetchAll(db, sql: "SELECT digest, header FROM signing_headers ORDER BY digest").compactMap { row in
            let digest = [UInt8]((row[0] as Data?) ?? Data())
            let header: String = row[1] ?? ""
            return SignedParts.digest(ofHeader: header[...]) == digest ? nil : digest
        }
    }
}
