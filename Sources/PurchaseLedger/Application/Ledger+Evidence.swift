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
        let (rows, chains) = try read { db in (try EvidenceRows.stored(db), try SigningChains.read(db)) }
        var judged: [[UInt8]: AppleEvidence] = [:]
        for (digest, chain) in chains {
            switch chain {
            case .chain(let leaf, let intermediate): judged[digest] = await verifier.judge(leaf: leaf, intermediate: intermediate)
            case .unreadable(let why): judged[digest] = .invalid(why)
            }
        }
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
    /// `verifier`'s roots: a fleet store's, or any other holder of headers.
    package static func judged(headers: [([UInt8], String)], verifier: AppleSignatureVerifier) async -> AppleChains {
        var trusted = Set<[UInt8]>()
        for (digest, header) in headers {
            guard SignedParts.digest(ofHeader: header[...]) == digest, let parsed = try? SignedTransaction(jws: header + ".e30."),
                parsed.certificateChain.count >= 2
            else { continue }
            if await verifier.judge(leaf: parsed.certificateChain[0], intermediate: parsed.certificateChain[1]) == .apple { trusted.insert(digest) }
        }
        return AppleChains(trusted: trusted, chains: headers.count)
    }

    /// The chains of `ledger`'s signed transactions judged with `verifier`'s roots.
    public static func judged(in ledger: Ledger, verifier: AppleSignatureVerifier = AppleSignatureVerifier()) async throws -> AppleChains {
        let chains = try ledger.read { db in try SigningChains.read(db) }
        var trusted = Set<[UInt8]>()
        for (digest, chain) in chains {
            if case .chain(let leaf, let intermediate) = chain, await verifier.judge(leaf: leaf, intermediate: intermediate) == .apple {
                trusted.insert(digest)
            }
        }
        return AppleChains(trusted: trusted, chains: chains.count)
    }

    /// How many of ``chains`` reach a trusted root.
    public var trustedCount: Int { trusted.count }
}

/// The chains of `signing_headers`, by digest: each header's leaf and intermediate.
enum SigningChains {
    enum Chain: Sendable {
        case chain(leaf: String, intermediate: String)
        case unreadable(String)
    }

    static func read(_ db: Database) throws -> [[UInt8]: Chain] {
        var chains: [[UInt8]: Chain] = [:]
        for (digest, header) in try SigningHeaders.read(db).byDigest {
            // The header alone, with an empty payload and signature: the parser checks its form.
            do {
                let parsed = try SignedTransaction(jws: header + ".e30.")
                chains[digest] =
                    parsed.certificateChain.count >= 2
                    ? .chain(leaf: parsed.certificateChain[0], intermediate: parsed.certificateChain[1]) : .unreadable("its x5c holds no chain")
            } catch {
                chains[digest] = .unreadable("its header does not parse: \(error.message)")
            }
        }
        return chains
    }
}
