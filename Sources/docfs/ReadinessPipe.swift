import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// How a background daemon tells the `docfs mount` that started it whether mounting worked:
/// one line on an inherited pipe, `ok` or `error: MESSAGE`. With no pipe (foreground), errors
/// go to stderr.
struct ReadinessPipe {
    let fd: Int32?

    /// Runs `body`; on failure reports the error (on the pipe, or stderr) and answers nil.
    func reporting<T>(_ body: () throws(DocfsError) -> T) -> T? {
        do {
            return try body()
        } catch {
            let message = error.message.isEmpty ? error.description : error.message
            if let fd {
                send("error: \(message)\n", fd)
            } else {
                printError("docfs: \(message)\n")
            }
            return nil
        }
    }

    func succeed() {
        if let fd { send("ok\n", fd) }
    }

    private func send(_ line: String, _ fd: Int32) {
        _ = line.withCString { write(fd, $0, strlen($0)) }
        close(fd)
    }
}
