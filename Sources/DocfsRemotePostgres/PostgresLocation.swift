import Foundation

/// Where a PostgreSQL remote is and how to log in, read as libpq reads a connection URI
/// (issue 22 §1), so a user's URIs, `~/.pgpass` and `PG*` variables work as with psql:
/// `postgresql://[user[:password]@][host[:port][,host[:port]…]][/dbname][?param=value&…]`,
/// parameters `host` (a folder is a Unix socket's), `port`, `user`, `password`, `dbname`,
/// `sslmode`, `sslrootcert`, `passfile`, `connect_timeout`; `PGHOST`, `PGPORT`, `PGUSER`,
/// `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`, `PGSSLROOTCERT`, `PGPASSFILE`, `PGCONNECT_TIMEOUT`
/// fill what the URI leaves out. The password is kept apart from `uri`, which never holds it
/// (what a store records and a log shows).
public struct PostgresLocation: Sendable, Equatable, CustomStringConvertible {
    /// One server to try: a host name or address and port, or a Unix socket folder.
    public struct Server: Sendable, Equatable {
        public var host: String
        public var port: Int

        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        public var isSocketFolder: Bool { host.hasPrefix("/") }
        /// The socket's path when `host` is a folder, as PostgreSQL names it.
        public var socketPath: String { "\(host)/.s.PGSQL.\(port)" }
    }

    /// libpq's `sslmode`.
    public enum TLSMode: String, Sendable, CaseIterable {
        case disable, allow, prefer, require
        case verifyCA = "verify-ca"
        case verifyFull = "verify-full"
    }

    public var servers: [Server]
    public var user: String
    public var database: String
    public var password: String?
    public var tlsMode: TLSMode
    public var rootCertificate: String?
    public var connectTimeout: Double

    /// The URI without its password: what the store records and messages show.
    public var uri: String {
        var text = "postgresql://\(Self.percentEncoded(user))@"
        text += servers.map { server in
            server.isSocketFolder ? "" : "\(server.host.contains(":") ? "[\(server.host)]" : server.host):\(server.port)"
        }.joined(separator: ",")
        text += "/\(Self.percentEncoded(database))"
        var parameters: [String] = []
        let sockets = servers.filter(\.isSocketFolder)
        if let socket = sockets.first {
            parameters.append("host=\(Self.percentEncoded(socket.host))")
            parameters.append("port=\(socket.port)")
        }
        if tlsMode != .prefer { parameters.append("sslmode=\(tlsMode.rawValue)") }
        if let rootCertificate { parameters.append("sslrootcert=\(Self.percentEncoded(rootCertificate))") }
        return parameters.isEmpty ? text : text + "?" + parameters.joined(separator: "&")
    }

    public var description: String { uri }

    /// Reads `text` as libpq would, with `environment` for what it leaves out and the password
    /// file (`passfile`, `PGPASSFILE`, else `~/.pgpass` of `home`) for a password it lacks.
    public init(_ text: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                home: String? = nil, osUser: String? = nil) throws(PostgresLocationError) {
        guard let rest = Self.stripScheme(text) else {
            throw PostgresLocationError("'\(Self.redacted(text))' is not a PostgreSQL URI: write postgresql://user@host:port/database")
        }
        // Split authority, path and query.
        let queryStart = rest.firstIndex(of: "?")
        let beforeQuery = queryStart.map { String(rest[..<$0]) } ?? rest
        let query = queryStart.map { String(rest[rest.index(after: $0)...]) } ?? ""
        let slash = beforeQuery.firstIndex(of: "/")
        let authority = slash.map { String(beforeQuery[..<$0]) } ?? beforeQuery
        let path = slash.map { String(beforeQuery[beforeQuery.index(after: $0)...]) } ?? ""

        var user: String?, password: String?, hostList = ""
        if let at = authority.lastIndex(of: "@") {
            let credentials = String(authority[..<at])
            hostList = String(authority[authority.index(after: at)...])
            if let colon = credentials.firstIndex(of: ":") {
                user = try Self.percentDecoded(String(credentials[..<colon]))
                password = try Self.percentDecoded(String(credentials[credentials.index(after: colon)...]))
            } else {
                user = try Self.percentDecoded(credentials)
            }
        } else {
            hostList = authority
        }
        var database = path.isEmpty ? nil : try Self.percentDecoded(path)

        var parameters: [String: String] = [:]
        for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
            guard let equals = pair.firstIndex(of: "=") else {
                throw PostgresLocationError("the URI's parameter '\(pair)' has no value: write name=value")
            }
            parameters[try Self.percentDecoded(String(pair[..<equals]))] = try Self.percentDecoded(String(pair[pair.index(after: equals)...]))
        }
        let known: Set = ["host", "port", "user", "password", "dbname", "sslmode", "sslrootcert", "passfile",
                          "connect_timeout", "application_name", "target_session_attrs"]
        if let unknown = parameters.keys.sorted().first(where: { !known.contains($0) }) {
            throw PostgresLocationError("the URI's parameter '\(unknown)' is not one docfs knows (\(known.sorted().joined(separator: ", ")))")
        }
        if let value = parameters["user"] { user = value }
        if let value = parameters["password"] { password = value }
        if let value = parameters["dbname"] { database = value }

        // Servers: from the URI's host list, else the host parameter, else PGHOST, else the
        // default socket folder; ports pair with hosts as libpq pairs them.
        var hosts: [String] = []
        var ports: [String] = []
        if !hostList.isEmpty {
            for item in Self.splitHostList(hostList) {
                let (host, port) = try Self.splitHostPort(item)
                hosts.append(try Self.percentDecoded(host))
                ports.append(port)
            }
        }
        if let value = parameters["host"] ?? (hosts.allSatisfy(\.isEmpty) ? environment["PGHOST"] : nil) {
            hosts = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        if let value = parameters["port"] ?? (ports.allSatisfy(\.isEmpty) ? environment["PGPORT"] : nil) {
            ports = value.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        if hosts.isEmpty || hosts.allSatisfy(\.isEmpty) { hosts = ["/var/run/postgresql"] }
        if ports.count == 1, hosts.count > 1 { ports = Array(repeating: ports[0], count: hosts.count) }
        guard ports.isEmpty || ports.count == hosts.count else {
            throw PostgresLocationError("the URI names \(hosts.count) hosts but \(ports.count) ports")
        }
        var servers: [Server] = []
        for (index, host) in hosts.enumerated() {
            let portText = ports.isEmpty ? "" : ports[index]
            let port: Int
            if portText.isEmpty {
                port = 5432
            } else if let number = Int(portText), (1...65535).contains(number) {
                port = number
            } else {
                throw PostgresLocationError("'\(portText)' is not a port number (1 to 65535)")
            }
            servers.append(Server(host: host.isEmpty ? "/var/run/postgresql" : host, port: port))
        }
        self.servers = servers

        let osUserName = osUser ?? environment["USER"] ?? "postgres"
        self.user = user.flatMap { $0.isEmpty ? nil : $0 } ?? environment["PGUSER"] ?? osUserName
        self.database = database.flatMap { $0.isEmpty ? nil : $0 } ?? environment["PGDATABASE"] ?? self.user

        let modeText = parameters["sslmode"] ?? environment["PGSSLMODE"] ?? "prefer"
        guard let mode = TLSMode(rawValue: modeText) else {
            throw PostgresLocationError("sslmode '\(modeText)' is not one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        self.tlsMode = mode
        self.rootCertificate = parameters["sslrootcert"] ?? environment["PGSSLROOTCERT"]
        let timeoutText = parameters["connect_timeout"] ?? environment["PGCONNECT_TIMEOUT"] ?? "10"
        guard let timeout = Double(timeoutText), timeout >= 0 else {
            throw PostgresLocationError("connect_timeout '\(timeoutText)' is not a number of seconds")
        }
        self.connectTimeout = timeout == 0 ? 10 : max(timeout, 2)

        if let password, !password.isEmpty {
            self.password = password
        } else if let fromEnvironment = environment["PGPASSWORD"] {
            self.password = fromEnvironment
        } else {
            let homeFolder = home ?? environment["HOME"] ?? NSHomeDirectory()
            let file = parameters["passfile"] ?? environment["PGPASSFILE"] ?? "\(homeFolder)/.pgpass"
            self.password = PasswordFile(path: file).password(servers: servers, database: self.database, user: self.user)
        }
    }

    /// Keeps the URI's password where libpq looks (`~/.pgpass` of `home`, made mode 0600), so a
    /// daemon that reconnects later finds it without the store holding it; answers the file
    /// written, nil when it gives this password already or there is none to keep.
    public func rememberPassword(home: String) throws(PostgresLocationError) -> String? {
        guard let password, let server = servers.first else { return nil }
        let file = PasswordFile(path: home + "/.pgpass")
        if file.password(servers: servers, database: database, user: user) == password { return nil }
        func escaped(_ text: String) -> String {
            text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: ":", with: "\\:")
        }
        let host = server.isSocketFolder && server.host == "/var/run/postgresql" ? "localhost" : server.host
        let key = [host, String(server.port), database, user].map(escaped).joined(separator: ":") + ":"
        // A line for this very server, database and user is replaced (libpq takes the first match).
        let kept = ((try? String(contentsOfFile: file.path, encoding: .utf8)) ?? "")
            .split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix(key) && !$0.isEmpty }
        let text = (kept + [Substring(key + escaped(password))]).joined(separator: "\n") + "\n"
        let temporary = file.path + ".docfs-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw PostgresLocationError("cannot write \(file.path): \(String(cString: strerror(errno)))") }
        fchmod(fd, 0o600)
        let bytes = Array(text.utf8)
        let written = write(fd, bytes, bytes.count)
        close(fd)
        guard written == bytes.count, rename(temporary, file.path) == 0 else {
            unlink(temporary)
            throw PostgresLocationError("cannot write \(file.path): \(String(cString: strerror(errno)))")
        }
        return file.path
    }

    private static func stripScheme(_ text: String) -> String? {
        for scheme in ["postgresql://", "postgres://"] where text.hasPrefix(scheme) {
            return String(text.dropFirst(scheme.count))
        }
        return nil
    }

    /// `text` with any password in it replaced, for messages about a URI that did not parse.
    static func redacted(_ text: String) -> String {
        guard let rest = stripScheme(text), let at = rest.lastIndex(of: "@"),
              let colon = rest[..<at].firstIndex(of: ":") else {
            return text.replacingOccurrences(of: #"password=[^&]*"#, with: "password=…", options: .regularExpression)
        }
        let scheme = text.dropLast(rest.count)
        return scheme + rest[...colon] + "…" + rest[at...]
    }

    private static func splitHostList(_ list: String) -> [String] {
        var items: [String] = []
        var current = ""
        var inBrackets = false
        for character in list {
            if character == "[" { inBrackets = true }
            if character == "]" { inBrackets = false }
            if character == ",", !inBrackets {
                items.append(current)
                current = ""
            } else {
                current.append(character)
            }
        }
        items.append(current)
        return items
    }

    private static func splitHostPort(_ item: String) throws(PostgresLocationError) -> (String, String) {
        if item.hasPrefix("[") {
            guard let close = item.firstIndex(of: "]") else {
                throw PostgresLocationError("the host '\(item)' opens a [ it does not close")
            }
            let host = String(item[item.index(after: item.startIndex)..<close])
            let after = item[item.index(after: close)...]
            return (host, after.hasPrefix(":") ? String(after.dropFirst()) : "")
        }
        if let colon = item.lastIndex(of: ":") {
            return (String(item[..<colon]), String(item[item.index(after: colon)...]))
        }
        return (item, "")
    }

    static func percentDecoded(_ text: String) throws(PostgresLocationError) -> String {
        guard let decoded = text.removingPercentEncoding else {
            throw PostgresLocationError("'\(text)' has a broken %-escape")
        }
        return decoded
    }

    static func percentEncoded(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return text.addingPercentEncoding(withAllowedCharacters: allowed) ?? text
    }
}

/// A URI, parameter or password file that cannot be used, in words.
public struct PostgresLocationError: Error, CustomStringConvertible, Sendable, Equatable {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// libpq's password file (`~/.pgpass`): lines `host:port:database:user:password`, `*` matching
/// anything, `\:` and `\\` escapes; ignored, as libpq ignores it, when others may read it.
struct PasswordFile {
    var path: String

    func password(servers: [PostgresLocation.Server], database: String, user: String) -> String? {
        guard let attributes = try? FileManager.default.attributesOfItem(atPath: path),
              let permissions = attributes[.posixPermissions] as? Int, permissions & 0o077 == 0,
              let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        let server = servers.first
        let host = server.map { $0.isSocketFolder && $0.host == "/var/run/postgresql" ? "localhost" : $0.host } ?? "localhost"
        let port = String(server?.port ?? 5432)
        for line in text.split(whereSeparator: \.isNewline) where !line.hasPrefix("#") {
            let fields = Self.fields(of: String(line))
            guard fields.count == 5 else { continue }
            let wanted = [host, port, database, user]
            if zip(fields.prefix(4), wanted).allSatisfy({ $0 == "*" || $0 == $1 }) { return fields[4] }
        }
        return nil
    }

    private static func fields(of line: String) -> [String] {
        var fields: [String] = [""]
        var escaped = false
        for character in line {
            if escaped {
                fields[fields.count - 1].append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == ":", fields.count < 5 {
                fields.append("")
            } else {
                fields[fields.count - 1].append(character)
            }
        }
        return fields
    }
}
