import ArgumentParser
import Foundation
public import PurchaseLedger
import PurchaseLedgerFleet

/// The `purchase-ledger` command line, as a library: `main` parses, runs and maps every failure
/// to the contract's exit status (0 success; 1 a rule rejected the input or verify found a
/// problem; 2 malformed input or bad usage; 3 storage or I/O failure).
public enum PurchaseLedgerCLI {
    /// Runs the command line `arguments` (without the program name: `["verify", "app.ledger"]`),
    /// writing to ``Console/current``, and returns the exit status above (0...3).
    public static func main(_ arguments: [String]) async -> Int32 {
        let console = Console.current
        // Passwords given on the command line or in PGPASSWORD never reach the output, whatever
        // path prints them (an error quoting an argument, a URL that does not parse).
        console.secrets.withLock { $0 = FleetAddress.secrets(in: arguments) }
        defer { console.flush() }
        // The command parsed, once it is: a usage error its run throws shows its own usage.
        var parsed: (any ParsableCommand.Type)?
        do {
            var command = try Root.parseAsRoot(arguments)
            parsed = type(of: command)
            if var async = command as? any AsyncParsableCommand {
                try await async.run()
            } else {
                try command.run()
            }
            return 0
        } catch let exit as CommandExit {
            return exit.status
        } catch let error as LedgerError {
            console.error(error.description)
            return status(for: error)
        } catch let error as FleetError {
            console.error(error.description)
            return 3
        } catch let error as ValidationError where parsed != nil && parsed != Root.self {
            // Thrown by a subcommand's run, after parsing: ArgumentParser would show the
            // top-level usage, as if the subcommand were unknown.
            let usage = Root.usageString(for: parsed!)
            // The command's path ("purchase-ledger checkpoint create"): the usage's leading words.
            let path = usage.split(separator: " ").prefix { !["<", "[", "-"].contains($0.first) }.joined(separator: " ")
            console.error("Error: \(error.message)\nUsage: \(usage)\n  See '\(path) --help' for more information.")
            return 2
        } catch {
            let code = Root.exitCode(for: error)
            let message = Root.fullMessage(for: error)
            if code == .success {
                console.print(message)
                return 0
            }
            console.error(message)
            return 2
        }
    }

    static func status(for error: LedgerError) -> Int32 {
        switch error.code {
        // A file claiming an id it cannot prove is a finding about the file, as verify's are.
        case .ruleViolation, .notErasable, .idConflict: 1
        case .malformedInput, .unregisteredURL, .unknownUser: 2
        default: 3
        }
    }
}

/// Ends a command with a status, its message already printed.
struct CommandExit: Error {
    var status: Int32
}

/// Where commands write. Buffered stdout, unbuffered stderr; in tests a capturing console is set
/// with `Console.$current.withValue`.
///
/// Everything written is made safe for a terminal
/// (``TerminalText/escape(_:keepingColours:keepingCarriageReturns:)``): control characters, C1
/// controls and bidirectional overrides in ids, titles or messages are shown as `\u001b` and the
/// like, so a ledger's data can neither retitle, clear nor rewrite the reader's terminal; the only
/// escape sequences left are this console's own colours. Any `secrets` (passwords) are replaced
/// by `***`.
public final class Console: Sendable {
    /// The console commands write to: the process's stdout and stderr, unless a task sets another.
    @TaskLocal public static var current = Console()

    /// Text that must never be printed: replaced by `***` in every line written.
    package let secrets = Locked<[String]>([])

    private let sink: (@Sendable (_ text: String, _ toError: Bool) -> Void)?
    private let buffer = Locked<[UInt8]>([])
    /// Whether stdout is a terminal; false for a console with a sink.
    public let stdoutIsTerminal: Bool
    /// Whether stderr is a terminal (progress lines are shown only then); false for a console with a
    /// sink.
    public let stderrIsTerminal: Bool
    /// Colours only on a terminal, and never with NO_COLOR set.
    public let colours: Bool

    /// Values a command leaves to the end of the process (``keepUntilExit(_:)``).
    private static let kept = Locked<[Any]>([])

    /// Keeps `value` until the process exits, when this console is the process's own: the
    /// system takes back its memory at once, where freeing a large state record by record took
    /// 2 ms of a `replay --at` on a 1,000,000-event ledger. A console with a sink (a test, a
    /// host app) keeps nothing.
    package func keepUntilExit(_ value: Any) {
        guard sink == nil else { return }
        Console.kept.withLock { $0.append(value) }
    }

    /// The process's stdout and stderr.
    public init() {
        sink = nil
        stdoutIsTerminal = isatty(1) == 1
        stderrIsTerminal = isatty(2) == 1
        colours = stdoutIsTerminal && ProcessInfo.processInfo.environment["NO_COLOR"] == nil
    }

    /// A console that hands everything to `sink` (no terminal, no colours).
    public init(sink: @escaping @Sendable (_ text: String, _ toError: Bool) -> Void) {
        self.sink = sink
        stdoutIsTerminal = false
        stderrIsTerminal = false
        colours = false
    }

    /// Writes `text` and a newline to stdout (or the sink), made safe for a terminal.
    public func print(_ text: String) {
        write(text + "\n")
    }

    /// One JSON object on a line of its own, its members written by `body`.
    public func printJSON(_ body: (inout JSONWriter) -> Void) {
        print(JSONWriter.object(body))
    }

    /// A line of data (CSV) in which a carriage return is part of a quoted value: kept, with
    /// newline and tab; every other control character is escaped as `print` does.
    public func printData(_ text: String) {
        write(text + "\n", keepingCarriageReturns: true)
    }

    /// Writes `text` to stdout (or the sink) with no newline added, made safe for a terminal.
    /// Buffered: see ``flush()``.
    public func write(_ text: String) {
        write(text, keepingCarriageReturns: false)
    }

    private func write(_ text: String, keepingCarriageReturns: Bool) {
        let text = safe(text, keepingCarriageReturns: keepingCarriageReturns)
        if let sink { return sink(text, false) }
        let full = buffer.withLock { bytes -> Bool in
            bytes.append(contentsOf: text.utf8)
            return bytes.count >= 1 << 16
        }
        if full { flush() }
    }

    /// Writes `text` and a newline to stderr (or the sink), made safe for a terminal, after
    /// flushing stdout.
    public func error(_ text: String) {
        let text = safe(text)
        if let sink { return sink(text + "\n", true) }
        flush()
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }

    /// Writes out what stdout's buffer holds (it is also written whenever it reaches 64 KiB); a
    /// console with a sink buffers nothing.
    public func flush() {
        let bytes = buffer.withLock { bytes -> [UInt8] in
            defer { bytes.removeAll(keepingCapacity: true) }
            return bytes
        }
        if !bytes.isEmpty { FileHandle.standardOutput.write(Data(bytes)) }
    }

    /// `text` with control characters escaped (colours kept when this console shows them) and
    /// secrets replaced.
    private func safe(_ text: String, keepingCarriageReturns: Bool = false) -> String {
        var text = TerminalText.escape(text, keepingColours: colours, keepingCarriageReturns: keepingCarriageReturns)
        for secret in secrets.withLock({ $0 }) where text.contains(secret) {
            text = text.replacingOccurrences(of: secret, with: "***")
        }
        return text
    }

    /// A progress line on stderr, only when stderr is a terminal.
    func progress(_ text: String) {
        guard stderrIsTerminal, sink == nil else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K\(safe(text))".utf8))
    }

    func endProgress() {
        guard stderrIsTerminal, sink == nil else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
    }

    func style(_ text: String, _ code: String) -> String {
        colours ? "\u{1B}[\(code)m\(text)\u{1B}[0m" : text
    }

    func bold(_ text: String) -> String { style(text, "1") }
    func dim(_ text: String) -> String { style(text, "2") }
    func red(_ text: String) -> String { style(text, "31") }
    func green(_ text: String) -> String { style(text, "32") }
    func yellow(_ text: String) -> String { style(text, "33") }
}

struct Root: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "purchase-ledger",
        abstract: "Replay, inspect and verify a purchase ledger: in-app purchases and their hosted-content downloads.",
        discussion: """
            A ledger is one SQLite file holding every payment, download-state change and finish call as an \
            event. Start with `purchase-ledger demo` to see what the tool shows.

            Examples:
              purchase-ledger demo                      # writes ./demo.ledger
              purchase-ledger replay demo.ledger --first-anomaly
              purchase-ledger timeline demo.ledger --transaction t1
              purchase-ledger report demo.ledger --view undelivered
              purchase-ledger verify demo.ledger --all

            Exit status: 0 success; 1 a rule rejected the input, verify found a problem, or forget cannot \
            erase without breaking the chain; 2 malformed input, bad usage, or a transaction, download or \
            user the ledger never held (asked for by id); 3 storage or I/O failure.
            """,
        subcommands: [
            AppendCommand.self, ImportCommand.self, ExportCommand.self, ReplayCommand.self, EventsCommand.self,
            TimelineCommand.self, ExtractCommand.self, VerifyCommand.self, RebuildCommand.self, ReportCommand.self, ForgetCommand.self,
            ShipCommand.self, MigrateCommand.self, KeygenCommand.self, CheckpointCommand.self, StatsCommand.self, DemoCommand.self,
            AppleImportCommand.self, ServeCommand.self, TokenCommand.self, PushCommand.self, PullCommand.self,
        ]
    )
}

/// Options every command that opens a ledger takes.
struct LedgerOptions: ParsableArguments {
    @Argument(help: "The ledger file.", completion: .file(extensions: ["ledger"]))
    var ledger: String

    @Option(name: .customLong("key-file"), help: "A file holding the secret key of a keyed (HMAC) hash chain.", completion: .file())
    var keyFile: String?

    @Option(
        name: .customLong("apple-bundle-id"),
        help: "The app's bundle id: Apple's signed transactions for another app are invalid evidence. Recorded in the ledger by a command that writes.")
    var appleBundleID: String?

    func configuration(readOnly: Bool) throws -> LedgerConfiguration {
        var configuration = LedgerConfiguration()
        configuration.readOnly = readOnly
        configuration.chainKey = try keyFile.map(Self.chainKey(fromFile:))
        configuration.appleBundleID = appleBundleID
        // Fault injection for the test suite: end the process as a kill would, right after an
        // erasure's commit (before its checkpoint), to show the next open finishes it.
        if ProcessInfo.processInfo.environment["PURCHASE_LEDGER_FAULT"] == "exit-after-erasure-commit" {
            configuration.afterErasureCommit = { _exit(137) }
        }
        return configuration
    }

    /// The secret key of a keyed (HMAC) hash chain, from a file: its bytes as they are (a
    /// trailing newline is part of the key). Refused when shorter than 16 bytes (guessable) or
    /// readable by group or others (`chmod 600` it): a key anyone on the machine can read keys
    /// nothing.
    static func chainKey(fromFile path: String) throws -> [UInt8] {
        let key = try KeyFiles.read(path, what: "the key file", secret: true)
        guard key.count >= 16 else {
            throw LedgerError.make(.malformedInput, "the key file \(path) holds \(key.count) bytes; a chain key needs at least 16 (head -c 32 /dev/urandom > \(path))")
        }
        return [UInt8](key)
    }

    /// Opens an existing ledger; `readOnly` ones are never changed, not even caught up. An empty
    /// file is no ledger for any command that opens one (a truncated ledger, or a placeholder):
    /// refused, and left as it is, zero bytes, rather than made a new ledger by a command that
    /// was not asked to create one.
    func open(readOnly: Bool = true) throws -> Ledger {
        guard FileManager.default.fileExists(atPath: ledger) else {
            throw LedgerError.io("no ledger at \(ledger)")
        }
        if !readOnly && Self.isEmptyFile(ledger) {
            throw LedgerError.make(
                .notALedger, "\(ledger) is an empty file, not a ledger (truncated? restore it from a backup); nothing was written")
        }
        return try Ledger(path: ledger, configuration: configuration(readOnly: readOnly))
    }

    /// Whether `path` is a file of zero bytes.
    static func isEmptyFile(_ path: String) -> Bool {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1) == 0
    }

    /// Streams `reader` into the ledger in one atomic write, creating the ledger when missing.
    /// The rules run once, and a refusal writes nothing: an existing file is left exactly as it
    /// was, and a ledger this call created is removed again, so a refused first append leaves
    /// nothing.
    func importJSONLines(_ reader: JSONLinesReader, progress: ((ImportProgress) -> Void)? = nil) throws -> ImportSummary {
        let existed = FileManager.default.fileExists(atPath: ledger)
        // An empty file is made a ledger by the events it takes; refused, it is empty again.
        let empty = existed && Self.isEmptyFile(ledger)
        do {
            return try Ledger(path: ledger, configuration: configuration(readOnly: false)).importJSONLines(from: reader, progress: progress)
        } catch {
            // The Ledger is released by now, so its connections are closed.
            if !existed {
                for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: ledger + suffix) }
            } else if empty {
                for suffix in ["-wal", "-shm"] { try? FileManager.default.removeItem(atPath: ledger + suffix) }
                if let handle = FileHandle(forWritingAtPath: ledger) {
                    try? handle.truncate(atOffset: 0)
                    try? handle.close()
                }
            }
            throw error
        }
    }
}

extension LedgerError {
    static func io(_ message: String) -> LedgerError {
        LedgerError.make(.io, message)
    }
}

/// What `what` (an option, or a command) says of `value` when it is not a fleet store's URL; an
/// empty value is most often a variable left unset (`"$FLEET_SHIP"` before `eval "$(fleet-up.sh)"`).
func notAURL(_ what: String, _ value: String) -> String {
    value.isEmpty
        ? "\(what) was given an empty string, not a postgres:// URL (a variable such as $FLEET_SHIP left unset?)"
        : "\(what) takes a postgres:// URL, not \(FleetAddress.redacted(value))"
}
