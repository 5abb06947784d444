import Crypto
import Foundation
import PurchaseLedger
import PurchaseLedgerTesting
import Testing

/// Apple's signature on a transaction (#50): a chain made at test time (root -> intermediate ->
/// leaf, the two marker extensions) signs StoreKit-shaped payloads; each way a signed
/// transaction can fail gets its own evidence and reason.
struct AppleSignatureTests {
    static let signedAt: Int64 = 1_780_000_000_000  // 2026-05-28
    static let recorded = Date(timeIntervalSince1970: 1_790_000_000)

    static func purchase(signedDate: Int64 = signedAt, environment: String = "Production") -> [String: any Sendable] {
        SigningChain.payload(transaction: "2000000123", product: "pack.levels", price: 4990, currency: "USD", environment: environment, signedDate: signedDate)
    }

    @Test func theBuiltInRootIsAppleRootCAG3() {
        #expect(
            AppleTrustRoots.apple.fingerprints == ["63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79"])
    }

    @Test func aTransactionSignedByATrustedChainIsApple() async throws {
        let chain = try SigningChain()
        let verifier = AppleSignatureVerifier(roots: try chain.roots)
        let signed = try SignedTransaction(jws: try chain.sign(Self.purchase()))
        #expect(signed.claims.price == 4990 && signed.claims.productId == "pack.levels" && signed.claims.signedDate == Self.signedAt)
        #expect(await verifier.evidence(of: signed, recordedAt: Self.recorded) == .apple)
        // The same chain again is not validated again; the synchronous path answers alike.
        let second = try SignedTransaction(
            jws: try chain.sign(SigningChain.payload(transaction: "2000000124", product: "p", price: 990, currency: "EUR", signedDate: Self.signedAt)))
        #expect(await verifier.evidence(of: second, recordedAt: Self.recorded) == .apple)
        #expect(verifier.chainsValidated == 1)
        // Bound to the app: Apple's signature on another app's transaction is not this app's.
        #expect(await AppleSignatureVerifier(roots: try chain.roots, bundleID: "com.example.app").evidence(of: signed, recordedAt: Self.recorded) == .apple)
        let other = await AppleSignatureVerifier(roots: try chain.roots, bundleID: "com.example.other").evidence(of: signed, recordedAt: Self.recorded)
        #expect(other.reason == "signed for the app com.example.app, not com.example.other", "\(other)")
        // A recording clock a few minutes slow is not a forgery.
        let early = Date(timeIntervalSince1970: Double(Self.signedAt) / 1000 - 300)
        #expect(await verifier.evidence(of: signed, recordedAt: early) == .apple)
        // Apple's own root does not trust the test chain.
        let apple = AppleSignatureVerifier()
        let untrusted = await apple.evidence(of: signed, recordedAt: Self.recorded)
        #expect(untrusted.name == "invalid" && untrusted.reason?.contains("does not validate") == true, "\(untrusted)")
    }

    @Test func eachWayASignatureFailsHasItsLevelAndReason() async throws {
        let chain = try SigningChain()
        let roots = try chain.roots
        func evidence(_ jws: String, roots: AppleTrustRoots? = nil) async throws -> AppleEvidence {
            await AppleSignatureVerifier(roots: try roots ?? chain.roots).evidence(of: try SignedTransaction(jws: jws), recordedAt: Self.recorded)
        }
        func expectInvalid(_ e: AppleEvidence, _ text: String, _ comment: Comment) {
            #expect(e.name == "invalid" && e.reason?.contains(text) == true, "\(comment): \(e)")
        }
        // No marker on the intermediate, or on the leaf.
        let unmarked = try SigningChain(intermediateMarker: false)
        expectInvalid(try await evidence(try unmarked.sign(Self.purchase()), roots: try unmarked.roots), "1.2.840.113635.100.6.2.1", "intermediate marker")
        let unmarkedLeaf = try SigningChain(leafMarker: false)
        expectInvalid(try await evidence(try unmarkedLeaf.sign(Self.purchase()), roots: try unmarkedLeaf.roots), "1.2.840.113635.100.6.11.1", "leaf marker")
        // An intermediate that is no CA; a leaf the root issued itself (a two-certificate path,
        // x5c still listing an intermediate).
        let notCA = try SigningChain(intermediateIsCA: false)
        expectInvalid(try await evidence(try notCA.sign(Self.purchase()), roots: try notCA.roots), "does not validate", "intermediate not a CA")
        let direct = try SigningChain(leafSignedByRoot: true)
        expectInvalid(try await evidence(try direct.sign(Self.purchase()), roots: try direct.roots), "does not validate", "leaf issued by the root")
        // Another root: the chain's own root in x5c[2] is never trusted.
        let other = try SigningChain(name: "Other")
        expectInvalid(try await evidence(try other.sign(Self.purchase()), roots: roots), "does not validate", "wrong root")
        // Another algorithm named in the header.
        expectInvalid(try await evidence(try chain.sign(Self.purchase(), alg: "HS256")), "not ES256", "alg")
        // A payload byte changed after signing.
        let jws = try chain.sign(Self.purchase())
        let parts = jws.split(separator: ".")
        var payload = try #require(Base64URL.decode(parts[1]))
        let at = payload.firstIndex(of: UInt8(ascii: "4"))!  // 4990 -> 9990
        payload[at] = UInt8(ascii: "9")
        let tampered = parts[0] + "." + Base64URL.encode(payload) + "." + parts[2]
        expectInvalid(try await evidence(tampered), "does not verify", "tampered payload")
        // Signed after it was recorded.
        expectInvalid(try await evidence(try chain.sign(Self.purchase(signedDate: 1_800_000_000_000))), "after the transaction was recorded", "future")
        // Signed while the leaf was not yet valid; and a years-old one after the leaf expired still verifies.
        let expired = try SigningChain(leafValid: (Date(timeIntervalSince1970: 1_600_000_000), Date(timeIntervalSince1970: 1_700_000_000)))
        expectInvalid(
            try await evidence(try expired.sign(Self.purchase(signedDate: 1_550_000_000_000)), roots: try expired.roots), "not valid at signedDate", "before leaf")
        #expect(try await evidence(try expired.sign(Self.purchase(signedDate: 1_650_000_000_000)), roots: try expired.roots) == .apple, "expired since")
        // Xcode and local testing are never Apple's, whoever signed them.
        #expect(try await evidence(try chain.sign(Self.purchase(environment: "Xcode"))) == .xcode)
        #expect(try await evidence(try chain.sign(Self.purchase(environment: "LocalTesting"))) == .xcode)
        // A chain of two certificates.
        let short = try chain.sign(Self.purchase(), x5c: [Data(chain.leaf).base64EncodedString(), Data(chain.intermediate).base64EncodedString()])
        expectInvalid(try await evidence(short), "not leaf, intermediate and root", "short x5c")
    }

    @Test func malformedSignedTransactionsAreRefusedWithWhy() throws {
        for (jws, why) in [
            ("a.b", "three base64url parts"), ("%%%.e30.AA", "header is not base64url"), ("e30.e30.AA", "header has no alg"),
            ("eyJhbGciOiJFUzI1NiJ9.WzFd.AA", "payload is not a JSON object"), ("eyJhbGciOiJFUzI1NiJ9.e30.AB", "signature is not base64url"),
            ("eyJhbGciOiJFUzI1NiJ9.eyJwcmljZSI6IjQuOTkifQ.AA", "price is not a whole number"),
        ] {
            #expect(throws: SignedTransaction.FormError.self, "\(jws)") { try SignedTransaction(jws: jws) }
            do {
                _ = try SignedTransaction(jws: jws)
            } catch {
                #expect(error.message.contains(why), "\(jws): \(error.message)")
            }
        }
    }

    @Test func rootsLoadFromPEMOrDERAndAreNamedWhenBad() throws {
        let chain = try SigningChain()
        let pem = try AppleTrustRoots(files: [("root.pem", Array(chain.rootPEM.utf8))])
        let der = try AppleTrustRoots(files: [("root.der", chain.root)])
        #expect(pem == der && pem.certificates == [chain.root])
        #expect(AppleTrustRoots.apple.adding(pem).certificates.count == 2)
        #expect(throws: LedgerError.self) { try AppleTrustRoots(files: [("notes.txt", Array("hello".utf8))]) }
        do {
            _ = try AppleTrustRoots(files: [("notes.txt", Array("hello".utf8))])
        } catch let error as LedgerError {
            #expect(error.message.contains("notes.txt") && error.code == .malformedInput)
        }
    }
}

/// The fields an observation and its signed transaction both state must agree; each that does
/// not is named with both values.
struct SignedFieldAgreementTests {
    static func claims(_ payload: [String: any Sendable]) throws -> SignedTransaction.Claims {
        try SignedTransaction.Claims(json: Array(try JSONSerialization.data(withJSONObject: payload)))
    }

    @Test func agreeingFieldsGiveNoDifferenceAndEachDisagreementIsNamed() throws {
        let signed = try Self.claims(
            SigningChain.payload(
                transaction: "2000000123", original: "2000000100", product: "pack.levels", price: 9990, currency: "USD", storefront: "FRA",
                ownership: "FAMILY_SHARED", quantity: 2, signedDate: 1, offerType: 2))
        let agreeing = PurchaseTerms(
            price: "9.99", currency: "USD", storefront: "FRA", environment: .production, ownership: .familyShared, offer: Offer(type: .promotional, id: "p1"))
        #expect(
            signed.differences(product: "pack.levels", quantity: 2, storeTransactionID: "2000000123", originalTransaction: "2000000100", terms: agreeing).isEmpty)
        // A purchase that names no environment or ownership is production and purchased.
        let plain = try Self.claims(SigningChain.payload(transaction: "2000000200", product: "pack.levels", price: 9990, currency: "USD", signedDate: 1))
        func fields(_ terms: PurchaseTerms, of claims: SignedTransaction.Claims, revoking: Bool = false) -> [String] {
            claims.differences(product: nil, quantity: nil, storeTransactionID: nil, originalTransaction: nil, terms: terms, revoking: revoking).map(\.field)
        }
        #expect(fields(PurchaseTerms(price: "9.990", currency: "USD"), of: plain).isEmpty, "9.990 is 9990 milliunits")
        #expect(fields(PurchaseTerms(price: "9.99", currency: "USD"), of: signed) == ["ownership"], "no ownership named: purchased, not family-shared")
        let sandbox = try Self.claims(
            SigningChain.payload(transaction: "2000000201", product: "pack.levels", price: 9990, currency: "USD", environment: "Sandbox", signedDate: 1))
        #expect(fields(PurchaseTerms(price: "9.99", currency: "USD"), of: sandbox) == ["environment"], "no environment named: production, not sandbox")
        for odd in ["-9.99", "9.ab", "1e3", "+9.99", " 9.99", "9.", "9223372036854775.999", "9.9901"] {
            #expect(fields(PurchaseTerms(price: odd, currency: "USD"), of: plain) == ["price"], "\(odd)")
        }
        let lying = PurchaseTerms(price: "0.99", currency: "EUR", storefront: "USA", environment: .sandbox, ownership: .purchased, offer: Offer(type: .code, id: "c"))
        let found = signed.differences(product: "pack.other", quantity: 1, storeTransactionID: "2000000999", originalTransaction: "2000000101", terms: lying)
        #expect(
            found.map(\.field) == ["storeTransactionId", "originalTransaction", "product", "quantity", "price", "currency", "storefront", "environment", "ownership", "offer.type"])
        #expect(found.first { $0.field == "price" }?.description == "price is 0.99 in the event, 9.99 in its signed transaction")
        #expect(fields(.none, of: plain, revoking: true) == ["revocation"])
    }
}
