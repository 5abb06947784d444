import Foundation
import GRDBSQLite
import PurchaseLedger
import PurchaseLedgerTesting

// Reliability harnesses: crash (SIGKILL at random moments), flips (corruption detection), fuzz
// (hostile input). Each prints its figures and exits non-zero when a check fails.

/// Deterministic batches for the crash writer: each batch stores exactly its events (no
/// automatic cancellations, no ignored repeats), so every batch boundary is a known seq.
enum CrashWorkload {
    static let catalog =
        #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"p","kind":"nonConsumable","price":"1.99","currency":"USD","downloadable":true,"contents":[{"content":"c","contentVersion":"1.0","contentLength":100}]}"#

    /// Batches of the import into an empty ledger (about 7,000 events).
    static let freshBatches = 1000

    /// Batch `k`: one transaction's life, whole (a batch) or a single event of it.
    static func batch(_ k: Int) -> [String] {
        if k == 0 { return [catalog] }
        let t = "t\(k)", d = "t\(k)-d1"
        let at = { (s: Int) in "2024-03-01T00:\(String(format: "%02d", (k / 60) % 60)):\(String(format: "%02d", k % 60)).\(String(format: "%03d", s))Z" }
        let life = [
            #"{"type":"paymentQueued","at":"\#(at(1))","transaction":"\#(t)","product":"p","user":"u\#(k % 50)"}"#,
            #"{"type":"transactionPurchased","at":"\#(at(2))","transaction":"\#(t)","storeTransactionId":"\#(k)","downloads":[{"download":"\#(d)","content":"c","contentVersion":"1.0","contentLength":100}]}"#,
            #"{"type":"downloadStarted","at":"\#(at(3))","download":"\#(d)"}"#,
            #"{"type":"downloadProgressed","at":"\#(at(4))","download":"\#(d)","progress":0.5,"bytesWritten":50}"#,
            #"{"type":"downloadFinished","at":"\#(at(5))","download":"\#(d)","contentURL":"file:///c/\#(d)/"}"#,
            #"{"type":"contentCopiedOut","at":"\#(at(6))","download":"\#(d)","destination":"Documents/\#(d)"}"#,
            #"{"type":"transactionFinished","at":"\#(at(7))","transaction":"\#(t)"}"#,
        ]
        return life
    }

    /// Seq after batch `k`.
    static func end(ofBatch k: Int) -> Int64 { k == 0 ? 1 : 1 + Int64(k) * 7 }
}

/// The writer child: appends batches from where the ledger is, acknowledging each in `ack`
/// (`batch lastSeq`, fsynced) after `append` returned. Every third batch goes in one event per
/// append; the others in one append.
func crashWriter(ledgerPath: String, ackPath: String, mode: String) throws {
    var c = LedgerConfiguration()
    c.blockSize = 64
    c.snapshotInterval = 100
    c.maxSnapshots = 3
    let ledger = try Ledger(path: ledgerPath, configuration: c)
    if mode == "fresh" {
        // One import into an empty ledger, the path that writes the projection tables in bulk
        // (indexes dropped and built again inside the transaction), then an acknowledgement.
        let events = try (0..<CrashWorkload.freshBatches).flatMap { try CrashWorkload.batch($0).map { try JSONLines.decode($0) } }
        try ledger.append(contentsOf: events)
        try Data("fresh \(try ledger.lastSeq())\n".utf8).write(to: URL(fileURLWithPath: ackPath))
        return
    }
    if mode == "rebuild" {
        // Alternately the default rebuild and one rewriting every row, so kills land in both.
        var everyRow = false
        while true {
            try ledger.rebuildProjections(rewritingEveryRow: everyRow)
            everyRow.toggle()
        }
    }
    let ack = FileHandle(forWritingAtPath: ackPath)!
    ack.seekToEndOfFile()
    // Resume with the next seq: inside a one-event-per-append batch, if a kill stopped one there.
    let last = try ledger.lastSeq()
    var k = last == 0 ? 0 : Int((last - 1) / 7) + 1
    var offset = last == 0 ? 0 : Int(last - CrashWorkload.end(ofBatch: k - 1))
    while true {
        let lines = CrashWorkload.batch(k)
        let events = try lines.dropFirst(offset).map { try JSONLines.decode($0) }
        offset = 0
        if mode == "import" && k % 3 != 1 {
            // A large import: 300 batches in one append, killed, if at all, in the middle of it.
            var all = events
            var end = k
            while end < k + 300 {
                end += 1
                all += try CrashWorkload.batch(end).map { try JSONLines.decode($0) }
            }
            try ledger.append(contentsOf: all)
            k = end
        } else if k % 3 == 1 {
            for e in events { try ledger.append(e) }
        } else {
            try ledger.append(contentsOf: events)
        }
        ack.write(Data("\(k) \(try ledger.lastSeq())\n".utf8))
        try ack.synchronize()
        k += 1
    }
}

func crashHarness(kills: Int, scratch: String) throws -> Bool {
    let ledgerPath = "\(scratch)/crash.ledger", ackPath = "\(scratch)/acks.txt"
    remove(ledgerPath)
    _ = FileManager.default.createFile(atPath: ackPath, contents: nil)
    var acknowledged: Int64 = 0, lost: Int64 = 0, partial = 0, invalid = 0, rebuildKills = 0, importKills = 0
    var freshKills = 0, freshCommitted = 0
    var generator = SystemRandomNumberGenerator()
    for round in 0..<kills {
        if round % 10 == 7 {
            // A kill during (or after) an import into an empty ledger: afterwards the ledger is
            // empty or whole, with every index, and verifies; acknowledged means whole.
            let fresh = "\(scratch)/fresh.ledger", freshAck = "\(scratch)/fresh-ack.txt"
            for file in [fresh, fresh + "-wal", fresh + "-shm", freshAck] { remove(file) }
            let child = try spawn([CommandLine.arguments[0], "crash-writer", fresh, freshAck, "fresh"])
            // Longer than the other rounds: the import takes a few tenths of a second, and some
            // kills should come after its commit.
            usleep(UInt32.random(in: 20_000...350_000, using: &generator))
            kill(child, SIGKILL)
            var status: Int32 = 0
            waitpid(child, &status, 0)
            freshKills += 1
            guard FileManager.default.fileExists(atPath: fresh) else { continue }
            let ledger = try Ledger(path: fresh)
            let last = try ledger.lastSeq()
            let whole = CrashWorkload.end(ofBatch: CrashWorkload.freshBatches - 1)
            let acked = FileManager.default.fileExists(atPath: freshAck)
            if last == whole { freshCommitted += 1 }
            if last != 0 && last != whole { partial += 1 }
            if acked && last != whole { lost += whole - last }
            let handle = try RawSQLiteHandle(path: fresh)
            let indexes = handle.int64s(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name IN ('transactions_by_user', 'downloads_by_transaction', 'downloads_by_url')")
            handle.close()
            let report = try ledger.verify()
            if !report.isValid || indexes != [3] {
                invalid += 1
                print("  round \(round), fresh import: \(report.problems.first.map(String.init(describing:)) ?? "indexes \(indexes)")")
            }
            continue
        }
        let mode = round % 10 == 9 ? "rebuild" : round % 10 == 4 ? "import" : "append"
        let child = try spawn([CommandLine.arguments[0], "crash-writer", ledgerPath, ackPath, mode])
        usleep(UInt32.random(in: 20_000...150_000, using: &generator))
        kill(child, SIGKILL)
        var status: Int32 = 0
        waitpid(child, &status, 0)
        if mode == "rebuild" { rebuildKills += 1 }
        if mode == "import" { importKills += 1 }

        // Reopen as the app would after a crash, and check.
        guard FileManager.default.fileExists(atPath: ledgerPath) else { continue }
        let ledger = try Ledger(path: ledgerPath)
        let last = try ledger.lastSeq()
        let acks = (try String(contentsOfFile: ackPath, encoding: .utf8)).split(separator: "\n").compactMap { line -> (Int, Int64)? in
            let parts = line.split(separator: " ")
            guard parts.count == 2, let k = Int(parts[0]), let s = Int64(parts[1]) else { return nil }
            return (k, s)
        }
        let ackedSeq = acks.map(\.1).max() ?? 0
        acknowledged = ackedSeq
        if last < ackedSeq { lost += ackedSeq - last }
        // No partial batch: the log ends at a batch boundary (single-event batches may stop inside).
        let k = last == 0 ? 0 : Int((last - 1 + 6) / 7)
        let boundary = CrashWorkload.end(ofBatch: k) == last || last == 0
        if !boundary && k % 3 != 1 { partial += 1 }
        // Every acknowledged event is there, as written.
        var expected: [String] = []
        for b in 0...max(0, acks.map(\.0).max() ?? 0) { expected += CrashWorkload.batch(b) }
        var mismatch = false
        try ledger.forEachEvent(through: ackedSeq) { e in
            let line = expected[Int(e.seq - 1)]
            if (try? JSONLines.decode(line)) != e.event { mismatch = true }
            return !mismatch
        }
        if mismatch { lost += 1 }
        let report = try ledger.verify()
        if !report.isValid {
            invalid += 1
            print("  round \(round): \(report.problems.first!)")
        }
    }
    print(
        "crash: \(kills) kills (\(importKills) during 2,100-event imports, \(rebuildKills) during a rebuild, \(freshKills) during or after a 7,000-event import into an empty ledger, \(freshCommitted) of those committed first), \(acknowledged) events acknowledged, lost: \(lost), partial batches: \(partial), ledgers failing verify: \(invalid)"
    )
    return lost == 0 && partial == 0 && invalid == 0
}

/// Flips one random bit of stored event data (a sealed block or a tail payload) per trial and
/// counts the trials `verify` catches, and, for flips in the events a signed checkpoint (taken
/// half-way) covers, the trials `verify --checkpoint` catches: every one that changed an event.
func flipHarness(trials: Int, workload: String, scratch: String) throws -> Bool {
    let pristine = "\(scratch)/flips.ledger"
    remove(pristine)
    var c = LedgerConfiguration()
    c.durability = .normal
    let source = try Ledger(path: pristine, configuration: c)
    let lines = try String(contentsOfFile: workload, encoding: .utf8).split(separator: "\n").prefix(20_000)
    try source.appendJSONLines(try JSONLinesInput(bytes: Array(lines.prefix(10_000).joined(separator: "\n").utf8)))
    let signer = CheckpointSigningKey()
    let checkpoint = try source.checkpoint(signingKey: signer)
    try source.appendJSONLines(try JSONLinesInput(bytes: Array(lines.dropFirst(10_000).joined(separator: "\n").utf8)))
    let copy = "\(scratch)/flipped.ledger"
    let original = try source.events(limit: .max)
    var detected = 0, harmless = 0, missed = 0
    var covered = 0, caughtByCheckpoint = 0, coveredHarmless = 0, missedByCheckpoint = 0
    var generator = SystemRandomNumberGenerator()
    for trial in 0..<trials {
        remove(copy)
        try FileManager.default.copyItem(atPath: pristine, toPath: copy)
        if FileManager.default.fileExists(atPath: pristine + "-wal") { try FileManager.default.copyItem(atPath: pristine + "-wal", toPath: copy + "-wal") }
        let db = try RawSQLiteHandle(path: copy)
        let inBlock = trial % 4 != 3
        let (table, key, column) = inBlock ? ("event_blocks", "first_seq", "data") : ("events", "seq", "payload")
        let rows = db.int64s("SELECT \(key) FROM \(table)")
        guard let row = rows.randomElement(using: &generator) else { continue }
        // A block starting at or before the checkpoint's seq holds events it covers.
        let underCheckpoint = row <= checkpoint.seq
        var blob = db.blob("SELECT \(column) FROM \(table) WHERE \(key) = \(row)")
        guard !blob.isEmpty else { continue }
        let index = Int.random(in: 0..<blob.count, using: &generator)
        blob[index] ^= UInt8(1) << UInt8.random(in: 0...7, using: &generator)
        db.update("UPDATE \(table) SET \(column) = ? WHERE \(key) = \(row)", blob)
        db.close()
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        if underCheckpoint {
            covered += 1
            do {
                let flipped = try Ledger(path: copy, configuration: readOnly)
                try flipped.verify(against: checkpoint, publicKey: signer.publicKey)
                if (try? flipped.events(limit: .max)) == original { coveredHarmless += 1 } else { missedByCheckpoint += 1 }
            } catch {
                caughtByCheckpoint += 1
            }
        }
        do {
            let flipped = try Ledger(path: copy, configuration: readOnly)
            if !(try flipped.verify().isValid) {
                detected += 1
            } else if try flipped.events(limit: .max) == original {
                // Some compressed bits do not matter: an LZ4 match offset pointing at identical
                // bytes decompresses to the same events. Nothing was corrupted.
                harmless += 1
            } else {
                missed += 1
            }
        } catch {
            detected += 1  // refused at open, or a typed error while reading: also detected
        }
    }
    print(
        "flips: \(trials) single-bit flips inside stored event data (blocks and tail payloads), detected: \(detected), events unchanged by the flip: \(harmless), missed: \(missed)"
    )
    print(
        "flips under a signed checkpoint (seq \(checkpoint.seq)): \(covered), caught by verify --checkpoint: \(caughtByCheckpoint), events unchanged: \(coveredHarmless), missed: \(missedByCheckpoint)"
    )
    return missed == 0 && missedByCheckpoint == 0
}

/// Random and mutated inputs to every decoder of untrusted bytes. A crash ends the process,
/// which the caller sees as a failure.
func fuzzHarness(inputs: Int) throws -> Bool {
    var generator = SystemRandomNumberGenerator()
    let seeds = (1...40).flatMap { CrashWorkload.batch($0) } + [CrashWorkload.catalog]
    let payloads = try seeds.map { try JSONLines.decode($0) }.map { ($0.type, $0.binaryPayload) }
    let block = try FuzzTargets.compressedSample()
    let frames = BlockLayout.allCases.map { ($0, FuzzTargets.blockSample(layout: $0)) }
    // Each seed decodes as it is: the mutations below start from blocks the reader accepts.
    precondition(frames.allSatisfy { FuzzTargets.decodeBlock($1, first: 1, last: 24, layout: $0) }, "a sample block does not decode")
    var decoded = 0, rejected = 0
    for i in 0..<inputs {
        switch i % 4 {
        case 0:
            // JSON Lines: a valid line with random bytes changed, inserted or removed, or pure noise.
            var bytes = Array(seeds[Int.random(in: 0..<seeds.count, using: &generator)].utf8)
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let p = Int.random(in: 0..<max(bytes.count, 1), using: &generator)
                switch Int.random(in: 0..<4, using: &generator) {
                case 0 where !bytes.isEmpty: bytes[p] = UInt8.random(in: 0...255, using: &generator)
                case 1: bytes.insert(UInt8.random(in: 0...255, using: &generator), at: min(p, bytes.count))
                case 2 where !bytes.isEmpty: bytes.remove(at: p)
                default: bytes = (0..<Int.random(in: 0...64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                }
            }
            if (try? JSONLinesInput(bytes: bytes)) != nil { decoded += 1 } else { rejected += 1 }
        case 1:
            // Payloads: a valid payload with bytes changed, decoded as a random type.
            var (_, bytes) = payloads[Int.random(in: 0..<payloads.count, using: &generator)]
            if !bytes.isEmpty { bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator) }
            if Bool.random(using: &generator) { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &generator))) }
            let type = EventType.allCases.randomElement(using: &generator)!
            if FuzzTargets.decodePayload(type, bytes) { decoded += 1 } else { rejected += 1 }
        case 3:
            // Sealed-block frames, in every layout: bytes changed, inserted or cut, and the
            // block's range of seqs right, off by a little, or absurd.
            var (layout, bytes) = frames.randomElement(using: &generator)!
            for _ in 0..<Int.random(in: 1...3, using: &generator) where !bytes.isEmpty {
                let p = Int.random(in: 0..<bytes.count, using: &generator)
                if Bool.random(using: &generator) {
                    bytes[p] = UInt8.random(in: 0...255, using: &generator)
                } else {
                    bytes.insert(UInt8.random(in: 0...255, using: &generator), at: p)
                }
            }
            if Int.random(in: 0..<4, using: &generator) == 0 { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &generator))) }
            let first: Int64 = [1, 0, -1, .max, .min, Int64.random(in: -100...100, using: &generator)].randomElement(using: &generator)!
            let last: Int64 =
                Bool.random(using: &generator)
                ? 24 : [first, first &+ 23, first &- 1, .max, .min, Int64.random(in: -100...100, using: &generator)].randomElement(using: &generator)!
            if FuzzTargets.decodeBlock(bytes, first: first, last: last, layout: layout) { decoded += 1 } else { rejected += 1 }
        default:
            // LZ4: a compressed block with bytes changed or cut, and a wrong size claimed.
            var bytes = block.data
            for _ in 0..<Int.random(in: 1...3, using: &generator) where !bytes.isEmpty {
                bytes[Int.random(in: 0..<bytes.count, using: &generator)] = UInt8.random(in: 0...255, using: &generator)
            }
            if Bool.random(using: &generator) { bytes = Array(bytes.prefix(Int.random(in: 0...bytes.count, using: &generator))) }
            let size = Bool.random(using: &generator) ? block.rawSize : Int.random(in: -5...(block.rawSize * 2), using: &generator)
            if FuzzTargets.decompress(bytes, size: size) { decoded += 1 } else { rejected += 1 }
        }
    }
    print("fuzz: \(inputs) inputs (JSON Lines, payloads, block frames, LZ4 blocks), decoded \(decoded), rejected with an error \(rejected), crashes: 0")
    return true
}

/// Just enough of SQLite's C API to flip bytes in a ledger file.
final class RawSQLiteHandle {
    var db: OpaquePointer?

    init(path: String) throws { sqlite3_open(path, &db) }

    func int64s(_ sql: String) -> [Int64] {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, sql, -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        var values: [Int64] = []
        while sqlite3_step(statement) == SQLITE_ROW { values.append(sqlite3_column_int64(statement, 0)) }
        return values
    }

    func blob(_ sql: String) -> [UInt8] {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, sql, -1, &statement, nil)
        defer { sqlite3_finalize(statement) }
        guard sqlite3_step(statement) == SQLITE_ROW, let pointer = sqlite3_column_blob(statement, 0) else { return [] }
        return Array(UnsafeRawBufferPointer(start: pointer, count: Int(sqlite3_column_bytes(statement, 0))))
    }

    func update(_ sql: String, _ blob: [UInt8]) {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, sql, -1, &statement, nil)
        blob.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 1, $0.baseAddress, Int32($0.count), nil) }
        sqlite3_step(statement)
        sqlite3_finalize(statement)
    }

    func close() {
        sqlite3_close(db)
        db = nil
    }
}

/// Starts a child process with posix_spawn (Foundation's Process does not reap a SIGKILLed child
/// reliably on Linux).
/// With `stdout`, the child's standard output is that file descriptor, and `closing` is closed in
/// the child (the read end of a pipe whose write end is `stdout`). With `stderr`, its standard
/// error is that file descriptor.
func spawn(_ arguments: [String], stdout: Int32? = nil, stderr: Int32? = nil, closing: Int32? = nil) throws -> pid_t {
    var pid: pid_t = 0
    let argv = arguments.map { strdup($0) } + [nil]
    let env = ProcessInfo.processInfo.environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { for p in argv + env { free(p) } }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if let stdout { posix_spawn_file_actions_adddup2(&actions, stdout, 1) }
    if let stderr { posix_spawn_file_actions_adddup2(&actions, stderr, 2) }
    for fd in Set([stdout, stderr].compactMap { $0 }) { posix_spawn_file_actions_addclose(&actions, fd) }
    if let closing { posix_spawn_file_actions_addclose(&actions, closing) }
    let result = posix_spawn(&pid, arguments[0], &actions, nil, argv, env)
    guard result == 0 else { throw LedgerError.make(.io, "cannot start \(arguments[0]): \(result)") }
    return pid
}
