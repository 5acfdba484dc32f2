"""The code layout kmpc promises (issue 27), checked instead of claimed.

- No function longer than LIMIT (80) lines in mpc-server/src,
  mpc-server/admin, kdc-plugin/src, kdc-plugin/dealer, and in kmpc's new C
  files of the patched krb5 tree (the .c/.h files its git history adds over
  Debian's source, refs/tags/debian). Lengths are lizard's (PyPI, pinned in
  layout-requirements.txt, installed by this test into build/pydeps):
  the lines from a function's signature to its closing brace.
- Tests mirror sources (RULE): in mpc-server/src and kdc-plugin/src, every
  file with logic (lizard finds a function body in it) has a test file of
  its own, FOO_test.cc anywhere under the component's test/ tree, where FOO
  is the file's name without extension. A header or .inc beside a FOO.c/
  FOO.cc of the same name is part of that source's unit. Files without a
  function body (declarations, interfaces, a 3-line ISA instantiation) need
  none. The few logic files that belong to another source's unit are in
  PART_OF, each with the test that covers it and why.
- deploy/ holds what an administrator deploys: no benchmark or harness file
  (by name), no Python in it built on the harness, and no deploy/ file
  imported by integration-tests/ other than the administrator's deploy
  helper, which the tests run as a product tool.
- The harness has one realm class: kmpc_harness.realm.Realm (the patched
  KDC alone) and its kmpc form kmpc_harness.cluster.KmpcRealm; no other
  class named *Realm or derived from one, but the two in NOT_A_REALM.

Each check is a function on a tree, tested here on a small tree made to
fail it, so a check that silently passes everything is caught too.
"""
import ast
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from kmpc_paths import BUILD, ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
REQUIREMENTS = os.path.join(HERE, "layout-requirements.txt")
PYDEPS = os.path.join(BUILD, "pydeps")
LIZARD_VERSION = "1.24.3"
LIMIT = 80
TREES = ("mpc-server/src", "mpc-server/admin", "kdc-plugin/src", "kdc-plugin/dealer")
SOURCE_EXTS = (".c", ".cc", ".h", ".inc")
UNIT_EXTS = (".c", ".cc")
COMPONENTS = ("mpc-server", "kdc-plugin")
KRB5_SRC = os.environ.get("KMPC_KRB5_SRC", os.path.join(BUILD, "krb5-src"))

# Logic files that are part of another source's unit: {path: (the test
# file that covers them, why they have no test of their own)}.
PART_OF = {
    "mpc-server/src/aes/circuit.h": (
        "aes_test.cc", "the AES circuit, written once over an abstract AND "
        "engine and compiled into each ISA kernel of aes.cc; aes_test.cc runs "
        "it on every kernel (AVX2 and native) against FIPS-197"),
    "mpc-server/src/aes/kernel_impl.inc": (
        "aes_test.cc", "aes.cc's kernel body, compiled once per ISA "
        "(kernel_avx2.cc, kernel_avx512.cc); aes_test.cc runs each kernel"),
    "mpc-server/src/service/ring.h": (
        "scheduler_test.cc", "the scheduler's ring interface; its one body, "
        "the default SpinControl (a no-op hint), is what the in-memory "
        "scheduler ring runs in scheduler_test.cc"),
    "mpc-server/src/net/channel.h": (
        "rep3_test.cc", "the ring channel interface; its one body, the "
        "default Exchange (send, then receive), is what rep3 and prss call on "
        "the in-memory ring in rep3_test.cc and every engine test"),
}

# Names that mark benchmark or test-harness code.
HARNESS_NAME = re.compile(r"bench|storm|soak|harness|conftest|^test_|_test\.|realm",
                          re.IGNORECASE)
# deploy/ files the tests may load: {path: why}.
DEPLOY_TOOLS_UNDER_TEST = {
    "deploy/kmpc_deploy.py": "the administrator's deploy helper "
    "(deploy/THREE-HOSTS.md); kmpc_harness/deploy_tool.py loads it so that "
    "the tests run exactly what an administrator runs",
}

# Classes named *Realm, or derived from one, that are no realm of the build
# tree: {"file:Class": why}.
NOT_A_REALM = {
    "kmpc_harness/replica.py:ReplicaKdc": "one more KDC (kpropd, its own KDB "
    "copy) of a KmpcRealm's realm; reuses Realm's daemon code",
}
REALM_CLASSES = {"kmpc_harness/realm.py:Realm", "kmpc_harness/cluster.py:KmpcRealm"}


# ---- lizard ------------------------------------------------------------------

def _requirements_digest():
    with open(REQUIREMENTS, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _install_pydeps():
    """pip install --target build/pydeps of layout-requirements.txt (hashes
    required), once per change of that file; under a lock, into a fresh
    directory moved into place."""
    os.makedirs(BUILD, exist_ok=True)
    stamp = os.path.join(PYDEPS, ".requirements-sha256")
    with open(PYDEPS + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(stamp) and _read(stamp) == _requirements_digest():
            return
        tmp = PYDEPS + ".new"
        shutil.rmtree(tmp, ignore_errors=True)
        p = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--require-hashes", "--no-compile", "--target", tmp,
             "-r", REQUIREMENTS], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, ("pip install of layout-requirements.txt failed "
                                   f"(python3-pip: make deps):\n{p.stdout}{p.stderr}")
        with open(os.path.join(tmp, ".requirements-sha256"), "w") as f:
            f.write(_requirements_digest())
        shutil.rmtree(PYDEPS, ignore_errors=True)
        os.rename(tmp, PYDEPS)


@pytest.fixture(scope="module")
def lizard():
    t0 = time.monotonic()
    _install_pydeps()
    if PYDEPS not in sys.path:
        sys.path.insert(0, PYDEPS)
    import lizard as mod
    from lizard_ext.version import version
    assert version == LIZARD_VERSION, (mod.__file__, version)
    print(f"lizard {version} from {os.path.dirname(mod.__file__)} "
          f"({time.monotonic() - t0:.1f} s)")
    return mod


def _read(path):
    with open(path, errors="replace") as f:
        return f.read()


def functions(lizard, path):
    """lizard's functions of one file (a .inc is read as C++)."""
    return lizard.FileAnalyzer(lizard.get_extensions([])).analyze_source_code(
        path if not path.endswith(".inc") else path[:-4] + ".cc",
        _read(path)).function_list


# ---- function lengths --------------------------------------------------------

def source_files(root, trees, exts=SOURCE_EXTS):
    """Files of trees (relative to root) with one of exts, sorted."""
    out = []
    for tree in trees:
        for d, _, names in os.walk(os.path.join(root, tree)):
            out += [os.path.join(d, n) for n in names if n.endswith(exts)]
    return sorted(out)


def long_functions(lizard, root, paths, limit=LIMIT):
    """'file:line: name is N lines' for every function over limit lines."""
    found = []
    for path in paths:
        for fn in functions(lizard, os.path.join(root, path)):
            if fn.length > limit:
                found.append(f"{path}:{fn.start_line}: {fn.name} is {fn.length} lines")
    return found


def krb5_new_files():
    """kmpc's own C files in the patched krb5 tree (`make krb5` makes it):
    those its history adds over Debian's source."""
    assert os.path.isdir(os.path.join(KRB5_SRC, ".git")), (
        f"{KRB5_SRC} is no git tree: make krb5 first (or KMPC_KRB5_SRC)")
    out = subprocess.run(
        ["git", "-C", KRB5_SRC, "diff", "--name-only", "--diff-filter=A",
         "refs/tags/debian", "HEAD"], capture_output=True, text=True, check=True).stdout
    return sorted(p for p in out.split() if p.endswith((".c", ".h")))


def test_no_long_function_in_kmpc_sources(lizard):
    t0 = time.monotonic()
    paths = [os.path.relpath(p, ROOT) for p in source_files(ROOT, TREES)]
    assert len(paths) > 50, paths      # the trees are where they should be
    found = long_functions(lizard, ROOT, paths)
    print(f"{len(paths)} files, {time.monotonic() - t0:.1f} s")
    assert not found, f"functions over {LIMIT} lines:\n" + "\n".join(found)


def test_no_long_function_in_kmpcs_krb5_files(lizard):
    paths = krb5_new_files()
    # The KDC's MPC layer is among them: the list is the right one.
    assert "src/kdc/kdc_mpc.c" in paths, paths
    found = long_functions(lizard, KRB5_SRC, paths)
    assert not found, (f"functions over {LIMIT} lines in kmpc's files of "
                       f"{KRB5_SRC}:\n" + "\n".join(found))


def test_length_check_reports_what_is_too_long(lizard, tmp_path):
    body = lambda n: "".join(f"  x += {i};\n" for i in range(n - 3))
    (tmp_path / "a.cc").write_text(
        "int ok(int x) {\n" + body(LIMIT) + "  return x;\n}\n"
        "int too_long(int x) {\n" + body(LIMIT + 1) + "  return x;\n}\n")
    assert long_functions(lizard, str(tmp_path), ["a.cc"]) == [
        f"a.cc:{LIMIT + 1}: too_long is {LIMIT + 1} lines"]


# ---- tests mirror sources ----------------------------------------------------

def has_logic(lizard, path):
    return bool(functions(lizard, path))


def sources_without_test(lizard, root, component, part_of=None):
    """RULE (module docstring): the logic files of component/src with no
    FOO_test.cc under component/test and not in part_of."""
    part_of = PART_OF if part_of is None else part_of
    tests = {n for _, _, names in os.walk(os.path.join(root, component, "test"))
             for n in names if n.endswith("_test.cc")}
    missing = []
    for path in source_files(root, [f"{component}/src"]):
        rel = os.path.relpath(path, root)
        stem, ext = os.path.splitext(path)
        if ext not in UNIT_EXTS and any(os.path.exists(stem + e) for e in UNIT_EXTS):
            continue                    # a header of FOO.c / FOO.cc
        if rel in part_of or not has_logic(lizard, path):
            continue
        if os.path.basename(stem) + "_test.cc" not in tests:
            missing.append(rel)
    return missing


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_logic_source_has_its_own_test(lizard, component):
    missing = sources_without_test(lizard, ROOT, component)
    assert not missing, ("sources without a test file of their own "
                         "(FOO.cc -> test/**/FOO_test.cc):\n" + "\n".join(missing))


def test_part_of_list_is_current(lizard):
    """Every PART_OF entry is a logic file whose covering test exists."""
    tests = {n for c in COMPONENTS for _, _, names in os.walk(os.path.join(ROOT, c, "test"))
             for n in names}
    for path, (test, why) in PART_OF.items():
        assert os.path.exists(os.path.join(ROOT, path)), f"{path} is gone: drop it"
        assert has_logic(lizard, os.path.join(ROOT, path)), f"{path} has no logic: drop it"
        assert test in tests and why, (path, test)


def test_mirror_rule_catches_a_missing_test(lizard, tmp_path):
    src = tmp_path / "comp" / "src" / "sub"
    src.mkdir(parents=True)
    (tmp_path / "comp" / "test").mkdir()
    (src / "tested.cc").write_text("int f() { return 1; }\n")
    (src / "tested.h").write_text("inline int g() { return 2; }\n")
    (src / "untested.cc").write_text("int h() { return 3; }\n")
    (src / "lonely.h").write_text("inline int i() { return 4; }\n")
    (src / "decl.h").write_text("int f();\nstruct S { int a; };\n")
    (tmp_path / "comp" / "test" / "tested_test.cc").write_text("\n")
    assert sources_without_test(lizard, str(tmp_path), "comp", part_of={}) == [
        "comp/src/sub/lonely.h", "comp/src/sub/untested.cc"]


# ---- deploy/ holds deployment only -------------------------------------------

def _py_files(root, tree):
    return source_files(root, [tree], exts=(".py",))


def _imported_modules(path):
    mods = set()
    for node in ast.walk(ast.parse(_read(path), path)):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            mods.add(node.module.split(".")[0])
    return mods


def deploy_offences(root, tools_under_test=None):
    """What in root/deploy is benchmark or harness code: such names, Python
    importing the harness or a test module, and deploy/ files loaded by
    integration-tests/ (by import, sys.path or file location) beyond
    tools_under_test."""
    tools = DEPLOY_TOOLS_UNDER_TEST if tools_under_test is None else tools_under_test
    found = []
    deploy = os.path.join(root, "deploy")
    tests = os.path.join(root, "integration-tests")
    test_modules = ({"kmpc_harness", "bench", "conftest"} |
                    {os.path.splitext(os.path.basename(p))[0] for p in _py_files(root, "integration-tests")})
    for d, _, names in os.walk(deploy):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root)
            if HARNESS_NAME.search(n):
                found.append(f"{rel}: named as benchmark or harness code")
    deploy_py = {}
    for path in _py_files(root, "deploy"):
        rel = os.path.relpath(path, root)
        deploy_py[os.path.splitext(os.path.basename(path))[0]] = rel
        used = _imported_modules(path) & test_modules
        if used:
            found.append(f"{rel}: imports test code {sorted(used)}")
    for path in _py_files(root, "integration-tests"):
        rel = os.path.relpath(path, root)
        text = _read(path)
        if re.search(r"sys\.path\.(insert|append)\([^)\n]*deploy", text):
            found.append(f"{rel}: puts deploy/ on sys.path")
        for mod, dep in deploy_py.items():
            loaded = mod in _imported_modules(path) or (
                re.search(r"spec_from_file_location|runpy|SourceFileLoader", text)
                and re.search(rf"\b{re.escape(mod)}\.py\b", text))
            if loaded and dep not in tools:
                found.append(f"{rel}: loads {dep}")
    assert os.path.isdir(tests) and os.path.isdir(deploy)
    return found


def test_deploy_holds_no_bench_or_harness_code():
    found = deploy_offences(ROOT)
    assert not found, "\n".join(found)
    for path in DEPLOY_TOOLS_UNDER_TEST:
        assert os.path.exists(os.path.join(ROOT, path)), f"{path} is gone: drop it"


def test_deploy_check_catches_harness_code(tmp_path):
    (tmp_path / "deploy").mkdir()
    (tmp_path / "integration-tests" / "kmpc_harness").mkdir(parents=True)
    (tmp_path / "deploy" / "storm_bench.py").write_text("")
    (tmp_path / "deploy" / "tool.py").write_text("from kmpc_harness import realm\n")
    (tmp_path / "deploy" / "helper.py").write_text("")
    (tmp_path / "integration-tests" / "kmpc_harness" / "x.py").write_text("import helper\n")
    assert deploy_offences(str(tmp_path), tools_under_test={}) == [
        "deploy/storm_bench.py: named as benchmark or harness code",
        "deploy/tool.py: imports test code ['kmpc_harness']",
        "integration-tests/kmpc_harness/x.py: loads deploy/helper.py"]


# ---- one realm class ---------------------------------------------------------

def realm_classes(root):
    """'file:Class' (file relative to integration-tests/) of every class
    named *Realm or with a base named *Realm."""
    found = set()
    for path in _py_files(root, "integration-tests"):
        for node in ast.walk(ast.parse(_read(path), path)):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                     for b in node.bases]
            if node.name.endswith("Realm") or any(b.endswith("Realm") for b in bases):
                rel = os.path.relpath(path, os.path.join(root, "integration-tests"))
                found.add(f"{rel}:{node.name}")
    return found


def test_one_realm_class():
    found = realm_classes(ROOT)
    assert found - set(NOT_A_REALM) == REALM_CLASSES, sorted(found)
    assert set(NOT_A_REALM) <= found, "NOT_A_REALM names a class that is gone"
