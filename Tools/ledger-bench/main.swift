import Foundation
import PurchaseLedger

let args = CommandLine.arguments
let input = args[1]
let path = args[2]
if args.count > 5 {
    _ = try Ledger(path: path)
    print("opened")
    exit(0)
}
if args.count > 4 {
    var c = LedgerConfiguration(); c.readOnly = true
    let l = try Ledger(path: path, configuration: c)
    print("readonly ok", try l.lastSeq())
    exit(0)
}
if args.count > 3 {
    let ledger = try Ledger(path: path)
    let t0 = Date()
    for _ in 0..<20 { _ = try ledger.state(atSeq: 19999) }
    print("20x state at 19999", Date().timeIntervalSince(t0))
    exit(0)
}
try? FileManager.default.removeItem(atPath: path)
try? FileManager.default.removeItem(atPath: path + "-wal")
try? FileManager.default.removeItem(atPath: path + "-shm")
let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: input)))
var t0 = Date()
let parsed = try JSONLinesInput(bytes: bytes)
print("parse", Date().timeIntervalSince(t0))
t0 = Date()
let ledger = try Ledger(path: path)
let result = try ledger.appendJSONLines(parsed)
let dt = Date().timeIntervalSince(t0)
print("append \(result.events.count) stored, \(result.ignored) ignored in \(dt)s = \(Double(parsed.events.count)/dt)/s")
t0 = Date()
let s = try ledger.state(atSeq: .max)
print("replay", Date().timeIntervalSince(t0), "anomalies", s.anomalies, "txns", s.transactions.count, "equal live:", s == ledger.currentState)
t0 = Date()
var n = 0
try ledger.forEachEvent { _ in n += 1; return true }
print("decode only", n, Date().timeIntervalSince(t0))
t0 = Date()
var s0 = LedgerState()
for _ in 0..<5 { s0 = try ledger.state(atSeq: 19999) }
print("state at 15000", Date().timeIntervalSince(t0), s0.seq)
