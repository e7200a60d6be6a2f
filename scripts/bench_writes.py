#!/usr/bin/env python3
"""docfs's write-heavy benchmark (issue 20 §3): what people do to files that already exist and
to trees of real files (untar, git, rm; appends to a log; small rewrites in a big file; sqlite
inserts; a stress run of many kinds of change at once), timed on the raw disk, on libfuse's
passthrough_ll and on docfs (and docfs built at --baseline), each run on a freshly made ext4
filesystem as in scripts/bench.py, whose machinery this reuses.

docfs is reported as the time it takes relative to passthrough_ll's (1.00x = as fast, 2.00x =
twice as long), against the target the issue sets for each row. For docfs it also reports the
disk taken by kept versions after each row and the bytes the daemon wrote during each row.

A run that goes past --timeout is killed (workload and FUSE server) and reported as >TIMEOUT;
a target that timed out on a row is not run again on that row."""
import argparse, json, os, random, signal, stat, statistics, subprocess, sys, time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
import bench  # noqa: E402

IMAGE_MB = 6144  # room for the largest row (a 50 MB file) plus docfs's kept versions (at most 2 GiB)
TARGET_NAMES = {"raw": "raw disk", "pt": "passthrough_ll", "pt+": "passthrough_ll+", "docfs": "docfs",
                "baseline": "docfs-baseline"}
GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.org",
               GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.org",
               GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent")


class TimedOut(Exception):
    """A run went past its time limit; its processes have been killed."""


class Failed(Exception):
    """A workload's command failed (on docfs, an error the other targets did not give)."""


def process_io(pid="self"):
    """/proc/PID/io as a dict of ints (write_bytes: what reached the page cache or disk as
    writes; wchar: what write calls passed, whatever the file)."""
    with open(f"/proc/{pid}/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f.read().splitlines())}


def directory_bytes(*paths):
    """The disk `paths` take together, `du -sc -B1` (0 for those that do not exist): blocks, not
    sizes, since a delta version is a sparse file holding only the bytes it saved; one du over
    all of them, since a chunk is linked from the versions using it and must count once."""
    present = [p for p in paths if os.path.exists(p)]
    if not present:
        return 0
    return int(subprocess.check_output(["du", "-sc", "-B1", *present], text=True).splitlines()[-1].split()[0])


def wait_group_gone(pgid, limit):
    """Wait up to `limit` seconds until no process of group `pgid` remains (killed processes can
    take a moment: one in the middle of a FUSE request ends when the request does)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


class Run:
    """One run of a workload on one target: runs its commands as child processes in a session of
    their own, under two budgets of --timeout seconds (one for the untimed setup, one for the
    timed part); on going past one it kills them and the target's FUSE server (the workload may
    be waiting on it in the kernel; a dead server ends those waits and lets the mount go)."""

    def __init__(self, target, timeout):
        self.target, self.timeout = target, timeout
        self.deadlines = {}
        self.phases = {}            # timed phase -> seconds
        self.workload_bytes = None  # what the timed part wrote, by its own count or its write calls
        self.daemon_bytes = None    # write_bytes of the FUSE server during the timed part (so far,
        self.before = None          # if it was cut off); the counts at its start

    def command(self, cmd, budget, cwd=None, env=None):
        """Run `cmd`; (seconds it took, its stdout). Raises TimedOut or Failed."""
        deadline = self.deadlines.setdefault(budget, time.monotonic() + self.timeout)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill(proc)
            raise TimedOut(f"{budget} went past {self.timeout:g} s in {cmd[0]}")
        seconds = time.perf_counter() - start
        for line in err.splitlines():
            print(f"      {line}", file=sys.stderr)
        if proc.returncode != 0:
            raise Failed(f"{' '.join(cmd)[:80]} exited with {proc.returncode}")
        return seconds, out

    def kill(self, proc):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.target.proc is not None:
            if self.before is not None:
                self.daemon_bytes = self.daemon_written_since()
            self.target.proc.kill()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            print(f"bench: pid {proc.pid} did not end 30 s after SIGKILL", file=sys.stderr)
        if not wait_group_gone(proc.pid, 30):
            print(f"bench: processes of group {proc.pid} still there 30 s after SIGKILL", file=sys.stderr)

    def setup(self, cmd, cwd=None):
        """An untimed step that prepares the timed part."""
        self.command(cmd, "setup", cwd)

    def timed(self, phase, cmd, cwd=None, env=None, reports_time=False):
        """A timed step; `reports_time`: the command prints JSON with its own "seconds" (a Python
        child's, which leaves out the interpreter's start), used instead of the wall time."""
        seconds, out = self.command(cmd, "timed part", cwd, env)
        result = json.loads(out.splitlines()[-1]) if reports_time else {}
        self.phases[phase] = result.get("seconds", seconds)
        return result

    def begin_timed(self):
        """Notes the write counts at the timed part's start."""
        self.before = {"wchar": process_io()["wchar"], "daemon": self.daemon_written()}

    def end_timed(self):
        """What the workload (unless it counted itself) and the daemon wrote in the timed part."""
        if self.workload_bytes is None:
            self.workload_bytes = process_io()["wchar"] - self.before["wchar"]
        self.daemon_bytes = self.daemon_written_since()

    def daemon_written(self):
        """The FUSE server's write_bytes so far; None on the raw disk (or if it is gone).
        `docfs mount --foreground` is the daemon itself (its children are fusermount3 and a
        reaper that unmounts if it dies)."""
        try:
            return process_io(self.target.proc.pid)["write_bytes"] if self.target.proc else None
        except (OSError, ValueError):
            return None

    def daemon_written_since(self):
        now, then = self.daemon_written(), self.before["daemon"]
        return None if now is None or then is None else now - then


def python_child(name, *args):
    """The command that runs CHILDREN[name](*args) in a child process of its own (so the timeout
    can kill it), printing JSON with the seconds its timed part took."""
    return [sys.executable, os.path.abspath(__file__), "--child", name] + [str(a) for a in args]


def make_text_file(path, mb):
    """`mb` MB of log-like text lines (hex of seeded random bytes)."""
    rng = random.Random(10)
    with open(path, "w") as f:
        for i in range((int(mb) << 20) // 80):
            f.write(f"{i:08d} {rng.randbytes(35).hex()}\n")
    return 0.0


def make_random_file(path, mb):
    """`mb` MB of seeded random bytes."""
    rng = random.Random(50)
    block = rng.randbytes(1 << 20)
    with open(path, "wb") as f:
        for _ in range(int(mb)):
            f.write(block)
    return 0.0


def make_document(path, mb):
    """`mb` MB of seeded random bytes that never repeat (a compressed document's content)."""
    with open(path, "wb") as f:
        f.write(random.Random(51).randbytes(int(mb) << 20))
    return 0.0


def rewrite_blocks(path, count, seed):
    """`count` times: open for writing, write 4 KiB at a random 4 KiB-aligned offset, close."""
    rng = random.Random(int(seed))
    blocks = os.path.getsize(path) // 4096
    offsets = [rng.randrange(blocks) * 4096 for _ in range(int(count))]
    data = rng.randbytes(4096)
    start = time.perf_counter()
    for offset in offsets:
        fd = os.open(path, os.O_WRONLY)
        os.pwrite(fd, data, offset)
        os.close(fd)
    return time.perf_counter() - start


def safe_saves(path, count, seed):
    """`count` times what an editor's safe-save does: read the document, change 64 bytes and
    insert 100 at random places, write it all to a new file, fsync, rename it over."""
    rng = random.Random(int(seed))
    start = time.perf_counter()
    for _ in range(int(count)):
        with open(path, "rb") as f:
            data = bytearray(f.read())
        at = rng.randrange(len(data) - 64)
        data[at:at + 64] = rng.randbytes(64)
        at = rng.randrange(len(data))
        data[at:at] = rng.randbytes(100)
        temporary = path + ".tmp"
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(temporary, path)
    return time.perf_counter() - start


CHILDREN = {f.__name__: f for f in (make_text_file, make_random_file, make_document, rewrite_blocks, safe_saves)}


# The workloads. Each is (row name, target: docfs's time at most this many times
# passthrough_ll's, setup(run, dir) or None, body(run, dir)). The body's phases add up to the
# row's time.
def include_tarball(scratch, count=2000):
    """A tarball of the first `count` regular files of /usr/include in sorted path order (real C
    headers, their relative paths kept): made once, extracted on every target."""
    files = []
    for folder, _, names in os.walk("/usr/include"):
        files += [os.path.join(folder, n) for n in names if stat.S_ISREG(os.lstat(os.path.join(folder, n)).st_mode)]
    chosen = sorted(files)[:count]
    listing = os.path.join(scratch, "include.list")
    with open(listing, "w") as f:
        f.write("".join(os.path.relpath(p, "/usr/include") + "\0" for p in chosen))
    tarball = os.path.join(scratch, "include.tar")
    bench.run(["tar", "cf", tarball, "-C", "/usr/include", "--null", "-T", listing])
    return tarball, sum(os.path.getsize(p) for p in chosen)


def untar_git_rm(tarball):
    def setup(run, d):
        os.makedirs(os.path.join(d, "tree"))
    def body(run, d):
        tree = os.path.join(d, "tree")
        run.timed("tar x", ["tar", "xf", tarball, "-C", tree])
        run.timed("git", ["sh", "-c", "git init -q && git add -A && git commit -qm x"], cwd=tree, env=GIT_ENV)
        run.timed("rm -rf", ["rm", "-rf", tree])
    return setup, body


def appends(count, mb):
    """What `echo line >> log` does in a shell loop: open O_WRONLY|O_APPEND|O_CREAT, one write,
    close, `count` times (dash's echo is built in: no process per line)."""
    def setup(run, d):
        run.setup(python_child("make_text_file", os.path.join(d, "log"), mb))
    def body(run, d):
        run.timed("appends", ["sh", "-c", f'for i in $(seq {count}); do echo "line $i appended by the bench" >> log; done'], cwd=d)
    return setup, body


def rewrites(count, mb):
    def setup(run, d):
        run.setup(python_child("make_random_file", os.path.join(d, "big.bin"), mb))
    def body(run, d):
        run.timed("rewrites", python_child("rewrite_blocks", os.path.join(d, "big.bin"), count, 3), reports_time=True)
    return setup, body


def sqlite_inserts(count, mb):
    """A table t(id integer primary key, v text) filled to about `mb` MB with the sqlite3 CLI;
    then `count` runs of sqlite3 each inserting a row (each a transaction: journal, fsync)."""
    rows = (mb << 20) // 530  # a row of 500 characters takes about 530 bytes with its page's share
    fill = ("create table t(id integer primary key, v text);"
            f"with recursive c(x) as (select 1 union all select x + 1 from c where x < {rows}) "
            "insert into t(v) select hex(randomblob(250)) from c;")
    def setup(run, d):
        run.setup(["sqlite3", "db.sqlite", fill], cwd=d)
    def body(run, d):
        run.timed("inserts", ["sh", "-c", f"for i in $(seq {count}); do sqlite3 db.sqlite "
                              f"\"insert into t(v) values ('row $i inserted by the bench')\"; done"], cwd=d)
    return setup, body


def document_saves(count, mb):
    def setup(run, d):
        run.setup(python_child("make_document", os.path.join(d, "report.odt"), mb))
    def body(run, d):
        run.timed("safe-saves", python_child("safe_saves", os.path.join(d, "report.odt"), count, 5), reports_time=True)
        run.setup(["sleep", "2"])  # docfs cuts the kept files into chunks in the background
    return setup, body


def stress(procs, ops):
    def body(run, d):
        result = run.timed("stress", [sys.executable, os.path.join(SCRIPTS, "stress.py"), d, "--procs", str(procs),
                                      "--ops", str(ops)], reports_time=True)
        run.workload_bytes = result["bytes_written"]
    return None, body


def workloads(tarball, quick):
    ops = 5000 if quick else 20000
    return [("untar+git+rm, 2000 real files", 2, *untar_git_rm(tarball)),
            ("200 appends (>>) to a 10 MB file", 3, *appends(200, 10)),
            ("100 rewrites of 4 KiB in a 50 MB file", 3, *rewrites(100, 50)),
            ("50 sqlite3 inserts, 20 MB database", 2, *sqlite_inserts(50, 20)),
            ("10 safe-saves of a 20 MB document", 2, *document_saves(10, 20)),
            (f"stress: 4 procs x {ops} ops", 2, *stress(4, ops))]


def run_once(target, setup, body, root, scratch, timeout):
    """One run of a workload on `target` on a fresh filesystem: a dict with its time (None when
    it timed out), its phases, what it and the FUSE server wrote, and the disk taken by docfs's
    kept versions afterwards."""
    result = {"seconds": None, "error": None, "phases": {}, "workload_bytes": None, "daemon_bytes": None,
              "versions_bytes": None}

    def work(d, _):
        run = Run(target, timeout)
        try:
            if setup:
                setup(run, d)
                run.setup(["sync"])  # the setup's writeback does not run into the timed part
                # Served afresh: the files the setup made are a user's files from before, not
                # files just created (docfs keeps no version of a file rewritten within its
                # thinning window after it made it).
                target.restart()
            run.begin_timed()
            body(run, d)
            run.end_timed()
            result["seconds"] = sum(run.phases.values())
        except TimedOut as e:
            result["error"] = "timeout"
            print(f"      {target.name}: {e}: killed", file=sys.stderr)
        except Failed as e:
            result["error"] = "failed"
            print(f"      {target.name}: {e}", file=sys.stderr)
        result.update(phases=run.phases, workload_bytes=run.workload_bytes, daemon_bytes=run.daemon_bytes)

    def after_stop(backing):
        if target.name.startswith("docfs"):
            result["versions_bytes"] = directory_bytes(*(os.path.join(backing, "store", part) for part in ("versions", "chunks")))

    bench.run_on_fresh_filesystem(target, work, root, scratch, IMAGE_MB, after_stop)
    return result


def log_run(name, target, rep, r):
    """One line per run on stderr: its time, and its phases and byte counts."""
    what = f"{r['seconds']:.3f} s" if r["seconds"] is not None else r["error"]
    phases = " (" + ", ".join(f"{p} {s:.3f}" for p, s in r["phases"].items()) + ")" if len(r["phases"]) > 1 else ""
    extra = ""
    if r["daemon_bytes"] is not None:
        extra += f"; daemon wrote {r['daemon_bytes'] / 1e6:.1f} MB" + (" before the kill" if r["error"] else "")
    if r["workload_bytes"] is not None:
        extra += f", workload {r['workload_bytes'] / 1e6:.1f} MB"
    if r["versions_bytes"] is not None:
        extra += f"; versions {r['versions_bytes'] / 1e6:.1f} MB"
    print(f"  {name:38} {target.name:15} #{rep + 1} {what}{phases}{extra}", file=sys.stderr)


def measure(rows, targets, repeat, root, scratch, timeout):
    """Every row on every target, `repeat` times; targets take turns within each repetition
    (each repetition starting with another), so slow spells of a shared machine fall on all of
    them. {(row, target name): [run results]}."""
    runs = {}
    for name, _, setup, body in rows:
        for rep in range(repeat):
            for t in targets[rep % len(targets):] + targets[:rep % len(targets)]:
                done = runs.setdefault((name, t.name), [])
                if any(r["error"] for r in done):
                    continue  # timed out or failed once: known, and another try costs the timeout again
                os.sync()  # no earlier run's writeback competes with this one
                r = run_once(t, setup, body, root, scratch, timeout)
                done.append(r)
                log_run(name, t, rep, r)
    return runs


def median(results, key):
    """The median of `key` over the runs, None if any run failed or timed out (or has no figure)."""
    values = [r[key] for r in results]
    if not values or any(r["error"] for r in results) or any(v is None for v in values):
        return None
    return statistics.median(values)


def error_of(results):
    return next((r["error"] for r in results if r["error"]), None)


def seconds(value):
    """Three decimals below 10 s (some rows take milliseconds on the raw disk), one above."""
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def time_cell(results, timeout):
    """A time as the table shows it: seconds, >TIMEOUT, failed, or - when not run."""
    if not results:
        return "-"
    error = error_of(results)
    if error == "timeout":
        return f">{timeout:g}"
    return "failed" if error else seconds(median(results, "seconds"))


def ratio_cell(results, reference, timeout, goal):
    """docfs's time over passthrough_ll's: ('N.NNx', ok) or a bound ('>N.NNx') when docfs timed
    out; ('?', False) when there is nothing to compare."""
    if not results or not reference or error_of(reference):
        return "?", False
    pt = median(reference, "seconds")
    error = error_of(results)
    if error == "timeout":
        return ">" + times(timeout / pt), False
    if error:
        return "failed", False
    ratio = median(results, "seconds") / pt
    return times(ratio), ratio <= goal


def mb(value):
    """Bytes as MB: three decimals below 1 MB, one above."""
    if value is None:
        return "-"
    return f"{value / 1e6:.3f}" if value < 1e6 else f"{value / 1e6:.1f}"


def times(ratio):
    """A ratio as 'N.NNx', fewer decimals when it is large."""
    return f"{ratio:.2f}x" if ratio < 100 else f"{ratio:.0f}x"


def daemon_cell(results):
    """The daemon's median bytes; for a run cut off by the timeout what it had written by then,
    marked +."""
    cut = [r for r in results if r["error"] == "timeout" and r["daemon_bytes"] is not None]
    return f"{mb(cut[0]['daemon_bytes'])}+" if cut else mb(median(results, "daemon_bytes"))


def versions_cell(results):
    """The median disk taken by kept versions (measured after timed-out runs too)."""
    values = [r["versions_bytes"] for r in results if r["versions_bytes"] is not None]
    return mb(statistics.median(values)) if values else "-"


SHORT = {"raw disk": "raw disk", "passthrough_ll": "passthru", "passthrough_ll+": "pt+xattr", "docfs": "docfs",
         "docfs-baseline": "baseline"}
RATIO = {"docfs": "docfs/pt", "docfs-baseline": "base/pt"}


def time_table(rows, names, runs, timeout):
    """Each row's time on each target, and docfs's (and the baseline's) as a multiple of
    passthrough_ll's, against the row's target."""
    compared = [n for n in RATIO if n in names]
    header = f"{'workload':38}" + "".join(f" {SHORT[n]:>9}" for n in names)
    header += "".join(f" {RATIO[n]:>9}" for n in compared) + "  target"
    print(header)
    print("-" * len(header))
    for name, goal, _, _ in rows:
        line = f"{name:38}" + "".join(f" {time_cell(runs[(name, n)], timeout):>9}" for n in names)
        verdict = ""
        for n in compared:
            cell, ok = ratio_cell(runs[(name, n)], runs.get((name, "passthrough_ll")), timeout, goal)
            line += f" {cell:>9}"
            if n == "docfs":
                verdict = f"  <= {goal}x pt {'ok' if ok else 'MISSED'}"
        print(line + verdict)


def versions_table(rows, docfs_names, runs):
    print("\nkept versions after each row (disk taken by STORE/versions and STORE/chunks, du -s -B1, MB)")
    print(f"{'workload':38}" + "".join(f" {SHORT[n]:>9}" for n in docfs_names))
    for name, *_ in rows:
        print(f"{name:38}" + "".join(f" {versions_cell(runs[(name, n)]):>9}" for n in docfs_names))


def writes_table(rows, names, runs):
    """What the daemon wrote during each row's timed part next to what the workload wrote (and
    passthrough_ll's daemon, for scale); the stress row has a target for it."""
    docfs_names = [n for n in names if n.startswith("docfs")]
    reference = ["passthrough_ll"] if "passthrough_ll" in names else []
    print("\nwrites during the timed part (MB): the workload's, each daemon's (/proc/PID/io write_bytes),")
    print("and the docfs daemon's as a multiple of the workload's")
    print(f"{'workload':38} {'workload':>9}" + "".join(f" {SHORT[n]:>9}" for n in reference)
          + "".join(f" {SHORT[n]:>9} {'ratio':>9}" for n in docfs_names) + "  target")
    for name, *_ in rows:
        # The same workload on every target (the stress run's races aside): any run's count will do.
        counts = [median(runs[(name, n)], "workload_bytes") for n in docfs_names + reference + names]
        workload = next((c for c in counts if c is not None), None)
        line = f"{name:38} {mb(workload):>9}" + "".join(f" {daemon_cell(runs[(name, n)]):>9}" for n in reference)
        verdict = ""
        for n in docfs_names:
            daemon = median(runs[(name, n)], "daemon_bytes")
            ratio = daemon / workload if daemon is not None and workload else None
            line += f" {daemon_cell(runs[(name, n)]):>9} {'-' if ratio is None else times(ratio):>9}"
            if n == "docfs" and name.startswith("stress"):
                verdict = f"  <= 3x workload {'ok' if ratio is not None and ratio <= 3 else 'MISSED'}"
        print(line + verdict)


def report(rows, targets, runs, args, label):
    """The tables, and what their figures mean."""
    names = [t.name for t in targets]
    docfs_names = [n for n in names if n.startswith("docfs")]
    print()
    print(f"docfs write-heavy benchmark — {args.dir} ({label}; timeout {args.timeout:g} s; times in seconds)")
    time_table(rows, names, runs, args.timeout)
    if docfs_names:
        versions_table(rows, docfs_names, runs)
        writes_table(rows, names, runs)
    print(f"\ndocfs/pt: the time docfs takes as a multiple of passthrough_ll's (median of the runs; lower is")
    print(f"better, 1.00x = as fast); >N.Nx: docfs went past the {args.timeout:g} s timeout and was killed, so it")
    print("takes more than that. A target that timed out on a row was not run again on it.")
    if docfs_names:
        print("The workload's writes: the stress tool's own count of bytes written; for the other rows what its")
        print("processes' write calls passed (wchar). The daemon's: what it wrote to the backing filesystem")
        print("itself (writes the kernel passes through to a backing file count for the writing process).")
        print("write_bytes counts whole page-cache folios made dirty: ext4 caches a big file in large folios,")
        print("so a 4 KiB write into one can count hundreds of KiB (see passthrough_ll's daemon on the rewrites).")
        print("N+: what the daemon had written when the timeout cut the run off.")


def check_no_mounts_under(path):
    """A run that crashed can leave mounts under the work folder: removing it would go into them."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[1].startswith(path.rstrip("/") + "/")]
    if mounts:
        sys.exit(f"bench: {', '.join(mounts)} still mounted: unmount (and losetup -d) first")


def choose_targets(all_targets, names, baseline):
    """The Targets --targets names, in bench.make_targets' order (the baseline last)."""
    wanted = {TARGET_NAMES[n] for n in names.split(",") if n}
    if baseline:
        wanted.add("docfs-baseline")
    return [t for t in all_targets if t.name in wanted]


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        print(json.dumps({"seconds": CHILDREN[sys.argv[2]](*sys.argv[3:])}))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docfs", default="", help="the docfs binary (needed when docfs is a target)")
    parser.add_argument("--dir", default="/var/tmp/docfs-bench-writes", help="where to work")
    parser.add_argument("--quick", action="store_true", help="one repetition, 5,000 stress operations per process")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=300, help="seconds a run may take (default 300)")
    parser.add_argument("--docfs-options", default="")
    parser.add_argument("--only", default="", help="run only the rows whose name contains this")
    parser.add_argument("--targets", default="raw,pt,docfs",
                        help=f"comma-separated, of {','.join(n for n in TARGET_NAMES if n != 'baseline')} "
                             "(default raw,pt,docfs; --baseline adds the baseline)")
    parser.add_argument("--baseline", default="", help="also measure docfs built at this git revision")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (mounts)")
    unknown = [n for n in args.targets.split(",") if n and n not in TARGET_NAMES]
    if unknown:
        sys.exit(f"bench: unknown targets {unknown}; known: {', '.join(TARGET_NAMES)}")
    if "docfs" in args.targets.split(",") and not os.path.exists(args.docfs):
        sys.exit(f"bench: no docfs binary at {args.docfs!r} (--docfs)")
    repeat = 1 if args.quick else args.repeat

    args.dir = os.path.abspath(args.dir)
    check_no_mounts_under(args.dir)
    if os.path.exists(args.dir):
        subprocess.run(["rm", "-rf", "--one-file-system", args.dir], check=True)
    scratch = os.path.join(args.dir, "scratch")
    os.makedirs(scratch)
    tarball, tar_bytes = include_tarball(scratch)
    print(f"bench: {tarball}: 2000 files of /usr/include, {tar_bytes / 1e6:.1f} MB", file=sys.stderr)
    rows = [w for w in workloads(tarball, args.quick) if args.only in w[0]]

    baseline, commit = (None, None)
    if args.baseline:
        baseline, commit = bench.build_baseline(args.baseline, os.path.dirname(SCRIPTS))
    targets = choose_targets(bench.make_targets(args.dir, args.docfs, args.docfs_options, baseline),
                             args.targets, baseline)
    try:
        runs = measure(rows, targets, repeat, args.dir, scratch, args.timeout)
    finally:
        for t in targets:
            t.stop()
    report(rows, targets, runs, args, "quick, one run" if repeat == 1 else f"median of {repeat}")
    if commit:
        print(f"baseline: docfs built at {commit}.")
    subprocess.run(["rm", "-rf", "--one-file-system", args.dir])


if __name__ == "__main__":
    main()
