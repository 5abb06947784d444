import ArgumentParser
import Foundation
import PurchaseLedger

struct ExtractCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extract",
        abstract: "Write a minimal repro: a new ledger holding only what reproduces some transactions, or one user's.",
        discussion: """
            The new ledger keeps the catalog events of the chosen transactions' products, their events and \
            their downloads' events, and the restores they took part in, in the original order; the \
            cancellations the ledger appended are appended again by the new one. Replaying it gives the \
            chosen transactions and downloads the same state as the original at every point where they \
            changed, so it can be attached to a ticket instead of the user's whole ledger. A transaction \
            whose purchase reuses a chosen one's download id is kept too, and named.

            Examples:
              purchase-ledger extract user.ledger --transaction t1 -o t1.ledger
              purchase-ledger extract user.ledger --user u-03322 --redact
            """)

    @OptionGroup var options: LedgerOptions
    @Option(name: .customLong("transaction"), help: "A transaction to keep (repeat for several).")
    var transactions: [String] = []
    @Option(help: "Keep every transaction of this user.") var user: String?
    @Option(
        name: [.customShort("o"), .customLong("output")], help: "The new ledger (default: the ledger's name with -repro added).",
        completion: .file(extensions: ["ledger"]))
    var output: String?
    @Flag(help: "Replace every personal field with keyed pseudonyms, as export --redact does.") var redact = false
    @Flag(help: "Replace the output file when it exists.") var force = false
    @Flag(help: "Print the summary as JSON.") var json = false

    func validate() throws {
        if transactions.isEmpty == (user == nil) {
            throw ValidationError("give --transaction (one or more) or --user, not both")
        }
    }

    func run() throws {
        let console = Console.current
        let ledger = try options.open()
        let path = output ?? Self.defaultOutput(for: options.ledger)
        // The output replaces a file (with --force): never the ledger being read, under any name.
        if Self.sameFile(path, options.ledger) {
            throw LedgerError.make(.malformedInput, "-o \(path) is the ledger being extracted from; give another file")
        }
        if FileManager.default.fileExists(atPath: path) {
            guard force else { throw LedgerError.io("\(path) already exists; give another -o, or --force to replace it") }
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        }
        let selection: ExtractSelection = user.map { .user($0) } ?? .transactions(transactions)
        let s = try ledger.extract(selection, to: path, redact: redact)
        if json {
            console.printJSON { w in
                w.field("output", s.path)
                w.field("keptEvents", s.keptEvents)
                w.field("totalEvents", s.totalEvents)
                w.key("transactions")
                w.array(s.transactions)
                w.key("addedTransactions")
                w.array(s.addedTransactions)
                w.field("downloads", s.downloads.count)
                w.field("restores", s.restores)
                w.field("appleRecords", s.appleRecords)
                w.field("redacted", redact)
            }
            return
        }
        var line = "wrote \(s.path): kept \(s.keptEvents) of \(s.totalEvents) events; "
        line +=
            "\(s.transactions.count) transaction\(s.transactions.count == 1 ? "" : "s"), \(s.downloads.count) download\(s.downloads.count == 1 ? "" : "s"), \(s.restores) restore\(s.restores == 1 ? "" : "s")"
        if s.appleRecords > 0 { line += ", \(s.appleRecords) of Apple's record\(s.appleRecords == 1 ? "" : "s")" }
        if redact { line += "; personal fields redacted" }
        console.print(line)
        if !s.addedTransactions.isEmpty {
            console.print("also kept, as they share a download id with a chosen transaction: " + s.addedTransactions.joined(separator: ", "))
        }
        console.print(console.dim("try: purchase-ledger timeline \(s.path) --transaction \(s.transactions[0])"))
    }

    /// Whether two paths name one file (the same device and inode: symbolic and hard links, `./`
    /// and `..` included).
    static func sameFile(_ a: String, _ b: String) -> Bool {
        var sa = stat(), sb = stat()
        guard stat(a, &sa) == 0, stat(b, &sb) == 0 else { return false }
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino
    }

    /// `user.ledger` -> `user-repro.ledger`, beside it.
    static func defaultOutput(for ledger: String) -> String {
        let url = URL(fileURLWithPath: ledger)
        let ext = url.pathExtension
        let base = url.deletingPathExtension().lastPathComponent
        let name = base + "-repro" + (ext.isEmpty ? ".ledger" : "." + ext)
        let dir = (ledger as NSString).deletingLastPathComponent
        return dir.isEmpty ? name : (dir as NSString).appendingPathComponent(name)
    }
}
