import GRDB

extension Ledger {
    /// The records `focus` chooses in `state` (a state of this ledger, at any seq): as
    /// ``StateFocus/select(in:)``, but the chosen users' transactions are found through the
    /// projections' user index (when the projections are up to date) instead of by visiting every
    /// transaction, so one user's records in a large ledger come back in milliseconds.
    ///
    /// ```swift
    /// let then = try ledger.state(atSeq: 120)
    /// let mine = try ledger.select(StateFocus(users: ["u1"]), in: then)
    /// ```
    public func select(_ focus: StateFocus, in state: LedgerState) throws -> StateFocus.Selection {
        guard !focus.users.isEmpty else { return focus.select(in: state) }
        let candidates: Set<String>? = try read { db in
            let (projected, current) = try Projector.status(db)
            guard current, projected == (try EventStore.lastSeq(db)) else { return nil }
            let marks = Array(repeating: "?", count: focus.users.count).joined(separator: ", ")
            return Set(
                try String.fetchAll(
                    db, sql: "SELECT transaction_id FROM transactions WHERE user_id IN (\(marks))",
                    arguments: StatementArguments(focus.users)))
        }
        return focus.select(in: state, userTransactions: candidates)
    }
}
