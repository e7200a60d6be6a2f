import ArgumentParser
import DocfsThumbnails
#if canImport(Glibc)
import Glibc
#endif

/// `docfs thumbnail-worker` (hidden): the process the daemon starts to make thumbnails, so
/// image decoders run apart from it (see `ThumbnailWorker`). Its standard input is the socket
/// the daemon talks to it on.
struct ThumbnailWorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "thumbnail-worker", shouldDisplay: false)

    func run() throws {
        throw ExitCode(ThumbnailWorker.serve(socket: 0))
    }
}
