import Crypto
public import Foundation
import SwiftASN1
@_spi(DisableValidityCheck) import X509

/// What Apple's signature says about one transaction (docs/rules.md, "Apple's signature").
public enum AppleEvidence: Sendable, Hashable, CustomStringConvertible {
    /// Signed by a leaf certificate that chains, through an intermediate with Apple's marker, to
    /// a trusted root, at the payload's `signedDate`; the signature verifies.
    case apple
    /// No signed transaction (StoreKit 1, or none recorded).
    case unsigned
    /// An Xcode or local-testing transaction: StoreKit signs those with a local key, never Apple's.
    case xcode
    /// A signed transaction that does not verify, with why.
    case invalid(String)

    /// `apple`, `unsigned`, `xcode` or `invalid`.
    public var name: String {
        switch self {
        case .apple: "apple"
        case .unsigned: "unsigned"
        case .xcode: "xcode"
        case .invalid: "invalid"
        }
    }

    /// Why it is `invalid` (nil for the other levels).
    public var reason: String? {
        if case .invalid(let why) = self { why } else { nil }
    }

    public var description: String { reason.map { "invalid: \($0)" } ?? name }
}

/// A StoreKit 2 signed transaction: a compact JWS (`header.payload.signature`, each part
/// base64url) whose header names its algorithm and its certificate chain (`x5c`) and whose
/// payload is Apple's `JWSTransactionDecodedPayload`. Parsing checks only the form; whether
/// Apple signed it is ``AppleSignatureVerifier``'s question.
///
/// ```swift
/// let signed = try SignedTransaction(jws: verificationResult.jwsRepresentation)
/// print(signed.claims.productId, signed.claims.price ?? 0)
/// ```
public struct SignedTransaction: Sendable, Hashable {
    /// The JWS exactly as given.
    public let jws: String
    /// The header's `alg`.
    public let algorithm: String
    /// The header's `x5c`: standard base64 DER, the leaf first.
    public let certificateChain: [String]
    /// What the payload states.
    public let claims: Claims
    /// The bytes the signature covers (`header.payload`, as given) and the signature's 64 bytes
    /// (r and s, for ES256).
    let signingInput: [UInt8]
    let signature: [UInt8]

    /// The fields of Apple's `JWSTransactionDecodedPayload` a ledger compares or reports.
    /// Dates are milliseconds since 1970, as Apple writes them; `price` is in milliunits of
    /// `currency` (4990 is 4.99).
    public struct Claims: Sendable, Hashable, Decodable {
        public var transactionId: String?
        public var originalTransactionId: String?
        public var bundleId: String?
        public var productId: String?
        public var purchaseDate: Int64?
        public var quantity: Int?
        public var type: String?
        public var inAppOwnershipType: String?
        public var environment: String?
        public var storefront: String?
        public var price: Int64?
        public var currency: String?
        public var offerType: Int?
        public var transactionReason: String?
        public var revocationDate: Int64?
        public var revocationReason: Int?
        public var signedDate: Int64?
    }

    /// Why a string is not a signed transaction at all.
    public struct FormError: Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Parses `jws`. Throws ``FormError`` when it is not a compact JWS with a JSON header and
    /// payload and a 64-byte signature.
    public init(jws: String) throws(FormError) {
        let parts = jws.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw FormError(message: "a signed transaction is three base64url parts joined by dots; this has \(parts.count)") }
        guard let header = Base64URL.decode(parts[0]) else { throw FormError(message: "its header is not base64url") }
        guard let payload = Base64URL.decode(parts[1]) else { throw FormError(message: "its payload is not base64url") }
        guard let signature = Base64URL.decode(parts[2]) else { throw FormError(message: "its signature is not base64url") }
        struct Header: Decodable {
            var alg: String?
            var x5c: [String]?
        }
        let decoder = JSONDecoder()
        guard let h = try? decoder.decode(Header.self, from: Data(header)) else { throw FormError(message: "its header is not a JSON object with alg and x5c") }
        guard let alg = h.alg else { throw FormError(message: "its header has no alg") }
        let claims: Claims
        do {
            claims = try decoder.decode(Claims.self, from: Data(payload))
        } catch {
            throw FormError(message: "its payload is not a JSON transaction (\(Self.describe(error)))")
        }
        self.jws = jws
        algorithm = alg
        certificateChain = h.x5c ?? []
        self.claims = claims
        signingInput = Array(jws.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        self.signature = signature
    }

    private static func describe(_ error: any Error) -> String {
        switch error as? DecodingError {
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .keyNotFound(_, let context), .dataCorrupted(let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? context.debugDescription : "\(path): \(context.debugDescription)"
        case nil: return "\(error)"
        @unknown default: return "\(error)"
        }
    }

    /// Whether the payload says the transaction comes from Xcode or local testing (never Apple-signed).
    public var isLocalTesting: Bool { claims.environment == "Xcode" || claims.environment == "LocalTesting" }
}

/// The roots a signed transaction's chain must end at. Trust comes from these, never from the
/// root a JWS carries in `x5c`.
public struct AppleTrustRoots: Sendable, Hashable {
    /// The certificates, DER.
    public let certificates: [[UInt8]]
    let parsed: [Certificate]

    /// Apple Root CA - G3 (SHA-256 fingerprint
    /// `63:34:3A:BF:B8:9A:6A:03:EB:B5:7E:9B:3F:5F:A7:BE:7C:4F:5C:75:6F:30:17:B3:A8:C4:88:C3:65:3E:91:79`),
    /// the root of every App Store signed transaction; valid until 2039-04-30.
    public static let apple: AppleTrustRoots = {
        let der = Array(Data(base64Encoded: appleRootCAG3)!)
        return AppleTrustRoots(trusted: [(der, try! Certificate(derEncoded: der))])
    }()

    private init(trusted: [([UInt8], Certificate)]) {
        certificates = trusted.map(\.0)
        parsed = trusted.map(\.1)
    }

    /// Roots from files' contents: each PEM (one or more `CERTIFICATE` blocks) or DER. Throws
    /// ``LedgerError/Code/invalidInput`` naming the file that holds no certificate.
    public init(files: [(name: String, contents: [UInt8])]) throws {
        var trusted: [([UInt8], Certificate)] = []
        for (name, contents) in files {
            let text = String(decoding: contents, as: UTF8.self)
            if text.contains("-----BEGIN") {
                let documents: [PEMDocument]
                do {
                    documents = try PEMDocument.parseMultiple(pemString: text)
                } catch {
                    throw LedgerError.make(.malformedInput, "\(name): not a PEM certificate (\(error))")
                }
                let certificates = documents.filter { $0.discriminator == "CERTIFICATE" }
                guard !certificates.isEmpty else { throw LedgerError.make(.malformedInput, "\(name): holds no CERTIFICATE block") }
                for document in certificates {
                    do {
                        trusted.append((document.derBytes, try Certificate(derEncoded: document.derBytes)))
                    } catch {
                        throw LedgerError.make(.malformedInput, "\(name): a CERTIFICATE block that does not parse (\(error))")
                    }
                }
            } else {
                do {
                    trusted.append((contents, try Certificate(derEncoded: contents)))
                } catch {
                    throw LedgerError.make(.malformedInput, "\(name): neither PEM nor a DER certificate (\(error))")
                }
            }
        }
        self.init(trusted: trusted)
    }

    /// These roots and `other`'s.
    public func adding(_ other: AppleTrustRoots) -> AppleTrustRoots {
        AppleTrustRoots(trusted: Array(zip(certificates, parsed)) + zip(other.certificates, other.parsed))
    }

    /// The SHA-256 fingerprint of each root, as `AA:BB:...`.
    public var fingerprints: [String] {
        certificates.map { der in SHA256.hash(data: der).map { String(format: "%02X", $0) }.joined(separator: ":") }
    }

    public static func == (a: AppleTrustRoots, b: AppleTrustRoots) -> Bool { a.certificates == b.certificates }
    public func hash(into hasher: inout Hasher) { hasher.combine(certificates) }

    /// Apple Root CA - G3, DER, base64 (from Apple's PKI page).
    static let appleRootCAG3 =
        "MIICQzCCAcmgAwIBAgIILcX8iNLFS5UwCgYIKoZIzj0EAwMwZzEbMBkGA1UEAwwSQXBwbGUgUm9vdCBDQSAtIEczMSYwJAYDVQQLDB1BcHBsZSBDZXJ0aWZpY2F0aW9uIEF1dGhvcml0eTETMBEGA1UECgwKQXBwbGUgSW5jLjELMAkGA1UEBhMCVVMwHhcNMTQwNDMwMTgxOTA2WhcNMzkwNDMwMTgxOTA2WjBnMRswGQYDVQQDDBJBcHBsZSBSb290IENBIC0gRzMxJjAkBgNVBAsMHUFwcGxlIENlcnRpZmljYXRpb24gQXV0aG9yaXR5MRMwEQYDVQQKDApBcHBsZSBJbmMuMQswCQYDVQQGEwJVUzB2MBAGByqGSM49AgEGBSuBBAAiA2IABJjpLz1AcqTtkyJygRMc3RCV8cWjTnHcFBbZDuWmBSp3ZHtfTjjTuxxEtX/1H7YyYl3J6YRbTzBPEVoA/VhYDKX1DyxNB0cTddqXl5dvMVztK517IDvYuVTZXpmkOlEKMaNCMEAwHQYDVR0OBBYEFLuw3qFYM4iapIqZ3r6966/ayySrMA8GA1UdEwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgEGMAoGCCqGSM49BAMDA2gAMGUCMQCD6cHEFl4aXTQY2e3v9GwOAEZLuN+yRhHFD/3meoyhpmvOwgPUnPWTxnS4at+qIxUCMG1mihDK1A3UT82NQz60imOlM27jbdoXt2QfyFMm+YhidDkLF1vLUagM6BgD56KyKA=="
}

/// Checks signed transactions against trust roots: the ES256 signature with the leaf's key
/// (swift-crypto), and the chain leaf -> intermediate -> a trusted root with swift-certificates'
/// `Verifier` (RFC 5280 path validation, Apple's two marker extensions). Each distinct chain is
/// validated once and remembered; the time check, the payload's `signedDate` inside every
/// certificate's validity (so a years-old transaction still verifies after its leaf expired)
/// and not after the moment it was recorded, is made for each transaction.
///
/// ```swift
/// let verifier = AppleSignatureVerifier(bundleID: "com.example.app")   // Apple Root CA - G3
/// let evidence = await verifier.evidence(of: signed, recordedAt: Date())
/// ```
///
/// Async only: swift-certificates' `Verifier` is. A synchronous caller waiting on it would hold
/// a thread the check itself may need (on a device with as many waiting callers as cores, for
/// ever), so a synchronous path must come from verdicts prepared beforehand (``prepare(_:)``).
public final class AppleSignatureVerifier: Sendable {
    /// The roots chains must end at.
    public let roots: AppleTrustRoots
    /// The app's bundle id: a transaction Apple signed for another app is `invalid`. Nil checks
    /// no app (a transaction of any app signed by Apple is then `apple`).
    public let bundleID: String?
    /// How far a `signedDate` may lie after the moment it was recorded (the recording device's
    /// clock may be slow): ten minutes.
    public static let clockSkew: TimeInterval = 600
    private let verdicts = Locked<[ChainKey: ChainVerdict]>([:])
    /// Chains remembered at most; past it the memory starts again (devices supply chains).
    static let rememberedChains = 256

    /// Intermediate certificates carry 1.2.840.113635.100.6.2.1 (Apple WWDR), leaves
    /// 1.2.840.113635.100.6.11.1 (the App Store receipt signer).
    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    static let leafMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]

    public init(roots: AppleTrustRoots = .apple, bundleID: String? = nil) {
        self.roots = roots
        self.bundleID = bundleID
    }

    struct ChainKey: Hashable {
        var leaf: String
        var intermediate: String
    }

    /// A chain's verdict under ``roots``, whatever the time: its leaf key and the span every
    /// certificate of the validated chain is valid in, or why it does not validate.
    enum ChainVerdict: Sendable {
        /// The leaf's key as its X9.63 bytes (swift-crypto's key type is not Sendable here).
        case trusted(key: [UInt8], notBefore: Date, notAfter: Date)
        case untrusted(String)
    }

    /// The evidence `signed` gives, recorded at `recordedAt` (a `signedDate` after it is refused).
    public func evidence(of signed: SignedTransaction, recordedAt: Date) async -> AppleEvidence {
        if signed.isLocalTesting { return .xcode }
        switch precheck(signed) {
        case .failure(let evidence): return evidence
        case .success(let key):
            if let verdict = verdicts.withLock({ $0[key] }) { return finish(signed, verdict, recordedAt: recordedAt) }
            let verdict = await validate(signed)
            remember(verdict, for: key)
            return finish(signed, verdict, recordedAt: recordedAt)
        }
    }

    private func remember(_ verdict: ChainVerdict, for key: ChainKey) {
        verdicts.withLock { verdicts in
            if verdicts.count >= Self.rememberedChains { verdicts.removeAll(keepingCapacity: true) }
            verdicts[key] = verdict
        }
    }

    /// Validates the chains of `transactions` not seen before, so later checks of them answer at once.
    public func prepare(_ transactions: [SignedTransaction]) async {
        for signed in transactions where !signed.isLocalTesting {
            guard case .success(let key) = precheck(signed), verdicts.withLock({ $0[key] }) == nil else { continue }
            let verdict = await validate(signed)
            remember(verdict, for: key)
        }
    }

    /// How many distinct chains were validated so far.
    public var chainsValidated: Int { verdicts.withLock { $0.count } }

    private enum Precheck {
        case success(ChainKey)
        case failure(AppleEvidence)
    }

    private func precheck(_ signed: SignedTransaction) -> Precheck {
        guard signed.algorithm == "ES256" else { return .failure(.invalid("alg is \(signed.algorithm), not ES256")) }
        guard signed.certificateChain.count == 3 else {
            return .failure(.invalid("x5c holds \(signed.certificateChain.count) certificates, not leaf, intermediate and root"))
        }
        guard signed.claims.signedDate != nil else { return .failure(.invalid("the payload has no signedDate")) }
        if let bundleID, signed.claims.bundleId != bundleID {
            return .failure(.invalid("signed for the app \(signed.claims.bundleId ?? "(none)"), not \(bundleID)"))
        }
        return .success(ChainKey(leaf: signed.certificateChain[0], intermediate: signed.certificateChain[1]))
    }

    private func finish(_ signed: SignedTransaction, _ verdict: ChainVerdict, recordedAt: Date) -> AppleEvidence {
        switch verdict {
        case .untrusted(let why):
            return .invalid(why)
        case .trusted(let key, let notBefore, let notAfter):
            let signedAt = Date(timeIntervalSince1970: Double(signed.claims.signedDate!) / 1000)
            if signedAt > recordedAt.addingTimeInterval(Self.clockSkew) {
                return .invalid("signedDate \(time(signedAt)) is more than ten minutes after the transaction was recorded (\(time(recordedAt)))")
            }
            if signedAt < notBefore || signedAt > notAfter {
                return .invalid(
                    "the chain was not valid at signedDate \(time(signedAt)) (valid \(time(notBefore)) to \(time(notAfter)))")
            }
            guard signed.signature.count == 64, let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signed.signature) else {
                return .invalid("the signature is not 64 bytes of ES256 (r and s)")
            }
            guard let key = try? P256.Signing.PublicKey(x963Representation: key), key.isValidSignature(signature, for: signed.signingInput) else {
                return .invalid("the signature does not verify with the leaf certificate's key")
            }
            return .apple
        }
    }

    private func time(_ date: Date) -> String {
        RFC3339.format(Timestamp(millisecondsSinceEpoch: Int64((date.timeIntervalSince1970 * 1000).rounded())))
    }

    private func validate(_ signed: SignedTransaction) async -> ChainVerdict {
        let leaf: Certificate, intermediate: Certificate
        do {
            guard let der = Data(base64Encoded: signed.certificateChain[0]) else { return .untrusted("x5c[0] is not base64") }
            leaf = try Certificate(derEncoded: Array(der))
        } catch {
            return .untrusted("x5c[0] is not a certificate")
        }
        do {
            guard let der = Data(base64Encoded: signed.certificateChain[1]) else { return .untrusted("x5c[1] is not base64") }
            intermediate = try Certificate(derEncoded: Array(der))
        } catch {
            return .untrusted("x5c[1] is not a certificate")
        }
        // The root is never taken from x5c[2]: only the trusted roots can end the chain. Time is
        // checked per transaction (at its signedDate), so the chain's validity is not checked here.
        var verifier = Verifier(rootCertificates: CertificateStore(roots.parsed)) {
            RFC5280Policy.withValidityCheckDisabled()
            AppleMarkerPolicy()
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        switch result {
        case .validCertificate(let chain):
            let certificates = Array(chain)
            guard let key = P256.Signing.PublicKey(certificates[0].publicKey) else {
                return .untrusted("the leaf certificate's key is not a P-256 key")
            }
            return .trusted(
                key: key.x963Representation.map { $0 }, notBefore: certificates.map(\.notValidBefore).max()!, notAfter: certificates.map(\.notValidAfter).min()!)
        case .couldNotValidate(let failures):
            if let failure = failures.first {
                return .untrusted("the certificate chain does not validate: \(failure.policyFailureReason)")
            }
            return .untrusted("the certificate chain does not validate: it does not lead to a trusted root")
        }
    }
}

/// A chain of exactly leaf, intermediate and root, the intermediate marked as Apple's WWDR
/// intermediate and the leaf as the App Store's signer.
struct AppleMarkerPolicy: VerifierPolicy {
    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else { return .failsToMeetPolicy(reason: "the chain has \(chain.count) certificates, not 3") }
        guard chain[1].extensions[oid: AppleSignatureVerifier.intermediateMarker] != nil else {
            return .failsToMeetPolicy(reason: "the intermediate certificate lacks Apple's marker extension 1.2.840.113635.100.6.2.1")
        }
        guard chain[0].extensions[oid: AppleSignatureVerifier.leafMarker] != nil else {
            return .failsToMeetPolicy(reason: "the leaf certificate lacks Apple's marker extension 1.2.840.113635.100.6.11.1")
        }
        return .meetsPolicy
    }
}

/// Base64url without padding (RFC 7515), as JWS parts are written.
package enum Base64URL {
    package static func decode(_ text: Substring) -> [UInt8]? {
        var s = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        guard !s.contains("=") else { return nil }
        s += String(repeating: "=", count: (4 - s.utf8.count % 4) % 4)
        return Data(base64Encoded: s).map(Array.init)
    }

    package static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// One field an observation and its own signed transaction both state, differently.
public struct SignedFieldDifference: Sendable, Hashable, CustomStringConvertible {
    /// The event's field (`price`, `storeTransactionId`, ...).
    public var field: String
    /// What the event says, and what the signed payload says, as text.
    public var observed: String
    public var signed: String

    public var description: String { "\(field) is \(observed) in the event, \(signed) in its signed transaction" }
}

extension SignedTransaction.Claims {
    /// The fields the event states and these claims state differently (contract: Apple's
    /// statement wins, the observation is flagged). A field either side leaves out is not
    /// compared. `revoking`: the observation is a revocation, which the claims must state.
    ///
    /// Prices compare as amounts: the event's decimal `"4.99"` against Apple's milliunits
    /// `4990`; an event price finer than a thousandth of a unit can never agree.
    public func differences(
        product: String?, quantity: Int?, storeTransactionID: String?, originalTransaction: String?, terms: PurchaseTerms, revoking: Bool = false
    ) -> [SignedFieldDifference] {
        var found: [SignedFieldDifference] = []
        func compare(_ field: String, _ observed: String?, _ signed: String?) {
            if let observed, let signed, observed != signed { found.append(SignedFieldDifference(field: field, observed: observed, signed: signed)) }
        }
        compare("storeTransactionId", storeTransactionID, transactionId)
        compare("originalTransaction", originalTransaction, originalTransactionId)
        compare("product", product, productId)
        compare("quantity", quantity.map(String.init), self.quantity.map(String.init))
        if let price = terms.price, let signedPrice = self.price {
            if Self.milliunits(price) != signedPrice {
                found.append(SignedFieldDifference(field: "price", observed: price, signed: Self.decimal(milliunits: signedPrice)))
            }
        }
        compare("currency", terms.currency, currency)
        compare("storefront", terms.storefront, storefront)
        // A purchase that names no environment or ownership is production and purchased (the
        // ledger counts it as revenue), so Apple's statement must say so.
        if let signed = self.environment {
            let environment = terms.environment ?? .production
            let named: String =
                switch environment {
                case .production: "Production"
                case .sandbox: "Sandbox"
                case .xcode: "Xcode"
                }
            // Local testing is StoreKit's other unsigned environment: the ledger calls both xcode.
            if named != signed && !(environment == .xcode && signed == "LocalTesting") {
                found.append(SignedFieldDifference(field: "environment", observed: environment.rawValue, signed: signed))
            }
        }
        if let signed = inAppOwnershipType {
            let ownership = terms.ownership ?? .purchased
            let named = ownership == .purchased ? "PURCHASED" : "FAMILY_SHARED"
            if named != signed { found.append(SignedFieldDifference(field: "ownership", observed: ownership.rawValue, signed: signed)) }
        }
        if let offer = terms.offer {
            let code: Int =
                switch offer.type {
                case .introductory: 1
                case .promotional: 2
                case .code: 3
                case .winBack: 4
                }
            if let signed = offerType, signed != code {
                found.append(SignedFieldDifference(field: "offer.type", observed: offer.type.rawValue, signed: "offerType \(signed)"))
            } else if offerType == nil {
                found.append(SignedFieldDifference(field: "offer.type", observed: offer.type.rawValue, signed: "no offer"))
            }
        }
        if revoking && revocationDate == nil {
            found.append(SignedFieldDifference(field: "revocation", observed: "revoked", signed: "no revocationDate"))
        }
        return found
    }

    /// `"4.99"` as milliunits (4990): digits, optionally a point and digits; nil for any other
    /// text, for more than three decimals that are not zeros, and past Int64.
    static func milliunits(_ decimal: String) -> Int64? {
        let parts = decimal.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        let digits = { (text: Substring) in !text.isEmpty && text.utf8.allSatisfy { $0 >= 48 && $0 <= 57 } }
        guard digits(parts[0]), parts.count == 1 || digits(parts[1]), let whole = Int64(parts[0]) else { return nil }
        var fraction = parts.count == 2 ? String(parts[1]) : ""
        while fraction.count > 3, fraction.hasSuffix("0") { fraction.removeLast() }
        guard fraction.count <= 3, let thousandths = Int64(fraction + String(repeating: "0", count: 3 - fraction.count)) else { return nil }
        let (scaled, overflow) = whole.multipliedReportingOverflow(by: 1000)
        let (sum, overflowed) = scaled.addingReportingOverflow(thousandths)
        return overflow || overflowed ? nil : sum
    }

    /// 4990 milliunits as `"4.99"`: the shortest decimal that says it.
    static func decimal(milliunits: Int64) -> String {
        let sign = milliunits < 0 ? "-" : ""
        let magnitude = milliunits.magnitude
        var fraction = String(magnitude % 1000)
        fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
        while fraction.hasSuffix("0") { fraction.removeLast() }
        return sign + String(magnitude / 1000) + (fraction.isEmpty ? "" : "." + fraction)
    }
}
