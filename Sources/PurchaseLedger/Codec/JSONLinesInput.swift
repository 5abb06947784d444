/// A JSON Lines document split into events, each with its line number.
public struct JSONLinesInput: Sendable {
    /// The events, in order.
    public var events: [Event]
    /// The 1-based line of each event.
    public var lines: [Int]
    /// Lines an export marked `appendedByLedger` (automatic cancellations). They are left out:
    /// the ledger appends them again, at the same place, when it stores the finish that caused them.
    public var skippedLedgerAppended: Int

    /// Parses `bytes`. Blank lines are skipped; the first malformed line throws
    /// ``LedgerError/Code/malformedInput`` with its ``LedgerError/line``.
    public init(bytes: [UInt8]) throws(LedgerError) {
        events = []
        lines = []
        skippedLedgerAppended = 0
        var start = 0
        var lineNumber = 0
        let count = bytes.count
        while start < count {
            var end = start
            while end < count && bytes[end] != 0x0A { end += 1 }
            lineNumber += 1
            var last = end
            if last > start && bytes[last - 1] == 0x0D { last -= 1 }
            let isBlank = bytes[start..<last].allSatisfy { $0 == 0x20 || $0 == 0x09 }
            if !isBlank {
                do {
                    let line = try JSONLines.decodeLine(Array(bytes[start..<last]))
                    if line.appendedByLedger {
                        skippedLedgerAppended += 1
                    } else {
                        events.append(line.event)
                        lines.append(lineNumber)
                    }
                } catch {
                    throw error.at(line: lineNumber)
                }
            }
            start = end + 1
        }
    }
}

extension Ledger {
    /// Checks a JSON Lines document against the rules without writing; errors name the input line.
    public func checkJSONLines(_ input: JSONLinesInput) throws {
        do {
            _ = try check(input.events)
        } catch var error as LedgerError {
            if let index = error.batchIndex, index < input.lines.count {
                error.line = input.lines[index]
            }
            throw error
        }
    }

    /// Appends a JSON Lines document in one atomic write; errors name the input line.
    @discardableResult
    public func appendJSONLines(_ input: JSONLinesInput, progress: ((Int, Int) -> Void)? = nil) throws -> AppendResult {
        do {
            return try append(contentsOf: input.events, progress: progress)
        } catch var error as LedgerError {
            if let index = error.batchIndex, index < input.lines.count {
                error.line = input.lines[index]
            }
            throw error
        }
    }
}
