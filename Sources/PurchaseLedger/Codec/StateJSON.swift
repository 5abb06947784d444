/// The JSON shapes of states, transactions and downloads (docs/json.md), as `replay --json`
/// prints them. Lists are sorted by id; a transaction's `downloads` keep delivery order.
public enum StateJSON {
    /// The whole state: `seq`, `transactions`, `downloads`, `ownedContent`, `anomalies`,
    /// `restoreInProgress`.
    public static func encode(_ s: LedgerState) -> String {
        var w = JSONWriter()
        write(s, to: &w)
        return w.string
    }

    /// The state's shape with only the records `focus` chooses (``StateFocus``): the same keys,
    /// shorter lists.
    public static func encode(_ s: LedgerState, focus: StateFocus) -> String {
        guard !focus.isEmpty else { return encode(s) }
        return encode(s, selection: focus.select(in: s))
    }

    /// The state's shape with only the records of `selection`.
    public static func encode(_ s: LedgerState, selection: StateFocus.Selection) -> String {
        var w = JSONWriter()
        write(s, transactions: selection.transactions, downloads: selection.downloads, owned: selection.ownedContent, to: &w)
        return w.string
    }

    static func write(_ s: LedgerState, to w: inout JSONWriter) {
        write(
            s, transactions: s.transactions.keys.sorted().map { s.transactions[$0]! },
            downloads: s.downloads.keys.sorted().map { s.downloads[$0]! }, owned: s.ownedContent, to: &w)
    }

    private static func write(
        _ s: LedgerState, transactions: [TransactionRecord], downloads: [DownloadRecord],
        owned ownedContent: [OwnedContent], to w: inout JSONWriter
    ) {
        w.beginObject()
        w.field("seq", s.seq)
        w.key("transactions"); w.beginArray()
        for t in transactions { write(t, to: &w) }
        w.endArray()
        w.key("downloads"); w.beginArray()
        for d in downloads { download(d, contentURL: s.contentURL(for: d.download), to: &w) }
        w.endArray()
        w.key("ownedContent"); w.beginArray()
        for o in ownedContent { owned(o, state: s, to: &w) }
        w.endArray()
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

    /// One transaction, as in the state's `transactions`, into a larger document.
    public static func write(_ t: TransactionRecord, to w: inout JSONWriter) {
        w.beginObject()
        w.field("transaction", t.transaction); w.field("product", t.product); w.field("user", t.user)
        w.field("quantity", t.quantity); w.field("state", t.state.rawValue); w.field("finished", t.finished)
        w.field("revoked", t.revoked); w.field("originalTransaction", t.originalTransaction)
        w.field("storeTransactionId", t.storeTransactionId)
        w.key("downloads"); w.beginArray(); for d in t.downloads { w.value(d) }; w.endArray()
        if let e = t.error {
            w.key("error"); w.beginObject(); w.field("domain", e.domain); w.field("code", e.code); w.field("message", e.message); w.endObject()
        }
        if let reason = t.revocationReason { w.field("revocationReason", reason) }
        paid(t.paid, to: &w)
        w.endObject()
    }

    /// A transaction's paid terms, fixed when it was purchased or restored (contract 5.1):
    /// `price` and `currency` (null before that, or when nothing gave a price), `priceSource`,
    /// `environment`, `ownership`, and `storefront` and `offer` when known.
    static func paid(_ p: PaidTerms, to w: inout JSONWriter) {
        w.field("price", p.price); w.field("currency", p.currency)
        if let source = p.priceSource { w.field("priceSource", source.rawValue) }
        if let storefront = p.storefront { w.field("storefront", storefront) }
        w.field("environment", p.environment.rawValue); w.field("ownership", p.ownership.rawValue)
        if let offer = p.offer {
            w.key("offer"); w.beginObject(); w.field("type", offer.type.rawValue)
            if let id = offer.id { w.field("id", id) }
            w.endObject()
        }
    }

    static func download(_ d: DownloadRecord, contentURL: String?, to w: inout JSONWriter) {
        w.beginObject()
        w.field("download", d.download); w.field("transaction", d.transaction); w.field("content", d.content)
        w.field("contentVersion", d.contentVersion?.text); w.field("contentLength", d.contentLength)
        w.field("state", d.state.rawValue); w.field("progress", d.progress)
        w.field("contentURL", contentURL); w.field("copiedOut", d.copiedOut)
        w.field("destination", d.destination); w.field("started", d.started); w.field("discarded", d.discarded)
        w.field("lost", d.lost)
        if let url = d.url { w.field("url", url) }
        w.endObject()
    }

    static func owned(_ o: OwnedContent, state: LedgerState, to w: inout JSONWriter) {
        w.beginObject()
        w.field("product", o.product); w.field("content", o.content); w.field("contentVersion", o.contentVersion.text)
        w.field("destination", o.destination); w.field("transaction", o.transaction)
        w.field("updateAvailable", state.updateAvailable(for: ContentKey(product: o.product, content: o.content)))
        w.endObject()
    }
}
