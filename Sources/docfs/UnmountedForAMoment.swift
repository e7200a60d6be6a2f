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
/// had, also when the change fails. When one of them is busy, those already unmounted come
/// back and the change is not made. Ctrl-C is held off while the store is unmounted.
struct UnmountedForAMoment {
    let layout: StoreLayout

    /// Unmounts the store's mounts, runs `change` (which finds the store unserved), and mounts
    /// them again; answers what `change` answered and the mounts that could not come back.
    func run<T>(_ change: () throws(DocfsError) -> T) throws(DocfsError) -> (T, notBack: [String]) {
        // Ctrl-C is held off while the store is unmounted and changed (not while it is mounted
        // again: a daemon started with a signal ignored would inherit that and never hear it).
        let signals: [Int32] = [SIGINT, SIGTERM, SIGHUP, SIGQUIT]
        let before = signals.map { signal($0, SIG_IGN) }
        let restoreSignals = { for (number, handler) in zip(signals, before) { signal(number, handler) } }
        let mounts = MountRegistry.mounts(ofStore: MountTable.canonical(layout.root))
            .sorted { ($0.app == nil ? 1 : 0) < ($1.app == nil ? 1 : 0) }
        var unmounted: [MountRegistry.Record] = []
        for mount in mounts {
            guard let point = mount.mountPoint else { continue }
            guard UnmountCommand.unmount(point) else {
                restoreSignals()
                let notBack = remount(unmounted.reversed())
                let back = notBack.isEmpty ? "" : "; could not mount \(notBack.joined(separator: ", ")) again (docfs mount it)"
                throw DocfsError(.storeBusy, "\(point) is busy: close the files and shells using it (fuser -vm \(point)), then link again; the store was not linked\(back)")
            }
            unmounted.append(mount)
            _ = UnmountCommand.waitForEnd(of: point, servedBy: mount.pid)
        }
        // The daemon ends with its last mount; it lets the store go a moment later.
        var waited = 0
        while StoreLock.holder(of: layout) != nil && waited < 1000 {
            usleep(10_000)
            waited += 1
        }
        let outcome = Result { () throws(DocfsError) -> T in try change() }
        restoreSignals()
        let notBack = remount(unmounted.reversed())
        return (try outcome.get(), notBack)
    }

    /// Mounts each of `mounts` again as it was (the user view first); answers the mount points
    /// that did not come back.
    private func remount(_ mounts: some Sequence<MountRegistry.Record>) -> [String] {
        var failures: [String] = []
        for mount in mounts {
            guard let point = mount.mountPoint else { continue }
            var arguments = ["mount", "--store", layout.root]
            if let app = mount.app { arguments += ["--app", app] }
            // Where it was mounted before: a folder it hid may show again while it is not.
            arguments += ["-o", (mount.options + ["nonempty"]).joined(separator: ",")]
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
        return failures
    }
}
