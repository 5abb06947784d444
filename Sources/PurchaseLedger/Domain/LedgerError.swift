/// The one error type of purchase-ledger.
///
/// Switch on ``code`` (stable, may grow) and, for rule violations, on ``rule``. Messages never
/// contain user ids, destinations or other payload values beyond the ids of transactions and
/// downloads, so they are safe to log.
///
/// ```swift
/// do {
///     try ledger.append(finish)
/// } catch let error as LedgerError where error.rule == .finishBeforeCopyOut {
///     print("copy these out first:", error.downloads)
/// }
/// ```
///
/// ## Topics
///
/// ### What failed
/// - ``code``
/// - ``Code``
/// - ``rule``
/// - ``message``
/// - ``description``
///
/// ### What it is about
/// - ``event``
/// - ``downloads``
/// - ``underlying``
///
/// ### Where in the log or the input
/// - ``seq``
/// - ``line``
/// - ``batchIndex``
///
/// ### Errors for tools built on the library
/// - ``make(_:_:seq:line:)``
public struct LedgerError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. New codes may be added; existing ones never change meaning.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        enum Kind: String, Sendable {
            case ruleViolation, malformedInput, corruptData, chainMismatch, schemaTooNew, notALedger
            case keyRequired, keyMismatch, notKeyed, unregisteredURL, storage, io, staleProjections, idConflict
            case unknownUser, notErasable, pulledCopy
        }

        let kind: Kind

        /// A command broke a rule; nothing was written. ``LedgerError/rule`` names it.
        public static let ruleViolation = Code(kind: .ruleViolation)
        /// The input is not a valid event (bad JSON, unknown type, missing field, unknown id...).
        public static let malformedInput = Code(kind: .malformedInput)
        /// Stored bytes do not decode (a flipped or truncated byte); ``LedgerError/seq`` says where.
        public static let corruptData = Code(kind: .corruptData)
        /// The hash chain does not match the stored events: an event was edited, removed or moved.
        public static let chainMismatch = Code(kind: .chainMismatch)
        /// The file was written by a newer purchase-ledger.
        public static let schemaTooNew = Code(kind: .schemaTooNew)
        /// The file is not a purchase-ledger ledger.
        public static let notALedger = Code(kind: .notALedger)
        /// The ledger's chain is keyed and no key was given.
        public static let keyRequired = Code(kind: .keyRequired)
        /// The key given is not the ledger's key.
        public static let keyMismatch = Code(kind: .keyMismatch)
        /// A key was given, but the file says its chain has no key: another ledger, or a keyed
        /// ledger whose key check was removed to pass it off as plain (tampering).
        public static let notKeyed = Code(kind: .notKeyed)
        /// No download is registered for the content URL asked about.
        public static let unregisteredURL = Code(kind: .unregisteredURL)
        /// SQLite failed (disk full, I/O error, lock timeout...).
        public static let storage = Code(kind: .storage)
        /// Reading or writing a file outside the ledger failed.
        public static let io = Code(kind: .io)
        /// A ledger opened read-only holds projection tables (what reports and queries read)
        /// written by an older version, or behind its log: open it for writing once, which
        /// rebuilds them from the log.
        public static let staleProjections = Code(kind: .staleProjections)

        /// The file claims a ledger id it cannot prove: its identity key does not derive the id,
        /// or a fleet store holds the id under another ledger's key (docs/fleet.md).
        public static let idConflict = Code(kind: .idConflict)

        /// `forget` was asked to erase a user the ledger holds no personal value of (never
        /// recorded, or already erased).
        public static let unknownUser = Code(kind: .unknownUser)
        /// `forget` cannot erase the user without breaking the chain: events of the user written
        /// before migration 0007 hold their personal values inside it.
        public static let notErasable = Code(kind: .notErasable)
        /// The file is a copy pulled from a fleet store (`purchase-ledger pull`): it is read, never
        /// written (its identity key stayed on the device), so it is opened read-only.
        public static let pulledCopy = Code(kind: .pulledCopy)

        /// The code's stable name (`corruptData`, `keyMismatch`...), which ``LedgerError/description``
        /// shows for an error that names no rule.
        public var description: String { kind.rawValue }
    }

    /// What kind of failure this is: switch on it (and, for rule violations, on ``rule``).
    public let code: Code
    /// The broken rule, for rule violations and anomalies.
    public let rule: Rule?
    /// A sentence a person understands.
    public let message: String
    /// The event that was refused, when there is one.
    public var event: Event?
    /// The downloads concerned (for `finishBeforeCopyOut`: the ones never copied out).
    public var downloads: [String]
    /// The position in the stored log this error is about, for stored data.
    public var seq: Int64?
    /// The 1-based input line, for JSON Lines input.
    public var line: Int?
    /// For a batch given to the library (``Ledger/append(contentsOf:)``, ``Ledger/check(_:)``),
    /// the 0-based index of the event refused; nil for a single event or a JSON Lines input
    /// (which names its ``line``).
    public var batchIndex: Int?
    /// The error this one reports, when it came from below: for ``Code/storage`` and the file
    /// errors, SQLite's own (a GRDB `DatabaseError` with its result code), kept whole rather than
    /// only quoted in ``message``.
    public var underlying: (any Error)?

    init(_ code: Code, rule: Rule? = nil, _ message: String, event: Event? = nil, downloads: [String] = [], seq: Int64? = nil, line: Int? = nil) {
        self.code = code
        self.rule = rule
        self.message = message
        self.event = event
        self.downloads = downloads
        self.seq = seq
        self.line = line
    }

    /// The same error, its message followed by `hint`.
    func adding(hint: String) -> LedgerError {
        var hinted = LedgerError(code, rule: rule, message + hint, event: event, downloads: downloads, seq: seq, line: line)
        hinted.batchIndex = batchIndex
        hinted.underlying = underlying
        return hinted
    }

    /// An error with a code and a message, for tools built on the library.
    public static func make(_ code: Code, _ message: String, seq: Int64? = nil, line: Int? = nil) -> LedgerError {
        LedgerError(code, message, seq: seq, line: line)
    }

    static func violation(_ rule: Rule, _ message: String, _ event: Event, downloads: [String] = []) -> LedgerError {
        LedgerError(.ruleViolation, rule: rule, message, event: event, downloads: downloads)
    }

    static func malformed(_ message: String, event: Event? = nil, line: Int? = nil) -> LedgerError {
        LedgerError(.malformedInput, message, event: event, line: line)
    }

    static func corrupt(_ message: String, seq: Int64?) -> LedgerError {
        LedgerError(.corruptData, message, seq: seq)
    }

    static func storage(_ message: String) -> LedgerError {
        LedgerError(.storage, message)
    }

    /// Where an input event came from: a JSON Lines line, or an index in a batch given to the
    /// library.
    enum Position {
        case line(Int)
        case batch(Int)
    }

    /// The same error, placed at `position`.
    func at(_ position: Position) -> LedgerError {
        var copy = self
        switch position {
        case .line(let line): copy.line = line
        case .batch(let index): copy.batchIndex = index
        }
        return copy
    }

    /// The same error, placed at an input line.
    func at(line: Int) -> LedgerError { at(.line(line)) }

    /// `line 7: finishBeforeCopyOut: download t1-d1 finished but ...`
    public var description: String {
        var parts: [String] = []
        if let line { parts.append("line \(line)") } else if let batchIndex { parts.append("batch[\(batchIndex)]") }
        if let seq, line == nil { parts.append("seq \(seq)") }
        if let rule { parts.append(rule.name) } else if code == .malformedInput { parts.append("malformed") } else if code != .ruleViolation { parts.append(code.description) }
        parts.append(message)
        return parts.joined(separator: ": ")
    }
}
