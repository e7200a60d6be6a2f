import ArgumentParser
import DocfsCore
#if canImport(Glibc)
import Glibc
#endif

/// Prints a DocfsError as one line on stderr and exits non-zero: the CLI's error boundary.
func exitWithError(_ error: DocfsError) -> Never {
    let text = "docfs: \(error.message.isEmpty ? error.description : error.message)\n"
    printError(text)
    exit(1)
}

/// Runs `body`, turning a DocfsError into a one-line message and exit status 1.
func reportingErrors<T>(_ body: () throws(DocfsError) -> T) -> T {
    do {
        return try body()
    } catch {
        exitWithError(error)
    }
}

/// Writes `text` to standard error as is.
func printError(_ text: String) {
    var text = text
    text.withUTF8 { bytes in
        var offset = 0
        while offset < bytes.count {
            let n = write(2, bytes.baseAddress! + offset, bytes.count - offset)
            if n <= 0 { break }
            offset += n
        }
    }
}
