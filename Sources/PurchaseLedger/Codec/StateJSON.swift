/// The JSON shapes of states, transactions and downloads (docs/json.md), as `replay --json`
/// prints them. Lists are sorted by id; a transaction's `downloads` keep delivery order.
public enum StateJSON {
    /// The whole state: `seq`, `transactions`, `downloads`, `ownedContent`, `productViews` (when
    /// there are any), `anomalies`, `restoreInProgress`.
    public static func encode(_ s: LedgerState) -> String { whole(s, selection: nil, evidence: nil) }

    /// The state's shape with only the records `focus` chooses (``StateFocus``): the same keys,
    /// shorter lists.
    public static func encode(_ s: LedgerState, focus: StateFocus) -> String {
        guard !focus.isEmpty else { return encode(s) }
        return encode(s, selection: focus.select(in: s))
    }

    /// The state's shape with only the records of `selection`.
    public static func encode(_ s: LedgerState, selection: StateFocus.Selection) -> String { whole(s, selection: selection, evidence: nil) }

    /// The state (all of it, or the records of `selection`), each transaction with what Apple's
    /// signature says of it (``Ledger/appleEvidence(verifier:)``): `evidence` (`apple`,
    /// `xcode`, `invalid`, `unsigned`) and `evidenceReason` when invalid. Evidence judged after
    /// the state's seq (a transaction signed again later) is left out: no `evidence` member.
    public static func encode(_ s: LedgerState, selection: StateFocus.Selection? = nil, evidence: [String: TransactionEvidence]) -> String {
        whole(s, selection: selection, evidence: evidence)
    }

    /// ``stream(_:selection:evidence:chunk:_:)`` in one piece.
    private static func whole(_ s: LedgerState, selection: StateFocus.Selection?, evidence: [String: TransactionEvidence]?) -> String {
        var text = ""
        stream(s, selection: selection, evidence: evidence, chunk: .max) { text = $0 }
        return text
    }

    /// The state's JSON (the whole state, or the records of `selection`; each transaction with
    /// its `evidence` when given, as ``encode(_:selection:evidence:)``), handed to `emit` in
    /// pieces of about `chunk` bytes as it is written: the same text as `encode`, without ever
    /// holding all of it (a 1,000,000-event state is about 80 MB of JSON).
    public static func stream(
        _ s: LedgerState, selection: StateFocus.Selection? = nil, evidence: [String: TransactionEvidence]? = nil, chunk: Int = 1 << 16,
        _ emit: (String) -> Void
    ) {
        var w = JSONWriter()
        func flush(_ w: inout JSONWriter) { if w.byteCount >= chunk { emit(w.drain()) } }
        if let selection {
            write(
                s, transactions: selection.transactions, downloads: selection.downloads, owned: selection.ownedContent, evidence: evidence, flush: flush,
                to: &w)
        } else {
            write(
                s, transactions: s.transactions.values, downloads: s.downloads.values, owned: s.ownedContent, views: s.productViews(),
                evidence: evidence, flush: flush, to: &w)
        }
        emit(w.drain())
    }

    private static func write(
        _ s: LedgerState, transactions: [TransactionRecord], downloads: [DownloadRecord],
        owned ownedContent: [OwnedContent], views: [ProductViewRecord] = [], evidence: [String: TransactionEvidence]? = nil,
        flush: (inout JSONWriter) -> Void = { _ in }, to w: inout JSONWriter
    ) {
        w.beginObject()
        w.field("seq", s.seq)
        w.key("transactions"); w.beginArray()
        for t in transactions {
            flush(&w)
            guard let evidence else {
                write(t, to: &w)
                continue
            }
            w.beginObject()
            TransactionRecord.schema.writeJSON(TransactionRow(record: t), to: &w)
            if let found = evidence[t.transaction] {
                if found.seq <= s.seq {
                    w.field("evidence", found.evidence.name)
                    if let reason = found.evidence.reason { w.field("evidenceReason", reason) }
                }
            } else {
                w.field("evidence", AppleEvidence.unsigned.name)
            }
            w.endObject()
        }
        w.endArray()
        w.key("downloads"); w.beginArray()
        for d in downloads {
            flush(&w)
            download(d, contentURL: s.contentURL(for: d.download), to: &w)
        }
        w.endArray()
        w.key("ownedContent"); w.beginArray()
        for o in ownedContent {
            flush(&w)
            owned(o, state: s, to: &w)
        }
        w.endArray()
        // Only in a state that has store product views (a focused state never lists them): the
        // states of ledgers without any read as before.
        if !views.isEmpty {
            w.key("productViews"); w.beginArray()
            for v in views {
                flush(&w)
                write(v, to: &w)
            }
            w.endArray()
        }
        w.field("anomalies", s.anomalies)
        w.field("restoreInProgress", s.restoreInProgress)
        w.endObject()
    }

    /// One transaction, as in the state's `transactions`.
    public static func encode(_ t: TransactionRecord) -> String {
        var w = JSONWriter()
        write(t, to: &w)
        return w.string
    }

    /// One download, as in the state's `downloads`. Its `contentURL` is the record's, which the
    /// reducer clears when the transaction finishes.
    public static func encode(_ d: DownloadRecord) -> String {
        var w = JSONWriter()
        write(d, to: &w)
        return w.string
    }

    /// One download, as in the state's `downloads`, into a larger document.
    public static func write(_ d: DownloadRecord, to w: inout JSONWriter) {
        download(d, contentURL: d.state == .finished ? d.contentURL : nil, to: &w)
    }

    /// One transaction, as in the state's `transactions`, into a larger document: the members
    /// its declaration (``TransactionRecord/schema``) gives.
    public static func write(_ t: TransactionRecord, to w: inout JSONWriter) {
        w.beginObject()
        TransactionRecord.schema.writeJSON(TransactionRow(record: t), to: &w)
        w.endObject()
    }

    /// One store product view, as in the state's `productViews`: the members its declaration
    /// (``ProductViewRecord/schema``) gives.
    public static func write(_ v: ProductViewRecord, to w: inout JSONWriter) {
        w.beginObject()
        ProductViewRecord.schema.writeJSON(ProductViewRow(record: v), to: &w)
        w.endObject()
    }

    static func download(_ d: DownloadRecord, contentURL: String?, to w: inout JSONWriter) {
        w.beginObject()
        DownloadRecord.schema.writeJSON(DownloadRow(d, contentURL: contentURL), to: &w)
        w.endObject()
    }

    static func owned(_ o: OwnedContent, state: LedgerState, to w: inout JSONWriter) {
        w.beginObject()
        let update = state.updateAvailable(for: ContentKey(product: o.product, content: o.content))
        OwnedContent.schema.writeJSON(OwnedRow(fields: o, updateAvailable: update), to: &w)
        w.endObject()
    }
}
