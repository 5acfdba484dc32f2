"""Debian's Heimdal clients (heimdal-clients), unpacked privately.

Installing heimdal-clients would point /usr/bin/kinit, klist and kdestroy
at Heimdal through Debian's alternatives and change what every other test
runs, so the packages are fetched with `apt-get download` (Debian's
archive only) and unpacked with `dpkg -x` under build/heimdal, never
installed.  The package list is resolved, not written down: heimdal-clients
plus every package it needs (Depends and Pre-Depends, through apt-cache
depends) that the host does not have installed and that is not
Architecture: all, followed only through packages that are themselves
missing (an installed package's own dependencies are installed).  ldd then checks that every unpacked program
finds all its libraries with LD_LIBRARY_PATH set to the unpacked library
directory.  Done once: a stamp file holds the package list.

prepare() raises HeimdalError with the apt or ldd output when anything is
missing: the caller fails, it does not skip.
"""
import fcntl
import glob
import os
import platform
import shutil
import subprocess

from kmpc_harness import realm as kmpc_realm

DIR = os.path.join(kmpc_realm.BUILD, "heimdal")
ROOT = os.path.join(DIR, "root")
DEBS = os.path.join(DIR, "debs")
STAMP = os.path.join(DIR, "packages.txt")
PACKAGE = "heimdal-clients"
# The clients the tests run, by the name Heimdal's own programs go by:
# klist and kswitch are links to heimtools, which picks its command from
# the program name, so each is run through a link of that plain name in
# bin/ (never on PATH: callers use these absolute paths).
PROGRAMS = {"kinit": "kinit.heimdal", "klist": "klist.heimdal",
            "kdestroy": "kdestroy.heimdal", "kgetcred": "kgetcred",
            "kswitch": "kswitch.heimdal"}
BIN = os.path.join(DIR, "bin")


class HeimdalError(Exception):
    pass


def _run(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kw)
    return p.returncode, p.stdout + p.stderr


def lib_dirs():
    """The unpacked library directories (Debian's multiarch one and /lib)."""
    arch = _run(["dpkg-architecture", "-qDEB_HOST_MULTIARCH"])[1].strip() \
        or f"{platform.machine()}-linux-gnu"
    dirs = [os.path.join(ROOT, "usr/lib", arch), os.path.join(ROOT, "lib", arch)]
    return [d for d in dirs if os.path.isdir(d)]


def env(base):
    """base with LD_LIBRARY_PATH set to the unpacked libraries only."""
    e = dict(base)
    e["LD_LIBRARY_PATH"] = ":".join(lib_dirs())
    return e


def _installed(pkg):
    rc, out = _run(["dpkg-query", "-W", "-f=${Status}", pkg])
    return rc == 0 and "install ok installed" in out


def _depends(pkg):
    """pkg's Depends and Pre-Depends as lists of alternatives; a virtual
    package (apt-cache shows it in <>) is replaced by its providers, which
    apt-cache lists beneath it."""
    rc, out = _run(["apt-cache", "depends", "--no-recommends", "--no-suggests",
                    "--no-conflicts", "--no-breaks", "--no-replaces",
                    "--no-enhances", pkg])
    if rc != 0:
        raise HeimdalError(f"apt-cache depends {pkg} failed:\n{out}")
    groups, open_group = [], False
    for line in out.splitlines()[1:]:
        s = line.strip()
        alt = s.startswith("|")
        s = s.lstrip("|")
        if s.startswith(("Depends:", "PreDepends:")):
            name = s.split(":", 1)[1].strip()
            if open_group:
                groups[-1].append(name)
            else:
                groups.append([name])
            open_group = alt
        elif s and ":" not in s and groups:
            # a provider of the virtual package just above
            groups[-1].append(s)
        else:
            open_group = False
    return [[n for n in g if not n.startswith("<")] for g in groups]


def _arch_all(pkg):
    rc, out = _run(["apt-cache", "show", "--no-all-versions", pkg])
    return rc == 0 and "\nArchitecture: all\n" in "\n" + out


def resolve():
    """heimdal-clients and the packages it needs that are not installed,
    less Architecture: all ones (configuration and data, such as
    krb5-config: no program or library the clients load; ldd checks the
    result)."""
    need, todo = [], [PACKAGE]
    while todo:
        pkg = todo.pop(0)
        if pkg in need:
            continue
        need.append(pkg)
        for group in _depends(pkg):
            if not group or any(_installed(n) for n in group) \
                    or any(n in need for n in group):
                continue
            if not _arch_all(group[0]):
                todo.append(group[0])
    return need


def _apt_download(pkgs):
    os.makedirs(DEBS, exist_ok=True)
    argv = ["apt-get", "download", "-q", *pkgs]
    rc, out = _run(argv, cwd=DEBS)
    if rc != 0 and os.geteuid() == 0:
        # Package lists missing or stale (a fresh machine that installed
        # nothing yet): refresh them once, as deploy/install-deps.sh does.
        _run(["apt-get", "update", "-qq"])
        rc, out = _run(argv, cwd=DEBS)
    if rc != 0:
        raise HeimdalError(f"apt-get download {' '.join(pkgs)} failed "
                           f"(Debian's heimdal-clients is needed):\n{out}")


def _check_ldd():
    missing = []
    for name, target in PROGRAMS.items():
        path = os.path.join(ROOT, "usr/bin", target)
        rc, out = _run(["ldd", path], env=env(os.environ))
        if rc != 0 or "not found" in out:
            missing.append(f"{path}:\n{out}")
    if missing:
        raise HeimdalError("Heimdal clients miss libraries:\n" + "\n".join(missing))


def _unpack(pkgs):
    shutil.rmtree(ROOT, ignore_errors=True)
    shutil.rmtree(DEBS, ignore_errors=True)
    _apt_download(pkgs)
    debs = sorted(glob.glob(os.path.join(DEBS, "*.deb")))
    if len(debs) != len(pkgs):
        raise HeimdalError(f"apt-get download gave {debs} for {pkgs}")
    for deb in debs:
        rc, out = _run(["dpkg-deb", "-x", deb, ROOT])
        if rc != 0:
            raise HeimdalError(f"dpkg -x {deb} failed:\n{out}")
    os.makedirs(BIN, exist_ok=True)
    for name, target in PROGRAMS.items():
        link = os.path.join(BIN, name)
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(os.path.join(ROOT, "usr/bin", target), link)


def prepare():
    """Unpack the clients once; returns {program: path} for PROGRAMS."""
    os.makedirs(DIR, exist_ok=True)
    with open(os.path.join(DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(STAMP):
            try:
                _check_ldd()
            except HeimdalError:
                os.unlink(STAMP)  # a damaged tree: unpacked anew below
        if not os.path.exists(STAMP):
            pkgs = resolve()
            _unpack(pkgs)
            _check_ldd()
            with open(STAMP, "w") as f:
                f.write("\n".join(pkgs) + "\n")
    return {name: os.path.join(BIN, name) for name in PROGRAMS}


def packages():
    with open(STAMP) as f:
        return f.read().split()
