extension Ledger {
    /// Checks a JSON Lines document against the rules without writing; errors name the input line.
    /// (Like ``importJSONLines(from:progress:)``, it takes the ids an erasure left in an export.)
    public func checkJSONLines(_ input: JSONLinesInput) throws {
        try input.namingLines { _ = try check(input.events, refusingErasedUsers: false) }
    }

    /// Appends a JSON Lines document in one atomic write; errors name the input line.
    @discardableResult
    public func appendJSONLines(_ input: JSONLinesInput, progress: ((Int, Int) -> Void)? = nil) throws -> AppendResult {
        try input.namingLines { try append(contentsOf: input.events, progress: progress, refusingErasedUsers: false) }
    }
}

extension JSONLinesInput {
    /// Runs `body` on this document's events; a ``LedgerError`` it throws at an index of the
    /// batch is thrown again at that event's line instead.
    fileprivate func namingLines<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch var error as LedgerError {
            if let index = error.batchIndex, index < lines.count {
                error.line = lines[index]
                error.batchIndex = nil
            }
            throw error
        }
    }
}
