import CLinux
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// create/open/read/write/truncate/fsync and their errno cases, compared with ext4.
@Suite(.needsRootAndFUSE) struct FileOperationTests {
    @Test func createOpenReadWriteAndTheirErrors() throws {
        try expectSameAsPlainDirectory { dir, r in
            let f = dir + "/a.txt"
            let fd = open(f, O_CREAT | O_EXCL | O_RDWR, 0o640)
            r.call("create", fd)
            r.call("create again O_EXCL", open(f, O_CREAT | O_EXCL | O_RDWR, 0o640))
            r.call("write", write(fd, "hello world", 11))
            var buffer = [UInt8](repeating: 0, count: 64)
            r.call("pread", pread(fd, &buffer, 64, 6))
            r.note("content", String(decoding: buffer[0..<5], as: UTF8.self))
            r.call("pread past end", pread(fd, &buffer, 64, 100))
            r.call("pwrite past end (hole)", pwrite(fd, "X", 1, 4096))
            var st = stat()
            r.call("fstat", fstat(fd, &st))
            r.note("size", st.st_size)
            r.note("mode", String(st.st_mode, radix: 8))
            r.call("fsync", fsync(fd))
            r.call("fdatasync", fdatasync(fd))
            r.call("ftruncate shrink", ftruncate(fd, 5))
            r.call("close", close(fd))
            r.call("stat", stat(f, &st))
            r.note("size after truncate", st.st_size)

            let ro = open(f, O_RDONLY)
            r.call("write to O_RDONLY", write(ro, "x", 1))
            r.call("ftruncate O_RDONLY", ftruncate(ro, 0))
            close(ro)
            let wo = open(f, O_WRONLY)
            r.call("read from O_WRONLY", read(wo, &buffer, 1))
            close(wo)

            let ap = open(f, O_WRONLY | O_APPEND)
            r.call("append 1", write(ap, "-a", 2))
            r.call("pwrite with O_APPEND still appends", pwrite(ap, "-b", 2, 0))
            close(ap)
            r.call("stat", stat(f, &st))
            r.note("size after appends", st.st_size)

            let tr = open(f, O_WRONLY | O_TRUNC)
            r.call("open O_TRUNC", tr)
            close(tr)
            r.call("stat", stat(f, &st))
            r.note("size after O_TRUNC", st.st_size)
            r.call("truncate grow", truncate(f, 10000))
            r.call("truncate missing", truncate(dir + "/missing", 1))

            r.call("open missing", open(dir + "/missing", O_RDONLY))
            r.call("create in missing dir", open(dir + "/nodir/x", O_CREAT | O_WRONLY, 0o644))
            r.call("create under a file", open(f + "/x", O_CREAT | O_WRONLY, 0o644))
            r.call("open dir for writing", open(dir, O_WRONLY))
            r.call("name too long", open(dir + "/" + String(repeating: "n", count: 256), O_CREAT | O_WRONLY, 0o644))
            let long = open(dir + "/" + String(repeating: "n", count: 255), O_CREAT | O_WRONLY, 0o644)
            r.call("name of 255 bytes", long)
            close(long)
            r.call("O_DIRECTORY on a file", open(f, O_RDONLY | O_DIRECTORY))
            r.call("O_NOFOLLOW on a symlink", { () -> Int32 in
                symlink("a.txt", dir + "/link")
                return open(dir + "/link", O_RDONLY | O_NOFOLLOW)
            }())
            r.call("creat mode 0 then reopen as root", { () -> Int32 in
                let z = open(dir + "/zero", O_CREAT | O_WRONLY, 0)
                close(z)
                let again = open(dir + "/zero", O_RDWR)
                defer { close(again) }
                return again < 0 ? -1 : 0
            }())
        }
    }

    @Test func openButUnlinkedFilesKeepWorking() throws {
        try expectSameAsPlainDirectory { dir, r in
            let f = dir + "/ghost"
            let fd = open(f, O_CREAT | O_RDWR, 0o644)
            r.call("write", write(fd, "before", 6))
            r.call("unlink while open", unlink(f))
            r.call("stat path", { var st = stat(); return stat(f, &st) }())
            r.call("write after unlink", pwrite(fd, "after!", 6, 6))
            var buffer = [UInt8](repeating: 0, count: 32)
            r.call("read after unlink", pread(fd, &buffer, 32, 0))
            r.note("content", String(decoding: buffer[0..<12], as: UTF8.self))
            var st = stat()
            r.call("fstat", fstat(fd, &st))
            r.note("links", st.st_nlink)
            r.note("size", st.st_size)
            r.call("ftruncate", ftruncate(fd, 3))
            r.call("fchmod", fchmod(fd, 0o600))
            r.call("close", close(fd))
            r.call("create same name anew", { () -> Int32 in
                let again = open(f, O_CREAT | O_EXCL | O_WRONLY, 0o644)
                defer { close(again) }
                return again < 0 ? -1 : 0
            }())
        }
    }

    @Test func directIOReadsAndWrites() throws {
        try expectSameAsPlainDirectory { dir, r in
            let fd = open(dir + "/direct", O_CREAT | O_RDWR | DOCFS_O_DIRECT, 0o644)
            r.call("open O_DIRECT", fd < 0 ? -1 : 0)
            var block: UnsafeMutableRawPointer?
            posix_memalign(&block, 4096, 8192)
            defer { free(block) }
            memset(block!, 0x41, 8192)
            r.call("aligned write", pwrite(fd, block, 8192, 0))
            memset(block!, 0, 8192)
            r.call("aligned read", pread(fd, block, 8192, 0))
            r.note("first byte", block!.load(as: UInt8.self))
            close(fd)
        }
    }

    @Test func allocateSeekAndCopyRanges() throws {
        try expectSameAsPlainDirectory { dir, r in
            let fd = open(dir + "/sparse", O_CREAT | O_RDWR, 0o644)
            let chunk = [UInt8](repeating: 0x5a, count: 65536)
            r.call("write 64k", pwrite(fd, chunk, chunk.count, 0))
            r.call("write 64k at 1M", pwrite(fd, chunk, chunk.count, 1 << 20))
            r.call("fsync", fsync(fd))
            r.call("3 0", lseek(fd, 0, 3))
            r.call("4 0", lseek(fd, 0, 4))
            r.call("3 in hole", lseek(fd, 200_000, 3))
            r.call("3 past end", lseek(fd, 4 << 20, 3))
            r.call("fallocate extend", docfs_fallocate(fd, 0, 2 << 20, 65536))
            var st = stat()
            fstat(fd, &st)
            r.note("size after fallocate", st.st_size)
            r.call("fallocate keep size", docfs_fallocate(fd, DOCFS_FALLOC_FL_KEEP_SIZE, 3 << 20, 65536))
            fstat(fd, &st)
            r.note("size after keep-size", st.st_size)
            r.call("punch hole", docfs_fallocate(fd, DOCFS_FALLOC_FL_PUNCH_HOLE | DOCFS_FALLOC_FL_KEEP_SIZE, 0, 4096))
            var first = [UInt8](repeating: 1, count: 4)
            pread(fd, &first, 4, 0)
            r.note("punched bytes", first)
            r.call("zero range", docfs_fallocate(fd, DOCFS_FALLOC_FL_ZERO_RANGE, 8192, 4096))
            r.call("punch without keep-size", docfs_fallocate(fd, DOCFS_FALLOC_FL_PUNCH_HOLE, 0, 4096))

            let out = open(dir + "/copy", O_CREAT | O_RDWR, 0o644)
            var inOffset: off_t = 0
            var outOffset: off_t = 0
            r.call("copy_file_range", docfs_copy_file_range(fd, &inOffset, out, &outOffset, 65536, 0))
            r.note("offsets", [inOffset, outOffset])
            close(out)
            close(fd)
        }
    }

    @Test func sharedWritableMmapReachesTheStore() throws {
        let fixture = try MountFixture()
        defer { fixture.tearDown() }
        let path = fixture.path("mapped")
        let fd = open(path, O_CREAT | O_RDWR, 0o644)
        #expect(fd >= 0)
        #expect(ftruncate(fd, 8192) == 0)
        let map = mmap(nil, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
        #expect(map != MAP_FAILED)
        let text = Array("written through a shared mapping".utf8)
        text.withUnsafeBytes { map!.copyMemory(from: $0.baseAddress!, byteCount: text.count) }
        #expect(msync(map, 8192, MS_SYNC) == 0)
        munmap(map, 8192)
        close(fd)
        let backing = try Data(contentsOf: URL(fileURLWithPath: fixture.documents + "/mapped"))
        #expect(Array(backing.prefix(text.count)) == text)
        let throughMount = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(Array(throughMount.prefix(text.count)) == text)
    }
}
