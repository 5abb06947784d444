import Foundation
import GRDB
import PostgresNIO
import PurchaseLedgerServer
import PurchaseLedgerUploader
import Testing

@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting
import PurchaseLedgerTesting

/// `purchase-ledger serve` as a separate process on loopback, in front of a real PostgreSQL.
///
/// Spawned with posix_spawn, every descriptor of this process above stderr closed in the child,
/// and reaped with waitpid: Foundation's Process lets a child inherit descriptors it watches for
/// other children, so a long-running service started beside a test that runs the CLI kept that
/// test waiting for the service's exit (a hang seen once in a full run).
final class ServiceProcess: @unchecked Sendable {  // unchecked: `pid` is touched by one thread at a time
    let port: Int
    let arguments: [String]
    let log: String
    private var pid: pid_t = 0
    private(set) var url = ""

    init(fleet: String, port: Int = (try? LocalPostgres.freePort()) ?? 0, extra: [String] = [], log: String) {
        self.port = port
        arguments = ["serve", "--fleet", fleet, "--listen", "127.0.0.1:\(port)"] + extra
        self.log = log
    }

    /// Starts it and waits until it listens.
    func start() throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // glibc's posix_spawn_file_actions_addclosefrom_np (2.34 and later), which Glibc's module
        // does not declare: found at run time.
        typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "posix_spawn_file_actions_addclosefrom_np") else {
            throw LocalPostgres.Failure(description: "this libc has no posix_spawn_file_actions_addclosefrom_np")
        }
        _ = unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3)
        let argv = ([binary] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, binary, &actions, nil, argv, environ)
        guard spawned == 0 else { throw LocalPostgres.Failure(description: "cannot run serve: error \(spawned)") }
        pid = child
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").first(where: { $0.hasPrefix("listening on ") }) {
                url = String(line.dropFirst("listening on ".count))
                return
            }
            var status: Int32 = 0
            if waitpid(child, &status, WNOHANG) == child {
                pid = 0
                throw LocalPostgres.Failure(description: "serve exited: \(text)")
            }
            usleep(20_000)
        }
        throw LocalPostgres.Failure(description: "serve did not listen within 30 s")
    }

    /// Ends it with `signal` and waits; its exit status (128 + the signal when a signal ended it).
    @discardableResult
    func stop(_ signal: Int32 = SIGKILL) -> Int32 {
        guard pid > 0 else { return 0 }
        kill(pid, signal)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        pid = 0
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    }

    deinit { _ = stop() }
}

/// The ingest service (#52): devices upload over HTTP(S) into the fleet store, exactly once,
/// through the real service on loopback and a real PostgreSQL; support pulls a ledger back.
@Suite(.serialized, .enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct IngestTests {
    /// A fleet store with the documented roles (this test's names) and a token; its ingest and
    /// reporting URLs, the owner's, and the token.
    static func fleet() throws -> (server: LocalPostgres, owner: String, ingest: String, report: String, token: String) {
        let (server, owner) = try FleetServer.database()
        let database = String(owner.split(separator: "/").last!)
        let suffix = "_" + database.suffix(8)
        try server.psql(try FleetProductionTests.documentedSQL("roles.sql", suffix: suffix), database: database)
        try server.psql(try FleetProductionTests.documentedSQL("grants.sql", suffix: suffix), database: database)
        let token = try cli(["token", "create", owner, "--name", "devices"])
        guard token.status == 0 else { throw LocalPostgres.Failure(description: token.stderr) }
        return (
            server, owner, server.url(database: database, password: "change-me-four", user: "ledger_ingest" + suffix),
            server.url(database: database, password: "change-me-too", user: "ledger_report" + suffix), token.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        )
    }

    /// One raw request through the CLI's transport.
    static func send(
        _ url: String, method: String = "POST", token: String?, body: [UInt8]? = nil, protocolVersion: String? = "1"
    ) async throws -> (status: Int, json: [String: Any], headers: [String: String]) {
        let transport = try HTTPClientTransport()
        var headers: [String: String] = [:]
        if let token { headers["Authorization"] = "Bearer \(token)" }
        if let protocolVersion { headers["Purchase-Ledger-Protocol"] = protocolVersion }
        let response = try await transport.send(UploadRequest(method: method, url: URL(string: url)!, headers: headers, body: body.map { Data($0) }))
        try await transport.shutdown()
        return (response.status, (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:], response.headers)
    }

    static func storedEvents(_ fleet: FleetStore, _ id: String) async throws -> Int64 {
        try await fleet.fetchRows(PostgresQuery(unsafeSQL: "SELECT coalesce(sum(last_seq - first_seq + 1), 0)::int8 AS n FROM event_blocks WHERE ledger_id = '\(id)'::uuid"))
            .first?["n"]?.int64 ?? -1
    }

    @Test func uploadsAreStoredOncePulledBackWholeAndEveryBadRequestGetsItsAnswer() async throws {
        let (_, owner, ingest, report, token) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let service = ServiceProcess(fleet: ingest, extra: ["--max-body-bytes", "200000"], log: dir.path("serve.log"))
        try service.start()
        let base = service.url
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        let ledger = try Ledger(path: path)
        let id = try #require(try ledger.identity()?.id)

        // The library's uploader, over URLSession: two batches of 6, then nothing to send.
        let uploader = LedgerUploader(ledger: ledger, endpoint: URL(string: base)!, token: token, batchSize: 6)
        let first = try await uploader.upload()
        let last = try ledger.lastSeq()
        #expect(first.stored == Int(last) && first.batches == Int((last + 5) / 6) && first.seq == last)
        let status = await uploader.status
        #expect(status.lag == 0 && status.acknowledged == last && status.lastError == nil)
        #expect(try await uploader.upload().stored == 0)
        let fleet = try await FleetStore.connect(owner)
        #expect(try await Self.storedEvents(fleet, id) == last)

        // The CLI's push, after new events: only those are sent.
        _ = try ledger.append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-02T09:00:00Z","transaction":"t9","product":"book","user":"bob"}"#))
        let tokenFile = dir.path("token")
        try token.write(toFile: tokenFile, atomically: true, encoding: .utf8)
        chmod(tokenFile, 0o600)
        let pushed = try cli(["push", path, "--to", base, "--token-file", tokenFile])
        #expect(pushed.status == 0 && pushed.stdout.contains("stored 1 event in 1 request") && !pushed.stdout.contains(token), "\(pushed.stdout)\(pushed.stderr)")
        #expect(try cli(["push", path, "--to", base], environment: ["PURCHASE_LEDGER_TOKEN": token]).stdout.contains("up to date"))

        // Pulled back: verifies, and exports byte for byte as the device's file does.
        let pulled = dir.path("pulled.ledger")
        let pull = try cli(["pull", report, "--ledger", id, "-o", pulled])
        #expect(pull.status == 0, "\(pull.stderr)")
        #expect(try cli(["verify", pulled]).status == 0)
        #expect(try cli(["export", pulled]).stdout == (try cli(["export", path]).stdout))
        let appended = try cli(["append", pulled, "-"], stdin: #"{"type":"restoreCompleted","at":"2024-03-05T09:00:00Z"}"#)
        #expect(appended.status == 3 && appended.stderr.contains("pulledCopy"), "a pulled copy is read-only: \(appended.stderr)")

        let eventsURL = "\(base)/v1/ledgers/\(id)/events"
        let oldBody = try #require(try ledger.upload(after: 0, link: nil, limit: 3)).encoded()
        let before = try await Self.storedEvents(fleet, id)
        // A replayed old body, and the same body twice at once: the same head, nothing stored.
        let replayed = try await Self.send(eventsURL, token: token, body: oldBody)
        #expect(replayed.status == 200 && replayed.json["seq"] as? Int64 == last + 1 && replayed.json["stored"] as? Int == 0, "\(replayed.json)")
        async let a = Self.send(eventsURL, token: token, body: oldBody)
        async let b = Self.send(eventsURL, token: token, body: oldBody)
        #expect(try await [a.status, b.status] == [200, 200])
        // A wrong token, none, a revoked one.
        #expect(try await Self.send(eventsURL, token: "plt_nope", body: oldBody).status == 401)
        let none = try await Self.send(eventsURL, token: nil, body: oldBody)
        #expect(none.status == 401 && none.headers["www-authenticate"] == "Bearer")
        // An unknown protocol version, a body that is not an upload, a body over the limit.
        let version = try await Self.send(eventsURL, token: token, body: oldBody, protocolVersion: "2")
        #expect(version.status == 400 && version.json["error"] as? String == "unsupportedProtocol")
        #expect(try await Self.send(eventsURL, token: token, body: Array("hello".utf8)).status == 400)
        let large = try await Self.send(eventsURL, token: token, body: [UInt8](repeating: 7, count: 300_000))
        #expect(large.status == 413 && large.json["error"] as? String == "tooLarge")
        // Another ledger's id: a head signed by another key for this id (the key does not derive it).
        var forged = try #require(try ledger.upload(after: 0, link: nil, limit: 3))
        forged.head = try Checkpoint(ledgerID: id, seq: forged.head.seq, link: forged.head.link, at: .now, key: CheckpointSigningKey())
        let stolen = try await Self.send(eventsURL, token: token, body: forged.encoded())
        #expect(stolen.status == 403 && stolen.json["error"] as? String == "keyMismatch", "\(stolen.json)")
        // A body whose head was edited after signing.
        var edited = try #require(try ledger.upload(after: 0, link: nil, limit: 3))
        edited.head.seq = 2
        #expect(try await Self.send(eventsURL, token: token, body: edited.encoded()).json["error"] as? String == "badSignature")
        // A body for another path.
        #expect(try await Self.send("\(base)/v1/ledgers/\(UUID().uuidString.lowercased())/events", token: token, body: oldBody).status == 400)

        // A forked history: a copy of the file (its key too) that recorded something else.
        let copy = dir.path("copy.ledger")
        // The file and its WAL, as a backup tool copies them (nothing writes meanwhile).
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: path + suffix) {
            try FileManager.default.copyItem(atPath: path + suffix, toPath: copy + suffix)
        }
        _ = try ledger.append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-06T09:00:00Z","transaction":"t10","product":"book","user":"bob"}"#))
        try await uploader.upload()
        _ = try Ledger(path: copy).append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-06T09:00:00Z","transaction":"t11","product":"book","user":"eve"}"#))
        let forkBody = try #require(try Ledger(path: copy).upload(after: last + 1, link: nil)).encoded()
        let fork = try await Self.send(eventsURL, token: token, body: forkBody)
        #expect(fork.status == 409 && fork.json["error"] as? String == "fork" && fork.json["seq"] as? Int64 == last + 2, "\(fork.json)")
        let forkPush = try cli(["push", copy, "--to", base, "--token-file", tokenFile])
        #expect(forkPush.status == 1 && forkPush.stderr.contains("seq \(last + 2)"), "the device sees the fork itself: \(forkPush.stderr)")
        #expect(try await Self.storedEvents(fleet, id) == before + 1, "none of the refused requests stored anything")

        // A gap: events that start past the store's head.
        _ = try ledger.append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-07T09:00:00Z","transaction":"t12","product":"book","user":"bob"}"#))
        _ = try ledger.append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-07T09:00:01Z","transaction":"t13","product":"book","user":"bob"}"#))
        let gap = try await Self.send(eventsURL, token: token, body: try #require(try ledger.upload(after: last + 3, link: nil)).encoded())
        #expect(gap.status == 409 && gap.json["error"] as? String == "gap" && (gap.json["head"] as? [String: Any])?["seq"] as? Int64 == last + 2)

        // A connection cut in the middle of a body: nothing is stored, the service goes on.
        let pending = try #require(try ledger.upload(after: last + 2, link: nil)).encoded()
        let socket = try Self.connect(service.port)
        let head =
            "POST /v1/ledgers/\(id)/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(token)\r\nPurchase-Ledger-Protocol: 1\r\nContent-Length: \(pending.count)\r\n\r\n"
        _ = Array(head.utf8).withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
        _ = Array(pending.prefix(pending.count / 2)).withUnsafeBytes { write(socket, $0.baseAddress, $0.count) }
        close(socket)
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await Self.storedEvents(fleet, id) == last + 2)
        #expect(try await uploader.upload().stored == 2)

        // A revoked token is refused from the next request.
        #expect(try cli(["token", "revoke", owner, "devices"]).status == 0)
        try await Task.sleep(for: .milliseconds(1100))  // the service trusts a token it checked for a second
        #expect(try await Self.send("\(base)/v1/ledgers/\(id)/head", method: "GET", token: token).status == 401)
        let listed = try cli(["token", "list", owner])
        #expect(listed.stdout.contains("devices") && listed.stdout.contains("revoked") && !listed.stdout.contains(token))
        await fleet.close()
        #expect(service.stop(SIGTERM) == 0, "SIGTERM stops it cleanly")
        #expect(try String(contentsOfFile: service.log, encoding: .utf8).contains("stopped"))
    }

    /// 20 devices record and upload at once while the service is killed (SIGKILL) 20 times and
    /// started again on the same port: afterwards the fleet holds every device's events exactly
    /// once, each ledger pulls back to its device's export, and the fleet audit finds nothing.
    @Test func twentyDevicesUploadWhileTheServiceIsKilledTwentyTimes() async throws {
        let (_, owner, ingest, _, token) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let lines = try String(contentsOfFile: try Workload.file(events: 6_000), encoding: .utf8).split(separator: "\n")
        let devices = GrowingDevices(events: try lines.map { try JSONLines.decode(String($0)) }, devices: 20, rounds: 12, directory: dir.path(""))
        let service = ServiceProcess(fleet: ingest, extra: ["--rate", "10000"], log: dir.path("serve.log"))
        try service.start()
        let endpoint = try #require(URL(string: service.url))
        let transport = try HTTPClientTransport(timeoutSeconds: 10)
        let killing = Locked(true)
        let rounds = devices.rounds
        // On a thread of its own: its waits block, and the cooperative pool is the devices'.
        let kills = Locked(0)
        Thread.detachNewThread {
            var random = SplitMix(seed: 52)
            for _ in 0..<20 {
                usleep(UInt32(Int.random(in: 150...450, using: &random)) * 1000)
                service.stop(SIGKILL)
                kills.withLock { $0 += 1 }
                try? service.start()
            }
            killing.withLock { $0 = false }
        }
        let failures = Locked(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, path) in devices.paths.enumerated() {
                group.addTask {
                    var round = 0
                    var uploader: LedgerUploader?
                    while killing.withLock({ $0 }) || round < rounds {
                        if round < rounds {
                            try devices.grow(round, device: index)
                            round += 1
                        }
                        if uploader == nil {
                            // Half the devices retry a request once; the others give up at once, so
                            // that uploads meeting a killed service fail whatever the timing (with a
                            // retry each, the service was back in time for every one in a CI run).
                            uploader = LedgerUploader(
                                ledger: try Ledger(path: path), endpoint: endpoint, token: token, transport: transport, batchSize: 97,
                                maxAttempts: index % 2 == 0 ? 1 : 2)
                        }
                        do { try await uploader!.upload() } catch { failures.withLock { $0 += 1 } }
                        try await Task.sleep(for: .milliseconds(40))
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(kills.withLock { $0 } == 20)
        // The service stays up now: each device's uploader catches up from the service's head.
        for path in devices.paths {
            let uploader = LedgerUploader(ledger: try Ledger(path: path), endpoint: endpoint, token: token, transport: transport)
            try await uploader.upload()
            #expect(await uploader.status.lag == 0)
        }
        try await transport.shutdown()
        #expect(failures.withLock { $0 } > 0, "some uploads met a killed service")
        let fleet = try await FleetStore.connect(owner)
        for path in devices.paths {
            let ledger = try Ledger(path: path)
            let id = try #require(try ledger.identity()?.id)
            #expect(try await Self.storedEvents(fleet, id) == (try ledger.lastSeq()), "every event exactly once")
            let pulled = dir.path("pulled-\(id).ledger")
            #expect(try cli(["pull", owner, "--ledger", id, "-o", pulled]).status == 0)
            #expect(try cli(["export", pulled]).stdout == (try cli(["export", path]).stdout))
        }
        await fleet.close()
        let audit = try cli(["verify", owner])
        #expect(audit.status == 0 && audit.stdout.contains("ok: 20 ledgers"), "\(audit.stdout)\(audit.stderr)")
        service.stop(SIGTERM)
    }

    /// HTTPS with a certificate of the test's own CA: push trusts it with --ca and refuses the
    /// service under another CA; plain HTTP is refused off loopback.
    @Test func theServiceSpeaksTLSAndPlainHTTPOnlyOnLoopback() async throws {
        let (_, _, ingest, _, token) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let certificates = try TestCertificates(in: dir)
        let open = try cli(["serve", "--fleet", ingest, "--listen", "0.0.0.0:0"])
        #expect(open.status == 2 && open.stderr.contains("--insecure-http"), "\(open.stderr)")
        #expect(IngestServiceConfiguration.isLoopback("127.0.0.1") && !IngestServiceConfiguration.isLoopback("127.mitm.example"))
        let service = ServiceProcess(
            fleet: ingest, extra: ["--tls-cert", certificates.certificate, "--tls-key", certificates.key], log: dir.path("serve.log"))
        try service.start()
        #expect(service.url.hasPrefix("https://"))
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        let url = "https://localhost:\(service.port)"
        let environment = ["PURCHASE_LEDGER_TOKEN": token]
        let pushed = try cli(["push", path, "--to", url, "--ca", certificates.ca], environment: environment)
        #expect(pushed.status == 0 && pushed.stdout.contains("stored"), "\(pushed.stdout)\(pushed.stderr)")
        let untrusted = try cli(["push", path, "--to", url, "--ca", certificates.otherCA], environment: environment)
        #expect(untrusted.status == 3 && !untrusted.stderr.contains(token), "\(untrusted.stderr)")
        service.stop(SIGTERM)
    }

    /// App Store Server Notifications V2 posted to the service are stored as apple-import stores
    /// them, once, and only when Apple's signature verifies.
    @Test func appleNotificationsAreStoredOnceAndOnlySigned() async throws {
        let (_, owner, ingest, _, _) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let docs = try ReconciliationTests()
        try docs.chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        let service = ServiceProcess(
            fleet: ingest, extra: ["--apple-notifications", "--apple-root", dir.path("root.pem")], log: dir.path("serve.log"))
        try service.start()
        let notification = try docs.notification("REFUND", uuid: "n-1", transaction: try docs.signed("1001", revoked: true))
        let url = "\(service.url)/v1/apple/notifications"
        let first = try await Self.send(url, token: nil, body: Array(notification.utf8), protocolVersion: nil)
        #expect(first.status == 200 && first.json["notifications"] as? Int == 1, "\(first.json)")
        #expect(try await Self.send(url, token: nil, body: Array(notification.utf8), protocolVersion: nil).status == 200, "Apple's retry")
        // Signed by another chain: refused, nothing stored, so Apple retries it.
        let stranger = try ReconciliationTests().notification("REFUND", uuid: "n-2", transaction: try docs.signed("1002", revoked: true))
        let refused = try await Self.send(url, token: nil, body: Array(stranger.utf8), protocolVersion: nil)
        #expect(refused.status == 422, "\(refused.json)")
        let fleet = try await FleetStore.connect(owner)
        let rows = try await fleet.fetchRows(PostgresQuery(unsafeSQL: "SELECT notification_uuid FROM apple_notifications"))
        #expect(rows.map { $0.string("notification_uuid") } == ["n-1"])
        await fleet.close()
        service.stop(SIGTERM)
    }

    /// Shipped ledgers pull back too (ship stores their personal values), and after the fleet's
    /// `forget` the pulled copy still verifies, with the user masked and the erasure counted.
    @Test func shippedLedgersPullBackAndAForgottenUserStaysErasedInTheCopy() async throws {
        let (_, owner, _, _, _) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        #expect(try cli(["ship", path, "--to", owner]).status == 0)
        let id = try #require(try Ledger(path: path).identity()?.id)
        let pulled = dir.path("pulled.ledger")
        #expect(try cli(["pull", owner, "--ledger", id, "-o", pulled]).status == 0)
        #expect(try cli(["verify", pulled]).status == 0)
        #expect(try cli(["export", pulled]).stdout == (try cli(["export", path]).stdout))
        let again = try cli(["pull", owner, "--ledger", id, "-o", pulled])
        #expect(again.status == 3 && again.stderr.contains("exists already"), "\(again.stderr)")

        let user = try #require(try Ledger(path: path).currentState.transactions.values.compactMap(\.user).first)
        #expect(try cli(["forget", owner, "--user", user]).status == 0)
        let fleet = try await FleetStore.connect(owner)
        let values = try await fleet.fetchRows(PostgresQuery(unsafeSQL: "SELECT value FROM personal_values"))
        #expect(!values.contains { $0.bytes("value") == Array(user.utf8) }, "the user's id is gone from the store's values")
        await fleet.close()
        let byUser = dir.path("by-user")
        let none = try cli(["pull", owner, "--user", user, "-o", byUser])
        #expect(none.status == 2, "the store no longer names the user: \(none.stderr)")
        let masked = dir.path("masked.ledger")
        #expect(try cli(["pull", owner, "--ledger", id, "-o", masked]).status == 0)
        let verified = try cli(["verify", masked])
        #expect(verified.status == 0, "\(verified.stdout)\(verified.stderr)")
        let exported = try cli(["export", masked]).stdout
        #expect(!exported.contains(user) && exported.contains("[erased "), "the copy holds the user masked")
    }

    /// A device that erases a user after uploading: its next upload carries the erasure, the store
    /// drops the user's values and masks the rows, and the ledger pulls back as the device holds it.
    @Test func anErasureOnTheDeviceReachesTheStoreThroughTheNextUpload() async throws {
        let (_, owner, ingest, _, token) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let service = ServiceProcess(fleet: ingest, log: dir.path("serve.log"))
        try service.start()
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        let ledger = try Ledger(path: path)
        let transport = try HTTPClientTransport()
        let uploader = LedgerUploader(ledger: ledger, endpoint: URL(string: service.url)!, token: token, transport: transport)
        try await uploader.upload()
        let user = try #require(ledger.currentState.transactions.values.compactMap(\.user).first)
        _ = try ledger.forget(user: user)
        let erasure = try await uploader.upload()
        try await transport.shutdown()
        #expect(erasure.stored == 1, "the erasure event")
        let fleet = try await FleetStore.connect(owner)
        let id = try #require(try ledger.identity()?.id)
        let named = try await fleet.fetchRows(PostgresQuery(unsafeSQL: "SELECT count(*) AS n FROM transactions WHERE user_id = '\(user)'"))
        #expect(named.first?["n"]?.int64 == 0, "no row names the user")
        let values = try await fleet.fetchRows(PostgresQuery(unsafeSQL: "SELECT value FROM personal_values WHERE ledger_id = '\(id)'::uuid"))
        #expect(!values.contains { $0.bytes("value") == Array(user.utf8) })
        await fleet.close()
        let pulled = dir.path("pulled.ledger")
        #expect(try cli(["pull", owner, "--ledger", id, "-o", pulled]).status == 0)
        #expect(try cli(["verify", pulled]).status == 0)
        #expect(try cli(["export", pulled]).stdout == (try cli(["export", path]).stdout))
        let audit = try cli(["verify", owner])
        #expect(audit.status == 0, "\(audit.stdout)\(audit.stderr)")
        service.stop(SIGTERM)
    }

    /// A token past its rate is answered 429 with Retry-After, and the uploader waits as long.
    @Test func aTokenPastItsRateIsToldWhenToComeBack() async throws {
        let (_, _, ingest, _, token) = try Self.fleet()
        let dir = try TemporaryDirectory()
        let service = ServiceProcess(fleet: ingest, extra: ["--rate", "1"], log: dir.path("serve.log"))
        try service.start()
        let head = "\(service.url)/v1/ledgers/\(UUID().uuidString.lowercased())/head"
        var statuses: [Int] = []
        var retryAfter: String?
        for _ in 0..<3 {
            let answer = try await Self.send(head, method: "GET", token: token)
            statuses.append(answer.status)
            if answer.status == 429 { retryAfter = answer.headers["retry-after"] }
        }
        #expect(statuses == [200, 200, 429], "a bucket of twice the rate, then 429")
        #expect(retryAfter.flatMap(Int.init).map { $0 >= 1 } == true)
        // The uploader honours it: its upload succeeds once the bucket has refilled.
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        let transport = try HTTPClientTransport()
        let uploader = LedgerUploader(ledger: try Ledger(path: path), endpoint: URL(string: service.url)!, token: token, transport: transport)
        let report = try await uploader.upload()
        try await transport.shutdown()
        #expect(report.stored > 0)
        service.stop(SIGTERM)
    }

    /// Rows shipped before the store kept keys or chain modes (found by a review): a token holder
    /// cannot claim such a ledger's key, nor store a link that does not recompute on it.
    @Test func aLedgerShippedBeforeKeysOrChainModesIsNeitherTakenOverNorRelinked() async throws {
        let (server, owner, ingest, _, token) = try Self.fleet()
        let database = String(owner.split(separator: "/").last!)
        let dir = try TemporaryDirectory()
        let service = ServiceProcess(fleet: ingest, log: dir.path("serve.log"))
        try service.start()
        let path = dir.path("device.ledger")
        try sampleLedger(path)
        let ledger = try Ledger(path: path)
        let id = try #require(try ledger.identity()?.id)
        let transport = try HTTPClientTransport()
        try await LedgerUploader(ledger: ledger, endpoint: URL(string: service.url)!, token: token, transport: transport).upload()
        try await transport.shutdown()
        let last = try ledger.lastSeq()
        _ = try ledger.append(
            try JSONLines.decode(#"{"type":"paymentQueued","at":"2024-03-02T09:00:00Z","transaction":"t9","product":"book","user":"bob"}"#))
        let eventsURL = "\(service.url)/v1/ledgers/\(id)/events"

        // No chain mode recorded: a garbage link, signed by the ledger's own key, is still refused.
        _ = try server.psql("UPDATE ledgers SET chain = NULL WHERE ledger_id = '\(id)'", database: database)
        var relinked = try #require(try ledger.upload(after: last, link: nil))
        relinked.frames[0].link = [UInt8](repeating: 0xEE, count: 32)
        relinked.head = try #require(try ledger.identityStatement(seq: relinked.head.seq, link: relinked.frames[0].link))
        let broken = try await Self.send(eventsURL, token: token, body: relinked.encoded())
        #expect(broken.status == 422 && broken.json["seq"] as? Int64 == last + 1, "\(broken.json)")

        // No key recorded: another key's head is refused, and the row keeps no key.
        _ = try server.psql("UPDATE ledgers SET public_key = NULL WHERE ledger_id = '\(id)'", database: database)
        var claimed = try #require(try ledger.upload(after: last, link: nil))
        claimed.head = try Checkpoint(ledgerID: id, seq: claimed.head.seq, link: claimed.head.link, at: .now, key: CheckpointSigningKey())
        let takeover = try await Self.send(eventsURL, token: token, body: claimed.encoded())
        #expect(takeover.status == 403 && takeover.json["error"] as? String == "keyMismatch", "\(takeover.json)")
        let key = try server.psql("SELECT public_key IS NULL, last_seq FROM ledgers WHERE ledger_id = '\(id)'", database: database)
        #expect(key.trimmingCharacters(in: .whitespacesAndNewlines) == "t|\(last)")
        // Its device's ship records the key; uploads go on.
        #expect(try cli(["ship", path, "--to", owner]).status == 0)
        service.stop(SIGTERM)
    }

    static func connect(_ port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let result = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard result == 0 else { throw LocalPostgres.Failure(description: "cannot connect to 127.0.0.1:\(port)") }
        return fd
    }
}
