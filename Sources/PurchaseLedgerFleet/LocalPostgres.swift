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
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/DATABASE`.
    package func url(database: String = "postgres", password: String? = nil) -> String {
        "postgres://postgres:\(password ?? self.password)@127.0.0.1:\(port)/\(database)"
    }

    /// Starts a server. `durable: false` turns fsync off (tests); the benchmark keeps it on.
    package init(durable: Bool = false) throws {
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
        if asUser != nil {
            try LocalPostgres.run("/bin/chown", ["-R", "postgres:postgres", directory])
        }
        do {
            try run("initdb", ["-D", directory + "/data", "-U", "postgres", "--auth-host=scram-sha-256", "--auth-local=trust",
                               "--pwfile=\(passwordFile)", "-E", "UTF8", "--locale=C", "--no-sync"])
            let options = "-p \(port) -k \(directory) -c listen_addresses=127.0.0.1" + (durable ? "" : " -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
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

    package func stop() {
        _ = try? run("pg_ctl", ["-D", directory + "/data", "-m", "immediate", "-w", "stop"])
        try? FileManager.default.removeItem(atPath: directory)
    }

    @discardableResult
    private func run(_ tool: String, _ arguments: [String]) throws -> String {
        if let asUser {
            return try LocalPostgres.run("/usr/sbin/runuser", ["-u", asUser, "--", bin + "/" + tool] + arguments)
        }
        return try LocalPostgres.run(bin + "/" + tool, arguments)
    }

    @discardableResult
    private static func run(_ executable: String, _ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: "/tmp")
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(executable) \(arguments.joined(separator: " ")) failed (\(process.terminationStatus)): \(text)")
        }
        return text
    }

    private static func freePort() throws -> Int {
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
