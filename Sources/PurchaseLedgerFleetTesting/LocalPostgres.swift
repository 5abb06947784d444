import Foundation

/// A throw-away PostgreSQL server for the tests and the benchmark tool: Debian's server binaries
/// (`/usr/lib/postgresql/<version>/bin`), a cluster in a new temporary folder, a free loopback
/// port, password authentication over TCP. As root it runs as the `postgres` user (PostgreSQL
/// refuses to run as root). ``stop()`` stops it and deletes the folder.
package final class LocalPostgres: Sendable {
    package let port: Int
    package let directory: String
    package let password = "fleet-test-password"
    private let bin: String
    private let asUser: String?

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(description: String) { self.description = description }
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE`.
    package func url(database: String = "postgres", password: String? = nil, host: String = "127.0.0.1", user: String = "postgres") -> String {
        "postgres://\(user):\(password ?? self.password)@\(host):\(port)/\(database)"
    }

    /// Starts a server. `durable: false` turns fsync off (tests); the benchmark keeps it on.
    /// `settings` are more `-c name=value` server settings. With `tls` (PEM files of a server
    /// certificate and its key), the server runs with `ssl=on`; `hba` replaces `pg_hba.conf`
    /// (for example `hostssl` lines only, so that plain-text connections over TCP are refused).
    package init(durable: Bool = false, settings: [String] = [], tls: (certificate: String, key: String)? = nil, hba: String? = nil) throws {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        guard let version = versions.compactMap(Int.init).max() else {
            throw Failure(description: "no PostgreSQL server in /usr/lib/postgresql; run Tools/ensure-dependencies.sh --with-postgres")
        }
        bin = "/usr/lib/postgresql/\(version)/bin"
        asUser = getuid() == 0 ? "postgres" : nil
        directory = NSTemporaryDirectory() + "purchase-ledger-pg-\(UUID().uuidString.prefix(8))"
        port = try LocalPostgres.freePort()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let passwordFile = directory + "/password"
        try Data(password.utf8).write(to: URL(fileURLWithPath: passwordFile))
        var settings = settings
        if let tls {
            try FileManager.default.copyItem(atPath: tls.certificate, toPath: directory + "/server.crt")
            try FileManager.default.copyItem(atPath: tls.key, toPath: directory + "/server.key")
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: directory + "/server.key")
            settings += ["ssl=on", "ssl_cert_file=\(directory)/server.crt", "ssl_key_file=\(directory)/server.key"]
        }
        if asUser != nil {
            try LocalPostgres.run("/bin/chown", ["-R", "postgres:postgres", directory])
        }
        do {
            try run(
                "initdb",
                [
                    "-D", directory + "/data", "-U", "postgres", "--auth-host=scram-sha-256", "--auth-local=trust",
                    "--pwfile=\(passwordFile)", "-E", "UTF8", "--locale=C", "--no-sync",
                ])
            if let hba {
                let path = directory + "/data/pg_hba.conf"
                try Data(hba.utf8).write(to: URL(fileURLWithPath: path))
                if asUser != nil { try LocalPostgres.run("/bin/chown", ["postgres:postgres", path]) }
            }
            let options =
                "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1" + (durable ? "" : " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
                + settings.map { " -c \($0)" }.joined()
            try run("pg_ctl", ["-D", directory + "/data", "-l", directory + "/server.log", "-o", options, "-w", "-t", "60", "start"])
        } catch {
            let log = (try? String(contentsOfFile: directory + "/server.log", encoding: .utf8)) ?? ""
            try? FileManager.default.removeItem(atPath: directory)
            throw Failure(description: "\(error)\n\(log.suffix(2000))")
        }
    }

    /// Creates a database, empty.
    package func createDatabase(_ name: String) throws {
        try run("createdb", ["-h", directory, "-p", String(port), "-U", "postgres", name])
    }

    /// Runs SQL through psql on the Unix socket (no password there).
    @discardableResult
    package func psql(_ sql: String, database: String = "postgres") throws -> String {
        try run("psql", ["-h", directory, "-p", String(port), "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
    }

    /// The database as `pg_dump` writes it (plain SQL: every live row).
    package func dump(_ database: String) throws -> String {
        try run("pg_dump", ["-h", directory, "-p", String(port), "-U", "postgres", "-d", database])
    }

    /// Stops the server (immediate shutdown) and deletes its folder. Signals the postmaster
    /// directly rather than running pg_ctl, so it also works from an `atexit` handler, where
    /// Foundation can no longer wait for a child process.
    package func stop() {
        if let text = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8),
            let pid = text.split(separator: "\n").first.flatMap({ Int32($0) })
        {
            kill(pid, SIGQUIT)
            for _ in 0..<500 where kill(pid, 0) == 0 { usleep(10_000) }
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    @discardableResult
    private func run(_ tool: String, _ arguments: [String]) throws -> String {
        if let asUser {
            return try LocalPostgres.run("/usr/sbin/runuser", ["-u", asUser, "--", bin + "/" + tool] + arguments)
        }
        return try LocalPostgres.run(bin + "/" + tool, arguments)
    }

    /// Runs a program and waits for it, its output (stdout and stderr) through a file; throws, with
    /// that output, when it fails. With
    /// posix_spawn and waitpid rather than Foundation's Process: `pg_ctl start` leaves a server
    /// running that inherits the descriptors Process watches, and Process would wait for it.
    @discardableResult
    package static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let outputPath = NSTemporaryDirectory() + "purchase-ledger-pg-output-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: outputPath) }
        #if canImport(Glibc)
            var actions = posix_spawn_file_actions_t()
        #else
            var actions: posix_spawn_file_actions_t?
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o666)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else { throw Failure(description: "cannot run \(executable): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        let exited = status & 0x7f == 0, code = (status >> 8) & 0xff
        guard exited && code == 0 else {
            throw Failure(description: "\(executable) \(arguments.joined(separator: " ")) failed (\(exited ? "status \(code)" : "signal \(status & 0x7f)")): \(text)")
        }
        return text
    }

    /// A free TCP port on 127.0.0.1 (free when asked: bind it soon).
    package static func freePort() throws -> Int {
        #if canImport(Glibc)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
            let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw Failure(description: "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw Failure(description: "no free loopback port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
