#!/usr/bin/env bash
# A day of real tools on a folder: run in DIR (plain disk or docfs mount), prints what the
# tools answered. Everything is deterministic so two runs can be compared line by line.
set -u
cd "$1" || exit 1
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
export GIT_AUTHOR_DATE='2001-01-01T00:00:00Z' GIT_COMMITTER_DATE='2001-01-01T00:00:00Z' HOME=/nonexistent
step() { echo "== $*"; }

step "make a source tree"
mkdir -p src/a/b src/c
for i in $(seq 1 60); do head -c $((i * 337)) /dev/zero | tr '\0' "$(printf "\\$(printf %03o $((97 + i % 26)))")" > "src/a/file$i.txt"; done
printf 'line %s\n' $(seq 1 500) > src/c/lines.txt
ln src/c/lines.txt src/c/hardlink.txt
ln -s ../c/lines.txt src/a/b/symlink
chmod 600 src/a/file1.txt; chmod 755 src/a/file2.txt; chmod 2755 src/c
setfattr -n user.tag -v important src/c/lines.txt
setfattr -n user.xdg.comment -v "a comment" src/a/file3.txt
mkfifo src/c/pipe
python3 -c "import random; random.seed(7); open('src/big.bin','wb').write(bytes(random.getrandbits(8) for _ in range(2_500_000)))"

step "cp -a"
cp -a src copy && echo "cp ok"
step "mv across directories"
mkdir -p moved/deeper && mv copy/a moved/deeper/ && mv copy/c/lines.txt moved/ && echo "mv ok"
step "rm -r"
rm -r copy/c && echo "rm ok"; ls copy

step "tar c and x"
# docfs's own attributes (user.docfs.*) belong to each item and are not restored onto others.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --xattrs --xattrs-exclude='user.docfs.*' --pax-option=delete=atime,delete=ctime -cf archive.tar src && echo "tar c ok"
mkdir unpacked && tar --xattrs --xattrs-include='user.*' -xf archive.tar -C unpacked && echo "tar x ok"
tar -tvf archive.tar | awk '{print $1, $3, $6}' | head -n 5

step "git"
git init -q -b main repo && cp -a src/a src/c repo/ && rm repo/c/pipe
cd repo
git add -A && git commit -qm first && echo "commit 1 ok"
sed -i 's/line 1$/line one/' c/lines.txt
echo new > new.txt
git status --porcelain
git add -A && git commit -qm second && echo "commit 2 ok"
git checkout -q -b older HEAD~1 && echo "checkout ok"
git status --porcelain; ls new.txt 2>&1 | sed 's/.*: //'
git checkout -q main && git log --format='%H %s'
git fsck --no-progress 2>&1 && echo "fsck ok"
git gc -q && git count-objects -v | grep -E '^(count|in-pack)'
cd ..

step "sqlite3 WAL, two writers"
sqlite3 db.sqlite 'PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, who TEXT, n INT);'
for who in alpha beta; do
  ( for i in $(seq 1 150); do echo "INSERT INTO t(who, n) VALUES('$who', $i);"; done | sqlite3 -cmd '.timeout 20000' db.sqlite ) &
done
wait
sqlite3 db.sqlite 'SELECT who, count(*), sum(n) FROM t GROUP BY who ORDER BY who; PRAGMA integrity_check;'
sqlite3 db.sqlite 'PRAGMA wal_checkpoint(TRUNCATE);' > /dev/null

step "sed -i"
printf 'alpha\nbeta\ngamma\n' > edit.txt
setfattr -n user.keep -v me edit.txt
sed -i 's/beta/BETA/' edit.txt && cat edit.txt

step "vim in place and via a backup"
printf 'one\ntwo\n' > inplace.txt
vim -Es -u NONE -i NONE -c 'set nocompatible backupcopy=yes' -c '%s/two/TWO/' -c 'wq' inplace.txt && cat inplace.txt
printf 'one\ntwo\n' > renamed.txt
vim -Es -u NONE -i NONE -c 'set nocompatible backupcopy=no writebackup nobackup' -c '%s/one/ONE/' -c 'wq' renamed.txt && cat renamed.txt
printf 'x\n' > kept.txt
vim -Es -u NONE -i NONE -c 'set nocompatible backup backupcopy=no backupdir=.' -c 's/x/y/' -c 'wq' kept.txt && cat kept.txt kept.txt~
ex -s -c 'normal! Gonew last line' -c 'x' edit.txt && tail -n 1 edit.txt

step "python tempfile + os.replace"
python3 - <<'PY'
import os, tempfile
for i in range(25):
    fd, tmp = tempfile.mkstemp(dir='.', prefix='.cfg-')
    os.write(fd, f'version {i}\n'.encode())
    os.fsync(fd)
    os.close(fd)
    os.chmod(tmp, 0o644)
    os.replace(tmp, 'config.txt')
print(open('config.txt').read().strip(), sorted(n for n in os.listdir('.') if n.startswith('.cfg-')))
PY
step "done"
