import Foundation
import PurchaseLedger

/// The heads of a fleet store's ledgers as one audit saw them, kept outside the store
/// (`verify postgres://... --witness FILE`): the next audit checks that no ledger it names has
/// gone, gone back, or had the history it saw rewritten. A store alone cannot show that: whoever
/// can write it whole can put back an earlier head a ledger signed, with its events and rows of
/// then, or delete a ledger.
public struct FleetWitness: Sendable, Hashable, Codable {
    /// One ledger's head: its id, last seq and the hash chain's link there (hex).
    public struct Head: Sendable, Hashable, Codable {
        public var ledger: String
        public var seq: Int64
        public var link: String
    }

    /// When the audit that saw them ran (RFC 3339).
    public var at: String
    /// Which store they are of: a digest of the store's own secret (``FleetAudit/store``), so a
    /// witness of another store is refused rather than reporting every ledger deleted.
    public var store: String?
    public var heads: [Head]

    public init(at: String, store: String?, heads: [Head]) {
        self.at = at
        self.store = store
        self.heads = heads
    }

    /// Reads a witness file; throws ``LedgerError/Code/malformedInput`` naming the file when it is not one.
    public static func read(_ path: String) throws -> FleetWitness {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        do {
            return try JSONDecoder().decode(FleetWitness.self, from: data)
        } catch {
            throw LedgerError.make(.malformedInput, "\(path) is not a fleet witness (a file `verify postgres://... --witness` wrote): \(error)")
        }
    }

    /// Writes it to `path` whole or not at all: Foundation's atomic write (a temporary file
    /// beside it, renamed over it), so a crash leaves the old witness or the new, never none.
    public func write(to path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        var data = try encoder.encode(self)
        data.append(0x0A)
        try data.write(to: URL(fileURLWithPath: path), options: [.atomic])
    }
}
