/// The largest values an event may hold, in UTF-8 bytes, enforced where events come in (JSON
/// Lines and ``Ledger/append(contentsOf:)``): a refused event names its line (or batch index) and
/// field, and nothing is written. They bound what one event costs in memory, in the file and in a
/// fleet store, whoever wrote the input.
///
/// | what | limit |
/// |---|---|
/// | an id (transaction, original and store transaction, download, product, related product, content, user, a registered URL) | 1,024 bytes |
/// | free text (title, destination, content URL, error domain and message, reason, checksum) | 4,096 bytes |
/// | one JSON Lines line | 1 MiB |
public enum InputLimits {
    public static let idBytes = 1024
    public static let textBytes = 4096
    public static let lineBytes = 1 << 20

    /// The JSON keys whose values are ids.
    static let idKeys: Set<String> = ["transaction", "originalTransaction", "storeTransactionId", "download", "product", "content", "user", "url"]

    /// `name` is built only for the error: building it for every field cost an import 4%.
    @inline(__always)
    static func check(_ value: String, key: String, name: @autoclosure () -> String) throws(LedgerError) {
        let count = value.utf8.count
        guard count > idBytes else { return }
        try refuse(count, key: key, name: name())
    }

    private static func refuse(_ count: Int, key: String, name: String) throws(LedgerError) {
        let limit = idKeys.contains(key) ? idBytes : textBytes
        guard count > limit else { return }
        throw LedgerError.malformed("field \(name) is \(count) bytes; at most \(limit) are allowed (\(limit == idBytes ? "an id" : "free text"), docs/json.md)")
    }

    /// The same checks for an event given to the library as for a JSON line: the event goes
    /// through its JSON form, so the limits above, a NUL in a string, a NaN or infinite number,
    /// a quantity or progress out of range are refused with the field's name, as at import.
    static func check(_ event: Event) throws(LedgerError) {
        _ = try JSONLines.decodeLine(Array(JSONLines.encode(event).utf8))
    }
}
