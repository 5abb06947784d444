/// How a projection column holds its values. Each store names the type in its own dialect
/// (`ColumnType.sqlite` in `Persistence/Projections`, `.postgres` in the fleet module).
package enum ColumnType: Sendable, Hashable {
    case text, integer, boolean, real
}

/// One column of a projection table.
package struct ProjectionColumn: Sendable, Hashable {
    package let name: String
    package let type: ColumnType
    package let nullable: Bool

    package init(_ name: String, _ type: ColumnType, nullable: Bool = false) {
        self.name = name
        self.type = type
        self.nullable = nullable
    }
}

/// What the fields of one snapshot record share while it is written or read: its key (the first
/// field), and the last time written, as each time is stored as the difference from the one
/// before it in the record.
struct SnapshotFieldContext {
    var key = ""
    var previousTime: Int64 = 0
}

/// One field's columns in a projection row: the row, and where the field's columns are in it
/// (nil: the result lacks the column, read as NULL). One per row read, handed to each field's
/// reader in turn (a class: as a struct it was copied for every field).
package final class FieldColumns {
    let row: any ProjectionColumns
    let positions: [Int?]
    /// The field's first column in ``positions``.
    var start = 0

    init(row: any ProjectionColumns, positions: [Int?]) {
        self.row = row
        self.positions = positions
    }

    /// The field's `k`th column.
    func string(_ k: Int = 0) -> String? { positions[start + k].flatMap { row.string(at: $0) } }
    func int64(_ k: Int = 0) -> Int64? { positions[start + k].flatMap { row.int64(at: $0) } }
    func double(_ k: Int = 0) -> Double? { positions[start + k].flatMap { row.double(at: $0) } }
}

/// A row of values in ``RecordSchema/columns`` order, as ``RecordSchema/row(_:)`` makes it.
struct ValueColumns: ProjectionColumns {
    let names: [String]
    let values: [ColumnValue]

    func position(_ column: String) -> Int? { names.firstIndex(of: column) }
    func string(at i: Int) -> String? { values[i].string }
    func int64(at i: Int) -> Int64? { values[i].int64 }
    func double(at i: Int) -> Double? { values[i].double }
    var positionCache: PositionCache? { nil }
}

/// What a projection row and the JSON of a record are made from: the record's fields, and what
/// only the state knows of it (a download's position in its transaction, its content URL).
///
/// Its metatype is sendable (from Swift 6.2, where that is said): the declarations' `@Sendable`
/// closures name `Source` and may run on any thread.
#if compiler(>=6.2)
    package protocol RecordSource: SendableMetatype {
        associatedtype Fields: Sendable
        var fields: Fields { get }
    }
#else
    package protocol RecordSource {
        associatedtype Fields: Sendable
        var fields: Fields { get }
    }
#endif

/// One field of a persisted record, declared once: its projection columns (name, type, whether
/// NULL), the values its row holds, how a row sets it again, its key and value in the JSON of
/// `replay --json` (docs/json.md), and its part of a snapshot record (docs/format.md).
package struct RecordField<Source: RecordSource>: Sendable {
    package typealias Failure = BinaryReader.Failure
    package typealias Fields = Source.Fields

    /// How the field takes part in a snapshot record.
    enum Snapshot: Sendable {
        /// Not stored: derived from other fields or from the state.
        case none
        /// One bit of the record's flags varint, written after its key.
        case flag(get: @Sendable (Fields) -> Bool, set: @Sendable (inout Fields, Bool) -> Void)
        /// Its own bytes, in declaration order.
        case value(
            write: @Sendable (Fields, inout BinaryWriter, inout SnapshotFieldContext) -> Void,
            read: @Sendable (inout Fields, inout BinaryReader, inout SnapshotFieldContext) throws(Failure) -> Void)
    }

    init(
        name: String, columns: [ProjectionColumn], row: @escaping @Sendable (Source, inout [ColumnValue]) -> Void,
        read: (@Sendable (inout Fields, FieldColumns) -> Void)?, json: (@Sendable (Source, inout JSONWriter) -> Void)?,
        snapshot: Snapshot
    ) {
        self.name = name
        self.columns = columns
        self.row = row
        self.read = read
        self.json = json
        self.snapshot = snapshot
    }

    package let name: String
    package let columns: [ProjectionColumn]
    /// Appends the field's values, one per column.
    let row: @Sendable (Source, inout [ColumnValue]) -> Void
    /// Sets the field from its columns in a row (nil: the row does not give it back).
    let read: (@Sendable (inout Fields, FieldColumns) -> Void)?
    /// Writes the field's members into the record's JSON object (nil: not in the JSON).
    let json: (@Sendable (Source, inout JSONWriter) -> Void)?
    let snapshot: Snapshot
}

/// A record's fields in declaration order: the one place a persisted field is described.
/// ``columns``, ``row(_:)``, `read(_:from:)`, ``writeJSON(_:to:)`` and the snapshot codec
/// all walk the same list.
package struct RecordSchema<Source: RecordSource>: Sendable {
    package typealias Fields = Source.Fields
    typealias Writer = @Sendable (Fields, inout BinaryWriter, inout SnapshotFieldContext) -> Void
    typealias Reader = @Sendable (inout Fields, inout BinaryReader, inout SnapshotFieldContext) throws(BinaryReader.Failure) -> Void

    package let fields: [RecordField<Source>]
    package let columns: [ProjectionColumn]

    // Each form's closures, taken out of the fields once: a record is written or read by
    // calling them in turn, without copying each field's other closures.
    private let rowWriters: ContiguousArray<@Sendable (Source, inout [ColumnValue]) -> Void>
    /// Each field a row gives back, with where its columns are in ``columns``.
    private let rowReaders: ContiguousArray<(read: @Sendable (inout Fields, FieldColumns) -> Void, start: Int)>
    private let jsonWriters: ContiguousArray<@Sendable (Source, inout JSONWriter) -> Void>
    /// The key's writer and reader come first, then the flags varint, then the others.
    private let snapshotWriters: ContiguousArray<Writer>
    private let snapshotReaders: ContiguousArray<Reader>
    private let flagGetters: ContiguousArray<@Sendable (Fields) -> Bool>
    private let flagSetters: ContiguousArray<@Sendable (inout Fields, Bool) -> Void>

    init(_ fields: [RecordField<Source>]) {
        self.fields = fields
        columns = fields.flatMap(\.columns)
        var rowReaders: ContiguousArray<(read: @Sendable (inout Fields, FieldColumns) -> Void, start: Int)> = []
        var writers: ContiguousArray<Writer> = [], readers: ContiguousArray<Reader> = []
        var getters: ContiguousArray<@Sendable (Fields) -> Bool> = [], setters: ContiguousArray<@Sendable (inout Fields, Bool) -> Void> = []
        var at = 0
        for f in fields {
            if let read = f.read { rowReaders.append((read, at)) }
            at += f.columns.count
            switch f.snapshot {
            case .none: break
            case .flag(let get, let set):
                getters.append(get)
                setters.append(set)
            case .value(let write, let read):
                writers.append(write)
                readers.append(read)
            }
        }
        if case .value = fields.first?.snapshot {} else { preconditionFailure("a record's first field is its key, stored as a value") }
        precondition(getters.count <= 63, "a snapshot record's flags fit one varint")
        rowWriters = ContiguousArray(fields.map(\.row))
        self.rowReaders = rowReaders
        jsonWriters = ContiguousArray(fields.compactMap(\.json))
        snapshotWriters = writers
        snapshotReaders = readers
        flagGetters = getters
        flagSetters = setters
    }

    package var columnNames: [String] { columns.map(\.name) }

    /// The projection row of `source`, one value per column.
    package func row(_ source: Source) -> [ColumnValue] {
        var values: [ColumnValue] = []
        values.reserveCapacity(columns.count)
        for write in rowWriters { write(source, &values) }
        return values
    }

    /// Sets every field a projection row (SQLite's or PostgreSQL's) gives back, each read
    /// straight from its columns by the row's own decoders.
    func read(_ fields: inout Fields, from row: some ProjectionColumns) {
        let columns = FieldColumns(row: row, positions: row.positions(ObjectIdentifier(Source.self), of: self.columns))
        for reader in rowReaders {
            columns.start = reader.start
            reader.read(&fields, columns)
        }
    }

    /// Sets every field a row of ``row(_:)``'s values gives back.
    func read(_ fields: inout Fields, from values: [ColumnValue]) {
        read(&fields, from: ValueColumns(names: columnNames, values: values))
    }

    /// The record's JSON members, in declaration order.
    func writeJSON(_ source: Source, to w: inout JSONWriter) {
        for write in jsonWriters { write(source, &w) }
    }

    /// The record's snapshot bytes: its key field, its flags, then every other stored field.
    func writeSnapshot(_ fields: Fields, to w: inout BinaryWriter) {
        var context = SnapshotFieldContext()
        var flags: UInt64 = 0
        for (bit, get) in flagGetters.enumerated() where get(fields) { flags |= 1 << UInt64(bit) }
        snapshotWriters.withUnsafeBufferPointer { writers in
            writers[0](fields, &w, &context)
            w.varint(flags)
            for i in 1..<writers.count { writers[i](fields, &w, &context) }
        }
    }

    /// Reads what ``writeSnapshot(_:to:)`` wrote, into `fields` (a blank record).
    func readSnapshot(into fields: inout Fields, _ r: inout BinaryReader) throws(BinaryReader.Failure) {
        var context = SnapshotFieldContext()
        try snapshotReaders[0](&fields, &r, &context)
        let flags = try r.varint()
        for i in 1..<snapshotReaders.count { try snapshotReaders[i](&fields, &r, &context) }
        for (bit, set) in flagSetters.enumerated() { set(&fields, flags & (1 << UInt64(bit)) != 0) }
    }
}

// MARK: - Field kinds

/// A value a field can hold, with its column, JSON and snapshot forms.
protocol FieldValue: Sendable {
    static var columnType: ColumnType { get }
    static var nullable: Bool { get }
    var column: ColumnValue { get }
    /// The value its columns hold back (NULL or a missing column: the value's default).
    init(columns c: FieldColumns)
    func json(_ w: inout JSONWriter)
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext)
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure)
}

/// A value that is never NULL, and its optional form: none as `0`, a value as what
/// ``writeSome(_:_:)`` writes (by default `1` and the value).
protocol FieldScalar: FieldValue {
    /// The value its columns hold, nil when NULL.
    static func present(_ c: FieldColumns) -> Self?
    /// What a NULL reads as where the field is not optional.
    static var whenNull: Self { get }
    static func writeSome(_ value: Self, _ w: inout BinaryWriter, _ c: inout SnapshotFieldContext)
    /// Reads a present value whose first varint, `tag` (not 0), was read already.
    static func readSome(tag: UInt64, _ r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) -> Self
}

extension FieldScalar {
    static var nullable: Bool { false }
    init(columns c: FieldColumns) { self = Self.present(c) ?? Self.whenNull }

    static func writeSome(_ value: Self, _ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) {
        w.varint(1)
        value.snapshot(&w, &c)
    }

    static func readSome(tag: UInt64, _ r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) -> Self {
        guard tag == 1 else { throw BinaryReader.Failure(message: "bad presence tag for \(Self.self)") }
        return try Self(snapshot: &r, &c)
    }
}

extension Optional: FieldValue where Wrapped: FieldScalar {
    static var columnType: ColumnType { Wrapped.columnType }
    static var nullable: Bool { true }
    var column: ColumnValue { self?.column ?? .null }
    init(columns c: FieldColumns) { self = Wrapped.present(c) }
    func json(_ w: inout JSONWriter) {
        if let self { self.json(&w) } else { w.null() }
    }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) {
        if let self { Wrapped.writeSome(self, &w, &c) } else { w.varint(0) }
    }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) {
        let tag = try r.varint()
        self = tag == 0 ? nil : try Wrapped.readSome(tag: tag, &r, &c)
    }
}

/// A scalar GRDB converts: its column value is its own.
protocol ConvertibleScalar: FieldScalar, ColumnConvertible {}

extension ConvertibleScalar {
    var column: ColumnValue { columnValue }
}

extension String: ConvertibleScalar {
    static var columnType: ColumnType { .text }
    static var whenNull: String { "" }
    static func present(_ c: FieldColumns) -> String? { c.string() }
    func json(_ w: inout JSONWriter) { w.value(self) }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { w.lengthPrefixed(self) }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) { self = try r.string() }
}

/// An integer field: an integer column, a JSON number, a zigzag varint in snapshots.
protocol IntegerField: ConvertibleScalar, FixedWidthInteger {}

extension IntegerField {
    static var columnType: ColumnType { .integer }
    static var whenNull: Self { 0 }
    static func present(_ c: FieldColumns) -> Self? { c.int64().map { Self(truncatingIfNeeded: $0) } }
    func json(_ w: inout JSONWriter) { w.value(Int64(truncatingIfNeeded: self)) }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { w.zigzag(Int64(truncatingIfNeeded: self)) }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) {
        self.init(truncatingIfNeeded: try r.zigzag())
    }
}

extension Int64: IntegerField {}
extension Int: IntegerField {}

extension Double: ConvertibleScalar {
    static var columnType: ColumnType { .real }
    static var whenNull: Double { 0 }
    static func present(_ c: FieldColumns) -> Double? { c.double() }
    func json(_ w: inout JSONWriter) { w.value(self) }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { w.double(self) }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) { self = try r.double() }
}

/// A flag field's value (``RecordField/flag(_:column:json:get:set:)``): a boolean column, a
/// bit of the record's flags in snapshots, or a varint where it stands alone.
extension Bool: ConvertibleScalar {
    static var columnType: ColumnType { .boolean }
    static var whenNull: Bool { false }
    static func present(_ c: FieldColumns) -> Bool? { c.int64().map { $0 != 0 } }
    func json(_ w: inout JSONWriter) { w.value(self) }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { w.varint(self ? 1 : 0) }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) { self = try r.varint() != 0 }
}

extension Timestamp: FieldScalar {
    /// Whole milliseconds, rounded down.
    static var columnType: ColumnType { .integer }
    var column: ColumnValue { Projector.ms(self).columnValue }
    static var whenNull: Timestamp { Timestamp(millisecondsSinceEpoch: 0) }
    static func present(_ c: FieldColumns) -> Timestamp? { c.int64().map { Timestamp(millisecondsSinceEpoch: $0) } }
    func json(_ w: inout JSONWriter) { w.value(description) }

    /// As the difference from the record's time before it (``SnapshotFieldContext``): a
    /// transaction is queued, bought and finished seconds apart, 1 to 3 bytes each instead of 7,
    /// which LZ4 cannot shorten. Differences wrap, so any times round-trip.
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) {
        TimeCodec.write(nanosecondsSinceEpoch &- c.previousTime, &w)
        c.previousTime = nanosecondsSinceEpoch
    }

    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) {
        try self.init(tag: try r.varint(), &r, &c)
    }

    private init(tag: UInt64, _ r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) {
        c.previousTime = c.previousTime &+ (try TimeCodec.read(tag: tag, &r))
        self.init(nanosecondsSinceEpoch: c.previousTime)
    }

    /// A time's first varint is never 0, so an absent time is `0` alone.
    static func writeSome(_ value: Timestamp, _ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { value.snapshot(&w, &c) }

    static func readSome(tag: UInt64, _ r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) -> Timestamp {
        try Timestamp(tag: tag, &r, &c)
    }
}

/// A state kept as its name in columns and JSON, and as its ``StoredCode`` in snapshots.
protocol CodedField: FieldScalar, StoredCode, RawRepresentable<String> {
    /// The case a NULL or unknown column value reads as.
    static var fallback: Self { get }
}

extension CodedField {
    static var columnType: ColumnType { .text }
    var column: ColumnValue { rawValue.columnValue }
    static var whenNull: Self { fallback }
    /// An unknown name reads as ``fallback`` too.
    static func present(_ c: FieldColumns) -> Self? { c.string().map { Self(rawValue: $0) ?? fallback } }
    func json(_ w: inout JSONWriter) { w.value(rawValue) }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { w.varint(UInt64(storedCode)) }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) {
        guard let value = Self(storedCode: try r.varint()) else { throw BinaryReader.Failure(message: "bad \(Self.self) code") }
        self = value
    }
}

extension TransactionStatus: CodedField { static var fallback: TransactionStatus { .purchasing } }
extension DownloadStatus: CodedField { static var fallback: DownloadStatus { .waiting } }
extension CancelReason: CodedField { static var fallback: CancelReason { .user } }

extension ContentVersion: FieldScalar {
    static var columnType: ColumnType { .text }
    var column: ColumnValue { text.columnValue }
    static var whenNull: ContentVersion { ContentVersion("0")! }
    static func present(_ c: FieldColumns) -> ContentVersion? { c.string().map { ContentVersion($0) ?? whenNull } }
    func json(_ w: inout JSONWriter) { w.value(text) }
    func snapshot(_ w: inout BinaryWriter, _ c: inout SnapshotFieldContext) { w.lengthPrefixed(text) }
    init(snapshot r: inout BinaryReader, _ c: inout SnapshotFieldContext) throws(BinaryReader.Failure) {
        guard let v = ContentVersion(try r.string()) else { throw BinaryReader.Failure(message: "bad version") }
        self = v
    }
}

/// When a field's JSON member is written.
enum JSONPresence {
    /// Always, `null` when the value is absent.
    case always
    /// Only when the value is present.
    case whenPresent
}

extension RecordField {
    /// A field stored in one column under `column`, in the JSON under `json` (nil: not in the
    /// JSON), and in snapshots as its value.
    @inline(__always) static func field<V: FieldValue>(
        _ name: String, column: String, json: String? = nil, _ presence: JSONPresence = .always,
        get: @escaping @Sendable (Fields) -> V, set: @escaping @Sendable (inout Fields, V) -> Void, snapshot: Snapshot? = nil
    ) -> RecordField {
        single(name, column: column, json: json, presence, get: get, set: set, snapshot: snapshot ?? value(get: get, set: set))
    }

    /// A field only snapshots hold (no column, not in the JSON): what the reducer keeps to
    /// decide, and no report shows.
    @inline(__always) static func stored<V: FieldValue>(_ name: String, get: @escaping @Sendable (Fields) -> V, set: @escaping @Sendable (inout Fields, V) -> Void)
        -> RecordField
    {
        RecordField(
            name: name, columns: [], row: { (_: Source, _: inout [ColumnValue]) in }, read: nil, json: nil,
            snapshot: value(get: get, set: set))
    }

    /// A field's value in a snapshot record, in the form its type gives it.
    @inline(__always) private static func value<V: FieldValue>(
        get: @escaping @Sendable (Fields) -> V, set: @escaping @Sendable (inout Fields, V) -> Void
    ) -> Snapshot {
        .value(
            write: { (fields: Fields, w: inout BinaryWriter, c: inout SnapshotFieldContext) in get(fields).snapshot(&w, &c) },
            read: { (fields: inout Fields, r: inout BinaryReader, c: inout SnapshotFieldContext) throws(Failure) in
                set(&fields, try V(snapshot: &r, &c))
            })
    }

    /// A column derived from the record or the state when its row is written: never read back,
    /// never in a snapshot.
    @inline(__always) static func derived<V: FieldValue>(_ name: String, column: String, json: String? = nil, _ value: @escaping @Sendable (Source) -> V) -> RecordField {
        RecordField(
            name: name, columns: [ProjectionColumn(column, V.columnType, nullable: V.nullable)],
            row: { (s: Source, values: inout [ColumnValue]) in values.append(value(s).column) }, read: nil,
            json: member(json, .always, value), snapshot: .none)
    }

    /// A record's key: its first field, a text id that the fields after it may be stored
    /// relative to (``SnapshotFieldContext/key``).
    @inline(__always) static func key(
        _ name: String, column: String, json: String, get: @escaping @Sendable (Fields) -> String,
        set: @escaping @Sendable (inout Fields, String) -> Void
    ) -> RecordField {
        single(
            name, column: column, json: json, .always, get: get, set: set,
            snapshot: .value(
                write: { (fields: Fields, w: inout BinaryWriter, c: inout SnapshotFieldContext) in
                    c.key = get(fields)
                    w.lengthPrefixed(c.key)
                },
                read: { (fields: inout Fields, r: inout BinaryReader, c: inout SnapshotFieldContext) throws(Failure) in
                    c.key = try r.string()
                    set(&fields, c.key)
                }))
    }

    /// A true-or-false field: a boolean column, and one bit of a snapshot record's flags.
    @inline(__always) static func flag(
        _ name: String, column: String, json: String? = nil, get: @escaping @Sendable (Fields) -> Bool,
        set: @escaping @Sendable (inout Fields, Bool) -> Void
    ) -> RecordField {
        single(name, column: column, json: json, .always, get: get, set: set, snapshot: .flag(get: get, set: set))
    }

    @inline(__always) private static func single<V: FieldValue>(
        _ name: String, column: String, json: String?, _ presence: JSONPresence, get: @escaping @Sendable (Fields) -> V,
        set: @escaping @Sendable (inout Fields, V) -> Void, snapshot: Snapshot
    ) -> RecordField {
        RecordField(
            name: name, columns: [ProjectionColumn(column, V.columnType, nullable: V.nullable)],
            row: { (s: Source, values: inout [ColumnValue]) in values.append(get(s.fields).column) },
            read: { (fields: inout Fields, c: FieldColumns) in set(&fields, V(columns: c)) },
            json: member(json, presence) { get($0.fields) },
            snapshot: snapshot)
    }

    /// Writes `value` as the JSON member `key` (none when `key` is nil).
    @inline(__always) private static func member<V: FieldValue>(_ key: String?, _ presence: JSONPresence, _ value: @escaping @Sendable (Source) -> V)
        -> (@Sendable (Source, inout JSONWriter) -> Void)?
    {
        guard let key else { return nil }
        return { (s: Source, w: inout JSONWriter) in
            let v = value(s)
            if presence == .whenPresent, v.column.isNull { return }
            w.key(key)
            v.json(&w)
        }
    }
}
