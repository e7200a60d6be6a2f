#!/usr/bin/env python3
"""docfs's metadata benchmarks (issue 5): how long after a write's close an image's thumbnail
is there, what reading each docfs extended attribute costs, and whether making thumbnails
slows a burst of image writes. Each runs on a freshly made ext4 filesystem, as scripts/bench's
workloads do; getxattr and the write burst are also run on the raw disk and on libfuse's
passthrough_ll, in the same run, for the ratios."""
import argparse, errno, os, shutil, statistics, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench import EXAMPLE, Filesystem, Target, run  # noqa: E402

ATTRIBUTE = "user.docfs.thumbnail"


def wait_for_thumbnail(path, limit=30.0):
    """Seconds from now until `path` has its thumbnail attribute (polled every half millisecond)."""
    start = time.perf_counter()
    while True:
        try:
            os.getxattr(path, ATTRIBUTE)
            return time.perf_counter() - start
        except OSError as e:
            if e.errno != errno.ENODATA:
                raise
        if time.perf_counter() - start > limit:
            sys.exit(f"bench: no thumbnail for {path} within {limit:.0f} s")
        time.sleep(0.0005)


def write_file(path, data):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)


def wait_for_whole_set(mountpoint, path, limit=30.0):
    """Seconds from now until the 1024-pixel thumbnail of `path` is served under .docfs/thumbnails/
    (a big photo's comes a moment after the attribute)."""
    start = time.perf_counter()
    largest = os.path.join(mountpoint, ".docfs", "thumbnails", f"{os.stat(path).st_ino}.png")
    while not os.path.exists(largest):
        if time.perf_counter() - start > limit:
            sys.exit(f"bench: no 1024-pixel thumbnail for {path} within {limit:.0f} s")
        time.sleep(0.0005)
    return time.perf_counter() - start


def thumbnail_latency(source, count):
    """Writes `source`'s bytes as `count` new files, one at a time: for each, the time from its
    write's close until its thumbnail attribute reads, and until its whole set is made (waited
    for before the next file, so each is timed on an idle daemon)."""
    data = open(source, "rb").read()
    name = os.path.basename(source)

    def work(d):
        # One file first: the worker process starts, libvips loads its modules.
        write_file(os.path.join(d, "warm-" + name), data)
        wait_for_thumbnail(os.path.join(d, "warm-" + name))
        wait_for_whole_set(d, os.path.join(d, "warm-" + name))
        times = []
        for i in range(count):
            path = os.path.join(d, f"{i}-{name}")
            write_file(path, data)
            attribute = wait_for_thumbnail(path)
            times.append((attribute, attribute + wait_for_whole_set(d, path)))
        return times
    return work


GETXATTR_CALLS = 2000


def getxattr_latency(names):
    """Microseconds per getxattr of each of `names` on one file (2,000 calls each, after one
    call that lets docfs make what it makes on demand); absent names count as read (ENODATA)."""
    def work(d):
        path = os.path.join(d, "doc.jpg")
        write_file(path, open(IMAGES["photo"], "rb").read())
        try:
            os.setxattr(path, "user.bench", b"a plain user attribute")
        except OSError:
            pass
        if ATTRIBUTE in names:
            wait_for_thumbnail(path)
        result = {}
        for name in names:
            def call():
                try:
                    os.getxattr(path, name)
                except OSError as e:
                    if e.errno != errno.ENODATA:
                        raise
            call()
            start = time.perf_counter()
            for _ in range(GETXATTR_CALLS):
                call()
            result[name] = (time.perf_counter() - start) / GETXATTR_CALLS * 1e6
        return result
    return work


def write_burst(source, count):
    """Writes `count` copies of an image, each its own file, as fast as they go: seconds."""
    data = open(source, "rb").read()

    def work(d):
        start = time.perf_counter()
        for i in range(count):
            write_file(os.path.join(d, f"img{i:04d}.jpg"), data)
        return time.perf_counter() - start
    return work


def on_fresh_filesystem(target, work, root, size_mb):
    fs = Filesystem(root, size_mb)
    try:
        path = target.start(fs.path)
        try:
            return work(path)
        finally:
            target.stop()
    finally:
        fs.remove()


IMAGES = {}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--docfs", required=True)
    parser.add_argument("--dir", default="/var/tmp/docfs-bench-thumbnails")
    parser.add_argument("--quick", action="store_true", help="fewer files and repetitions")
    parser.add_argument("--repeat", type=int, default=5)
    args, _ = parser.parse_known_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (mounts)")
    repeat = 3 if args.quick else args.repeat
    latency_count = 5 if args.quick else 15
    burst = 200

    shutil.rmtree(args.dir, ignore_errors=True)
    os.makedirs(args.dir)
    here = os.path.dirname(os.path.abspath(__file__))
    big, small = os.path.join(args.dir, "big"), os.path.join(args.dir, "small")
    print("bench: making test images (a 12-megapixel JPEG, a 20-page PDF)", file=sys.stderr)
    run(["bash", os.path.join(here, "make-test-images"), big, "4000x3000", "20"], stdout=subprocess.DEVNULL)
    run(["bash", os.path.join(here, "make-test-images"), small], stdout=subprocess.DEVNULL)
    IMAGES.update(jpeg=os.path.join(big, "photo.jpg"), pdf=os.path.join(big, "document.pdf"),
                  photo=os.path.join(small, "photo.jpg"))

    pt_bin = os.path.join(args.dir, "passthrough_ll")
    flags = subprocess.check_output(["pkg-config", "--cflags", "--libs", "fuse3"], text=True).split()
    run(["gcc", "-O2", EXAMPLE, "-o", pt_bin] + flags)

    def docfs(options):
        def command(backing, mnt):
            cmd = [args.docfs, "mount", "--foreground", "--store", os.path.join(backing, "store")]
            return cmd + (["-o", options] if options else []) + [mnt]
        return command
    raw = Target("raw disk", args.dir)
    passthrough = Target("passthrough_ll+", args.dir,
                         lambda backing, mnt: [pt_bin, "-f", "-o", f"source={backing},default_permissions,xattr", mnt])
    docfs_on = Target("docfs", args.dir, docfs(""))
    docfs_off = Target("docfs-nothumbs", args.dir, docfs("nothumbnails"))
    image_mb = 1536
    try:
        # 1. Thumbnail latency.
        latency = {}
        for label, source in (("12 MP JPEG (4000x3000)", IMAGES["jpeg"]), ("20-page PDF", IMAGES["pdf"])):
            times = on_fresh_filesystem(docfs_on, thumbnail_latency(source, latency_count), args.dir, image_mb)
            latency[label] = times
            print(f"  thumbnail {label}: " + " ".join(f"{a * 1000:.0f}/{w * 1000:.0f}" for a, w in times) + " ms", file=sys.stderr)

        # 2. getxattr latency, each target taking turns; the median of the repetitions.
        docfs_names = ["user.docfs.id", "user.docfs.version", "user.docfs.bookmark", ATTRIBUTE,
                       "user.docfs.conflict", "user.docfs.skip-backup", "user.mime_type", "user.bench"]
        targets = [raw, passthrough, docfs_on]
        xattr_runs = {t.name: [] for t in targets}
        for rep in range(repeat):
            for t in targets[rep % 3:] + targets[:rep % 3]:
                names = docfs_names if t is docfs_on else ["user.bench"]
                xattr_runs[t.name].append(on_fresh_filesystem(t, getxattr_latency(names), args.dir, image_mb))

        def xattr(target, name):
            return statistics.median(r[name] for r in xattr_runs[target])

        # 3. A burst of image writes, thumbnails on and off.
        targets = [raw, passthrough, docfs_on, docfs_off]
        burst_runs = {t.name: [] for t in targets}
        for rep in range(repeat):
            for t in targets[rep % 4:] + targets[:rep % 4]:
                os.sync()
                burst_runs[t.name].append(on_fresh_filesystem(t, write_burst(IMAGES["jpeg"], burst), args.dir, image_mb))
        for t in targets:
            print(f"  burst {t.name:20} " + " ".join(f"{x:.3f}" for x in burst_runs[t.name]), file=sys.stderr)
    finally:
        for t in (raw, passthrough, docfs_on, docfs_off):
            t.stop()

    print()
    print(f"docfs metadata benchmark — {args.dir} (median of {repeat} unless said)")
    print()
    header = f"{'thumbnail latency after close':28} {'attribute: median':>17} {'min':>6} {'max':>6} {'whole set':>10}  goal"
    print(header)
    print("-" * len(header))
    for label, times in latency.items():
        attribute = [a * 1000 for a, _ in times]
        whole = statistics.median(w * 1000 for _, w in times)
        goal = ""
        if "JPEG" in label:
            goal = f"< 100 ms {'ok' if statistics.median(attribute) < 100 else 'MISSED'}"
        print(f"{label:28} {statistics.median(attribute):15.0f}ms {min(attribute):4.0f}ms {max(attribute):4.0f}ms"
              f" {whole:8.0f}ms  {goal}")
    print(f"({len(next(iter(latency.values())))} files each, written one at a time, after one that starts the worker;")
    print("attribute: until user.docfs.thumbnail reads; whole set: until .docfs/thumbnails/ID.png does)")

    print()
    header = f"{'getxattr, µs per call':28} {'raw disk':>9} {'pt+perm':>9} {'docfs':>9} {'vs raw':>7} {'vs pt+':>7}"
    print(header)
    print("-" * len(header))
    plain_raw, plain_pt = xattr("raw disk", "user.bench"), xattr("passthrough_ll+", "user.bench")
    for name in docfs_names:
        value = xattr("docfs", name)
        print(f"{name:28} {plain_raw:9.1f} {plain_pt:9.1f} {value:9.1f} {plain_raw / value:6.2f}x {plain_pt / value:6.2f}x")
    print("raw disk and pt+perm read a plain user attribute (user.bench) for every row: what any")
    print("attribute costs there. user.docfs.conflict is absent (ENODATA) unless a conflict happened.")

    print()
    mb = os.path.getsize(IMAGES["jpeg"]) * burst / 1e6
    header = f"{f'write {burst} 12 MP JPEGs ({mb:.0f} MB)':28} {'raw disk':>9} {'pt+perm':>9} {'docfs':>9} {'no thumbs':>9} {'on/off':>7} {'vs pt+':>7}"
    print(header)
    print("-" * len(header))
    seconds = {name: statistics.median(runs) for name, runs in burst_runs.items()}
    on, off = seconds["docfs"], seconds["docfs-nothumbs"]
    print(f"{'seconds':28} {seconds['raw disk']:9.3f} {seconds['passthrough_ll+']:9.3f} {on:9.3f} {off:9.3f}"
          f" {off / on:6.2f}x {seconds['passthrough_ll+'] / on:6.2f}x")
    print(f"{'MB/s':28} {mb / seconds['raw disk']:9.1f} {mb / seconds['passthrough_ll+']:9.1f} {mb / on:9.1f} {mb / off:9.1f}")
    spread = statistics.pstdev(burst_runs["docfs-nothumbs"]) / off
    print(f"on/off: speed with thumbnails relative to without (goal: unchanged within noise; the runs")
    print(f"without vary by {spread * 100:.0f}% here): {'ok' if off / on >= 1 - max(0.1, 2 * spread) else 'MISSED'}")
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
