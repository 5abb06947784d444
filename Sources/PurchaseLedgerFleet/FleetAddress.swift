public import Foundation
import NIOSSL
import PostgresNIO

/// Where a fleet store is, and how to reach it: parsed from
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMETERS]`, as libpq reads such a URL.
///
/// Parameters: `sslmode` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`),
/// `sslrootcert` (a PEM file of the certificate authorities to trust; `system` for the system's),
/// `host` (a directory: connect through the Unix socket `DIR/.s.PGSQL.PORT`), `connect_timeout`
/// (seconds). The environment fills what the URL leaves out: `PGUSER`, `PGPASSWORD`,
/// `PGSSLMODE`, `PGSSLROOTCERT`.
///
/// With no `sslmode` anywhere, a loopback host (`localhost`, `127.x.x.x`, `::1`) is `prefer` and
/// any other host is `require`: purchase history never crosses a network in plain text unless
/// `sslmode=disable` says so. A Unix socket never uses TLS (as with libpq).
///
/// Nothing this type prints holds the password: its `description` leaves it out, and an error
/// about a URL shows the URL with the password replaced by `***` (``redacted(_:)``).
public struct FleetAddress: Sendable, CustomStringConvertible {
    /// How a connection uses TLS; the names and meanings are libpq's.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// Plain text only.
        case disable
        /// TLS when the server offers it, plain text otherwise; the certificate is not checked.
        case prefer
        /// TLS or no connection; the certificate is not checked (unless `sslrootcert` is given,
        /// then as `verify-ca`, as libpq does).
        case require
        /// TLS, and the server's certificate must be signed by a trusted authority.
        case verifyCA = "verify-ca"
        /// TLS, a trusted certificate, and the certificate must name the host connected to.
        case verifyFull = "verify-full"
    }

    /// The server's host name or IP address: the URL's, else `host=` (when not a directory), else
    /// `localhost`.
    public var host: String
    /// The server's TCP port (and the socket's number); 5432 when the URL gives none.
    public var port: Int
    /// The database user: the URL's, else `user=`, else `PGUSER`, else `postgres`.
    public var user: String
    /// The password: the URL's, else `password=`, else `PGPASSWORD`; nil when none is given. Never
    /// printed.
    public var password: String?
    /// The database name: the URL's path, else `dbname=`, else the user name.
    public var database: String
    /// The directory of the Unix socket to connect through (`host=/DIR`); nil: connect over TCP.
    public var socketDirectory: String?
    /// How the connection uses TLS: `sslmode`, else `PGSSLMODE`, else the default described above
    /// (`require` with `sslrootcert` is `verify-ca`).
    public var tlsMode: TLSMode
    /// The PEM file of trusted authorities (`sslrootcert`); nil: the system's.
    public var rootCertificates: String?
    /// Seconds to wait for a connection (`connect_timeout`, 1...3600); 10 by default.
    public var connectTimeout: Int64 = 10

    /// Parses `url`, filling what it leaves out from `environment` (`PGUSER`, `PGPASSWORD`, `PGSSLMODE`,
    /// `PGSSLROOTCERT`). Throws ``FleetError`` (`badURL`) naming what is wrong, the password hidden.
    public init(_ url: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let shown = FleetAddress.redacted(url)
        func bad(_ why: String) -> FleetError {
            FleetError(.badURL, "the fleet store URL \(shown) \(why) (the form: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...])")
        }
        guard let schemeEnd = url.range(of: "://"), ["postgres", "postgresql"].contains(url[..<schemeEnd.lowerBound].lowercased()) else {
            throw bad("does not start with postgres://")
        }
        var rest = Substring(url[schemeEnd.upperBound...])
        // The user information ends at the last "@": a password with an unencoded "@", "/", "?"
        // or "#" still parses (libpq wants them percent-encoded; being lenient never prints it).
        var userPart: Substring?
        var passwordPart: Substring?
        if let at = rest.lastIndex(of: "@") {
            let info = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = info.firstIndex(of: ":") {
                userPart = info[..<colon]
                passwordPart = info[info.index(after: colon)...]
            } else {
                userPart = info
            }
        }
        var query: Substring = ""
        if let mark = rest.firstIndex(of: "?") {
            query = rest[rest.index(after: mark)...]
            rest = rest[..<mark]
        }
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        var hostPort = rest
        var path: Substring = ""
        if let slash = rest.firstIndex(of: "/") {
            hostPort = rest[..<slash]
            path = rest[rest.index(after: slash)...]
        }
        var hostText = ""
        var portText: Substring?
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { throw bad("has an IPv6 address without its closing ]") }
            hostText = String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
            let after = hostPort[hostPort.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw bad("has text after its IPv6 address") }
                portText = after.dropFirst()
            }
        } else if let colon = hostPort.lastIndex(of: ":") {
            hostText = String(hostPort[..<colon])
            portText = hostPort[hostPort.index(after: colon)...]
        } else {
            hostText = String(hostPort)
        }
        var parameters: [String: String] = [:]
        for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = FleetAddress.decode(parts[0])
            guard parts.count == 2 else { throw bad("has a parameter \(name) without a value") }
            guard FleetAddress.parameters.contains(name) else {
                throw bad("has an unknown parameter \(name) (known: \(FleetAddress.parameters.sorted().joined(separator: ", ")))")
            }
            parameters[name] = FleetAddress.decode(parts[1])
        }
        func number(_ text: Substring?, _ what: String, _ range: ClosedRange<Int>) throws -> Int? {
            guard let text, !text.isEmpty else { return nil }
            guard let n = Int(text), range.contains(n) else { throw bad("has \(what) \(text.prefix(20)), not a number in \(range.lowerBound)...\(range.upperBound)") }
            return n
        }
        port = try number(portText ?? parameters["port"].map { Substring($0) }, "the port", 1...65535) ?? 5432
        connectTimeout = Int64(try number(parameters["connect_timeout"].map { Substring($0) }, "connect_timeout", 1...3600) ?? 10)
        host = hostText.isEmpty ? (parameters["host"].flatMap { $0.hasPrefix("/") ? nil : $0 } ?? "localhost") : FleetAddress.decode(Substring(hostText))
        user = userPart.map(FleetAddress.decode).flatMap { $0.isEmpty ? nil : $0 } ?? parameters["user"] ?? environment["PGUSER"] ?? "postgres"
        password = passwordPart.map(FleetAddress.decode) ?? parameters["password"] ?? environment["PGPASSWORD"]
        database = FleetAddress.decode(path)
        if database.isEmpty { database = parameters["dbname"] ?? user }
        socketDirectory = parameters["host"].flatMap { $0.hasPrefix("/") ? $0 : nil }
        let modeText = parameters["sslmode"] ?? environment["PGSSLMODE"]
        if let modeText {
            guard let mode = TLSMode(rawValue: modeText) else {
                throw bad("has sslmode=\(modeText.prefix(20)); give one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            tlsMode = mode
        } else {
            tlsMode = FleetAddress.isLoopback(host) ? .prefer : .require
        }
        let root = parameters["sslrootcert"] ?? environment["PGSSLROOTCERT"]
        rootCertificates = root == "system" ? nil : root
        if rootCertificates != nil && tlsMode == .require { tlsMode = .verifyCA }
    }

    static let parameters: Set<String> = ["sslmode", "sslrootcert", "host", "port", "user", "password", "dbname", "connect_timeout", "application_name"]

    /// Whether `text` is meant as a fleet store's URL rather than a ledger path: it begins with
    /// `postgres` or `postgresql`, in any case, then `:` or `/` (so `Postgres://...` is a URL, and a
    /// mistyped `postgres:/u:pw@h/db` is refused as a URL, its password hidden, never opened as a
    /// file whose name would be printed).
    public static func isURL(_ text: String) -> Bool {
        let lower = text.prefix(11).lowercased()
        for scheme in ["postgresql", "postgres"] where lower.hasPrefix(scheme) {
            let next = lower.dropFirst(scheme.count).first
            return next == ":" || next == "/"
        }
        return false
    }

    /// The user information of a URL however its scheme is spelt: what lies between the scheme's
    /// `:`s and `/`s (`postgres://`, `postgres:/`, `postgres//`, `Postgres:`) and the last `@`;
    /// nil without an `@`.
    static func userInformation(_ text: String) -> Substring? {
        guard let at = text.lastIndex(of: "@") else { return nil }
        var start = text.startIndex
        while start < at, text[start].isLetter || "+.-".contains(text[start]) { start = text.index(after: start) }
        // Only a scheme when letters were followed by a separator; else the user information starts at 0.
        guard start < at, text[start] == ":" || text[start] == "/" else { return text[..<at] }
        while start < at, text[start] == ":" || text[start] == "/" { start = text.index(after: start) }
        return text[start..<at]
    }

    /// `text` with any password it holds replaced by `***`: a URL's user information is
    /// everything before its last `@`, and only its user name (before the first `:`) is kept.
    /// Text that is not a URL comes back as it is.
    public static func redacted(_ text: String) -> String {
        guard let info = userInformation(text), let colon = info.firstIndex(of: ":") else {
            // A password may still follow "password=" in the parameters.
            return redactParameter(text)
        }
        return redactParameter(String(text[..<colon] + ":***" + text[info.endIndex...]))
    }

    private static func redactParameter(_ text: String) -> String {
        guard let range = text.range(of: "password=") else { return text }
        let end = text[range.upperBound...].firstIndex(of: "&") ?? text.endIndex
        return String(text[..<range.upperBound]) + "***" + text[end...]
    }

    /// The secrets a command line or environment holds (passwords of fleet URLs, `PGPASSWORD`),
    /// for output filters that must never print them.
    public static func secrets(in arguments: [String], environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        var found: [String] = []
        for argument in arguments where argument.contains("@") || argument.contains("password=") {
            if let address = try? FleetAddress(argument, environment: [:]), let password = address.password, !password.isEmpty {
                found.append(password)
            }
            // A URL that does not parse, or whose scheme is mistyped, may still hold one: everything
            // between the user name and the last "@".
            // (Read both with a scheme and without one: `u:pw@host` has none.)
            for info in [userInformation(argument), argument.lastIndex(of: "@").map { argument[..<$0] }].compactMap({ $0 }) {
                guard let colon = info.firstIndex(of: ":") else { continue }
                let raw = String(info[info.index(after: colon)...])
                if !raw.isEmpty { found += [raw, decode(Substring(raw))] }
            }
            if let range = argument.range(of: "password=") {
                let raw = String(argument[range.upperBound...].prefix { $0 != "&" })
                if !raw.isEmpty { found += [raw, decode(Substring(raw))] }
            }
        }
        if let password = environment["PGPASSWORD"], !password.isEmpty { found.append(password) }
        return Array(Set(found)).sorted { $0.count > $1.count }
    }

    /// Whether `host` is this machine by its address or by `localhost`: `127.0.0.0/8` written as
    /// four decimal numbers, or IPv6's `::1` however it is written. A name that merely begins with
    /// `127.` (`127.example.com`) is a name like any other, resolved by DNS: not loopback.
    static func isLoopback(_ host: String) -> Bool {
        if host.lowercased() == "localhost" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 4,
            parts.allSatisfy({ part in !part.isEmpty && part.count <= 3 && part.allSatisfy { $0.isASCII && $0.isNumber } && Int(part)! <= 255 })
        {
            return parts[0] == "127"
        }
        // IPv6: eight groups once "::" is expanded, all zero but a last 1.
        guard host.contains(":"), host.allSatisfy({ $0.isHexDigit || $0 == ":" }) else { return false }
        let halves = host.components(separatedBy: "::")
        guard halves.count <= 2 else { return false }
        let groups = halves.map { $0.isEmpty ? [] : $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) }
        let given = groups.flatMap { $0 }
        guard given.allSatisfy({ !$0.isEmpty && $0.count <= 4 }), halves.count == 2 ? given.count < 8 : given.count == 8 else { return false }
        let expanded = halves.count == 2 ? groups[0] + Array(repeating: "0", count: 8 - given.count) + groups[1] : given
        return expanded.dropLast().allSatisfy { Int($0, radix: 16) == 0 } && Int(expanded.last!, radix: 16) == 1
    }

    private static func decode(_ text: Substring) -> String {
        String(text).removingPercentEncoding ?? String(text)
    }

    /// The URL without its password.
    public var description: String {
        let where_ = socketDirectory ?? (host.contains(":") ? "[\(host)]" : host)
        return "postgres://\(user)@\(where_):\(port)/\(database)"
    }

    func configuration() throws -> PostgresConnection.Configuration {
        if let socketDirectory {
            return .init(unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)", username: user, password: password, database: database)
        }
        var configuration = PostgresConnection.Configuration(host: host, port: port, username: user, password: password, database: database, tls: try tls())
        configuration.options.connectTimeout = .seconds(connectTimeout)
        return configuration
    }

    /// The TLS of a TCP connection, as `tlsMode` and `rootCertificates` say.
    func tls() throws -> PostgresConnection.Configuration.TLS {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.minimumTLSVersion = .tlsv12
        switch tlsMode {
        case .disable: return .disable
        case .prefer, .require: tls.certificateVerification = .none
        case .verifyCA: tls.certificateVerification = .noHostnameVerification
        case .verifyFull: tls.certificateVerification = .fullVerification
        }
        if let rootCertificates, tlsMode == .verifyCA || tlsMode == .verifyFull {
            guard FileManager.default.isReadableFile(atPath: rootCertificates) else {
                throw FleetError(.tls, "cannot read sslrootcert \(rootCertificates) (the certificate authorities to trust, PEM)")
            }
            do {
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(rootCertificates))
            } catch {
                throw FleetError(.tls, "sslrootcert \(rootCertificates) holds no PEM certificate: \(error)")
            }
        }
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: tls)
        } catch {
            throw FleetError(.tls, "cannot set up TLS for \(self): \(error)")
        }
        return tlsMode == .prefer ? .prefer(context) : .require(context)
    }
}
