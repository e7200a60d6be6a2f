#!/usr/bin/env python3
"""A filesystem stress workload in the manner of fsstress: PROCS processes, each doing OPS random
operations in a folder of its own and in one folder they share: create, write at random offsets,
append, truncate, rename (within and across folders, also over existing files), link, unlink,
mkdir, rmdir, fsync, read, setxattr user.*, chmod.

Each process has a fixed seed, so a run does the same operations every time on an otherwise idle
filesystem (the shared folder's common names make the processes race; who wins may vary).
A process picks the names it operates on from its own list of what it made, so most operations
find their file; those that fail (ENOENT after another process's rename of a common name,
ENOTEMPTY, ENOTSUP on a filesystem without extended attributes, ...) are counted, never fatal.

Prints a summary on stderr and, as the last line on stdout, JSON: {"ops", "errors" (by errno
name), "bytes_written" (what its write calls wrote), "seconds" (from the processes' start to the
last one's end)}.

  scripts/stress.py DIR [--procs 4] [--ops 20000 | --quick] [--seed 1]"""
import argparse, errno, json, multiprocessing, os, random, sys, time

MAX_FILE = 4 << 20        # writes and truncates keep files below about this size
MAX_WRITE = 64 << 10      # one write moves at most this much
COMMON_NAMES = 16         # names in the shared folder that every process uses

# Operation weights: mostly data (write, read, create), some namespace and metadata changes.
WEIGHTS = {"create": 10, "write": 20, "append": 10, "truncate": 5, "rename": 8, "link": 3,
           "unlink": 6, "mkdir": 2, "rmdir": 1, "fsync": 3, "read": 15, "setxattr": 4, "chmod": 3}


class Worker:
    """One process's state: the folders and files it knows of, its random source, its counts."""

    def __init__(self, root, index, seed):
        self.rng = random.Random(seed * 1000 + index)
        self.index = index
        self.home = os.path.join(root, f"p{index}")
        self.shared = os.path.join(root, "shared")
        self.dirs = [self.home, self.shared]   # where new names go
        self.made_dirs = []                      # the ones it may remove
        self.files = []                          # paths it believes exist (own names)
        self.common = [os.path.join(self.shared, f"common{i}") for i in range(COMMON_NAMES)]
        self.counter = 0
        self.data = self.rng.randbytes(2 * MAX_WRITE)
        self.bytes_written = 0
        self.ops = 0
        self.errors = {}

    def new_name(self, kind="f"):
        self.counter += 1
        return os.path.join(self.rng.choice(self.dirs), f"{kind}{self.index}_{self.counter}")

    def pick_file(self):
        """An existing file of its own, or now and then a common name another process may have
        removed or renamed; None when it knows of none."""
        if self.files and self.rng.random() < 0.9:
            return self.rng.choice(self.files)
        return self.rng.choice(self.common)

    def chunk(self, limit=MAX_WRITE):
        size = self.rng.randint(1, max(1, limit))
        start = self.rng.randrange(len(self.data) - size + 1)
        return self.data[start:start + size]

    def write_all(self, fd, data, offset=None):
        written = os.pwrite(fd, data, offset) if offset is not None else os.write(fd, data)
        self.bytes_written += written

    # The operations. Each may raise OSError; run() counts it.
    def op_create(self):
        path = self.new_name() if self.rng.random() < 0.8 else self.rng.choice(self.common)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        try:
            if self.rng.random() < 0.8:
                self.write_all(fd, self.chunk())
        finally:
            os.close(fd)
        if path not in self.common:
            self.files.append(path)

    def op_write(self):
        fd = os.open(self.pick_file(), os.O_WRONLY)
        try:
            size = os.fstat(fd).st_size
            offset = self.rng.randrange(min(size + MAX_WRITE, MAX_FILE - MAX_WRITE))
            self.write_all(fd, self.chunk(), offset)
        finally:
            os.close(fd)

    def op_append(self):
        fd = os.open(self.pick_file(), os.O_WRONLY | os.O_APPEND)
        try:
            room = MAX_FILE - os.fstat(fd).st_size
            if room > 0:
                self.write_all(fd, self.chunk(min(room, MAX_WRITE)))
        finally:
            os.close(fd)

    def op_truncate(self):
        path = self.pick_file()
        size = os.stat(path).st_size
        os.truncate(path, self.rng.randrange(size + 1) if self.rng.random() < 0.8 else self.rng.randrange(MAX_FILE))

    def op_rename(self):
        source = self.pick_file()
        if self.files and self.rng.random() < 0.3:
            target = self.rng.choice(self.files)        # over an existing file
        else:
            target = self.new_name()                    # within or across folders
        os.rename(source, target)
        if source == target:
            return
        self.forget(source)
        if target not in self.files:
            self.files.append(target)

    def op_link(self):
        target = self.new_name()
        os.link(self.pick_file(), target)
        self.files.append(target)

    def op_unlink(self):
        path = self.pick_file()
        os.unlink(path)
        self.forget(path)

    def op_mkdir(self):
        parent = self.rng.choice([self.home] + self.made_dirs)
        self.counter += 1
        path = os.path.join(parent, f"d{self.index}_{self.counter}")
        os.mkdir(path)
        self.made_dirs.append(path)
        self.dirs.append(path)

    def op_rmdir(self):
        if not self.made_dirs:
            raise OSError(errno.ENOENT, "no folder made yet")
        # Prefer a folder it put nothing in; the others fail with ENOTEMPTY, which is counted.
        empty = [d for d in self.made_dirs if not any(f.startswith(d + "/") for f in self.files)
                 and not any(m.startswith(d + "/") for m in self.made_dirs)]
        path = self.rng.choice(empty or self.made_dirs)
        os.rmdir(path)
        self.made_dirs.remove(path)
        self.dirs.remove(path)

    def op_fsync(self):
        fd = os.open(self.pick_file(), os.O_WRONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def op_read(self):
        fd = os.open(self.pick_file(), os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if self.rng.random() < 0.3:
                while os.read(fd, 1 << 20):
                    pass
            else:
                os.pread(fd, MAX_WRITE, self.rng.randrange(size + 1))
        finally:
            os.close(fd)

    def op_setxattr(self):
        name = f"user.stress.{self.rng.randrange(8)}"
        os.setxattr(self.pick_file(), name, self.chunk(256))

    def op_chmod(self):
        os.chmod(self.pick_file(), self.rng.choice([0o600, 0o644, 0o640, 0o664, 0o755]))

    def forget(self, path):
        while path in self.files:
            self.files.remove(path)

    def run(self, count):
        os.makedirs(self.home, exist_ok=True)
        names = list(WEIGHTS)
        weights = [WEIGHTS[n] for n in names]
        operations = {n: getattr(self, "op_" + n) for n in names}
        for name in self.rng.choices(names, weights, k=count):
            try:
                operations[name]()
            except OSError as e:
                key = f"{name}:{errno.errorcode.get(e.errno, e.errno)}"
                self.errors[key] = self.errors.get(key, 0) + 1
            self.ops += 1
        return {"ops": self.ops, "errors": self.errors, "bytes_written": self.bytes_written}


def work(root, index, seed, count, results):
    """A process's body: run its operations, hand back its counts."""
    results.put(Worker(root, index, seed).run(count))


def stress(root, procs, count, seed):
    """Run `procs` workers at once on `root`; their counts summed, and the wall time."""
    os.makedirs(os.path.join(root, "shared"), exist_ok=True)
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    workers = [context.Process(target=work, args=(root, i, seed, count, results)) for i in range(procs)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    counts = [results.get() for _ in workers]
    for w in workers:
        w.join()
    seconds = time.perf_counter() - start
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    if failed:
        sys.exit(f"stress: a worker failed (exit codes {failed})")
    total = {"ops": 0, "errors": {}, "bytes_written": 0, "seconds": seconds}
    for c in counts:
        total["ops"] += c["ops"]
        total["bytes_written"] += c["bytes_written"]
        for k, v in c["errors"].items():
            total["errors"][k] = total["errors"].get(k, 0) + v
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--ops", type=int, default=20000, help="operations per process")
    parser.add_argument("--quick", action="store_true", help="5,000 operations per process")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    total = stress(os.path.abspath(args.dir), args.procs, 5000 if args.quick else args.ops, args.seed)
    errors = sum(total["errors"].values())
    print(f"stress: {total['ops']} operations in {total['seconds']:.2f} s, "
          f"{total['bytes_written'] / 1e6:.1f} MB written, {errors} failed: "
          + ", ".join(f"{k} {v}" for k, v in sorted(total["errors"].items())), file=sys.stderr)
    print(json.dumps(total))


if __name__ == "__main__":
    main()
