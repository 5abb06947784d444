import Crypto
package import Foundation
package import PurchaseLedger
import SwiftASN1
import X509

/// A root -> intermediate -> leaf chain made at test time, shaped like Apple's App Store chain
/// (P-256 keys, ECDSA-SHA256, the two marker extensions), and the JWS it signs: what the tests
/// and the benchmark sign transactions with. No Apple key, no network.
///
/// ```swift
/// let chain = try SigningChain()
/// let jws = try chain.sign(["transactionId": "1000", "signedDate": 1_700_000_000_000])
/// let roots = chain.roots          // trust this root instead of Apple's
/// ```
package struct SigningChain: Sendable {
    /// The certificates, DER: leaf, intermediate, root.
    package let leaf: [UInt8], intermediate: [UInt8], root: [UInt8]
    /// The leaf's private key, raw (swift-crypto's key type is not Sendable here).
    private let leafKey: [UInt8]

    /// The root, as trust roots a verifier can use.
    package var roots: AppleTrustRoots {
        get throws { try AppleTrustRoots(files: [("test root", root)]) }
    }

    /// The root as a PEM file's text.
    package var rootPEM: String {
        "-----BEGIN CERTIFICATE-----\n"
            + Data(root).base64EncodedString(options: [.lineLength64Characters, .endLineWithLineFeed]) + "\n-----END CERTIFICATE-----\n"
    }

    /// `markers`: whether the intermediate and the leaf carry Apple's marker extensions.
    /// `leafValid`: the leaf's validity (the others are valid from 2015 to 2045).
    /// `intermediateIsCA`: false makes the intermediate an end entity (basic constraints).
    /// `leafSignedByRoot`: the leaf is issued by the root itself (a two-certificate path), while
    /// `x5c` still lists the intermediate.
    package init(
        name: String = "Test", intermediateMarker: Bool = true, leafMarker: Bool = true, intermediateIsCA: Bool = true,
        leafSignedByRoot: Bool = false,
        leafValid: (from: Date, to: Date) = (Date(timeIntervalSince1970: 1_500_000_000), Date(timeIntervalSince1970: 2_200_000_000))
    ) throws {
        let rootKey = P256.Signing.PrivateKey(), intermediateKey = P256.Signing.PrivateKey(), leafKey = P256.Signing.PrivateKey()
        let rootName = try DistinguishedName { CommonName("\(name) Root CA - G3") }
        let intermediateName = try DistinguishedName { CommonName("\(name) Worldwide Developer Relations CA - G6") }
        let leafName = try DistinguishedName { CommonName("\(name) Prod ECC Mac App Store and iTunes Store Receipt Signing") }
        let (from, to) = (Date(timeIntervalSince1970: 1_420_070_400), Date(timeIntervalSince1970: 2_366_755_200))
        let marker = { (oid: ASN1ObjectIdentifier) in Certificate.Extension(oid: oid, critical: false, value: [0x05, 0x00]) }
        let root = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: from, notValidAfter: to,
            issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            }, issuerPrivateKey: .init(rootKey))
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: from, notValidAfter: to,
            issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                if intermediateIsCA {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                } else {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                }
                if intermediateMarker { marker([1, 2, 840, 113635, 100, 6, 2, 1]) }
            }, issuerPrivateKey: .init(rootKey))
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: leafValid.from, notValidAfter: leafValid.to,
            issuer: leafSignedByRoot ? rootName : intermediateName, subject: leafName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                if leafMarker { marker([1, 2, 840, 113635, 100, 6, 11, 1]) }
            }, issuerPrivateKey: .init(leafSignedByRoot ? rootKey : intermediateKey))
        func der(_ certificate: Certificate) throws -> [UInt8] {
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return serializer.serializedBytes
        }
        self.leaf = try der(leaf)
        self.intermediate = try der(intermediate)
        self.root = try der(root)
        self.leafKey = Array(leafKey.rawRepresentation)
    }

    /// A compact JWS of `payload` (a JSON object's members), signed by the leaf: header
    /// `{"alg": alg, "x5c": [leaf, intermediate, root]}` (or `x5c` as given).
    package func sign(_ payload: [String: any Sendable], alg: String = "ES256", x5c: [String]? = nil) throws -> String {
        let chain = x5c ?? [leaf, intermediate, root].map { Data($0).base64EncodedString() }
        let header = try JSONSerialization.data(withJSONObject: ["alg": alg, "x5c": chain], options: [.sortedKeys])
        let body = try JSONSerialization.data(withJSONObject: payload, options: [.sortedKeys])
        let input = Base64URL.encode(Array(header)) + "." + Base64URL.encode(Array(body))
        let signature = try P256.Signing.PrivateKey(rawRepresentation: leafKey).signature(for: Array(input.utf8))
        return input + "." + Base64URL.encode(Array(signature.rawRepresentation))
    }

    /// A StoreKit-shaped transaction payload: the fields a ledger compares, signed at `signedDate`
    /// (milliseconds since 1970).
    package static func payload(
        transaction: String, original: String? = nil, product: String, price: Int64, currency: String, storefront: String = "USA",
        environment: String = "Production", ownership: String = "PURCHASED", quantity: Int = 1, signedDate: Int64,
        revocationDate: Int64? = nil, offerType: Int? = nil
    ) -> [String: any Sendable] {
        var p: [String: any Sendable] = [
            "transactionId": transaction, "originalTransactionId": original ?? transaction, "bundleId": "com.example.app", "productId": product,
            "purchaseDate": signedDate - 1000, "quantity": quantity, "type": "Non-Consumable", "inAppOwnershipType": ownership,
            "environment": environment, "storefront": storefront, "price": price, "currency": currency, "signedDate": signedDate,
            "transactionReason": "PURCHASE",
        ]
        if let revocationDate {
            p["revocationDate"] = revocationDate
            p["revocationReason"] = 0
        }
        if let offerType { p["offerType"] = offerType }
        return p
    }
}
