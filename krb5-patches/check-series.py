#!/usr/bin/env python3
"""Check that no patch of a series removes or changes a line that an earlier
patch of the same series added.

    check-series.py [--src build/krb5-src] [--patches krb5-patches]

The series (PATCHES/series, applied in order with `git am`) is applied in a
scratch clone of SRC starting at refs/tags/debian, the pristine Debian tree.
For every resulting commit, the lines its diff removes (the `-U0` ranges of
the old side) are blamed in the commit's parent with `git blame -L`: each
must come from the Debian commit.  A line that comes from a commit of the
series means that patch undoes part of an earlier one, which is what a
reviewer cannot follow; the fix is to cut the branch so that the earlier
patch adds the final form of the line (see docs/krb5-patches.md).

Two rules on the shape of the series are checked as well: no patch changes
more than MAX_CHANGED_LINES lines (insertions plus deletions, as `git show
--numstat` counts them, in every file, tests included: a patch whose tests
would pass the limit puts them in a patch of their own), so that each is one
reviewable concern; and every
patch whose subject starts with "kmpc-local:" (kmpc's own test support, not
meant for upstream) comes after every other patch.

Exit status 0 when the series is clean, 1 when a patch removes an earlier
patch's line or breaks a rule of shape (each case is listed), 2 on usage
errors or when the series does not apply.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")
MAX_CHANGED_LINES = 1000
LOCAL_PREFIX = "kmpc-local:"


def git(repo, *args, check=True):
    """Run git in REPO with a fixed identity and return its stdout."""
    env = dict(os.environ, GIT_AUTHOR_NAME="check-series",
               GIT_AUTHOR_EMAIL="check-series@localhost",
               GIT_COMMITTER_NAME="check-series",
               GIT_COMMITTER_EMAIL="check-series@localhost")
    proc = subprocess.run(["git", "-C", repo, *args], env=env, check=False,
                          capture_output=True, text=True, errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError("git %s failed: %s" % (" ".join(args[:2]),
                                                   proc.stderr.strip()))
    return proc.stdout


def read_series(patch_dir):
    """Patch file names from PATCH_DIR/series, in order."""
    names = []
    with open(os.path.join(patch_dir, "series"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                names.append(line.split()[0])
    if not names:
        raise RuntimeError("%s/series lists no patches" % patch_dir)
    return names


def apply_series(src, patch_dir, scratch):
    """Clone SRC at refs/tags/debian into SCRATCH and `git am` the series.

    Returns (debian commit id, [(commit id, patch name)] in series order)."""
    subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", src,
                    scratch], check=True)
    base = git(scratch, "rev-parse", "refs/tags/debian^{commit}").strip()
    git(scratch, "checkout", "-q", "--detach", base)
    commits = []
    for name in read_series(patch_dir):
        path = os.path.join(patch_dir, name)
        try:
            git(scratch, "am", "-q", "--keep-cr", path)
        except RuntimeError as err:
            raise RuntimeError("patch %s does not apply: %s" % (name, err))
        commits.append((git(scratch, "rev-parse", "HEAD").strip(), name))
    return base, commits


def removed_ranges(repo, commit):
    """{old path: [(first line, count)]} of the lines COMMIT removes."""
    diff = git(repo, "diff", "-U0", "--no-renames", "--no-color",
               "--no-ext-diff", commit + "^", commit)
    ranges, path = {}, None
    for line in diff.splitlines():
        if line.startswith("--- "):
            old = line[4:]
            path = None if old == "/dev/null" else old[2:]
        elif line.startswith("@@") and path is not None:
            m = HUNK.match(line)
            count = 1 if m.group(2) is None else int(m.group(2))
            if count:
                ranges.setdefault(path, []).append((int(m.group(1)), count))
    return ranges


def blame_origins(repo, commit, path, ranges):
    """[(line number, origin commit)] for RANGES of PATH in COMMIT."""
    args = ["blame", "--porcelain"]
    for first, count in ranges:
        args += ["-L", "%d,+%d" % (first, count)]
    out = git(repo, *args, commit, "--", path)
    origins = []
    for line in out.splitlines():
        if line.startswith("\t"):
            continue
        parts = line.split()
        if len(parts) >= 3 and re.fullmatch(r"[0-9a-f]{40}", parts[0]):
            origins.append((int(parts[2]), parts[0]))
    return origins


def find_violations(repo, base, commits):
    """Yield (patch, path, line, earlier patch) for every removed line that a
    commit of the series (not the Debian commit) added."""
    name_of = dict(commits)
    for commit, name in commits:
        parent = commit + "^"
        for path, ranges in sorted(removed_ranges(repo, commit).items()):
            for line, origin in blame_origins(repo, parent, path, ranges):
                if origin != base:
                    yield name, path, line, name_of.get(origin, origin)


def patch_subject(patch_dir, name):
    """The subject of patch NAME, without its [PATCH] tag."""
    with open(os.path.join(patch_dir, name), encoding="utf-8",
              errors="replace") as f:
        for line in f:
            if line.startswith("Subject:"):
                return re.sub(r"^Subject:\s*(\[[^]]*\]\s*)?", "",
                              line.rstrip("\n"))
    raise RuntimeError("%s has no Subject line" % name)


def order_violations(patch_dir, names):
    """Yield (local patch, later non-local patch) for every kmpc-local patch
    that some other patch follows."""
    local = [patch_subject(patch_dir, n).startswith(LOCAL_PREFIX)
             for n in names]
    for i, name in enumerate(names):
        if local[i]:
            for later, is_local in zip(names[i + 1:], local[i + 1:]):
                if not is_local:
                    yield name, later


def size_violations(repo, commits, limit):
    """Yield (patch, changed lines) for every commit changing more than
    LIMIT lines, test files included (a reviewer reads them too)."""
    for commit, name in commits:
        changed = 0
        for line in git(repo, "show", "--numstat", "--format=",
                        commit).splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                changed += int(parts[0]) + int(parts[1])
        if changed > limit:
            yield name, changed


def collapse(violations):
    """Group consecutive lines of one (patch, path, origin) into ranges."""
    out = []
    for name, path, line, origin in violations:
        last = out[-1] if out else None
        if (last and last[:2] == (name, path) and last[4] == origin
                and last[3] + 1 == line):
            last[3] = line
        else:
            out.append([name, path, line, line, origin])
    return out


def main():
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=os.path.join(top, "build", "krb5-src"),
                    help="krb5 source repository with refs/tags/debian")
    ap.add_argument("--patches", default=os.path.join(top, "krb5-patches"),
                    help="directory holding the patches and `series`")
    ap.add_argument("--max-lines", type=int, default=MAX_CHANGED_LINES,
                    help="most lines a patch may change, tests included "
                    "(default %(default)s)")
    opts = ap.parse_args()
    if not os.path.isdir(os.path.join(opts.src, ".git")):
        print("error: %s is not a git repository (run 'make krb5' first)"
              % opts.src, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="check-series-") as tmp:
        scratch = os.path.join(tmp, "krb5")
        try:
            base, commits = apply_series(opts.src, opts.patches, scratch)
            bad = collapse(find_violations(scratch, base, commits))
            big = list(size_violations(scratch, commits, opts.max_lines))
            order = list(order_violations(opts.patches,
                                          read_series(opts.patches)))
        except (RuntimeError, OSError) as err:
            print("error: %s" % err, file=sys.stderr)
            return 2
    for name, path, first, last, origin in bad:
        lines = str(first) if first == last else "%d-%d" % (first, last)
        print("%s removes %s:%s, added by %s" % (name, path, lines, origin))
    for name, changed in big:
        print("%s changes %d lines, more than %d"
              % (name, changed, opts.max_lines))
    for name, later in order:
        print("%s is %s but %s, not, comes after it" % (name, LOCAL_PREFIX,
                                                         later))
    if bad:
        print("FAIL: %d range(s) of lines added by one patch are removed by "
              "a later one" % len(bad))
    if big:
        print("FAIL: %d patch(es) over %d changed lines"
              % (len(big), opts.max_lines))
    if order:
        print("FAIL: %d %s patch(es) before a patch for upstream"
              % (len({n for n, _ in order}), LOCAL_PREFIX))
    if bad or big or order:
        return 1
    print("OK: %d patches; every line a patch removes comes from the Debian "
          "tree; none changes more than %d lines; %s patches last"
          % (len(commits), opts.max_lines, LOCAL_PREFIX))
    return 0


if __name__ == "__main__":
    sys.exit(main())
