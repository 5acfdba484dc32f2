"""CMake's install rules (cmake/KmpcInstall.cmake), from which
deploy/debian/rules builds the Debian packages: `cmake --install` of the
build ($KMPC_CMAKE_BUILD, else build/cmake) into a temporary DESTDIR, one
component per package.

- Each component installs exactly the files its package ships (COMPONENTS
  below, the packages' lists of docs/admin-guide.md, "Packages"), each in
  the directory the build's install variables give and with its mode: a
  file missing, extra, misplaced or in another component fails.
- The components together are the whole install: nothing is installed
  outside them (an install() without COMPONENT ships in no package).
- The installed units are their templates with every path filled in: the
  server unit runs the installed server, every unit names its own
  component's copy of THREE-HOSTS.md, the KDC's units the build's
  KMPC_UNIT_KRB5_SBINDIR.

The check is a function on trees, also run on a planted tree with a file
missing and one extra, so a check that passes everything is caught.
test_packages.py installs the packages themselves.
"""
import os
import re
import shutil
import subprocess

import pytest

from kmpc_paths import BUILD

CMAKE_BUILD = os.environ.get("KMPC_CMAKE_BUILD") or os.path.join(BUILD, "cmake")
# component: [(directory, file name, mode)]; the directories are named as
# in install_dirs().
COMPONENTS = {
    "kmpc-mpc-server": [
        ("sbin", "kmpc-mpc-server", 0o755),
        ("unit", "kmpc-mpc-server@.service", 0o644),
        ("conf", "party.flags.example", 0o644),
        ("doc", "THREE-HOSTS.md", 0o644),
    ],
    "kmpc-kdc": [
        ("kdcmpc", "kmpc.so", 0o644),
        ("unit", "kmpc-krb5kdc.service", 0o644),
        ("unit", "kmpc-kpropd.service", 0o644),
        ("conf", "krb5.conf.example", 0o644),
        ("conf", "kdc.conf.example", 0o644),
        ("conf", "kdc.env.example", 0o644),
        ("doc", "THREE-HOSTS.md", 0o644),
    ],
    "kmpc-admin": [
        ("sbin", "kmpc-admin", 0o755),
        ("sbin", "kmpc-kdb-handle", 0o755),
        ("bin", "kmpc-mpc-client", 0o755),
        ("mpcdealer", "kmpc.so", 0o644),
        ("conf", "admin.conf.example", 0o644),
        ("doc", "THREE-HOSTS.md", 0o644),
    ],
}
UNIT_SERVER = {"kmpc-mpc-server@.service": "kmpc-mpc-server"}
UNIT_KRB5 = {"kmpc-krb5kdc.service": ("krb5kdc",), "kmpc-kpropd.service": ("kpropd", "kdb5_util")}


def read_cache(build):
    """CMakeCache.txt's NAME:TYPE=VALUE entries as {NAME: VALUE}."""
    out = {}
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"^([A-Za-z_][\w-]*):[A-Z]+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def _sysconfdir(prefix, sysconf):
    """GNUInstallDirs' CMAKE_INSTALL_FULL_SYSCONFDIR."""
    if sysconf.startswith("/"):
        return sysconf
    if re.match(r"^/(usr/?)?$", prefix):
        return "/" + sysconf
    m = re.match(r"^/opt/([^/]+)/?$", prefix)
    if m:
        return f"/{sysconf}/opt/{m.group(1)}"
    return f"{prefix.rstrip('/')}/{sysconf}"


def install_dirs(cache, component):
    """The absolute directories of a component's files, from the build's
    install variables (GNUInstallDirs' and cmake/KmpcInstall.cmake's)."""
    prefix = cache["CMAKE_INSTALL_PREFIX"]
    full = lambda d: d if d.startswith("/") else f"{prefix.rstrip('/')}/{d}"  # noqa: E731
    share = cache.get("CMAKE_INSTALL_DATAROOTDIR") or "share"
    per_component = cache.get("KMPC_INSTALL_DOC_PER_COMPONENT", "OFF").upper() in (
        "ON", "1", "TRUE", "YES")
    doc = (f"{share}/doc/{component}" if per_component else
           cache.get("CMAKE_INSTALL_DOCDIR") or f"{share}/doc/kmpc")
    return {
        "bin": full(cache.get("CMAKE_INSTALL_BINDIR", "bin")),
        "sbin": full(cache.get("CMAKE_INSTALL_SBINDIR", "sbin")),
        "conf": _sysconfdir(prefix, cache.get("CMAKE_INSTALL_SYSCONFDIR", "etc")) + "/kmpc",
        "unit": full(cache["KMPC_INSTALL_UNITDIR"]),
        "kdcmpc": full(cache["KMPC_INSTALL_KDCMPC_DIR"]),
        "mpcdealer": full(cache["KMPC_INSTALL_MPCDEALER_DIR"]),
        "doc": full(doc),
    }


def expected_files(cache, component):
    """{absolute path: mode} of what the component must install."""
    dirs = install_dirs(cache, component)
    return {os.path.normpath(f"{dirs[d]}/{name}"): mode
            for d, name, mode in COMPONENTS[component]}


def tree_files(root):
    """{absolute path as installed: mode} of the files under DESTDIR root."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            out["/" + os.path.relpath(p, root)] = os.stat(p, follow_symlinks=False).st_mode & 0o7777
    return out


def tree_offences(trees, everything, cache):
    """What is wrong with the components' trees ({component: DESTDIR}) and
    the whole install's (everything), one line each."""
    found = []
    union = {}
    for component, root in trees.items():
        have, want = tree_files(root), expected_files(cache, component)
        union.update(have)
        for path in sorted(want.keys() - have.keys()):
            found.append(f"{component}: {path} is not installed")
        for path in sorted(have.keys() - want.keys()):
            found.append(f"{component}: {path} is installed but not expected")
        for path in sorted(want.keys() & have.keys()):
            if have[path] != want[path]:
                found.append(f"{component}: {path} has mode {have[path]:o}, not {want[path]:o}")
    for path in sorted(tree_files(everything).keys() - union.keys()):
        found.append(f"{path} is installed in no component")
    return found


def unit_offences(trees, cache):
    """The installed units' paths against the install's."""
    found = []
    krb5 = cache["KMPC_UNIT_KRB5_SBINDIR"]
    for component, root in trees.items():
        dirs = install_dirs(cache, component)
        for d, name, _ in COMPONENTS[component]:
            if d != "unit":
                continue
            text = open(os.path.join(root, dirs["unit"].lstrip("/"), name)).read()
            if re.search(r"@[A-Za-z_]+@", text):
                found.append(f"{name}: a placeholder is left: {re.findall(r'@[A-Za-z_]+@', text)}")
            doc = f"Documentation=file:{dirs['doc']}/THREE-HOSTS.md"
            if not re.search(rf"^{re.escape(doc)}$", text, flags=re.M):
                found.append(f"{name}: no {doc}")
            if name in UNIT_SERVER:
                exe = f"{dirs['sbin']}/{UNIT_SERVER[name]}"
                if not re.search(rf"^ExecStart={re.escape(exe)} ", text, flags=re.M):
                    found.append(f"{name}: ExecStart does not run {exe}")
            for prog in UNIT_KRB5.get(name, ()):
                if f"{krb5}/{prog} " not in text and f"{krb5}/{prog}\n" not in text:
                    found.append(f"{name}: does not run {krb5}/{prog}")
    return found


def cmake_install(build, destdir, component=None):
    argv = ["cmake", "--install", build] + (["--component", component] if component else [])
    p = subprocess.run(argv, env=dict(os.environ, DESTDIR=destdir), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, (f"{' '.join(argv)} failed (is the build complete? make build):\n"
                               f"{p.stdout[-3000:]}{p.stderr[-3000:]}")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    assert os.path.isfile(os.path.join(CMAKE_BUILD, "CMakeCache.txt")), (
        f"{CMAKE_BUILD}: no CMake build (make build, or KMPC_CMAKE_BUILD)")
    base = tmp_path_factory.mktemp("install")
    trees = {}
    for component in COMPONENTS:
        trees[component] = str(base / component)
        cmake_install(CMAKE_BUILD, trees[component], component)
    cmake_install(CMAKE_BUILD, str(base / "all"))
    return trees, str(base / "all"), read_cache(CMAKE_BUILD)


def test_components_install_what_the_packages_ship(installed):
    trees, everything, cache = installed
    found = tree_offences(trees, everything, cache)
    assert not found, "\n".join(found)


def test_installed_units_name_the_installed_paths(installed):
    trees, _, cache = installed
    found = unit_offences(trees, cache)
    assert not found, "\n".join(found)


def test_tree_check_catches_a_missing_and_an_extra_file(installed, tmp_path):
    trees, everything, cache = installed
    planted = {}
    for component, root in trees.items():
        planted[component] = str(tmp_path / component)
        shutil.copytree(root, planted[component], symlinks=True, copy_function=os.link)
    all_copy = str(tmp_path / "all")
    shutil.copytree(everything, all_copy, symlinks=True, copy_function=os.link)
    # An install rule gone (the module in neither tree), and a file of no
    # component.
    dirs = install_dirs(cache, "kmpc-kdc")
    for root in (planted["kmpc-kdc"], all_copy):
        os.remove(os.path.join(root, dirs["kdcmpc"].lstrip("/"), "kmpc.so"))
    stray = os.path.join(all_copy, dirs["sbin"].lstrip("/"), "kmpc-stray")
    open(stray, "w").close()
    found = tree_offences(planted, all_copy, cache)
    assert found == [f"kmpc-kdc: {dirs['kdcmpc']}/kmpc.so is not installed",
                     f"{dirs['sbin']}/kmpc-stray is installed in no component"], found
