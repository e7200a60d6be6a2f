#!/usr/bin/env python3
"""The docfs benchmark: the same workloads on the raw disk, on libfuse's passthrough_ll and on
docfs, measured in one run, reported as a table of absolute figures and ratios.

Ratios are speeds relative to the other target (higher is better, 1.00 = as fast)."""
import argparse, os, shutil, statistics, subprocess, sys, tarfile, tempfile, time

EXAMPLE = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def is_mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def wait_mounted(path, proc, what):
    deadline = time.time() + 20
    while time.time() < deadline:
        if is_mounted(path):
            return
        if proc.poll() is not None:
            sys.exit(f"bench: {what} exited before mounting")
        time.sleep(0.02)
    sys.exit(f"bench: {what} did not mount {path}")


def drop_caches():
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Filesystem:
    """A freshly made ext4 filesystem in an image file on the bench disk, loop-mounted with
    direct I/O (so the image's own page cache does not count twice). Every run of a workload
    gets a new one, so no run inherits another's aged inodes, journal or writeback."""

    def __init__(self, root, size_mb):
        self.image = os.path.join(root, "fs.img")
        self.path = os.path.join(root, "fs")
        os.makedirs(self.path, exist_ok=True)
        with open(self.image, "wb") as f:
            f.truncate(size_mb << 20)
        run(["mkfs.ext4", "-q", "-F", "-N", "65536", "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image])
        self.device = subprocess.check_output(["losetup", "--find", "--show", "--direct-io=on", self.image],
                                              text=True).strip()
        run(["mount", self.device, self.path])

    def remove(self):
        if is_mounted(self.path):
            run(["umount", self.path])
        run(["losetup", "--detach", self.device])
        os.unlink(self.image)


class Target:
    """A place to run workloads: the raw disk, or a FUSE server over a backing directory.
    `start(backing)` serves `backing` and returns the directory workloads run in."""

    def __init__(self, name, root, command=None):
        self.name, self.command = name, command
        self.mountpoint = os.path.join(root, name + "-mnt")
        self.proc = None
        if command:
            os.makedirs(self.mountpoint)

    def start(self, backing):
        self.backing = backing
        if self.command is None:
            return backing
        self.proc = subprocess.Popen(self.command(backing, self.mountpoint),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_mounted(self.mountpoint, self.proc, self.name)
        return self.mountpoint

    def restart(self):
        """Stops the server and serves the same backing directory again (nothing for the raw
        disk): what the work made so far is then there from before, as a user's files are."""
        if self.command is not None:
            self.stop()
            self.start(self.backing)

    def stop(self):
        if self.proc is None:
            return
        if is_mounted(self.mountpoint):
            subprocess.run(["umount", self.mountpoint])
            if is_mounted(self.mountpoint):
                subprocess.run(["umount", "-l", self.mountpoint])
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc = None


def build_baseline(revision, repository):
    """docfs as it was at `revision`, built once into /var/tmp, to measure what came since:
    same machine, same run."""
    commit = subprocess.check_output(["git", "-C", repository, "rev-parse", "--short", revision], text=True).strip()
    tree = f"/var/tmp/docfs-baseline-{commit}"
    binary = os.path.join(tree, ".build", "release", "docfs")
    if not os.path.exists(binary):
        if not os.path.isdir(tree):
            run(["git", "-C", repository, "worktree", "add", "--detach", "--force", tree, commit],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"bench: building docfs at {commit}, once", file=sys.stderr)
        run(["swift", "build", "-c", "release", "--product", "docfs"], cwd=tree, stdout=subprocess.DEVNULL)
    return binary, commit


def make_targets(root, docfs, docfs_options, baseline=None):
    pt_bin = os.path.join(root, "passthrough_ll")
    flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "fuse3"], text=True).split()
    run(["gcc", "-O2", EXAMPLE, "-o", pt_bin] + flags)
    # passthrough_ll as it comes, and with the two POSIX features docfs always has: the
    # kernel's permission checks (default_permissions) and extended attributes.
    def passthrough(extra):
        return lambda backing, mnt: [pt_bin, "-f", "-o", f"source={backing}{extra}", mnt]
    def docfs_mount(binary):
        def command(backing, mnt):
            cmd = [binary, "mount", "--foreground", "--store", os.path.join(backing, "store")]
            return cmd + (["-o", docfs_options] if docfs_options else []) + [mnt]
        return command
    targets = [Target("raw disk", root), Target("passthrough_ll", root, passthrough("")),
               Target("passthrough_ll+", root, passthrough(",default_permissions,xattr")),
               Target("docfs", root, docfs_mount(docfs))]
    if baseline:
        targets.append(Target("docfs-baseline", root, docfs_mount(baseline)))
    return targets


def run_on_fresh_filesystem(target, work, root, scratch, size_mb, after_stop=None):
    """`work(directory, scratch)` on `target` serving a filesystem made for it; its result.
    `after_stop(backing)`, if given, sees the backing directory once the target has stopped
    (what a FUSE server left there), before the filesystem goes."""
    fs = Filesystem(root, size_mb)
    try:
        path = target.start(fs.path)
        try:
            return work(path, scratch)
        finally:
            target.stop()
            if after_stop is not None:
                after_stop(fs.path)
    finally:
        fs.remove()


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# Each workload: (name, unit, kind, function(target_dir, scratch) -> seconds, size for rates).
def seq_write(size_mb, fsync):
    def work(d, _):
        path = os.path.join(d, "seq.bin")
        block = os.urandom(1 << 20)
        def body():
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            for _ in range(size_mb):
                os.write(fd, block)
            if fsync:
                os.fsync(fd)
            os.close(fd)
        return timed(body)
    return work


# A warm read moves the file this many times: one pass from the page cache takes well under a
# tenth of a second, too short to time on a shared machine.
WARM_PASSES = 8


def seq_read(size_mb, cold):
    def work(d, _):
        path = os.path.join(d, "seq.bin")
        if not os.path.exists(path) or os.path.getsize(path) != size_mb << 20:
            seq_write(size_mb, True)(d, None)
        def read_once():
            fd = os.open(path, os.O_RDONLY)
            while os.read(fd, 1 << 20):
                pass
            os.close(fd)
        def body():
            for _ in range(1 if cold else WARM_PASSES):
                read_once()
        if cold:
            drop_caches()
        else:
            read_once()  # warm means read before: the pages are in the cache the target reads from
        return timed(body)
    return work


def small_files(count):
    """create, stat, read and unlink `count` 1 KiB files: one timing per phase."""
    payload = b"x" * 1024
    def work(d, _):
        base = os.path.join(d, "small")
        shutil.rmtree(base, ignore_errors=True)
        os.makedirs(base)
        names = [os.path.join(base, f"f{i:05d}") for i in range(count)]
        def create():
            for n in names:
                fd = os.open(n, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
                os.write(fd, payload)
                os.close(fd)
        def read():
            for n in names:
                fd = os.open(n, os.O_RDONLY)
                os.read(fd, 4096)
                os.close(fd)
        phases = {"create": timed(create), "stat": timed(lambda: [os.stat(n) for n in names]),
                  "read": timed(read), "unlink": timed(lambda: [os.unlink(n) for n in names])}
        os.rmdir(base)
        return phases
    return work


def make_tree(root, files):
    """A source-like tree: nested folders, text files of varied sizes."""
    for i in range(files):
        d = os.path.join(root, f"pkg{i % 20}", f"mod{i % 7}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file{i}.txt"), "w") as f:
            f.write((f"line {i} of a source file\n") * (1 + (i * 37) % 200))


def tar_extract(tarball):
    def work(d, _):
        dest = os.path.join(d, "untar")
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(dest)
        return timed(lambda: run(["tar", "xf", tarball, "-C", dest]))
    return work


def git_commit(tree):
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x", HOME="/nonexistent")
    def work(d, _):
        repo = os.path.join(d, "repo")
        shutil.rmtree(repo, ignore_errors=True)
        shutil.copytree(tree, repo)
        def body():
            run(["git", "init", "-q", repo], env=env)
            run(["git", "-C", repo, "add", "-A"], env=env)
            run(["git", "-C", repo, "commit", "-qm", "bench"], env=env)
        return timed(body)
    return work


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docfs", required=True)
    parser.add_argument("--dir", default="/var/tmp/docfs-bench", help="where to work (same disk for all)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repetition")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--docfs-options", default="")
    parser.add_argument("--only", default="", help="run only the workloads whose name contains this")
    parser.add_argument("--baseline", default="",
                        help="also measure docfs built at this git revision (the cost of what came since)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (mounts, drop_caches)")
    size_mb = 256 if args.quick else 1024
    files = 2000 if args.quick else 10000
    repeat = 3 if args.quick else args.repeat

    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    scratch = os.path.join(args.dir, "scratch")
    tree = os.path.join(scratch, "tree")
    make_tree(tree, 2000)
    tarball = os.path.join(scratch, "tree.tar")
    run(["tar", "cf", tarball, "-C", tree, "."])
    can_drop = drop_caches()

    # (row, unit, MiB moved or None, workload, phase of a multi-phase workload or None)
    small = small_files(files)
    workloads = [
        (f"write {size_mb} MiB, 1 MiB blocks", "MB/s", size_mb, seq_write(size_mb, False), None),
        (f"write {size_mb} MiB + fsync", "MB/s", size_mb, seq_write(size_mb, True), None),
        (f"read {size_mb} MiB, cold cache", "MB/s", size_mb, seq_read(size_mb, True), None),
        (f"read {size_mb} MiB, warm, {WARM_PASSES} times", "MB/s", size_mb * WARM_PASSES, seq_read(size_mb, False), None),
        (f"create {files} files (1 KiB)", "s", None, small, "create"),
        (f"stat {files} files", "s", None, small, "stat"),
        (f"read {files} files", "s", None, small, "read"),
        (f"unlink {files} files", "s", None, small, "unlink"),
        ("tar x, 2000 files", "s", None, tar_extract(tarball), None),
        ("git add+commit, 2000 files", "s", None, git_commit(tree), None),
    ]

    workloads = [w for w in workloads if args.only in w[0]]
    baseline, baseline_commit = (None, None)
    if args.baseline:
        baseline, baseline_commit = build_baseline(args.baseline, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    targets = make_targets(args.dir, args.docfs, args.docfs_options, baseline)
    image_mb = 2 * size_mb + 768
    results = {}
    try:
        done = {}
        for name, unit, size, work, phase in workloads:
            # Targets take turns within each repetition, so slow spells of a shared machine
            # fall on all of them; the median of the repetitions is reported. Each run has a
            # filesystem of its own, made for it. A multi-phase workload runs once for all its
            # rows.
            if phase is not None and id(work) in done:
                runs = done[id(work)]
            else:
                runs = {t.name: [] for t in targets}
                for rep in range(repeat):
                    # Each repetition starts with another target, so none always runs last.
                    for t in targets[rep % len(targets):] + targets[:rep % len(targets)]:
                        os.sync()  # no earlier run's writeback competes with this one
                        runs[t.name].append(run_on_fresh_filesystem(t, work, args.dir, scratch, image_mb))
                done[id(work)] = runs
            for t in targets:
                times = [r[phase] if phase else r for r in runs[t.name]]
                results[(name, t.name)] = statistics.median(times)
                print(f"  {name:34} {t.name:15} " + " ".join(f"{x:.3f}" for x in times), file=sys.stderr)
    finally:
        for t in targets:
            t.stop()

    def figure(name, unit, size, target):
        s = results[(name, target)]
        return size / s if unit == "MB/s" else s

    def speed_ratio(name, unit, size, a, b):
        sa, sb = results[(name, a)], results[(name, b)]
        return sb / sa  # time of b over time of a: speed of a relative to b

    print()
    print(f"docfs benchmark — {args.dir} ({'quick' if args.quick else f'median of {repeat}'}; "
          f"cold reads {'drop the page cache' if can_drop else 'could not drop the page cache'})")
    extra = baseline is not None
    header = (f"{'workload':34} {'unit':>5} {'raw disk':>9} {'passthru':>9} {'pt+perm':>9} {'docfs':>9}"
              + (f" {'baseline':>9}" if extra else "")
              + f" {'vs raw':>7} {'vs pt':>7} {'vs pt+':>7}" + (f" {'vs base':>7}" if extra else "") + "  target")
    print(header)
    print("-" * len(header))
    for name, unit, size, _, _ in workloads:
        raw, pt, ptp, dfs = (figure(name, unit, size, t) for t in ("raw disk", "passthrough_ll", "passthrough_ll+", "docfs"))
        vs_raw = speed_ratio(name, unit, size, "docfs", "raw disk")
        vs_pt = speed_ratio(name, unit, size, "docfs", "passthrough_ll")
        vs_ptp = speed_ratio(name, unit, size, "docfs", "passthrough_ll+")
        if unit == "MB/s":
            target, ok = ">= 0.90x raw", vs_raw >= 0.9
        else:
            target, ok = ">= 1.00x pt", vs_pt >= 1.0
        baseline_figure = f" {figure(name, unit, size, 'docfs-baseline'):9.2f}" if extra else ""
        vs_base = f" {speed_ratio(name, unit, size, 'docfs', 'docfs-baseline'):6.2f}x" if extra else ""
        print(f"{name:34} {unit:>5} {raw:9.2f} {pt:9.2f} {ptp:9.2f} {dfs:9.2f}{baseline_figure} {vs_raw:6.2f}x {vs_pt:6.2f}x"
              f" {vs_ptp:6.2f}x{vs_base}  {target} {'ok' if ok else 'MISSED'}")
    creates = [w[0] for w in workloads if w[4] == "create"]
    if creates:
        ratio = speed_ratio(creates[0], "s", None, "docfs", "passthrough_ll")
        print(f"issue 4: {creates[0]} with stitching >= 0.70x pt: {ratio:.2f}x {'ok' if ratio >= 0.7 else 'MISSED'}")
    print("\nvs raw / vs pt / vs pt+: docfs's speed relative to the raw disk, to passthrough_ll, and to")
    print("passthrough_ll with default_permissions,xattr (the checks and attributes docfs always has).")
    if extra:
        print(f"vs base: docfs's speed relative to docfs built at {baseline_commit} in the same run: what came")
        print("since costs (below 1.00x) or gains (above).")
    print("Higher is better; 1.00x is as fast.")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
