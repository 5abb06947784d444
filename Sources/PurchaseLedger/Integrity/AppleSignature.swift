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
    public struct Claims: Sendable, Hashable {
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

        /// The claims of a decoded payload's JSON (a `JWSTransactionDecodedPayload`). Throws
        /// ``FormError`` for text that is not a JSON object, or a claim of the wrong type.
        public init(json: [UInt8]) throws(FormError) {
            self = try SignedTransaction.claims(json: json)
        }

        package init(
            transactionId: String?, originalTransactionId: String?, bundleId: String?, productId: String?, purchaseDate: Int64?, quantity: Int?,
            type: String?, inAppOwnershipType: String?, environment: String?, storefront: String?, price: Int64?, currency: String?,
            offerType: Int?, transactionReason: String?, revocationDate: Int64?, revocationReason: Int?, signedDate: Int64?
        ) {
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.bundleId = bundleId
            self.productId = productId
            self.purchaseDate = purchaseDate
            self.quantity = quantity
            self.type = type
            self.inAppOwnershipType = inAppOwnershipType
            self.environment = environment
            self.storefront = storefront
            self.price = price
            self.currency = currency
            self.offerType = offerType
            self.transactionReason = transactionReason
            self.revocationDate = revocationDate
            self.revocationReason = revocationReason
            self.signedDate = signedDate
        }
    }

    /// Why a string is not a signed transaction at all.
    public struct FormError: Error, Sendable, Hashable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Parses `jws`. Throws ``FormError`` when it is not a compact JWS (three parts of canonical
    /// base64url, RFC 7515) with a JSON header naming `alg` and a JSON object for payload.
    public init(jws: String) throws(FormError) {
        let parts = try Self.parts(ofJWS: jws)
        let (alg, chain) = try Self.header(parts.header)
        let claims = try Self.claims(payloadSegment: parts.payload)
        guard let signature = Base64URL.decode(parts.signature) else { throw FormError(message: "its signature is not base64url") }
        self.jws = jws
        algorithm = alg
        certificateChain = chain
        self.claims = claims
        var text = jws
        let signed = parts.header.utf8.count + 1 + parts.payload.utf8.count
        signingInput = text.withUTF8 { Array($0.prefix(signed)) }
        self.signature = signature
    }

    /// The header's `alg` and `x5c`. The last header read is remembered: the transactions of an
    /// app come with one chain, and its header (about 4 KB of certificates) was decoded and
    /// parsed again for each.
    private static func header(_ text: Substring) throws(FormError) -> (alg: String, chain: [String]) {
        var text = text
        return try lastHeader.value(for: text.withUTF8 { Array($0) }) { () throws(FormError) in try parseHeader(text) }
    }

    private static func parseHeader(_ text: Substring) throws(FormError) -> (alg: String, chain: [String]) {
        guard let header = Base64URL.decode(text) else { throw FormError(message: "its header is not base64url") }
        let tape: JSONTape
        do { tape = try JSONTape(header) } catch { throw FormError(message: "its header is not JSON (\(error.message), byte \(error.offset))") }
        guard tape.tokens.first?.kind == .object else { throw FormError(message: "its header is not a JSON object") }
        guard let alg = try Self.string("alg", tape, in: "header") else { throw FormError(message: "its header has no alg") }
        var chain: [String] = []
        if let x5c = tape.member(0, "x5c").value {
            guard tape.tokens[x5c].kind == .array else { throw FormError(message: "its header's x5c is not an array") }
            for item in tape.items(x5c) {
                guard tape.tokens[item].kind == .string else { throw FormError(message: "its header's x5c holds something other than strings") }
                chain.append(tape.string(item))
            }
        }
        return (alg, chain)
    }

    private static let lastHeader = LastResult<(alg: String, chain: [String])>()

    /// The three dot-separated parts of `jws`, unchecked.
    static func parts(ofJWS jws: String) throws(FormError) -> (header: Substring, payload: Substring, signature: Substring) {
        // Over the UTF-8 bytes: splitting by Characters cost an import of signed purchases a
        // quarter of its time (a JWS is about 5,000 of them).
        var text = jws
        let dots: [Int] = text.withUTF8 { bytes in
            var found: [Int] = []
            for i in bytes.indices where bytes[i] == UInt8(ascii: ".") { found.append(i) }
            return found
        }
        guard dots.count == 2 else { throw FormError(message: "a signed transaction is three base64url parts joined by dots; this has \(dots.count + 1)") }
        let utf8 = text.utf8
        let first = utf8.index(utf8.startIndex, offsetBy: dots[0]), second = utf8.index(utf8.startIndex, offsetBy: dots[1])
        return (text[..<first], text[utf8.index(after: first)..<second], text[utf8.index(after: second)...])
    }

    /// The claims of the payload part alone: what the rules compare with the event (the header's
    /// certificates are the verifier's business). Read with the ledger's own JSON parser.
    static func claims(payloadSegment: Substring) throws(FormError) -> Claims {
        // The same event's payload is read by the input check, the rules and the evidence: the
        // last one is remembered.
        var segment = payloadSegment
        return try lastClaims.value(for: segment.withUTF8 { Array($0) }) { () throws(FormError) in
            guard let payload = Base64URL.decode(payloadSegment) else { throw FormError(message: "its payload is not base64url") }
            return try Claims(json: payload)
        }
    }

    private static let lastClaims = LastResult<Claims>()

    fileprivate static func claims(json payload: [UInt8]) throws(FormError) -> Claims {
        let tape: JSONTape
        do { tape = try JSONTape(payload) } catch { throw FormError(message: "its payload is not JSON (\(error.message), byte \(error.offset))") }
        guard tape.tokens.first?.kind == .object else { throw FormError(message: "its payload is not a JSON object") }
        func text(_ key: String) throws(FormError) -> String? { try string(key, tape, in: "payload") }
        func integer(_ key: String) throws(FormError) -> Int64? {
            let (found, repeated) = tape.member(0, key)
            guard let i = found, tape.tokens[i].kind != .null else { return nil }
            guard !repeated else { throw FormError(message: "its payload names \(key) twice") }
            guard tape.tokens[i].kind == .number, let value = tape.tokens[i].integer else {
                throw FormError(message: "its payload's \(key) is not a whole number")
            }
            return value
        }
        func small(_ key: String) throws(FormError) -> Int? {
            guard let value = try integer(key) else { return nil }
            guard let small = Int(exactly: value), (-1_000_000...1_000_000).contains(small) else {
                throw FormError(message: "its payload's \(key) is out of range")
            }
            return small
        }
        return Claims(
            transactionId: try text("transactionId"), originalTransactionId: try text("originalTransactionId"), bundleId: try text("bundleId"),
            productId: try text("productId"), purchaseDate: try integer("purchaseDate"), quantity: try small("quantity"), type: try text("type"),
            inAppOwnershipType: try text("inAppOwnershipType"), environment: try text("environment"), storefront: try text("storefront"),
            price: try integer("price"), currency: try text("currency"), offerType: try small("offerType"),
            transactionReason: try text("transactionReason"), revocationDate: try integer("revocationDate"),
            revocationReason: try small("revocationReason"), signedDate: try integer("signedDate"))
    }

    private static func string(_ key: String, _ tape: JSONTape, in part: String) throws(FormError) -> String? {
        let (found, repeated) = tape.member(0, key)
        guard let i = found, tape.tokens[i].kind != .null else { return nil }
        guard !repeated else { throw FormError(message: "its \(part) names \(key) twice") }
        guard tape.tokens[i].kind == .string else { throw FormError(message: "its \(part)'s \(key) is not a string") }
        return tape.string(i)
    }

    /// What is wrong with `jws` as a recorded signed transaction, naming the field; nil when it
    /// is one. What an erased one reads as (`[erased <hex>]`) is no signed transaction: only
    /// `forget` makes one, and an import of an erased export leaves it out.
    static func problem(jws: String) -> String? {
        do throws(FormError) {
            _ = try SignedTransaction(jws: jws)
            return nil
        } catch {
            return "field `signedTransaction` is not a signed transaction: \(error.message)"
        }
    }

    /// Whether `text` is what an erased value reads as.
    static func isErasedMarker(_ text: String) -> Bool {
        text.hasPrefix(PersonalValues.erasedPrefix) && text.hasSuffix("]") && !text.contains(".")
    }

    /// Whether `text` is what an erased or redacted statement reads as.
    static func isMarker(_ text: String) -> Bool {
        (text.hasPrefix(PersonalValues.erasedPrefix) || text.hasPrefix("[redacted ")) && text.hasSuffix("]") && !text.contains(".")
    }

    /// The part of `jws` that is personal (payload and signature, with the dot between them) and
    /// the header (the certificates, stored once per chain). An erased marker is all body.
    package static func split(jws: String) -> (header: Substring?, body: Substring) {
        var text = jws
        guard let offset = text.withUTF8({ $0.firstIndex(of: UInt8(ascii: ".")) }) else { return (nil, text[...]) }
        let dot = text.utf8.index(text.utf8.startIndex, offsetBy: offset)
        return (text[..<dot], text[text.utf8.index(after: dot)...])
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

    struct ChainKey: Hashable, Sendable {
        var leaf: String
        var intermediate: String
    }

    /// A chain's verdict under ``roots``: whether it reaches one, through Apple's intermediate,
    /// or why not. Time is the transaction's business (``ChainFacts``).
    enum ChainVerdict: Sendable, Hashable {
        case trusted
        case untrusted(String)
    }

    /// What a chain says whatever the roots: the leaf's key (X9.63 bytes) and the span both
    /// certificates are valid in; or why it cannot sign a transaction.
    enum ChainFacts: Sendable {
        case usable(key: [UInt8], notBefore: Date, notAfter: Date)
        case unusable(String)
    }

    /// The part of the evidence that needs no trust root, as a ledger stores it: everything
    /// checked but whether the chain reaches a trusted root.
    package enum Check: Sendable, Hashable {
        /// The form, the time, the markers and the ES256 signature hold: `apple` once the chain
        /// (leaf and intermediate) reaches a trusted root.
        case signed(leaf: String, intermediate: String)
        /// An Xcode or local-testing transaction, or one that is `invalid` whatever the roots.
        case final(AppleEvidence)
    }

    /// The evidence `signed` gives, recorded at `recordedAt` (a `signedDate` after it is refused).
    public func evidence(of signed: SignedTransaction, recordedAt: Date) async -> AppleEvidence {
        switch check(signed, recordedAt: recordedAt) {
        case .final(let evidence): return evidence
        case .signed(let leaf, let intermediate): return await judge(leaf: leaf, intermediate: intermediate)
        }
    }

    /// The root-independent part of ``evidence(of:recordedAt:)``, synchronous: form, bundle,
    /// time, markers and the ES256 signature. Each chain's certificates are parsed once.
    package func check(_ signed: SignedTransaction, recordedAt: Date) -> Check {
        if signed.isLocalTesting { return .final(.xcode) }
        guard signed.algorithm == "ES256" else { return .final(.invalid("alg is \(signed.algorithm), not ES256")) }
        guard signed.certificateChain.count == 3 else {
            return .final(.invalid("x5c holds \(signed.certificateChain.count) certificates, not leaf, intermediate and root"))
        }
        guard let signedDate = signed.claims.signedDate else { return .final(.invalid("the payload has no signedDate")) }
        if let bundleID, signed.claims.bundleId != bundleID {
            return .final(.invalid("signed for the app \(signed.claims.bundleId ?? "(none)"), not \(bundleID)"))
        }
        let key = ChainKey(leaf: signed.certificateChain[0], intermediate: signed.certificateChain[1])
        let known = facts.withLock { $0[key] }
        let chain = known ?? Self.facts(of: key)
        if known == nil {
            facts.withLock { facts in
                if facts.count >= Self.rememberedChains { facts.removeAll(keepingCapacity: true) }
                facts[key] = chain
            }
        }
        switch chain {
        case .unusable(let why):
            return .final(.invalid(why))
        case .usable(let leafKey, let notBefore, let notAfter):
            let signedAt = Date(timeIntervalSince1970: Double(signedDate) / 1000)
            if signedAt > recordedAt.addingTimeInterval(Self.clockSkew) {
                return .final(.invalid("signedDate \(time(signedAt)) is more than ten minutes after the transaction was recorded (\(time(recordedAt)))"))
            }
            if signedAt < notBefore || signedAt > notAfter {
                return .final(.invalid("the chain was not valid at signedDate \(time(signedAt)) (valid \(time(notBefore)) to \(time(notAfter)))"))
            }
            guard signed.signature.count == 64, let signature = try? P256.Signing.ECDSASignature(rawRepresentation: signed.signature) else {
                return .final(.invalid("the signature is not 64 bytes of ES256 (r and s)"))
            }
            guard let publicKey = try? P256.Signing.PublicKey(x963Representation: leafKey), publicKey.isValidSignature(signature, for: signed.signingInput)
            else {
                return .final(.invalid("the signature does not verify with the leaf certificate's key"))
            }
            return .signed(leaf: key.leaf, intermediate: key.intermediate)
        }
    }

    /// Whether the chain of leaf and intermediate (standard base64 DER, as `x5c` has them)
    /// reaches one of ``roots``: `apple` or `invalid` with why. Each chain is validated once.
    package func judge(leaf: String, intermediate: String) async -> AppleEvidence {
        let key = ChainKey(leaf: leaf, intermediate: intermediate)
        let verdict: ChainVerdict
        if let known = verdicts.withLock({ $0[key] }) {
            verdict = known
        } else {
            verdict = await validate(key)
            verdicts.withLock { verdicts in
                if verdicts.count >= Self.rememberedChains { verdicts.removeAll(keepingCapacity: true) }
                verdicts[key] = verdict
            }
        }
        switch verdict {
        case .trusted: return .apple
        case .untrusted(let why): return .invalid(why)
        }
    }

    /// Validates the chains of `transactions` not seen before, so later checks of them answer at once.
    public func prepare(_ transactions: [SignedTransaction]) async {
        for signed in transactions where !signed.isLocalTesting && signed.certificateChain.count == 3 {
            _ = await judge(leaf: signed.certificateChain[0], intermediate: signed.certificateChain[1])
        }
    }

    /// How many distinct chains were validated so far.
    public var chainsValidated: Int { verdicts.withLock { $0.count } }

    private let facts = Locked<[ChainKey: ChainFacts]>([:])

    private static func certificate(_ base64: String, _ name: String) -> Result<Certificate, ChainError> {
        guard let der = Data(base64Encoded: base64) else { return .failure(ChainError(message: "\(name) is not base64")) }
        guard let certificate = try? Certificate(derEncoded: Array(der)) else { return .failure(ChainError(message: "\(name) is not a certificate")) }
        return .success(certificate)
    }

    struct ChainError: Error {
        var message: String
    }

    /// The leaf's key and the span leaf and intermediate are both valid in; their markers.
    private static func facts(of key: ChainKey) -> ChainFacts {
        let leaf: Certificate, intermediate: Certificate
        switch (certificate(key.leaf, "x5c[0]"), certificate(key.intermediate, "x5c[1]")) {
        case (.failure(let e), _), (_, .failure(let e)): return .unusable(e.message)
        case (.success(let l), .success(let i)): (leaf, intermediate) = (l, i)
        }
        guard intermediate.extensions[oid: intermediateMarker] != nil else {
            return .unusable("the intermediate certificate lacks Apple's marker \(intermediateMarker)")
        }
        guard leaf.extensions[oid: leafMarker] != nil else { return .unusable("the leaf certificate lacks Apple's marker \(leafMarker)") }
        guard let publicKey = P256.Signing.PublicKey(leaf.publicKey) else { return .unusable("the leaf certificate's key is not a P-256 key") }
        return .usable(
            key: Array(publicKey.x963Representation), notBefore: max(leaf.notValidBefore, intermediate.notValidBefore),
            notAfter: min(leaf.notValidAfter, intermediate.notValidAfter))
    }

    private func time(_ date: Date) -> String {
        RFC3339.format(Timestamp(millisecondsSinceEpoch: Int64((date.timeIntervalSince1970 * 1000).rounded())))
    }

    private func validate(_ key: ChainKey) async -> ChainVerdict {
        let leaf: Certificate, intermediate: Certificate
        switch (Self.certificate(key.leaf, "x5c[0]"), Self.certificate(key.intermediate, "x5c[1]")) {
        case (.failure(let e), _), (_, .failure(let e)): return .untrusted(e.message)
        case (.success(let l), .success(let i)): (leaf, intermediate) = (l, i)
        }
        // The root is never taken from x5c[2]: only the trusted roots can end the chain. Time is
        // checked per transaction (at its signedDate), so the chain's validity is not checked here.
        var verifier = Verifier(rootCertificates: CertificateStore(roots.parsed)) {
            RFC5280Policy.withValidityCheckDisabled()
            AppleMarkerPolicy()
        }
        let result = await verifier.validate(leaf: leaf, intermediates: CertificateStore([intermediate]))
        switch result {
        case .validCertificate:
            return .trusted
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

/// Base64url without padding (RFC 7515), as JWS parts are written: strict (no `=`, no other
/// character, unused bits zero), so that decoding and encoding again gives back the same text.
package enum Base64URL {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
    private static let values: [UInt8] = {
        var table = [UInt8](repeating: 255, count: 256)
        for (i, c) in alphabet.enumerated() { table[Int(c)] = UInt8(i) }
        return table
    }()

    package static func decode(_ text: Substring) -> [UInt8]? {
        var text = text
        return text.withUTF8 { decode(UnsafeRawBufferPointer($0)) }
    }

    package static func decode(_ input: UnsafeRawBufferPointer) -> [UInt8]? {
        let count = input.count
        guard count % 4 != 1 else { return nil }
        return values.withUnsafeBufferPointer { table -> [UInt8]? in
            var failed = false
            let out = [UInt8](unsafeUninitializedCapacity: count * 3 / 4 + 1) { buffer, written in
                var accumulator: UInt32 = 0
                var bits: UInt32 = 0
                var n = 0
                for byte in input {
                    let v = table[Int(byte)]
                    if v == 255 {
                        failed = true
                        break
                    }
                    accumulator = accumulator << 6 | UInt32(v)
                    bits += 6
                    if bits >= 8 {
                        bits -= 8
                        buffer[n] = UInt8(truncatingIfNeeded: accumulator >> bits)
                        n += 1
                    }
                }
                // The bits left over must be zero: otherwise two texts would decode alike.
                if accumulator & ((1 << bits) - 1) != 0 { failed = true }
                written = n
            }
            return failed ? nil : out
        }
    }

    package static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8]()
        out.reserveCapacity((bytes.count * 4 + 2) / 3)
        var i = 0
        while i + 3 <= bytes.count {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2])
            out.append(alphabet[Int(n >> 18 & 63)]); out.append(alphabet[Int(n >> 12 & 63)])
            out.append(alphabet[Int(n >> 6 & 63)]); out.append(alphabet[Int(n & 63)])
            i += 3
        }
        if bytes.count - i == 1 {
            let n = UInt32(bytes[i]) << 16
            out.append(alphabet[Int(n >> 18 & 63)]); out.append(alphabet[Int(n >> 12 & 63)])
        } else if bytes.count - i == 2 {
            let n = UInt32(bytes[i]) << 16 | UInt32(bytes[i + 1]) << 8
            out.append(alphabet[Int(n >> 18 & 63)]); out.append(alphabet[Int(n >> 12 & 63)]); out.append(alphabet[Int(n >> 6 & 63)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

extension Timestamp {
    /// The same instant as a `Date` (what the verifier's clock checks take).
    package var date: Date { Date(timeIntervalSince1970: Double(nanosecondsSinceEpoch) / 1e9) }
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
            // A ledger value erased with another user (a restore's original) is not compared.
            guard let observed, !SignedTransaction.isErasedMarker(observed), let signed, observed != signed else { return }
            found.append(SignedFieldDifference(field: field, observed: observed, signed: signed))
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
        // A refund's statement is not a purchase's: a purchase or restore carrying one is flagged.
        if !revoking, let revoked = revocationDate {
            found.append(SignedFieldDifference(field: "revocation", observed: "not revoked", signed: "revocationDate \(revoked)"))
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
