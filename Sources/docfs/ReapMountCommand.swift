import ArgumentParser
import DocfsDaemon

/// `docfs reap-mount MOUNTPOINT CONNECTION`: the daemon's reaper (not for people).
struct ReapMountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "reap-mount", shouldDisplay: false)

    @Argument var mountPoint: String
    @Argument var connection: Int

    func run() {
        DeadMountReaper.waitAndReap(mountPoint: mountPoint, connection: connection)
    }
}
