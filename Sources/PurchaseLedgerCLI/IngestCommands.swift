import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet
import PurchaseLedgerServer
import PurchaseLedgerUploaderCore

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run the ingest service: devices upload their ledgers over HTTPS into a fleet store.",
        discussion: """
            Devices send their events with the uploader (PurchaseLedgerUploader, or `push`) and a \
            bearer token (`token create`); each upload is checked (the ledger's signature, its chain, \
            the rules) and stored in one PostgreSQL transaction, so a kill at any moment loses \
            nothing acknowledged. SIGTERM stops accepting and lets uploads in flight finish. \
            docs/ingest.md describes the protocol. Plain HTTP only on a loopback address, unless \
            --insecure-http (behind a TLS proxy). Prints the URL it listens on.

            Exit status: 0 stopped by a signal; 2 bad options; 3 the fleet store or the address failed.

            Examples:
              purchase-ledger serve --fleet postgres://ledger_ingest@db/fleet \\
                  --listen 0.0.0.0:8443 --tls-cert cert.pem --tls-key key.pem
              purchase-ledger serve --fleet "$FLEET_INGEST" --listen 127.0.0.1:8080
            """)

    @Option(help: "The fleet store: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...].")
    var fleet: String

    @Option(help: "HOST:PORT to listen on (port 0: any free port).")
    var listen = "127.0.0.1:8080"

    @Option(name: .customLong("tls-cert"), help: "The server's certificate chain (PEM).", completion: .file())
    var tlsCert: String?

    @Option(name: .customLong("tls-key"), help: "The server's private key (PEM).", completion: .file())
    var tlsKey: String?

    @Flag(name: .customLong("insecure-http"), help: "Allow plain HTTP on an address that is not loopback (behind a TLS proxy).")
    var insecureHTTP = false

    @Option(name: .customLong("max-body-bytes"), help: "The largest request body taken (413 past it).")
    var maxBodyBytes = 8 << 20

    @Option(help: "Requests per second per token (429 with Retry-After past it; bursts of twice as many).")
    var rate = 50.0

    @Option(help: "Connections to the fleet store (uploads stored at once).")
    var connections = 4

    @Option(
        name: .customLong("apple-bundle-id"), help: "The app's bundle id: Apple's signed transactions for another app are invalid evidence.")
    var appleBundleID: String?

    @Flag(name: .customLong("apple-notifications"), help: "Take App Store Server Notifications V2 at POST /v1/apple/notifications.")
    var appleNotifications = false

    @OptionGroup var appleRoots: AppleRootOptions

    func validate() throws {
        guard FleetAddress.isURL(fleet) else { throw ValidationError(notAURL("--fleet", fleet)) }
        _ = try Self.hostAndPort(listen)
        try NumberOption.check("--connections", connections, 1...64)
        try NumberOption.check("--max-body-bytes", maxBodyBytes, 1024...(1 << 30))
        guard rate > 0, rate.isFinite else { throw ValidationError("--rate \(rate) must be positive") }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
    }

    static func hostAndPort(_ text: String) throws -> (String, Int) {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            throw ValidationError("--listen \(text) is not HOST:PORT")
        }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw ValidationError("--listen \(text) names no host") }
        return (host, port)
    }

    func run() async throws {
        guard #available(macOS 14, iOS 17, tvOS 17, visionOS 1, *) else {
            throw ValidationError("serve needs macOS 14 or later (Hummingbird 2)")
        }
        let (host, port) = try Self.hostAndPort(listen)
        var configuration = IngestServiceConfiguration(fleet: fleet, host: host, port: port)
        configuration.tlsCertificate = tlsCert
        configuration.tlsKey = tlsKey
        configuration.insecureHTTP = insecureHTTP
        configuration.maxBodyBytes = maxBodyBytes
        configuration.requestsPerSecond = rate
        configuration.connections = connections
        configuration.appleBundleID = appleBundleID
        if appleNotifications { configuration.appleVerifier = try appleRoots.verifier() }
        let console = Console.current
        do {
            try await IngestService(configuration: configuration).run { url in
                console.print("listening on \(url)")
                console.flush()
            }
        } catch let error as IngestServiceError {
            console.error(error.message)
            throw CommandExit(status: 2)
        }
        console.print("stopped")
    }
}

struct TokenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Make, list and revoke the ingest service's bearer tokens (stored hashed in the fleet store).",
        discussion: """
            A token is printed once, by `token create`; the store keeps only its SHA-256. Run these as \
            the store's owner. A revoked token is refused from the service's next request.

            Examples:
              purchase-ledger token create "$FLEET_OWNER" --name ios-app > ingest.token
              purchase-ledger token list "$FLEET_OWNER"
              purchase-ledger token revoke "$FLEET_OWNER" ios-app
            """,
        subcommands: [Create.self, List.self, Revoke.self])

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a token and print it, once: only its SHA-256 is kept.",
            discussion: """
                Examples:
                  purchase-ledger token create "$FLEET_OWNER" --name ios-app-2026
                """)

        @Argument(help: "The fleet store (a role that may write ingest_tokens: its owner).")
        var url: String

        @Option(help: "The token's name (unique), to list and revoke it by.")
        var name: String

        func validate() throws {
            guard FleetAddress.isURL(url) else { throw ValidationError(notAURL("token create", url)) }
        }

        func run() async throws {
            let token = try await withFleet(url) { try await $0.createToken(name: name) }
            Console.current.print(token)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the tokens: name, made, revoked.")

        @Argument(help: "The fleet store.")
        var url: String

        func validate() throws {
            guard FleetAddress.isURL(url) else { throw ValidationError(notAURL("token list", url)) }
        }

        func run() async throws {
            let tokens = try await withFleet(url) { try await $0.tokens() }
            let console = Console.current
            for token in tokens {
                console.print("\(token.name)\tmade \(token.createdAt)\t" + (token.revokedAt.map { "revoked \($0)" } ?? "live"))
            }
            if tokens.isEmpty { console.print("no tokens") }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a token: the service refuses it from its next request.")

        @Argument(help: "The fleet store.")
        var url: String

        @Argument(help: "The token's name.")
        var name: String

        func validate() throws {
            guard FleetAddress.isURL(url) else { throw ValidationError(notAURL("token revoke", url)) }
        }

        func run() async throws {
            let revoked = try await withFleet(url) { try await $0.revokeToken(name: name) }
            guard revoked else {
                Console.current.error("no live token named \(name)")
                throw CommandExit(status: 2)
            }
            Console.current.print("revoked \(name)")
        }
    }
}

struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Upload a ledger's new events to an ingest service (what the app's uploader does).",
        discussion: """
            Asks the service for its head of this ledger and sends the events after it, in batches, \
            each stored whole or not at all; run it again at any time: nothing is sent twice, nothing \
            is skipped. A retryable failure (no answer, 429, 5xx) is retried with backoff. The token \
            comes from --token-file or PURCHASE_LEDGER_TOKEN, never from the command line.

            Exit status: 0 the service holds every event; 1 the service refused the ledger (a \
            forked history, another ledger's id, the rules); 3 it could not be reached, or the token \
            was refused.

            Examples:
              purchase-ledger push app.ledger --to https://ingest.example.com \\
                  --token-file ingest.token
              PURCHASE_LEDGER_TOKEN=plt_... purchase-ledger push app.ledger \\
                  --to https://127.0.0.1:8443 --ca ca.pem
            """)

    @OptionGroup var ledger: LedgerOptions

    @Option(help: "The ingest service: https://HOST[:PORT] (http:// on loopback).")
    var to: String

    @Option(name: .customLong("token-file"), help: "A file holding the bearer token (mode 0600).", completion: .file())
    var tokenFile: String?

    @Option(help: "Trust only this CA (PEM) for the service's certificate.", completion: .file())
    var ca: String?

    @Option(name: .customLong("batch-size"), help: "Events per request at most.")
    var batchSize = 2_000

    @Flag(help: "Print a JSON summary instead of text.")
    var json = false

    func validate() throws {
        guard let url = URL(string: to), ["http", "https"].contains(url.scheme ?? ""), url.host != nil else {
            throw ValidationError("--to \(to) is not an http(s):// URL")
        }
        try NumberOption.check("--batch-size", batchSize, 1...100_000)
    }

    func run() async throws {
        let console = Console.current
        let token: String
        if let tokenFile {
            token = try KeyFiles.text(tokenFile, what: "the token file", secret: true).trimmingCharacters(in: .whitespacesAndNewlines)
        } else if let fromEnvironment = ProcessInfo.processInfo.environment["PURCHASE_LEDGER_TOKEN"], !fromEnvironment.isEmpty {
            token = fromEnvironment.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            throw ValidationError("give the token with --token-file FILE or in PURCHASE_LEDGER_TOKEN")
        }
        console.secrets.withLock { $0.append(token) }
        let ledger = try Ledger(path: self.ledger.ledger, configuration: self.ledger.configuration(readOnly: true))
        let transport = try HTTPClientTransport(caFile: ca)
        let uploader = LedgerUploader(ledger: ledger, endpoint: URL(string: to)!, token: token, transport: transport, batchSize: batchSize)
        let outcome: Result<LedgerUploader.Report, any Error>
        do {
            outcome = .success(try await uploader.upload())
        } catch {
            outcome = .failure(error)
        }
        try? await transport.shutdown()
        let status = await uploader.status
        switch outcome {
        case .success(let report):
            if json {
                console.printJSON { w in
                    w.field("stored", report.stored)
                    w.field("batches", report.batches)
                    w.field("seq", report.seq)
                    w.field("lag", status.lag)
                }
            } else {
                console.print(
                    report.stored == 0
                        ? "up to date: the service holds every event (seq \(report.seq))"
                        : "stored \(report.stored) event\(report.stored == 1 ? "" : "s") in \(report.batches) request\(report.batches == 1 ? "" : "s"); the service holds seq \(report.seq)"
                )
            }
        case .failure(let error as UploadError):
            console.error("push: \(error)")
            let refusals = ["fork", "gap", "keyMismatch", "badSignature", "refused", "malformed", "ledger"]
            throw CommandExit(status: refusals.contains(error.kind) ? 1 : 3)
        case .failure(let error):
            throw error
        }
    }
}

struct PullCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pull",
        abstract: "Rebuild a device's ledger file from the fleet store, for timeline, replay and extract.",
        discussion: """
            The file holds the same events and hash chain as the device's, its personal values as the \
            store holds them (an erased user's are missing, and the file says so), and the public half \
            of its identity key: `verify` passes on it. It is read-only: its key stayed on the device.

            With --user, every ledger holding that user's transactions is pulled into the folder \
            given with -o, one file each, named by ledger id.

            Exit status: 0 pulled; 2 nothing to pull, or the output exists; 3 the store failed.

            Examples:
              purchase-ledger pull "$FLEET_REPORT" --ledger "$ID" -o ticket.ledger
              purchase-ledger pull "$FLEET_REPORT" --user u-04217 -o ticket-4217/
            """)

    @Argument(help: "The fleet store: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...].")
    var url: String

    @Option(help: "The ledger id to pull.")
    var ledger: String?

    @Option(help: "Pull every ledger holding this user's transactions.")
    var user: String?

    @Option(name: .shortAndLong, help: "The file to write (with --user: a folder, made if missing).")
    var output: String

    func validate() throws {
        guard FleetAddress.isURL(url) else { throw ValidationError(notAURL("pull", url)) }
        guard (ledger == nil) != (user == nil) else { throw ValidationError("give --ledger ID or --user U") }
    }

    func run() async throws {
        let console = Console.current
        let (ledger, user, output) = (self.ledger, self.user, self.output)
        try await withFleet(url) { fleet in
            var ids = [ledger?.lowercased() ?? ""]
            var paths = [output]
            if let user {
                ids = try await fleet.ledgers(ofUser: user)
                guard !ids.isEmpty else {
                    console.error("the fleet store holds no transaction of that user")
                    throw CommandExit(status: 2)
                }
                try FileManager.default.createDirectory(atPath: output, withIntermediateDirectories: true)
                paths = ids.map { (output as NSString).appendingPathComponent("\($0).ledger") }
            }
            for (id, path) in zip(ids, paths) {
                guard let pulled = try await fleet.pull(ledgerID: id) else {
                    console.error("the fleet store holds no event of ledger \(id)")
                    throw CommandExit(status: 2)
                }
                let copy = try Ledger.writePulledCopy(pulled, to: path)
                console.print("\(path): ledger \(id), \(try copy.lastSeq()) events")
            }
        }
    }
}

/// `body`'s result on a connection to the fleet store at `url`, closed after it whatever happens.
func withFleet<T: Sendable>(_ url: String, _ body: (FleetStore) async throws -> T) async throws -> T {
    let fleet = try await FleetStore.connect(url)
    do {
        let result = try await body(fleet)
        await fleet.close()
        return result
    } catch {
        await fleet.close()
        throw error
    }
}
