import Foundation
import PurchaseLedger
import Testing

/// An export imported again into the ledger it came from: the rules refuse it somewhere past its
/// start, and the error says what happened instead of only the rule.
@Suite struct ReimportTests {
    @Test func anExportImportedIntoItsOwnLedgerSaysSo() throws {
        let dir = try TemporaryDirectory()
        let input = dir.path("events.jsonl")
        try """
        {"type":"productRegistered","at":"2024-03-01T09:00:00Z","product":"book","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":true,"title":"Book"}
        {"type":"paymentQueued","at":"2024-03-01T09:01:00Z","transaction":"t1","product":"book","user":"u1"}
        {"type":"transactionPurchased","at":"2024-03-01T09:02:00Z","transaction":"t1","downloads":[{"download":"t1-d1","content":"book","contentVersion":"1.0","contentLength":10}]}
        {"type":"transactionFinished","at":"2024-03-01T09:03:00Z","transaction":"t1","discardContent":true}

        """.write(toFile: input, atomically: true, encoding: .utf8)
        let ledger = try Ledger(path: dir.path("a.ledger"))
        let first = try ledger.importJSONLines(from: try JSONLinesReader(path: input))
        #expect(first.stored == 4)
        let seq = try ledger.lastSeq()
        do {
            _ = try ledger.importJSONLines(from: try JSONLinesReader(path: input))
            Issue.record("the second import was accepted")
        } catch let error as LedgerError {
            #expect(error.code == .ruleViolation)
            #expect(error.message.contains("an export of it imported again? Import it into a new ledger file"), "\(error.message)")
        }
        #expect(try ledger.lastSeq() == seq, "nothing written")
        // Into another ledger the same input is an ordinary import.
        #expect(try Ledger(path: dir.path("b.ledger")).importJSONLines(from: try JSONLinesReader(path: input)).stored == first.stored)
    }
}
