#!/usr/bin/env python3
"""docfs's many-machines benchmark (issue 22 §7): two stores ("machines" a and b) on this
machine, each mounted by its own daemon, linked to one throwaway PostgreSQL server
(scripts/throwaway-postgres), and a third store mounted unlinked, all in one run:

- propagation: a save (write + close) on a's mount until b's mount shows it, over --saves
  saves: p50, p99, max (what b shows is indexed already: a remote change's record is stitched
  before its claim lets readers in, ManyMachinesTests.readersOfAnotherMachinesSavesSeeEachWholeAndIndexedFirst);
- creates/s and `tar x` of real source files through a linked mount against an unlinked one
  (the local write path must not wait for the network: within 10%), `tar x` again beside a
  process keeping a core busy;
- upload and first download of a --size MiB file: from the write on a until a has nothing
  waiting (MB/s), and `docfs download` of it on b once b lists it (promised: b fetches
  content on demand), against a plain COPY of the same bytes into the same
  server (psql, bytea rows of 1 MiB) and a plain SELECT of them back;
- an edit of 1 MiB in the middle of that file: the bytes it added to the remote's chunks;
- an app's key-value store (issue 24), through its key files (`.docfs/kv/` of app views on a
  and b): a value set on a until b's key file shows it, over --sets sets (p50, p99); sets/s and
  gets/s on a, against a small file written and fsynced (and read) in a folder of the same disk,
  and gets against small documents of the same app view;
- each daemon's resident memory (peak) at the end.

The stores live on a fresh ext4 made for the run (`ScratchFilesystem`: a sparse image under
/var/tmp, loop-mounted), not on this machine's root ext4, which has no journal (see there).

Needs root, the release build (--docfs) and PostgreSQL's server (scripts/setup installs it)."""
import argparse, json, os, random, shutil, statistics, subprocess, sys, tempfile, threading, time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(SCRIPTS)
PG = os.path.join(SCRIPTS, "throwaway-postgres")


def sh(*args, env=None, check=True, capture=True, input=None):
    return subprocess.run(args, env=env, check=check, text=True, input=input,
                          stdout=subprocess.PIPE if capture else None, stderr=subprocess.STDOUT if capture else None).stdout


class Server:
    def __init__(self):
        self.folder = sh(PG, "start", str(os.getpid())).strip()
        self.port = int(open(self.folder + "/port").read())
        self.password = open(self.folder + "/password").read().strip()

    def database(self, name):
        sh(PG, "createdb", self.folder, name)
        return f"postgresql://docfs_test:{self.password}@127.0.0.1:{self.port}/{name}?sslmode=disable"

    def sql(self, database, statement, input=None):
        return sh(PG, "psql", self.folder, "-d", database, "-At", "-c", statement, input=input)

    def stop(self):
        sh(PG, "stop", self.folder, check=False)


class Machine:
    def __init__(self, docfs, base, name, settings=None):
        self.docfs, self.name = docfs, name
        self.home = os.path.join(base, name)
        self.store = os.path.join(self.home, "store")
        self.mount = os.path.join(self.home, "mnt")
        os.makedirs(self.mount)
        if settings:
            os.makedirs(self.store)
            with open(os.path.join(self.store, "settings.json"), "w") as f:
                f.write(settings)
        self.env = dict(os.environ, HOME=self.home)
        sh(docfs, "mount", "--store", self.store, self.mount, env=self.env)
        self.pid = self.daemon_pid()

    def daemon_pid(self):
        for line in sh("ps", "-eo", "pid,args").splitlines()[1:]:
            pid, _, args = line.strip().partition(" ")
            if "docfs" in args and self.store in args and "mount" in args:
                return int(pid)
        return None

    def link(self, uri):
        return sh(self.docfs, "remote", "link", uri, "--machine", self.name, "--store", self.store, env=self.env)

    def status(self):
        return json.loads(sh(self.docfs, "remote", "status", "--json", "--store", self.store, env=self.env))

    def peak_rss_mib(self):
        if not self.pid:
            return float("nan")
        for line in open(f"/proc/{self.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def unmount(self):
        sh(self.docfs, "unmount", self.mount, env=self.env, check=False)


def wait_until(condition, limit, step=0.0005):
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if condition():
            return time.monotonic() - start
        time.sleep(step)
    return None


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def propagation(a, b, saves):
    """For each save on a: when b shows it (read through b's mount; b indexes a change before
    it shows it), and when `docfs watch` on b hears it as a's. Both lists sorted, in seconds."""
    latencies, heard = [], []
    # b's watcher: the moment each of a's changes of the file reaches it.
    watcher = subprocess.Popen([b.docfs, "watch", "--json", b.mount], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=b.env)
    events = []
    def follow():
        for line in watcher.stdout:
            if "latency.txt" in line and '"origin":"remote"' in line and '"machine":"a"' in line:
                events.append(time.monotonic())
    threading.Thread(target=follow, daemon=True).start()
    time.sleep(0.5)
    for i in range(saves):
        payload = f"save {i} {random.random()}\n".encode()
        start = time.monotonic()
        with open(os.path.join(a.mount, "latency.txt"), "wb") as f:
            f.write(payload)
        # Up to a minute, so a late save is measured rather than given up on.
        seen = wait_until(lambda: read(os.path.join(b.mount, "latency.txt")) == payload, 60)
        latencies.append((time.monotonic() - start) if seen is not None else float("inf"))
        # The watcher's event for this save: the first of a's after it was written.
        wait_until(lambda: any(t >= start for t in events[-4:]), 5)
        after = [t for t in events[-4:] if t >= start]
        heard.append(after[0] - start if after else float("inf"))
        if seen is None or seen > 1:
            # What the daemons said about a late save (their logs go with the bench's folder).
            for machine in (a, b):
                lines = (read(os.path.join(machine.store, "daemon.log")) or b"").decode(errors="replace").splitlines()
                print(f"late save {payload[:40]!r} ({seen}): {machine.name}: " + " | ".join(lines[-6:]), file=sys.stderr)
    watcher.terminate()
    watcher.wait()
    latencies.sort()
    heard.sort()
    return latencies, heard


def key_values(a, b, sets, seconds=3.0):
    """An app's key-value store through its key files: for each of `sets` values written to a's
    key file, when b's key file shows it (sorted, seconds); then sets/s and gets/s through a's
    key files and the same on plain files of the raw disk (written and fsynced: a set is on
    disk when its close answers)."""
    app = "com.example.Bench"
    sh(a.docfs, "container", "create", app, "--name", "Bench", "--store", a.store, env=a.env)
    wait_until(lambda: os.path.exists(os.path.join(b.store, "containers", app, "container.json")), 120, step=0.05)
    views = []
    try:
        for machine in (a, b):
            point = os.path.join(machine.home, "app")
            os.makedirs(point)
            sh(machine.docfs, "mount", "--store", machine.store, "--app", app, point, env=machine.env)
            views.append(point)
        on_a, on_b = (os.path.join(view, ".docfs", "kv") for view in views)
        latencies = []
        for i in range(sets):
            value = f"page {i} {random.random()}".encode()
            start = time.monotonic()
            with open(os.path.join(on_a, "page"), "wb") as f:
                f.write(value)
            seen = wait_until(lambda: read(os.path.join(on_b, "page")) == value, 60)
            latencies.append(time.monotonic() - start if seen is not None else float("inf"))
        latencies.sort()
        raw = os.path.join(a.home, "raw-kv")
        os.makedirs(raw)

        def rate(operation):
            count, start = 0, time.monotonic()
            while time.monotonic() - start < seconds:
                operation(count)
                count += 1
            return count / (time.monotonic() - start)

        def put(folder, durable):
            def operation(i):
                with open(os.path.join(folder, f"key{i % 100}"), "wb") as f:
                    f.write(b"value %d" % i)
                    if durable:
                        f.flush()
                        os.fsync(f.fileno())
            return operation

        get = lambda folder: (lambda i: read(os.path.join(folder, f"key{i % 100}")))
        documents = os.path.join(views[0], "Documents")
        for i in range(100):
            with open(os.path.join(documents, f"key{i}"), "wb") as f:
                f.write(b"value %d" % i)
        rates = (rate(put(on_a, False)), rate(put(raw, True)), rate(get(on_a)), rate(get(raw)), rate(get(documents)))
        return latencies, rates
    finally:
        for view in views:
            sh(a.docfs, "unmount", view, env=a.env, check=False)


# Linked and unlinked runs of creates and tar x, alternating: the best of each counts.
ATTEMPTS = 5


def set_nice(pids, niceness):
    """Sets every thread of `pids` to `niceness` (a process's nice value is its threads' own)."""
    for pid in pids:
        if not pid:
            continue
        for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
            try:
                os.setpriority(os.PRIO_PROCESS, int(tid), niceness)
            except OSError:
                pass  # a thread that ended meanwhile


def creates(folder, count):
    os.makedirs(folder)
    start = time.monotonic()
    for i in range(count):
        with open(os.path.join(folder, f"f{i}.txt"), "wb") as f:
            f.write(b"x" * 100)
    return count / (time.monotonic() - start)


def untar(archive, folder):
    os.makedirs(folder)
    start = time.monotonic()
    sh("tar", "-xf", archive, "-C", folder)
    return time.monotonic() - start


def print_table(title, rows, value_width=32):
    width = max(len(r[0]) for r in rows)
    print(f"\n{title}")
    for name, value, note in rows:
        print(f"  {name.ljust(width)}  {value:<{value_width}} {note}")


class ScratchFilesystem:
    """A fresh ext4 (with its journal, as mkfs makes it) in a sparse image under /var/tmp,
    mounted for one run: the stores live there. This machine's root ext4 has no journal, and
    without one ext4 checks every free inode it considers for a new file against the inodes
    freed in the last 30 s: for half a minute after any deletion (another test's clean-up, a
    run's own), creates ran 13x slower on the raw disk and 4x slower through docfs, which swung
    linked/unlinked ratios from 0.3x to 1.6x between neighbouring runs."""

    def __init__(self, label, gib=16):
        self.image = tempfile.mktemp(prefix=f"docfs-{label}-", suffix=".img", dir="/var/tmp")
        self.path = self.image[:-4]
        with open(self.image, "wb") as f:
            f.truncate(gib << 30)
        sh("mkfs.ext4", "-q", "-F", self.image)
        os.makedirs(self.path)
        sh("mount", "-o", "loop", self.image, self.path)

    def remove(self):
        # The daemons may still be closing their stores' files just after `docfs unmount`.
        for _ in range(100):
            if subprocess.run(["umount", self.path], stderr=subprocess.DEVNULL).returncode == 0:
                break
            time.sleep(0.1)
        else:
            sh("umount", "-l", self.path, check=False)
        os.rmdir(self.path)
        os.unlink(self.image)


def tear_down(machines, server, base, scratch=None):
    for machine in machines:
        machine.unmount()
    server.stop()
    shutil.rmtree(base, ignore_errors=True)
    if scratch:
        scratch.remove()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docfs", required=True)
    parser.add_argument("--saves", type=int, default=1000)
    parser.add_argument("--size", type=int, default=1024, help="MiB of the big file")
    parser.add_argument("--creates", type=int, default=2000)
    parser.add_argument("--sets", type=int, default=500, help="key-value sets timed until the other machine has them")
    parser.add_argument("--quick", action="store_true", help="200 saves, a 128 MiB file, 500 creates, 100 sets")
    args = parser.parse_args()
    if args.quick:
        args.saves, args.size, args.creates, args.sets = 200, 128, 500, 100
    scratch = ScratchFilesystem("bench-sync")
    base = tempfile.mkdtemp(prefix="docfs-bench-sync-", dir=scratch.path)
    server = Server()
    machines = []
    try:
        uri = server.database("bench")
        a, b, plain = (Machine(args.docfs, base, name) for name in ("a", "b", "plain"))
        machines = [a, b, plain]
        a.link(uri)
        b.link(uri)
        rows = []

        lat, heard = propagation(a, b, args.saves)
        p = lambda values, q: values[min(len(values) - 1, int(q * len(values)))] * 1000
        late = sum(1 for x in lat if x > 1)
        rows.append(("propagation a → b, p50 / p99 / max", f"{p(lat, 0.5):.1f} / {p(lat, 0.99):.1f} / {lat[-1] * 1000:.1f} ms",
                     f"{args.saves} saves, {late} over 1 s; target p99 < 1000 ms (shown on b, indexed first)"))
        unheard = sum(1 for x in heard if x > 1)
        rows.append(("  … heard by docfs watch on b, p50 / p99 / max",
                     f"{p(heard, 0.5):.1f} / {p(heard, 0.99):.1f} / {heard[-1] * 1000:.1f} ms",
                     f"origin remote, machine a; {unheard} over 1 s"))
        kv_lat, (kv_sets, raw_sets, kv_gets, raw_gets, document_gets) = key_values(a, b, args.sets)
        rows.append(("key-value set on a → seen on b, p50 / p99 / max",
                     f"{p(kv_lat, 0.5):.1f} / {p(kv_lat, 0.99):.1f} / {kv_lat[-1] * 1000:.1f} ms",
                     f"{args.sets} sets written to a's key file, read from b's; target converged within 1 s"))
        rows.append(("key-value sets/s on a (key files)", f"{kv_sets:.0f}/s",
                     f"a small file written and fsynced on the raw disk: {raw_sets:.0f}/s ({kv_sets / raw_sets:.2f}x)"))
        rows.append(("key-value gets/s on a (key files)", f"{kv_gets:.0f}/s",
                     f"a small file read on the raw disk: {raw_gets:.0f}/s ({kv_gets / raw_gets:.2f}x); a document of the same app view: {document_gets:.0f}/s ({kv_gets / document_gets:.2f}x)"))

        # Linked and unlinked runs alternate, best of ATTEMPTS each; each starts once the linked
        # machines are idle (b is another machine in real life: its applying, and a's upload
        # of the run before, would otherwise take this machine's CPU from the next run).
        # b and the server stand for other computers: they yield this one's CPU to the runs (the
        # server's processes again before each run: it starts one per new connection, and
        # autovacuum workers after a burst of commits).
        def others():
            return [b.pid] + [int(pid) for pid in sh("pgrep", "-x", "postgres", check=False).split()]

        def settled(last_on_b):
            wait_until(lambda: os.path.exists(last_on_b) and a.status()["waiting"] == 0 and b.status()["waiting"] == 0, 600, step=0.2)
            set_nice(others(), 10)

        set_nice(others(), 10)
        linked_rates, plain_rates = [], []
        for attempt in range(ATTEMPTS):
            set_nice(others(), 10)
            linked_rates.append(creates(os.path.join(a.mount, f"creates{attempt}"), args.creates))
            settled(os.path.join(b.mount, f"creates{attempt}", f"f{args.creates - 1}.txt"))
            plain_rates.append(creates(os.path.join(plain.mount, f"creates{attempt}"), args.creates))
        linked_rate, plain_rate = max(linked_rates), max(plain_rates)
        paired = statistics.median(l / p for l, p in zip(linked_rates, plain_rates))
        rows.append(("creates/s, linked vs unlinked", f"{linked_rate:.0f} vs {plain_rate:.0f} ({linked_rate / plain_rate:.2f}x)",
                     f"best of {ATTEMPTS} each, alternating; median of the pairs {paired:.2f}x; b and the server niced; target within 10%"))
        archive = os.path.join(base, "include.tar")
        files = sorted(os.path.relpath(os.path.join(d, f), "/usr/include")
                       for d, _, fs in os.walk("/usr/include") for f in fs)[:2000]
        with open(os.path.join(base, "list"), "w") as f:
            f.write("\n".join(files))
        sh("tar", "-cf", archive, "-C", "/usr/include", "-T", os.path.join(base, "list"))
        def tar_pairs(prefix):
            """`tar x` on a and on the unlinked store, alternating, ATTEMPTS of each (folders
            PREFIX0, PREFIX1…); the best of each and the median of the pairs' ratios."""
            linked, plain_times = [], []
            for attempt in range(ATTEMPTS):
                set_nice(others(), 10)
                linked.append(untar(archive, os.path.join(a.mount, f"{prefix}{attempt}")))
                settled(os.path.join(b.mount, f"{prefix}{attempt}", files[-1]))
                plain_times.append(untar(archive, os.path.join(plain.mount, f"{prefix}{attempt}")))
            paired = statistics.median(l / p for l, p in zip(linked, plain_times))
            return min(linked), min(plain_times), paired

        linked_tar, plain_tar, paired = tar_pairs("tree")
        rows.append(("tar x of 2,000 header files, linked vs unlinked", f"{linked_tar:.2f} s vs {plain_tar:.2f} s ({linked_tar / plain_tar:.2f}x)",
                     f"best of {ATTEMPTS} each, alternating; median of the pairs {paired:.2f}x; b and the server niced; target within 10%"))
        # The same beside a process that keeps one core busy (a build, a browser): a tar x
        # pauses more, and a sync round that takes a pause for the end of the burst competes
        # with the rest of it (issue 22 §7: 1.2x to 1.8x before rounds waited for 150 ms quiet).
        hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
        try:
            linked_tar, plain_tar, paired = tar_pairs("busy")
        finally:
            hog.kill()
            hog.wait()
        rows.append(("  … beside a busy core", f"{linked_tar:.2f} s vs {plain_tar:.2f} s ({linked_tar / plain_tar:.2f}x)",
                     f"best of {ATTEMPTS} each, alternating; median of the pairs {paired:.2f}x; `yes` at nice 0"))
        set_nice(others(), 0)  # the transfers below are measured against the server's own COPY and SELECT

        size = args.size << 20
        data = os.urandom(size)
        big = os.path.join(a.mount, "big.bin")
        start = time.monotonic()
        with open(big, "wb") as f:
            f.write(data)
        closed = time.monotonic()
        up = wait_until(lambda: a.status()["waiting"] == 0 and a.status().get("lastContact") is not None, 3600, step=0.05)
        listed = wait_until(lambda: os.path.getsize(os.path.join(b.mount, "big.bin")) == size
                            if os.path.exists(os.path.join(b.mount, "big.bin")) else False, 3600, step=0.05)
        up_seconds = (closed - start) + (up or float("inf"))
        # b lists it promised once a's commit is on the remote (a's upload done) and fetches it
        # when asked: `docfs download`, to the whole file there.
        t = time.monotonic()
        sh(b.docfs, "download", os.path.join(b.mount, "big.bin"), env=b.env)
        down_seconds = time.monotonic() - t if listed is not None else float("inf")
        # The same bytes by plain COPY into, and SELECT out of, the same server.
        server.sql("bench", "CREATE TABLE plain_copy (b bytea)")
        lines = "".join("\\\\x" + data[i:i + (1 << 20)].hex() + "\n" for i in range(0, size, 1 << 20))
        t = time.monotonic()
        server.sql("bench", "COPY plain_copy FROM STDIN", input=lines)
        copy_seconds = time.monotonic() - t
        # Out to /dev/null, as docfs writes what it fetches to disk (read into this process,
        # 2 GB of hex cost it more than the server took to send them: 48 MB/s).
        t = time.monotonic()
        subprocess.run([PG, "psql", server.folder, "-d", "bench", "-At", "-c", "COPY plain_copy TO STDOUT"],
                       stdout=subprocess.DEVNULL, check=True)
        select_seconds = time.monotonic() - t
        assert int(server.sql("bench", "SELECT sum(length(b)) FROM plain_copy")) == size
        mb = size / 1e6
        rows.append((f"upload of a {args.size} MiB file (close to nothing waiting)", f"{mb / up_seconds:.1f} MB/s",
                     f"COPY of the same bytes: {mb / copy_seconds:.1f} MB/s ({copy_seconds / up_seconds:.2f}x)"))
        rows.append((f"first download of it on b (docfs download of it, listed promised)", f"{mb / down_seconds:.1f} MB/s",
                     f"SELECT of the same bytes: {mb / select_seconds:.1f} MB/s ({select_seconds / down_seconds:.2f}x)"))

        before = int(server.sql("bench", "SELECT coalesce(sum(length(bytes)), 0) FROM docfs.chunks"))
        versions = lambda: int(server.sql("bench", "SELECT count(*) FROM docfs.versions WHERE name = 'big.bin'"))
        committed = versions()
        with open(big, "r+b") as f:
            f.seek(size // 2)
            f.write(os.urandom(1 << 20))
        # Until the edit is a version on the remote (the whole file is read to find what changed).
        wait_until(lambda: versions() > committed, 600, step=0.1)
        after = int(server.sql("bench", "SELECT coalesce(sum(length(bytes)), 0) FROM docfs.chunks"))
        rows.append(("an edit of 1 MiB in the middle: bytes sent", f"{(after - before) / 1e6:.2f} MB",
                     "the new chunks it put on the remote; target about 1 MiB"))
        rows.append(("daemon peak RSS a / b / unlinked", f"{a.peak_rss_mib():.0f} / {b.peak_rss_mib():.0f} / {plain.peak_rss_mib():.0f} MiB", ""))

        print_table("many machines (issue 22 §7): two linked daemons, one unlinked, one PostgreSQL on loopback", rows)
    finally:
        tear_down(machines, server, base, scratch)


if __name__ == "__main__":
    main()
