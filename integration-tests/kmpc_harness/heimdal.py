"""Debian's Heimdal clients (heimdal-clients), unpacked privately.

Installing heimdal-clients would point /usr/bin/kinit, klist and kdestroy
at Heimdal through Debian's alternatives and change what every other test
runs, so the packages are fetched with `apt-get download` (Debian's
archive only) and unpacked with `dpkg -x` under build/heimdal, never
installed.  The package list is resolved, not written down (resolve()):
heimdal-clients plus every package it needs (Depends and Pre-Depends,
through apt-cache depends), less Architecture: all ones.  A package built
from Heimdal's source (SOURCE) is always in the list, whether or not the
host has it installed: the programs load Heimdal's libraries from the
unpacked tree only.  Any other package is in it only when the host lacks
it, and is followed only then (an installed package's own dependencies
are installed).  The check after unpacking (ldd, LD_LIBRARY_PATH set to
the unpacked library directories) fails when a program misses a library
or would load one from the host that a Heimdal package owns; a tree that
fails it is unpacked anew.  Done once: a stamp file holds the package list.

prepare() raises HeimdalError with the apt or ldd output when anything is
missing: the caller fails, it does not skip.
"""
import fcntl
import glob
import os
import platform
import re
import shutil
import subprocess

from kmpc_harness import realm as kmpc_realm

DIR = os.path.join(kmpc_realm.BUILD, "heimdal")
ROOT = os.path.join(DIR, "root")
DEBS = os.path.join(DIR, "debs")
STAMP = os.path.join(DIR, "packages.txt")
PACKAGE = "heimdal-clients"
# Debian's source package of heimdal-clients and of Heimdal's libraries.
SOURCE = "heimdal"
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


def host_packages():
    """{package: its source package} for every package the host has installed."""
    rc, out = _run(["dpkg-query", "-W",
                    "-f=${Package}\t${source:Package}\t${Status}\n"])
    if rc != 0:
        raise HeimdalError(f"dpkg-query -W failed:\n{out}")
    host = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[2].endswith(" installed"):
            host[fields[0]] = fields[1] or fields[0]
    return host


def _depends(pkgs):
    """{pkg: its Depends and Pre-Depends as lists of alternatives} for each
    of pkgs; a virtual package (apt-cache shows it in <>) is replaced by its
    providers, which apt-cache lists beneath it."""
    rc, out = _run(["apt-cache", "depends", "--no-recommends", "--no-suggests",
                    "--no-conflicts", "--no-breaks", "--no-replaces",
                    "--no-enhances", *pkgs])
    if rc != 0:
        raise HeimdalError(f"apt-cache depends {' '.join(pkgs)} failed:\n{out}")
    deps, groups, open_group = {}, None, False
    for line in out.splitlines():
        if line and not line[0].isspace():
            # a package's name heads its dependencies; a name listed again
            # (another version) is ignored
            name = line.strip()
            groups = [] if name in deps else deps.setdefault(name, [])
            open_group = False
            continue
        if groups is None:
            continue
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
    return {pkg: [[n for n in g if not n.startswith("<")] for g in groups]
            for pkg, groups in deps.items()}


def sources(pkgs):
    """{pkg: (its source package, its Architecture)} for each of pkgs that
    the archive has, from the candidate versions."""
    if not pkgs:
        return {}
    rc, out = _run(["apt-cache", "show", "--no-all-versions", *pkgs])
    info = {}
    for stanza in out.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                k, v = line.split(":", 1)
                fields[k] = v.strip()
        name = fields.get("Package")
        if name and name not in info:
            src = fields.get("Source", "").split(" ", 1)[0] or name
            info[name] = (src, fields.get("Architecture", ""))
    if rc != 0 and not info:
        raise HeimdalError(f"apt-cache show {' '.join(pkgs)} failed:\n{out}")
    return info


def resolve(installed=None):
    """heimdal-clients and the packages it needs, in the order found.

    installed: the names of the packages the host has (a set, or anything
    that answers `in`); the host's own list by default.  A package built
    from SOURCE is taken whatever installed says, so Heimdal's libraries are
    always among the result; another package is taken only when no
    alternative of its dependency is installed.  Architecture: all packages
    (configuration and data, such as krb5-config: no program or library
    the clients load) are never taken; the ldd check judges the result."""
    if installed is None:
        installed = set(host_packages())
    need, level = [PACKAGE], [PACKAGE]
    while level:
        deps = _depends(level)
        groups = [g for pkg in level for g in deps.get(pkg, []) if g]
        info = sources(sorted({n for g in groups for n in g}))
        found = []
        for group in groups:
            if any(n in need or n in found for n in group):
                continue
            own = [n for n in group if info.get(n, ("", ""))[0] == SOURCE]
            if own:
                pkg = own[0]
            elif any(n.split(":", 1)[0] in installed for n in group):
                continue
            else:
                pkg = group[0]
            if info.get(pkg, ("", ""))[1] != "all":
                found.append(pkg)
        need += found
        level = found
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


def _owners(paths):
    """{path: {packages}} for those of paths a host package owns; each path
    is looked up as given, resolved, and with or without its /usr prefix
    (Debian's merged /usr: ldd may name /lib what a package ships under
    /usr/lib)."""
    forms = {}
    for p in paths:
        for q in {p, os.path.realpath(p)}:
            forms.setdefault(q, p)
            if q.startswith("/usr/"):
                forms.setdefault(q[len("/usr"):], p)
            else:
                forms.setdefault("/usr" + q, p)
    if not forms:
        return {}
    _, out = _run(["dpkg-query", "-S", *sorted(forms)])
    owners = {}
    for line in out.splitlines():
        names, sep, path = line.rpartition(": ")
        if sep and path in forms:
            owners.setdefault(forms[path], set()).update(
                n.strip().split(":", 1)[0] for n in names.split(","))
    return owners


def host_heimdal_libraries(ldd_output):
    """The libraries in ldd_output that resolve outside the unpacked tree
    to a file a host package built from SOURCE owns, as 'path (package)'."""
    paths = [m for m in re.findall(r"=> (/\S+)", ldd_output)
             if not m.startswith(ROOT + "/")]
    owners = _owners(paths)
    if not owners:
        return []
    host = host_packages()
    return [f"{p} ({n})" for p, names in sorted(owners.items())
            for n in sorted(names) if host.get(n) == SOURCE]


def _check_ldd():
    missing = []
    for name, target in PROGRAMS.items():
        path = os.path.join(ROOT, "usr/bin", target)
        rc, out = _run(["ldd", path], env=env(os.environ))
        if rc != 0 or "not found" in out:
            missing.append(f"{path}:\n{out}")
            continue
        host = host_heimdal_libraries(out)
        if host:
            missing.append(f"{path} loads the host's Heimdal libraries "
                           f"{', '.join(host)}:\n{out}")
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
