import Foundation
import GRDB

extension Ledger {
    /// The redactor of this ledger: its pseudonyms are stable across this ledger's exports and
    /// extracts, and differ from every other ledger's. Its secret (`ledger_info.redaction_secret`,
    /// 32 random bytes) is made with the ledger, or on the first writable open of an older one;
    /// a read-only ledger that has none gets a random secret for this instance only.
    public func redactor() throws -> Redactor {
        let stored = try read { db in try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'redaction_secret'") }
        return Redactor(secret: stored.map { [UInt8]($0) } ?? instanceRedactionSecret)
    }
}
