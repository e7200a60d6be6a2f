import DocfsCore
import DocfsDaemon
import DocfsProvider
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A change a served store cannot take while mounted (linking it merges it into a remote's
/// items, renumbering them: a mount's nodes, sessions and claims hold the old ids), made
/// with the store unmounted for a moment: every mount of the store is unmounted (app views
/// first), the change is made, and every mount comes back where it was with the options it
/// had, also when the change fails. Nothing is unmounted when one of them is busy.
struct UnmountedForAMoment {
    let layout: StoreLayout

    /// Unmounts the store's mounts, runs `change` (which finds the store unserved), and mounts
    /// them again.
    func run<T>(_ change: () throws(DocfsError) -> T) throws(DocfsError) -> T {
        let mounts = MountRegistry.mounts(ofStore: MountTable.canonical(layout.root))
            .sorted { ($0.app == nil ? 1 : 0) < ($1.app == nil ? 1 : 0) }
        var unmounted: [MountRegistry.Record] = []
        for mount in mounts {
            guard let point = mount.mountPoint else { continue }
            guard UnmountCommand.unmount(point) else {
                let back = remount(unmounted.reversed())
                throw DocfsError(.storeBusy, "\(point) is busy: close the files and shells using it (fuser -vm \(point)), then link again; nothing changed\(back)")
            }
            unmounted.append(mount)
            _ = UnmountCommand.waitForEnd(of: point, servedBy: mount.pid)
        }
        // The daemon ends with its last mount; it lets the store go a moment later.
        for _ in 0..<1000 where StoreLock.holder(of: layout) != nil { usleep(10_000) }
        let outcome = Result { () throws(DocfsError) -> T in try change() }
        let back = remount(unmounted.reversed())
        if !back.isEmpty { printError("docfs\(back)\n") }
        return try outcome.get()
    }

    /// Mounts each of `mounts` again as it was (the user view first); answers what failed, as
    /// a sentence's end ("" when all came back).
    private func remount(_ mounts: some Sequence<MountRegistry.Record>) -> String {
        var failures: [String] = []
        for mount in mounts {
            guard let point = mount.mountPoint else { continue }
            var arguments = ["mount", "--store", layout.root]
            if let app = mount.app { arguments += ["--app", app] }
            if !mount.options.isEmpty { arguments += ["-o", mount.options.joined(separator: ",")] }
            arguments.append(point)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Daemon.executablePath())
            process.arguments = arguments
            do {
                try process.run()
                process.waitUntilExit()
                if process.terminationStatus != 0 { failures.append(point) }
            } catch {
                failures.append(point)
            }
        }
        return failures.isEmpty ? "" : ": could not mount \(failures.joined(separator: ", ")) again (docfs mount it)"
    }
}
