import Foundation
import GRDB

/// What Apple's signature says of each transaction (docs/rules.md, "Apple's signature").
public struct TransactionEvidence: Sendable, Hashable {
    /// The transaction.
    public var transaction: String
    /// The event whose signed transaction it judges (its latest applied one).
    public var seq: Int64
    /// `apple`, `xcode` or `invalid` with why (a transaction without one is ``AppleEvidence/unsigned``).
    public var evidence: AppleEvidence
}

extension Ledger {
    /// The evidence of every transaction that carries a signed transaction, by transaction id:
    /// the root-independent check stored with the ledger (signature, time, markers, fields),
    /// and whether its chain reaches one of `verifier`'s roots, judged now (each distinct chain
    /// once). A transaction that is not in it is `unsigned`.
    ///
    /// ```swift
    /// let evidence = try await ledger.appleEvidence(verifier: AppleSignatureVerifier(roots: .apple))
    /// let vouched = evidence.values.filter { $0.evidence == .apple }.count
    /// ```
    public func appleEvidence(verifier: AppleSignatureVerifier = AppleSignatureVerifier()) async throws -> [String: TransactionEvidence] {
        let (rows, headers) = try read { db in (try EvidenceRows.stored(db), try SigningHeaders.read(db).byDigest) }
        let judged = await SigningChains.judge(headers, verifier: verifier)
        var evidence: [String: TransactionEvidence] = [:]
        for (t, row) in rows {
            let level: AppleEvidence =
                switch row.level {
                case "signed": row.header.flatMap { judged[$0] } ?? .invalid("its chain's header is not in signing_headers")
                case "xcode": .xcode
                default: .invalid(row.reason ?? "invalid")
                }
            evidence[t] = TransactionEvidence(transaction: t, seq: row.seq, evidence: level)
        }
        return evidence
    }
}

/// The chains of a ledger judged Apple's by a verifier's roots: what a revenue report needs to
/// count the money Apple's signature vouches for (``Ledger/revenue(from:to:groupBy:byStorefront:allEnvironments:apple:onlyApple:)``).
///
/// ```swift
/// let chains = try await AppleChains.judged(in: ledger)
/// let vouched = try ledger.revenue(apple: chains, onlyApple: true)
/// ```
public struct AppleChains: Sendable {
    /// The digests (`signing_headers`) of the chains that reach a trusted root.
    package var trusted: Set<[UInt8]>
    /// How many distinct chains the ledger's signed transactions came with (0: it holds none).
    public var chains: Int

    package init(trusted: Set<[UInt8]>, chains: Int) {
        self.trusted = trusted
        self.chains = chains
    }

    /// The chains of `headers` (`signing_headers` rows: digest, header text) judged with
    /// `verifier`'s roots: a fleet store's, or any other holder of headers. A row whose text
    /// does not hash to its digest is no chain.
    package static func judged(headers: [([UInt8], String)], verifier: AppleSignatureVerifier) async -> AppleChains {
        let sound = headers.filter { SignedParts.digest(ofHeader: $0.1[...]) == $0.0 }
        let judged = await SigningChains.judge(Dictionary(sound, uniquingKeysWith: { first, _ in first }), verifier: verifier)
        return AppleChains(trusted: Set(judged.filter { $0.value == .apple }.keys), chains: headers.count)
    }

    /// The chains of `ledger`'s signed transactions judged with `verifier`'s roots.
    public static func judged(in ledger: Ledger, verifier: AppleSignatureVerifier = AppleSignatureVerifier()) async throws -> AppleChains {
        let headers = try ledger.read { db in try SigningHeaders.read(db).byDigest }
        let judged = await SigningChains.judge(headers, verifier: verifier)
        return AppleChains(trusted: Set(judged.filter { $0.value == .apple }.keys), chains: headers.count)
    }

    /// How many of ``chains`` reach a trusted root.
    public var trustedCount: Int { trusted.count }
}

/// The chains of signing headers, judged: each header's leaf and intermediate, through the
/// verifier's roots (once per distinct chain).
enum SigningChains {
    /// What `verifier` says of each header's chain, by digest: `apple`, or `invalid` with why.
    static func judge(_ headers: [[UInt8]: String], verifier: AppleSignatureVerifier) async -> [[UInt8]: AppleEvidence] {
        var judged: [[UInt8]: AppleEvidence] = [:]
        for (digest, header) in headers {
            // The header alone, with an empty payload and signature: the parser checks its form.
            do {
                let parsed = try SignedTransaction(jws: header + ".e30.")
                judged[digest] =
                    parsed.certificateChain.count >= 2
                    ? await verifier.judge(leaf: parsed.certificateChain[0], intermediate: parsed.certificateChain[1])
                    : .invalid("its x5c holds no chain")
            } catch {
                judged[digest] = .invalid("its header does not parse: \(error.message)")
            }
        }
        return judged
    }
}
