/// Some records of a state: chosen transactions, users and downloads, with what belongs to them.
/// `replay --transaction / --user / --download` prints only these, so looking at one purchase of a
/// large ledger prints a few lines, not megabytes.
///
/// ```swift
/// let focus = StateFocus(users: ["u1"])
/// let mine = focus.select(in: try ledger.state(atSeq: 120))   // u1's transactions, downloads, content
/// ```
public struct StateFocus: Sendable, Hashable {
    /// Transaction ids chosen (`replay --transaction`).
    public var transactions: [String]
    /// User ids whose transactions are chosen (`replay --user`).
    public var users: [String]
    /// Download ids chosen, with their transactions (`replay --download`).
    public var downloads: [String]

    /// A focus on these ids, each normalized to NFC as the ledger stores ids. Nothing chosen: the whole
    /// state.
    public init(transactions: [String] = [], users: [String] = [], downloads: [String] = []) {
        self.transactions = transactions.map(Identifier.normalize)
        self.users = users.map(Identifier.normalize)
        self.downloads = downloads.map(Identifier.normalize)
    }

    /// True when nothing is chosen: the whole state.
    public var isEmpty: Bool { transactions.isEmpty && users.isEmpty && downloads.isEmpty }

    /// The chosen records of `state`, each list sorted by id as in the whole state.
    public struct Selection: Sendable, Hashable {
        /// The chosen transactions, the transactions of the chosen users, and those owning the
        /// chosen downloads.
        public var transactions: [TransactionRecord]
        /// The chosen downloads and the downloads of the transactions above.
        public var downloads: [DownloadRecord]
        /// The owned content those transactions copied out.
        public var ownedContent: [OwnedContent]
        /// Chosen ids the state does not hold (yet, or at all).
        public var missing: [String]
    }

    /// The records of `state` this focus chooses, and the chosen ids `state` does not hold.
    public func select(in state: LedgerState) -> Selection {
        select(in: state, userTransactions: nil)
    }

    /// `userTransactions`: every transaction that names one of the chosen users, at any seq (a
    /// transaction's user never changes once set), so the users' records are found without
    /// visiting every transaction of the state. Nil: visit them all.
    func select(in state: LedgerState, userTransactions: Set<String>?) -> Selection {
        var transactionIDs = Set<String>()
        var downloadIDs = Set<String>()
        var missing: [String] = []
        for id in transactions {
            if state.transactions[id] != nil { transactionIDs.insert(id) } else { missing.append("transaction \(id)") }
        }
        if !users.isEmpty {
            let wanted = Set(users)
            var found = Set<String>()
            let candidates = userTransactions.map { ids in ids.sorted().compactMap { state.transactions[$0] } } ?? state.transactions.values
            for t in candidates {
                if let user = t.user, wanted.contains(user) {
                    transactionIDs.insert(t.transaction)
                    found.insert(user)
                }
            }
            missing += users.filter { !found.contains($0) }.map { "user \($0)" }
        }
        for id in downloads {
            guard let d = state.downloads[id] else {
                missing.append("download \(id)")
                continue
            }
            downloadIDs.insert(id)
            if let t = d.transaction { transactionIDs.insert(t) }
        }
        let chosen = transactionIDs.sorted().compactMap { state.transactions[$0] }
        for t in chosen { downloadIDs.formUnion(t.downloads) }
        return Selection(
            transactions: chosen,
            downloads: downloadIDs.sorted().compactMap { state.downloads[$0] },
            ownedContent: state.ownedContent.filter { transactionIDs.contains($0.transaction) },
            missing: missing)
    }
}
