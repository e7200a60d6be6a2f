#!/usr/bin/env python3
"""docfs's big-tree benchmark (issue 21 §3): a store of --items items (default 1,000,000: files
of a few bytes in folders of 1,000) and a git repository of --repo-files files, made straight in
the store on a fresh ext4 filesystem, indexed by `docfs index rebuild` (ids given to all), then
walked through the mount: `find`, `ls -lR`, `du -s` over everything, and `git status` in the
repository, each from cold caches. The same walks run on the raw disk and on libfuse's
passthrough_ll over the same folder, in the same run.

docfs runs with its descriptors limited to --descriptors (default 4,096, soft and hard, so it
cannot raise them); passthrough_ll, which holds a descriptor per inode the kernel knows, gets
the hard limit of this shell (it is what a user's FUSE server gets; past it, its walks fail with
EMFILE, which the table says). After the walks the table gives docfs's resident memory (now and
at its peak) and open descriptors, and the same for passthrough_ll."""
import argparse, os, resource, shutil, subprocess, sys, time

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, SCRIPTS)
import bench  # noqa: E402

PER_FOLDER = 1000


def make_image(root, size_gb, inodes):
    """A fresh ext4 filesystem with room for `inodes` inodes, loop-mounted at root/fs."""
    image, path = os.path.join(root, "scale.img"), os.path.join(root, "fs")
    os.makedirs(path, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_gb << 30)
    bench.run(["mkfs.ext4", "-q", "-F", "-N", str(inodes), "-E", "lazy_itable_init=0,lazy_journal_init=0", image])
    device = subprocess.check_output(["losetup", "--find", "--show", image], text=True).strip()
    bench.run(["mount", device, path])
    return image, path, device


def progress(what, done, total, started):
    if sys.stderr.isatty():
        rate = done / max(time.monotonic() - started, 1e-6)
        print(f"\r  {what}: {done:,}/{total:,} ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)


def make_items(documents, items):
    """`items` items under documents/tree: folders of PER_FOLDER files of a few bytes."""
    started = time.monotonic()
    made = 0
    folder_index = 0
    while made < items:
        folder = os.path.join(documents, "tree", f"d{folder_index // 100:03d}", f"d{folder_index:05d}")
        os.makedirs(folder)
        made += 1 + (folder_index % 100 == 0)
        for i in range(min(PER_FOLDER, items - made)):
            fd = os.open(os.path.join(folder, f"file-{i:04d}.txt"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"item %d\n" % i)
            os.close(fd)
        made += min(PER_FOLDER, items - made)
        folder_index += 1
        if folder_index % 20 == 0:
            progress("making items", made, items, started)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return made


def make_repository(documents, files):
    """A git repository of `files` small source files, committed."""
    repo = os.path.join(documents, "repo")
    for i in range(files):
        folder = os.path.join(repo, f"src{i // 500:03d}")
        if i % 500 == 0:
            os.makedirs(folder)
        with open(os.path.join(folder, f"f{i}.c"), "w") as f:
            f.write(f"int f{i}(void) {{ return {i}; }}\n")
    env = dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@e", GIT_COMMITTER_NAME="bench",
               GIT_COMMITTER_EMAIL="b@e", GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "bench"]):
        bench.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL)
    return repo


def walk(path, cmd, cwd_relative=""):
    """Seconds `cmd` takes in path/cwd_relative from cold caches; fails loudly on an error."""
    bench.drop_caches()
    start = time.perf_counter()
    # bash with pipefail: `find | wc -l` fails when find does (a server out of descriptors).
    result = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=os.path.join(path, cwd_relative), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, GIT_CONFIG_NOSYSTEM="1", HOME="/nonexistent"))
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"{cmd} failed in {path}: {result.stderr.strip()[:300]}")
    return seconds, result.stdout


def wait_mounted(path, proc, what, limit):
    """Like bench.wait_mounted, with room for a daemon that looks at a big store first."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if bench.is_mounted(path):
            return
        if proc.poll() is not None:
            sys.exit(f"bench: {what} exited before mounting")
        time.sleep(0.05)
    sys.exit(f"bench: {what} did not mount {path} within {limit} s")


def process_figures(pid):
    """(resident MiB now, resident MiB at peak, open descriptors) of process `pid`."""
    rss = peak = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return rss, peak, len(os.listdir(f"/proc/{pid}/fd"))


WALKS = [
    ("find, every item", "find . | wc -l", ""),
    ("ls -lR, every item", "ls -lR > /dev/null", ""),
    ("du -s, every item", "du -s .", ""),
    ("git status, repository", "git status --porcelain | wc -l", "repo"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docfs", required=True)
    parser.add_argument("--dir", default="/var/tmp/docfs-bench-scale")
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--repo-files", type=int, default=100_000)
    parser.add_argument("--descriptors", type=int, default=4096)
    parser.add_argument("--quick", action="store_true", help="100,000 items and a repository of 10,000 files")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (mounts, drop_caches)")
    if args.quick:
        args.items, args.repo_files = 100_000, 10_000
    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    total = args.items + args.repo_files * 2
    image, fs, device = make_image(args.dir, max(4, (args.items * 4096 + args.repo_files * 16384) // (1 << 30) + 3),
                                   int(total * 1.3) + 10_000)
    procs = []
    try:
        store = os.path.join(fs, "store")
        mnt = os.path.join(args.dir, "mnt")
        os.makedirs(mnt)
        # The store's layout, made by a first mount.
        daemon = subprocess.Popen([args.docfs, "mount", "--foreground", "--store", store, mnt],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        bench.wait_mounted(mnt, daemon, "docfs")
        bench.run(["umount", mnt])
        daemon.wait(timeout=30)
        documents = os.path.join(store, "containers", "docfs.default", "Documents")
        started = time.perf_counter()
        made = make_items(documents, args.items)
        repo = make_repository(documents, args.repo_files)
        generation = time.perf_counter() - started
        started = time.perf_counter()
        bench.run([args.docfs, "index", "rebuild", "--store", store], stdout=subprocess.DEVNULL)
        rebuild = time.perf_counter() - started
        print(f"made {made:,} items and a repository of {args.repo_files:,} files in {generation:.1f} s; "
              f"`docfs index rebuild` gave them ids and records in {rebuild:.1f} s", flush=True)

        pt_bin = os.path.join(args.dir, "passthrough_ll")
        flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "fuse3"], text=True).split()
        bench.run(["gcc", "-O2", bench.EXAMPLE, "-o", pt_bin] + flags)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        targets = [
            ("raw disk", None),
            ("passthrough_ll", ["prlimit", f"--nofile={hard}:{hard}", "--", pt_bin, "-f", "-o", f"source={documents}", mnt]),
            ("docfs", ["prlimit", f"--nofile={args.descriptors}:{args.descriptors}", "--", args.docfs, "mount",
                       "--foreground", "--store", store, mnt]),
        ]
        times, figures, counts, mounting = {}, {}, {}, {}
        for name, command in targets:
            path = documents
            proc = None
            if command:
                bench.drop_caches()
                started = time.perf_counter()
                proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                procs.append(proc)
                wait_mounted(mnt, proc, name, limit=1800)
                mounting[name] = time.perf_counter() - started
                path = mnt
            try:
                for row, cmd, where in WALKS:
                    print(f"  {name}: {row}", file=sys.stderr, flush=True)
                    try:
                        seconds, out = walk(path, cmd, where)
                    except RuntimeError as failure:
                        print(f"    {failure}", file=sys.stderr)
                        times[(row, name)] = None
                        continue
                    times[(row, name)] = seconds
                    if row.startswith("find"):
                        counts[name] = int(out.strip())
                if proc:
                    figures[name] = process_figures(proc.pid)
            finally:
                if proc:
                    subprocess.run(["umount", mnt])
                    proc.wait(timeout=60)
        print()
        print(f"Big trees: {made:,} items in the store (+ a git repository of {args.repo_files:,} files), "
              f"walked from cold caches; docfs limited to {args.descriptors:,} descriptors")
        header = (f"| {'walk':<26} | {'raw':>8} | {'passthrough_ll':>14} | {'docfs':>8} | {'docfs/pt':>8} "
                  f"| {'docfs/raw':>9} |")
        print(header)
        print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")

        def shown(seconds, width):
            return f"{seconds:>{width - 1}.2f}s" if seconds is not None else f"{'failed':>{width}}"

        def ratio(a, b, width):
            return f"{a / b:>{width - 1}.2f}x" if a is not None and b else f"{'-':>{width}}"
        for row, _, _ in WALKS:
            raw, pt, dfs = (times[(row, t)] for t in ("raw disk", "passthrough_ll", "docfs"))
            print(f"| {row:<26} | {shown(raw, 8)} | {shown(pt, 14)} | {shown(dfs, 8)} | {ratio(dfs, pt, 8)} "
                  f"| {ratio(dfs, raw, 9)} |")
        print("(failed: the walk ended with an error, as `Too many open files` past a server's descriptor limit)")
        print(f"mounting took {mounting.get('passthrough_ll', 0):.2f} s for passthrough_ll and {mounting.get('docfs', 0):.2f} s "
              f"for docfs (which reconciles its index with the store first)")
        print()
        print(f"| {'after the walks':<26} | {'resident MiB':>12} | {'peak MiB':>9} | {'open descriptors':>16} |")
        print(f"|{'-' * 28}|{'-' * 14}|{'-' * 11}|{'-' * 18}|")
        for name in ("passthrough_ll", "docfs"):
            rss, peak, fds = figures[name]
            print(f"| {name:<26} | {rss:>12.0f} | {peak:>9.0f} | {fds:>16,} |")
        print(f"\nfind counted {counts.get('docfs', 0):,} names through docfs, {counts.get('raw disk', 0):,} on the raw disk")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if bench.is_mounted(mnt):
            subprocess.run(["umount", "-l", mnt])
        bench.run(["umount", fs])
        bench.run(["losetup", "--detach", device])
        os.unlink(image)


if __name__ == "__main__":
    main()
