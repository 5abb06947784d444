import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

struct ForgetCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "forget",
        abstract: "Erase a user's personal data from a ledger (GDPR article 17).",
        discussion: """
            Deletes every personal value recorded under the user id: the id itself, store and \
            original transaction ids, content and registered URLs, destinations, error messages \
            and revocation reasons of the user's transactions. The user's records stay, with \
            "[erased N]" in place of each value, so amounts, products, times and states remain \
            and every report still totals; the hash chain still verifies. The ledger records \
            that an erasure happened (a personalDataErased event), never whom.

            The projections and snapshots that held the values are rewritten and the write-ahead \
            log is truncated, so no byte of the values is left in the file or its WAL. Copies of \
            the file taken before (backups, exports, a fleet store) are not touched: see \
            docs/storage.md, "Erasure". The user id is never printed. With --download D instead: \
            the values of no user that D's events recorded (a registered download's URL, its \
            content URL, destination and error messages), the same way.

            Given a fleet store's postgres:// URL instead of a ledger, erases the user from every \
            ledger's rows there (run it as the owner role): the user id becomes "[erased N]" and \
            every other personal value "[erased]", the store remembers each ledger's number for \
            the user so later ships of a device that still holds it send markers, and the tables \
            are vacuumed. docs/fleet.md says what the operator must do about WAL archives, \
            replicas and backups.

            Example:
              purchase-ledger forget user.ledger --user u-04217
              purchase-ledger forget user.ledger --user u-04217 --json
              purchase-ledger forget user.ledger --download kollus-7f3a
              purchase-ledger forget postgres://owner@db.internal:5432/fleet --user u-04217
            """)

    @OptionGroup var options: LedgerOptions

    @Option(help: "The user id to erase (as the events give it).")
    var user: String?

    @Option(help: "A download whose values belong to no user (a registered URL) to erase; ledger files only.")
    var download: String?

    func validate() throws {
        guard (user == nil) != (download == nil) else { throw ValidationError("give --user or --download (one of them)") }
        if download != nil && FleetAddress.isURL(options.ledger) {
            throw ValidationError("--download erases from a ledger file; a fleet store holds no value of no user")
        }
    }

    @Flag(help: "Print the summary as JSON.") var json = false

    func run() async throws {
        let console = Console.current
        let start = Date()
        /// Prints the summary: `fields` as JSON with the time taken, or `text` and the time.
        func report(_ fields: (inout JSONWriter) -> Void, _ text: String) {
            let seconds = Date().timeIntervalSince(start)
            if json {
                console.printJSON { w in
                    fields(&w)
                    w.field("seconds", (seconds * 100).rounded() / 100)
                }
            } else {
                console.print(text + ", in " + String(format: "%.2f", seconds) + " s")
            }
        }
        if FleetAddress.isURL(options.ledger) {
            let fleet = try await FleetStore.connect(options.ledger)
            let erased: FleetErasure
            do {
                erased = try await fleet.forget(user: user!)
            } catch {
                await fleet.close()
                throw error
            }
            await fleet.close()
            report(
                { w in
                    w.field("ledgers", erased.ledgers)
                    w.field("rows", erased.rows)
                    w.field("appleRecords", erased.appleRecords)
                },
                "erased the user from \(erased.ledgers) ledgers of the fleet store (\(erased.rows) rows)"
                    + (erased.appleRecords > 0 ? "; deleted \(erased.appleRecords) of Apple's records of the user" : ""))
            return
        }
        let ledger = try options.open(readOnly: false)
        let summary = try download.map { try ledger.forget(download: $0) } ?? ledger.forget(user: user!)
        if summary.finishedUnfinishedErasure && summary.values == 0 {
            // The user was erased by a forget killed before its checkpoint: finishing it is the answer.
            report(
                { w in
                    w.field("values", 0)
                    w.field("seq", summary.seq)
                    w.field("finishedUnfinishedErasure", true)
                },
                "no personal value of that \(download == nil ? "user" : "download") is left; the erasure recorded at seq \(summary.seq) had been interrupted before its end "
                    + "and is now finished (neither the file nor its write-ahead log holds what it erased)")
            return
        }
        report(
            { w in
                w.field("values", summary.values)
                w.field("seq", summary.seq)
                w.field("rowsRewritten", summary.rowsRewritten)
                w.field("snapshotsDropped", summary.snapshotsDropped)
                w.field("walTruncated", summary.walTruncated)
                if summary.finishedUnfinishedErasure { w.field("finishedUnfinishedErasure", true) }
            },
            "erased \(summary.values) personal values of the \(download == nil ? "user" : "download") (recorded at seq \(summary.seq)); "
                + "\(summary.rowsRewritten) projection rows rewritten, \(summary.snapshotsDropped) snapshots replaced")
        if !summary.walTruncated && !json {
            console.print(
                "warning: another process was using the ledger, so the erasure could not be copied over the old pages: "
                    + "the ledger file still holds the erased values (and its -wal the new pages) until every process has closed it "
                    + "(the last to close finishes it; verify reports the erasure unfinished until then)")
        }
    }
}
