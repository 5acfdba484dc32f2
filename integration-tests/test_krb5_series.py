"""krb5-patches/ as a reviewable series (docs/krb5-patches.md):

* no patch removes or changes a line that an earlier patch added
  (krb5-patches/check-series.py, which blames every removed line);
* the checker does fail on a series where a later patch undoes an earlier
  one, and passes the same series cut cleanly;
* it fails on a patch changing more than 1,000 lines, tests included, and
  on a "kmpc-local:" patch (kmpc's own test support) before a patch meant for
  upstream; the export marks the local patches in `series`;
* krb5-patches/ is exactly what export-series.sh (make krb5-series) writes
  for the branch the series makes, so the files are regenerated, not edited.

They need Debian's krb5 source as build-krb5.sh leaves it (a git repository
with refs/tags/debian beside the krb5 prefix); `make test` builds it first.
"""
import filecmp
import os
import subprocess
import time

import pytest

import kmpc_paths

PATCHES = os.path.join(kmpc_paths.ROOT, "krb5-patches")
CHECK = os.path.join(PATCHES, "check-series.py")
EXPORT = os.path.join(PATCHES, "export-series.sh")
SRC = os.environ.get(
    "KMPC_KRB5_SRC",
    os.path.join(os.path.dirname(os.path.abspath(kmpc_paths.KRB5_PREFIX)), "krb5-src"))
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000"}


def run(*args, cwd=None, check=True):
    p = subprocess.run(list(args), cwd=cwd, env=GIT_ENV, capture_output=True,
                       text=True, timeout=600)
    if check:
        assert p.returncode == 0, f"{args}: rc {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.fixture(scope="module")
def krb5_src():
    if not os.path.isdir(os.path.join(SRC, ".git")):
        pytest.fail(f"no krb5 source repository at {SRC}: run 'make krb5' "
                    "(or set KMPC_KRB5_SRC)")
    run("git", "-C", SRC, "rev-parse", "--verify", "refs/tags/debian")
    return SRC


def test_no_patch_removes_a_line_an_earlier_patch_added(krb5_src):
    start = time.monotonic()
    p = run("/usr/bin/python3", CHECK, "--src", krb5_src, "--patches", PATCHES,
            check=False)
    assert p.returncode == 0, f"check-series.py failed:\n{p.stdout}\n{p.stderr}"
    assert p.stdout.startswith("OK: "), p.stdout
    print(f"check-series.py: {p.stdout.strip()} ({time.monotonic() - start:.1f} s)")


def commit(repo, path, text, message):
    with open(os.path.join(repo, path), "w") as f:
        f.write(text)
    run("git", "-C", repo, "add", path)
    run("git", "-C", repo, "commit", "-q", "-m", message)


def toy_repo(tmp_path, undo):
    """A repository with refs/tags/debian and a branch kmpc of two commits;
    with undo, the second changes a line the first added."""
    repo = tmp_path / "src"
    run("git", "init", "-q", "-b", "main", str(repo))
    commit(repo, "a.c", "one\ntwo\nthree\n", "Debian")
    run("git", "-C", repo, "tag", "debian")
    run("git", "-C", repo, "checkout", "-q", "-b", "kmpc")
    commit(repo, "a.c", "one\ntwo\nadded = 1;\nthree\n", "Add a line")
    last = "one\ntwo\nadded = 2;\nthree\n" if undo else "one\ntwo\nadded = 1;\nthree\nfour\n"
    commit(repo, "a.c", last, "Second patch")
    return str(repo)


@pytest.mark.parametrize("undo", [True, False], ids=["undoing", "clean"])
def test_checker_fails_on_a_patch_undoing_an_earlier_one(tmp_path, undo):
    repo = toy_repo(tmp_path, undo)
    out = tmp_path / "patches"
    run("bash", EXPORT, "-s", repo, "-b", "kmpc", "-o", str(out))
    series = [l for l in (out / "series").read_text().splitlines()
              if l and not l.startswith("#")]
    assert series == ["0001-Add-a-line.patch", "0002-Second-patch.patch"]
    p = run("/usr/bin/python3", CHECK, "--src", repo, "--patches", str(out), check=False)
    if undo:
        assert p.returncode == 1, p.stdout + p.stderr
        assert ("0002-Second-patch.patch removes a.c:3, added by "
                "0001-Add-a-line.patch") in p.stdout
    else:
        assert p.returncode == 0, p.stdout + p.stderr


def linear_repo(tmp_path, commits):
    """A repository with refs/tags/debian and a branch kmpc of COMMITS, each
    (path, text, subject), exported into tmp_path/patches."""
    repo = tmp_path / "src"
    run("git", "init", "-q", "-b", "main", str(repo))
    commit(repo, "a.c", "one\n", "Debian")
    run("git", "-C", repo, "tag", "debian")
    run("git", "-C", repo, "checkout", "-q", "-b", "kmpc")
    for path, text, subject in commits:
        commit(repo, path, text, subject)
    out = tmp_path / "patches"
    run("bash", EXPORT, "-s", str(repo), "-b", "kmpc", "-o", str(out))
    return str(repo), out


def lines(n):
    return "".join(f"x{i} = {i};\n" for i in range(n))


@pytest.mark.parametrize("n,ok", [(999, True), (1001, False)],
                         ids=["999-lines", "1001-lines"])
def test_checker_limits_a_patch_to_1000_changed_lines(tmp_path, n, ok):
    # a.c: 1 removed + n added; a test program counts as any file does, so
    # tests over the limit go into a patch of their own (t_big.c: 999).
    repo, out = linear_repo(tmp_path, [
        ("a.c", lines(n), "Big change"),
        ("t_big.c", lines(999), "Add a test program")])
    p = run("/usr/bin/python3", CHECK, "--src", repo, "--patches", str(out),
            check=False)
    if ok:
        assert p.returncode == 0, p.stdout + p.stderr
        assert "none changes more than 1000 lines" in p.stdout
    else:
        assert p.returncode == 1, p.stdout + p.stderr
        assert ("0001-Big-change.patch changes 1002 lines, more than 1000"
                in p.stdout)
        assert "0002-Add-a-test-program.patch" not in p.stdout


def test_checker_counts_test_files_too(tmp_path):
    # MIT-style test programs (t_*.c) count as any file does: a patch's
    # tests over the limit go into a patch of their own.
    repo, out = linear_repo(tmp_path, [
        ("a.c", lines(10), "Small change"),
        ("t_big.c", lines(1001), "Add a test program")])
    p = run("/usr/bin/python3", CHECK, "--src", repo, "--patches", str(out),
            check=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert ("0002-Add-a-test-program.patch changes 1001 lines, more than 1000"
            in p.stdout)


@pytest.mark.parametrize("local_first", [True, False],
                         ids=["local-first", "local-last"])
def test_checker_keeps_kmpc_local_patches_last(tmp_path, local_first):
    upstream = ("a.c", "one\nfix\n", "Fix a bug")
    local = ("t.py", "test\n", "kmpc-local: a test harness")
    repo, out = linear_repo(tmp_path, [local, upstream] if local_first
                            else [upstream, local])
    series = (out / "series").read_text().splitlines()
    marker = series.index("# kmpc-local: not for upstream")
    local_name = [l for l in series if "kmpc-local-a-test-harness" in l][0]
    assert series.index(local_name) == marker + 1
    p = run("/usr/bin/python3", CHECK, "--src", repo, "--patches", str(out),
            check=False)
    if local_first:
        assert p.returncode == 1, p.stdout + p.stderr
        assert ("0001-kmpc-local-a-test-harness.patch is kmpc-local: but "
                "0002-Fix-a-bug.patch, not, comes after it") in p.stdout
    else:
        assert p.returncode == 0, p.stdout + p.stderr


def test_series_files_are_the_export_of_the_branch(krb5_src, tmp_path):
    """Apply krb5-patches/ in a scratch clone and export that branch again:
    the files must come out byte for byte the same."""
    start = time.monotonic()
    scratch = str(tmp_path / "krb5")
    run("git", "clone", "-q", "--shared", "--no-checkout", krb5_src, scratch)
    # -B: the clone already has a branch kmpc when the source's HEAD is on
    # its kmpc branch (as `make krb5-series` leaves it).
    run("git", "-C", scratch, "checkout", "-q", "-B", "kmpc", "refs/tags/debian")
    series = [l.split()[0] for l in open(os.path.join(PATCHES, "series"))
              if l.strip() and not l.startswith("#")]
    for name in series:
        run("git", "-C", scratch, "am", "-q", "--keep-cr", os.path.join(PATCHES, name))
    out = tmp_path / "export"
    run("bash", EXPORT, "-s", scratch, "-b", "kmpc", "-o", str(out))
    exported = sorted(os.listdir(out))
    assert exported == sorted(series + ["series"])
    match, mismatch, errors = filecmp.cmpfiles(PATCHES, out, exported, shallow=False)
    assert not mismatch and not errors, (
        f"krb5-patches/ differs from the export of its own branch: {mismatch + errors}"
        " (regenerate with 'make krb5-series')")
    print(f"re-export of {len(series)} patches identical "
          f"({time.monotonic() - start:.1f} s)")
