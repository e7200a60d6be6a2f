#!/usr/bin/env python3
"""docfs's promised-items benchmark (issue 23 §3): machine a (mounted, linked to a throwaway
PostgreSQL) holds --items small documents and a --size MiB file; machine b joins on demand
(settings.json: sync.downloads = onDemand), so everything arrives promised. Measured, in one run:

- listing: `docfs remote link` of b (every item listed, promised), then mounted, the first `ls`
  of its top folder and a full `find` (time from the start of the link);
- time to first byte of the big promised file (4 KiB at its start, and at its middle);
- sequential read of it while promised (dd, 1 MiB blocks) against the same read once it is
  downloaded (page cache dropped), and against a plain SELECT of its chunks (psql COPY out);
- the bytes a 4 KiB read of a fresh promised file waits for (the chunk it sits in; the rest then
  comes down in the background), per byte read.

The stores live on a fresh ext4 made for the run (`ScratchFilesystem`: a sparse image under
/var/tmp, loop-mounted), not on this machine's root ext4, which has no journal (see there).

Needs root, the release build (--docfs) and PostgreSQL's server (scripts/setup installs it)."""
import argparse, json, os, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sync import PG, Machine, ScratchFilesystem, Server, print_table, sh, tear_down, wait_until  # noqa: E402

ON_DEMAND = '{"sync": {"downloads": "onDemand"}}'


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(function):
    start = time.monotonic()
    result = function()
    return time.monotonic() - start, result


def first_byte(path, offset):
    def read():
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, 4096, offset)
        finally:
            os.close(fd)
    return timed(read)


def dd(path):
    seconds, _ = timed(lambda: sh("dd", f"if={path}", "of=/dev/null", "bs=1M", "status=none"))
    return seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docfs", required=True)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="MiB of the big file")
    parser.add_argument("--quick", action="store_true", help="10,000 items, a 256 MiB file")
    args = parser.parse_args()
    if args.quick:
        args.items, args.size = 10_000, 256
    scratch = ScratchFilesystem("bench-promised")
    base = tempfile.mkdtemp(prefix="docfs-bench-promised-", dir=scratch.path)
    server = Server()
    machines = []
    try:
        uri = server.database("promised")
        a = Machine(args.docfs, base, "a")
        machines.append(a)
        a.link(uri)
        # The small documents, 1,000 to a folder, then the big files; a sends them all up.
        for start in range(0, args.items, 1000):
            folder = os.path.join(a.mount, f"folder-{start // 1000:03d}")
            os.mkdir(folder)
            for i in range(start, min(start + 1000, args.items)):
                with open(os.path.join(folder, f"doc-{i}.txt"), "w") as f:
                    f.write(f"document {i}\n")
        size = args.size << 20
        with open(os.path.join(a.mount, "big.bin"), "wb") as f:
            for _ in range(args.size):
                f.write(os.urandom(1 << 20))
        with open(os.path.join(a.mount, "random.bin"), "wb") as f:
            for _ in range(64):
                f.write(os.urandom(1 << 20))
        sent = wait_until(lambda: a.status()["waiting"] == 0, 7200, step=0.5)
        if sent is None:
            sys.exit("a did not send everything up within 2 hours")

        # b joins on demand: linked (unserved, every item listed), then mounted.
        home = os.path.join(base, "b")
        store, mount = os.path.join(home, "store"), os.path.join(home, "mnt")
        os.makedirs(store)
        os.makedirs(mount)
        with open(os.path.join(store, "settings.json"), "w") as f:
            f.write(ON_DEMAND)
        env = dict(os.environ, HOME=home)
        start = time.monotonic()
        sh(args.docfs, "remote", "link", uri, "--machine", "b", "--store", store, env=env)
        linked = time.monotonic() - start
        sh(args.docfs, "mount", "--store", store, mount, env=env)
        b = Machine.__new__(Machine)
        b.docfs, b.name, b.home, b.store, b.mount, b.env = args.docfs, "b", home, store, mount, env
        b.pid = b.daemon_pid()
        machines.append(b)
        _, listed = timed(lambda: sh("ls", mount))
        ls_after = time.monotonic() - start
        find_seconds, found = timed(lambda: sh("find", mount))
        find_after = time.monotonic() - start
        found_count = len(found.splitlines()) - 1
        promised = os.getxattr(os.path.join(mount, "big.bin"), "user.docfs.status").decode()

        rows = []
        rows.append((f"link of b ({args.items:,} items, all promised)", f"{linked:.1f} s", f"{args.items / linked:,.0f} items/s"))
        rows.append(("  first ls after the link started", f"{ls_after:.1f} s", f"{len(listed.splitlines())} entries"))
        rows.append(("  full find after the link started", f"{find_after:.1f} s", f"{found_count:,} paths, find alone {find_seconds:.2f} s"))

        big = os.path.join(mount, "big.bin")
        ttfb, data = first_byte(big, 0)
        ttfb_middle, _ = first_byte(big, size // 2)
        rows.append((f"time to first byte of the {args.size} MiB promised file", f"{ttfb * 1000:.0f} ms",
                     f"at its middle: {ttfb_middle * 1000:.0f} ms; target < 100 ms (status was {promised!r})"))

        # Sequential read while promised: its download began with the first bytes; the read
        # waits for each range in turn as the download brings it.
        promised_seconds = dd(big)
        wait_until(lambda: os.getxattr(big, "user.docfs.status").decode() == "current", 600, step=0.2)
        drop_caches()
        local_seconds = dd(big)
        # The big file's chunks are the only big ones (the documents are a line each).
        select = "COPY (SELECT bytes FROM docfs.chunks WHERE length(bytes) > 100000) TO STDOUT"
        select_seconds, _ = timed(lambda: subprocess.run([PG, "psql", server.folder, "-d", "promised", "-At", "-c", select],
                                                         stdout=subprocess.DEVNULL, check=True))
        mb = size / 1e6
        rows.append((f"sequential read of it, promised vs downloaded", f"{mb / promised_seconds:.0f} vs {mb / local_seconds:.0f} MB/s",
                     f"{local_seconds / promised_seconds:.2f}x; a plain SELECT of its chunks: {mb / select_seconds:.0f} MB/s "
                     f"({select_seconds / promised_seconds:.2f}x)"))

        # A 4 KiB read waits for the chunk around it (then the rest follows in the background,
        # so what was fetched by the time anyone looks is more): the chunk, from the promise.
        random_file = os.path.join(mount, "random.bin")
        item = os.getxattr(random_file, "user.docfs.id").decode()
        number = os.getxattr(random_file, "user.docfs.version").decode()
        fd = os.open(random_file, os.O_RDONLY)
        offset = 37 << 20
        os.pread(fd, 4096, offset)
        os.close(fd)
        waited = 0
        record = os.path.join(store, "promised", f"{item}-{number}.json")
        if os.path.exists(record):
            lengths = json.load(open(record)).get("lengths") or []
            start = 0
            for length in lengths:
                if start <= offset < start + length:
                    waited = length
                    break
                start += length
        rows.append(("bytes a 4 KiB read of a promised file waits for", f"{waited:,}" if waited else "(downloaded already)",
                     f"{waited / 4096:.0f} per byte read: the chunk around it; the rest follows in the background"))
        rows.append(("daemon peak RSS b", f"{b.peak_rss_mib():.0f} MiB", ""))

        # c joins the other way: mounted first, then linked; its daemon lists the items as they
        # come, so a listing answers at once (partial), and the rest fills in behind it.
        c = Machine(args.docfs, base, "c", settings=ON_DEMAND)
        machines.append(c)
        start = time.monotonic()
        sh(args.docfs, "remote", "link", uri, "--machine", "c", "--store", c.store, env=c.env)
        answered = time.monotonic() - start
        # Both times from the link's start (wait_until counts from its own).
        def since_start(waited):
            return None if waited is None else time.monotonic() - start

        first = since_start(wait_until(lambda: len(os.listdir(c.mount)) > 0, 600, step=0.01))
        first_entries = len(os.listdir(c.mount))
        everything = since_start(wait_until(lambda: len(sh("find", c.mount).splitlines()) - 1 >= found_count, 3600, step=1))
        rows.append(("c mounted, then linked: the link answered", f"{answered:.2f} s", "the daemon brings the items in behind it"))
        rows.append(("  first ls with an entry after the link started", f"{first:.2f} s" if first is not None else "none",
                     f"{first_entries} entries then"))
        rows.append(("  every item listed after the link started", f"{everything:.1f} s" if everything is not None else "not within an hour",
                     f"{found_count / everything:,.0f} items/s" if everything else ""))

        print_table("promised items (issue 23 §3): b joins a's store on demand, one PostgreSQL on loopback", rows, 24)
    finally:
        tear_down(machines, server, base, scratch)


if __name__ == "__main__":
    main()
