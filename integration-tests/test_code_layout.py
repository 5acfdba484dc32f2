"""The code layout kmpc promises (issue 27), checked instead of claimed.

- No function longer than LIMIT (80) lines in kmpc's own C and C++ (TREES:
  the servers, admin tool, cluster client, tools and load generator, the KDC
  module, its dealer and tools, proto/; every C/C++ folder is in TREES or
  TEST_TREES), and in kmpc's new C files of the patched krb5 tree (the .c/.h
  files its git history adds over Debian's source, refs/tags/debian).
  Lengths are lizard's (PyPI, pinned in layout-requirements.txt, installed
  by this test into build/pydeps): the lines from a function's signature to
  its closing brace.
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
- No server or KDC source can answer both replicated components of a
  FINALIZE tag (enctype.md, security invariant 7): the function that
  computes them, FinalizeBothComponents, is test code
  (mpc-server/test/core/finalize_testing.h), which no file of TREES names
  or includes, and mpc-server/src declares no Finalize over an
  EncryptState (the removed engine::Finalize) beside FinalizeShare.
- The harness has one realm class: kmpc_harness.realm.Realm (the patched
  KDC alone) and its kmpc form kmpc_harness.kmpc_realm.KmpcRealm; no other
  class named *Realm or derived from one, but the two in NOT_A_REALM.
- The KDC module's layers: kdc-plugin/README.md's "Layers" table, read
  here, puts every file of kdc-plugin/src in a layer (a source in its
  header's), and no file includes a header of kdc-plugin/src of a higher
  layer than its own.

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
TREES = ("mpc-server/src", "mpc-server/admin", "mpc-server/client", "mpc-server/tools",
         "integration-tests/storm", "kdc-plugin/src", "kdc-plugin/dealer", "kdc-plugin/tools",
         "proto")
SOURCE_EXTS = (".c", ".cc", ".h", ".inc")
UNIT_EXTS = (".c", ".cc")
COMPONENTS = ("mpc-server", "kdc-plugin")
KRB5_SRC = os.environ.get("KMPC_KRB5_SRC", os.path.join(BUILD, "krb5-src"))

# Logic files that are part of another source's unit: {path: (the test
# file that covers them, why they have no test of their own)}.
PART_OF = {
    "kdc-plugin/src/kdcmpc_c.cc": (
        "module_test.cc", "module.cc's conversions of the kdcmpc C structures "
        "(jobs, exchange plans, statuses as krb5 codes), reached only through "
        "the C interface: module_test.cc's refusals at submit (malformed jobs, "
        "enctypes, aes*-cts outside a plan) and kmpc_kdc_test.cc's plans"),
    "kdc-plugin/src/dispatcher_next.cc": (
        "dispatcher_test.cc", "the dispatcher's choice of its next batch "
        "(Dispatcher::NextRun, NextDeep, NextSign, NextFinalizeOnly, TakeUnits), "
        "one class with dispatcher.cc; dispatcher_test.cc drives the flush rules "
        "(windows, early flush, holds, deep groups, whole units, the cts shape "
        "bound) through Submit against a fake cluster"),
    "mpc-server/src/cts/masked_compile.cc": (
        "masked_test.cc", "the compile of cts/masked.h: a compiled program is "
        "checked by running it (masked_eval.cc) on three parties against the "
        "clear engine, and by the flips its message layout names"),
    "mpc-server/src/cts/masked_eval.cc": (
        "masked_test.cc", "the run of cts/masked.h, tested with its compile "
        "(masked_compile.cc): SHA-1, AES-256 and an adder against the clear "
        "engine, shared messages, and a cheating party caught"),
    "mpc-server/src/cts/masked_run.h": (
        "masked_lane0_test.cc", "the job state and message that the run's two "
        "walks (masked_eval.cc, masked_lane0.cc) share; masked_lane0_test.cc "
        "runs a one-lane job on both and compares every message"),
    "mpc-server/src/aes/circuit.h": (
        "aes_test.cc", "the AES circuit, written once over an abstract AND "
        "engine and compiled into each ISA kernel of aes.cc; aes_test.cc runs "
        "it on every kernel (AVX2 and native) against FIPS-197"),
    "mpc-server/src/aes/sbox3.inc": (
        "aes_test.cc", "the depth-3 S-box's layers, generated by "
        "tools/sbox3_gen.py (which checks them on all 256 inputs) and included "
        "into circuit.h's AesProgram; aes_test.cc runs them on every kernel "
        "against FIPS-197 and OpenSSL"),
    "mpc-server/src/aes/kernel_impl.inc": (
        "aes_test.cc", "aes.cc's kernel body, compiled once per ISA "
        "(kernel_avx2.cc, kernel_avx512.cc); aes_test.cc runs each kernel"),
    "mpc-server/src/service/ring.h": (
        "scheduler_test.cc", "the scheduler's ring interface; its default "
        "SpinBatch (a no-op hint) is what the in-memory scheduler ring runs "
        "in scheduler_test.cc"),
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
REALM_CLASSES = {"kmpc_harness/realm.py:Realm", "kmpc_harness/kmpc_realm.py:KmpcRealm"}


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


# Folders of C/C++ that are test code (the 80-line rule is for what ships).
TEST_TREES = ("mpc-server/test", "kdc-plugin/test", "krb5-patches/tests")


def source_dirs_outside(root, trees, test_trees=TEST_TREES):
    """Folders (relative to root) with C/C++ sources tracked by git that are
    in neither trees nor test_trees: kmpc code the length rule misses."""
    out = subprocess.run(["git", "-C", root, "ls-files", "--cached", "--others",
                          "--exclude-standard"],
                         capture_output=True, text=True, check=True).stdout
    inside = lambda d, ts: any(d == t or d.startswith(t + "/") for t in ts)
    return sorted({os.path.dirname(p) for p in out.split()
                   if p.endswith(SOURCE_EXTS) and not p.startswith("build/")
                   and not inside(os.path.dirname(p), tuple(trees) + tuple(test_trees))})


def test_length_rule_covers_every_source_folder():
    missing = source_dirs_outside(ROOT, TREES)
    assert not missing, ("C/C++ folders outside TREES and TEST_TREES (add them to "
                         "one):\n" + "\n".join(missing))


def test_folder_check_reports_an_uncovered_folder(tmp_path):
    for f in ("a/src/x.cc", "a/src/sub/y.h", "a/test/x_test.cc", "b/tool.c", "b/notes.md"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert source_dirs_outside(str(tmp_path), ["a/src"], ["a/test"]) == ["b"]
    assert source_dirs_outside(str(tmp_path), ["a/src", "b"], ["a/test"]) == []


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


# ---- both components of a tag: test code only --------------------------------

BOTH_COMPONENTS_HELPER = "mpc-server/test/core/finalize_testing.h"
BOTH_COMPONENTS_NAMES = re.compile(r"\bFinalizeBothComponents\b|finalize_testing\.h")
# A function named Finalize whose first parameter is an ENCRYPT state.
FINALIZE_OVER_STATE = re.compile(
    r"\bFinalize\s*\(\s*const\s+(?:(?:kmpc::)?engine::)?EncryptState\b")


def both_components_offences(root):
    """'file:line: why' for every server or KDC source that names the
    test-only both-components helper or declares a Finalize over a state."""
    found = []
    for path in source_files(root, TREES):
        rel = os.path.relpath(path, root)
        for n, line in enumerate(_read(path).splitlines(), 1):
            if BOTH_COMPONENTS_NAMES.search(line):
                found.append(f"{rel}:{n}: names the test-only both-components helper")
            if FINALIZE_OVER_STATE.search(line):
                found.append(f"{rel}:{n}: a Finalize over an EncryptState "
                             "(both components; FinalizeShare answers one)")
    if not os.path.exists(os.path.join(root, BOTH_COMPONENTS_HELPER)):
        found.append(f"{BOTH_COMPONENTS_HELPER}: gone (tests compute both components there)")
    return found


def test_no_source_answers_both_components_of_a_tag():
    found = both_components_offences(ROOT)
    assert not found, "\n".join(found)


def test_both_components_check_catches_a_server_path(tmp_path):
    (tmp_path / "mpc-server" / "test" / "core").mkdir(parents=True)
    (tmp_path / "mpc-server" / "src" / "engine").mkdir(parents=True)
    (tmp_path / "kdc-plugin" / "src").mkdir(parents=True)
    assert both_components_offences(str(tmp_path)) == [
        f"{BOTH_COMPONENTS_HELPER}: gone (tests compute both components there)"]
    (tmp_path / BOTH_COMPONENTS_HELPER).write_text("FinalizeBothComponents\n")
    (tmp_path / "mpc-server" / "src" / "engine" / "engine.h").write_text(
        "absl::Status FinalizeShare(const EncryptState& state);\n"
        "absl::StatusOr<JobResult> Finalize(const EncryptState& state,\n")
    (tmp_path / "mpc-server" / "src" / "engine" / "x.cc").write_text(
        "  grpc::Status Finalize(grpc::ServerContext* ctx,\n"
        "  auto r = Finalize( const engine::EncryptState& s);\n")
    (tmp_path / "kdc-plugin" / "src" / "y.cc").write_text(
        '#include "../../mpc-server/test/core/finalize_testing.h"\n'
        "  auto t = testing::FinalizeBothComponents(s, 2, c);\n")
    assert both_components_offences(str(tmp_path)) == [
        "kdc-plugin/src/y.cc:1: names the test-only both-components helper",
        "kdc-plugin/src/y.cc:2: names the test-only both-components helper",
        "mpc-server/src/engine/engine.h:2: a Finalize over an EncryptState "
        "(both components; FinalizeShare answers one)",
        "mpc-server/src/engine/x.cc:2: a Finalize over an EncryptState "
        "(both components; FinalizeShare answers one)"]


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


# ---- the KDC module's files and classes stay small ---------------------------
# A newcomer should not have to live in a 1,300-line file or a class of 50
# public methods (the module's step classes were split for this).
KDC_FILE_LINES = 850
KDC_CLASS_PUBLIC_METHODS = 26


def _strip_cxx_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def public_methods(text):
    """{class or struct name: public member functions declared or defined
    at its top level} of C++ source text (a heuristic: a declaration with a
    parameter list in a public section; deleted functions, using and
    friend declarations not counted)."""
    text = _strip_cxx_comments(text)
    out = {}
    for m in re.finditer(r"\b(class|struct)\s+(\w+)(\s+final)?\s*(:[^{;]*)?\{", text):
        access = "public" if m.group(1) == "struct" else "private"
        i, depth, n, stmt = m.end(), 1, 0, ""
        while i < len(text) and depth > 0:
            c = text[i]
            if c == "{":
                if depth == 1 and access == "public" and re.search(r"\w\s*\(", stmt):
                    n += 1
                stmt = "" if depth == 1 else stmt
                depth += 1
            elif c == "}":
                depth -= 1
                stmt = ""
            elif depth == 1 and c == ";":
                s = stmt.strip()
                if (access == "public" and re.search(r"\w\s*\(", s)
                        and not re.match(r"(using|typedef|friend|static_assert)\b", s)
                        and not re.search(r"=\s*delete$", s)):
                    n += 1
                stmt = ""
            elif depth == 1:
                stmt += c
                a = re.search(r"(?<!:)\b(public|private|protected)\s*:(?!:)\s*$", stmt)
                if a:
                    access, stmt = a.group(1), ""
            i += 1
        out[m.group(2)] = max(n, out.get(m.group(2), 0))
    return out


def kdc_size_offences(root):
    found = []
    for path in source_files(root, ["kdc-plugin/src"]):
        rel = os.path.relpath(path, root)
        text = _read(path)
        lines = text.count("\n")
        if lines > KDC_FILE_LINES:
            found.append(f"{rel}: {lines} lines (at most {KDC_FILE_LINES})")
        for name, n in public_methods(text).items():
            if n > KDC_CLASS_PUBLIC_METHODS:
                found.append(f"{rel}: class {name} has {n} public methods "
                             f"(at most {KDC_CLASS_PUBLIC_METHODS})")
    return found


def test_kdc_module_files_and_classes_are_small():
    assert kdc_size_offences(ROOT) == []


def test_kdc_size_check_catches_a_big_file_and_a_wide_class(tmp_path):
    src = tmp_path / "kdc-plugin" / "src"
    src.mkdir(parents=True)
    methods = "".join(f"  int M{i}(int x) const;\n" for i in range(30))
    (src / "wide.h").write_text(
        "class Wide {\n public:\n  Wide() = default;\n  Wide(const Wide&) = delete;\n"
        f"{methods}  void Inline() {{ if (true) {{ }} }}\n private:\n"
        "  int Hidden(int);\n};\n")
    (src / "narrow.h").write_text(
        "class Narrow {\n public:\n  void A();\n  void B() { }\n"
        " private:\n  void C();\n};\n")
    (src / "big.cc").write_text("int x;\n" * (KDC_FILE_LINES + 1))
    assert public_methods((src / "wide.h").read_text()) == {"Wide": 32}
    assert public_methods((src / "narrow.h").read_text()) == {"Narrow": 2}
    found = kdc_size_offences(str(tmp_path))
    assert len(found) == 2, found
    assert any("big.cc" in f for f in found) and any("class Wide has 32" in f for f in found)


def harness_bench_imports(harness_dir):
    """Imports of a benchmark module (integration-tests/bench/) by the test
    harness: the benchmarks build on the harness, never the reverse."""
    import ast
    found = []
    for name in sorted(os.listdir(harness_dir)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(harness_dir, name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{name}: imports {m}" for m in mods
                      if m == "bench" or m.startswith("bench.")]
    return found


def test_harness_imports_no_bench_module():
    found = harness_bench_imports(os.path.join(ROOT, "integration-tests", "kmpc_harness"))
    assert not found, "\n".join(found)


def test_harness_import_check_catches_a_bench_import(tmp_path):
    (tmp_path / "a.py").write_text("def f():\n    from bench import storm_bench\n")
    (tmp_path / "b.py").write_text("import bench.cts_bench as c\nimport benchmark\n")
    (tmp_path / "c.py").write_text("from kmpc_harness import storm_users\n")
    assert harness_bench_imports(str(tmp_path)) == [
        "a.py: imports bench", "b.py: imports bench.cts_bench"]


# ---- the KDC module's layers -------------------------------------------------
# kdc-plugin/README.md's "Layers" table is the one statement of the order:
# this check reads it, so the doc and the check cannot drift apart.
KDC_SRC = "kdc-plugin/src"
KDC_README = "kdc-plugin/README.md"
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def kdc_layers(readme_text):
    """{file name: layer} from the '## Layers' section's table, whose rows
    are `| N | what | \\`a.h\\`, \\`b.cc\\` |`, numbered 1, 2, ... from the
    lowest layer up. ValueError on a table missing, misnumbered, or naming
    a file twice."""
    m = re.search(r"^## Layers\n(.*?)(?=^## |\Z)", readme_text, re.M | re.S)
    if not m:
        raise ValueError('no "## Layers" section')
    layers, number = {}, 0
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or not cells[0].isdigit():
            continue
        number += 1
        if int(cells[0]) != number:
            raise ValueError(f"layer {cells[0]} where layer {number} was due")
        for name in re.findall(r"`([^`]+)`", cells[-1]):
            if name in layers:
                raise ValueError(f"{name} is in layers {layers[name]} and {number}")
            layers[name] = number
    if not layers:
        raise ValueError('the "Layers" section has no table of layers')
    return layers


def layer_offences(root, src=KDC_SRC, readme=KDC_README):
    """'file:line: why' for every file of root/src in no layer of root/readme's
    table, every quoted include of a header of src from a higher layer, and
    every name of the table that is no file of src. A source (.cc, .c) is in
    the layer of its header of the same name; one without is listed itself."""
    try:
        layers = kdc_layers(_read(os.path.join(root, readme)))
    except ValueError as e:
        return [f"{readme}: {e}"]
    files = [os.path.relpath(p, os.path.join(root, src))
             for p in source_files(root, [src])]
    found = []

    def layer_of(name):
        stem, ext = os.path.splitext(name)
        own_header = ext != ".h" and stem + ".h" in files
        return layers.get(stem + ".h") if own_header else layers.get(name)

    for name in files:
        stem, ext = os.path.splitext(name)
        if ext != ".h" and stem + ".h" in files and name in layers:
            found.append(f"{readme}: {name} is listed apart from its header {stem}.h")
        own = layer_of(name)
        if own is None:
            found.append(f"{src}/{name}: in no layer ({readme}, \"Layers\")")
            continue
        here = os.path.dirname(name)
        for n, line in enumerate(_read(os.path.join(root, src, name)).splitlines(), 1):
            m = LOCAL_INCLUDE.match(line)
            if not m:
                continue
            inc = next((c for c in (os.path.normpath(os.path.join(here, m.group(1))),
                                    m.group(1)) if c in files), None)
            if inc is None:
                continue        # not a header of src (proto/, mpc-server/, ...)
            theirs = layer_of(inc)
            if theirs is not None and theirs > own:
                found.append(f"{src}/{name}:{n}: includes {inc} (layer {theirs}) "
                             f"from layer {own}")
    found += [f"{readme}: \"Layers\" names {name}, which is no file of {src}"
              for name in sorted(set(layers) - set(files))]
    return found


def test_kdc_module_includes_follow_its_layers():
    layers = kdc_layers(_read(os.path.join(ROOT, KDC_README)))
    # The order the table states, where it matters most: the step base
    # under the step kinds, the kinds under what starts them and the host.
    assert (layers["batcher.h"] < layers["batch_step.h"] < layers["finalize_step.h"]
            < layers["run_step.h"] < layers["sign_step.h"] < layers["start_step.h"]
            < layers["dispatcher.h"] < layers["batcher_thread.h"]), layers
    found = layer_offences(ROOT)
    assert not found, "\n".join(found)


def test_layer_check_catches_an_upward_include(tmp_path):
    src = tmp_path / "kdc-plugin" / "src"
    src.mkdir(parents=True)
    (tmp_path / "kdc-plugin" / "README.md").write_text(
        "# m\n\n## Layers\n\n| layer | what | files |\n|---|---|---|\n"
        "| 1 | the base (`Base`) | `low.h` |\n| 2 | above it | `high.h`, `main.cc`, `gone.h` |\n"
        "\n## Next\n\n| 3 | not a layer | `orphan.h` |\n")
    (src / "low.h").write_text('#include "contract.h"\n')
    (src / "low.cc").write_text('#include "low.h"\n\n#include "high.h"\n')
    (src / "high.h").write_text('#include "low.h"\n')
    (src / "high.cc").write_text('#include "high.h"\n#include "low.h"\n')
    (src / "main.cc").write_text('#include "high.h"\n#include <vector>\n')
    (src / "orphan.h").write_text('#include "high.h"\n')
    assert layer_offences(str(tmp_path)) == [
        "kdc-plugin/src/low.cc:3: includes high.h (layer 2) from layer 1",
        'kdc-plugin/src/orphan.h: in no layer (kdc-plugin/README.md, "Layers")',
        'kdc-plugin/README.md: "Layers" names gone.h, which is no file of kdc-plugin/src']
    # A source is in its header's layer, never listed apart from it.
    (tmp_path / "kdc-plugin" / "README.md").write_text(
        "## Layers\n\n| 1 | base | `low.h`, `orphan.h` |\n| 2 | above | `high.h`, `high.cc`, "
        "`main.cc` |\n")
    (src / "low.cc").write_text('#include "low.h"\n')
    assert layer_offences(str(tmp_path)) == [
        "kdc-plugin/README.md: high.cc is listed apart from its header high.h",
        "kdc-plugin/src/orphan.h:1: includes high.h (layer 2) from layer 1"]


def test_layer_table_is_numbered_from_the_bottom_once_each():
    table = "## Layers\n\n| 1 | a | `a.h` |\n| {} | b | `{}` |\n"
    assert kdc_layers(table.format(2, "b.h")) == {"a.h": 1, "b.h": 2}
    with pytest.raises(ValueError, match="layer 3 where layer 2 was due"):
        kdc_layers(table.format(3, "b.h"))
    with pytest.raises(ValueError, match="a.h is in layers 1 and 2"):
        kdc_layers(table.format(2, "a.h"))
    with pytest.raises(ValueError, match="no .## Layers. section"):
        kdc_layers("## Other\n\n| 1 | a | `a.h` |\n")


# ---- no source file near the length limit ------------------------------------

# Design rule: no non-test source file of the servers, the KDC module or
# proto/ is over FILE_HARD_LIMIT (1,000) lines, and none is over
# FILE_HEADROOM (850): a file that grows near the limit is split along its
# design (one service, one phase, one prover step per file), never trimmed
# to pass (a shortened comment, joined lines). The headroom is what lets
# the next change land without a split under pressure.
FILE_HARD_LIMIT = 1000
FILE_HEADROOM = 850
FILE_TREES = ("mpc-server", "kdc-plugin", "proto")


def long_source_files(root, trees=FILE_TREES, limit=FILE_HEADROOM):
    """'file: N lines' for every non-test C++ source (.cc or .h: not a
    *_test.cc, not under a test/ folder) of trees over limit lines."""
    found = []
    for tree in trees:
        for path in source_files(root, [tree], exts=(".cc", ".h")):
            rel = os.path.relpath(path, root)
            if rel.endswith("_test.cc") or "test" in rel.split(os.sep)[:-1]:
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                n = sum(1 for _ in f)
            if n > limit:
                found.append(f"{rel}: {n} lines")
    return found


# Files over a limit whose split along the seam named is not done yet,
# with their length when listed: such a file may not grow, and it leaves
# this list (the test says so) once it is split. Nothing is added here: a
# new file over a limit fails.
SPLIT_PENDING = {
}


def over_limit(root, limit, pending=SPLIT_PENDING):
    """Offences against limit: files over it that SPLIT_PENDING does not
    name, or that grew past their listed length; and listed files that are
    no longer over the headroom (done: drop them from the list)."""
    found = []
    over = {}
    for line in long_source_files(root, limit=limit):
        rel, n = line.rsplit(": ", 1)
        over[rel] = int(n.split()[0])
    for rel, n in sorted(over.items()):
        if rel not in pending:
            found.append(f"{rel}: {n} lines")
        elif n > pending[rel][0]:
            found.append(f"{rel}: {n} lines, grew past the {pending[rel][0]} listed "
                         f"(split it: {pending[rel][1]})")
    if limit == FILE_HEADROOM:
        found += [f"{rel}: no longer over {FILE_HEADROOM} lines: drop it from SPLIT_PENDING"
                  for rel in sorted(pending) if rel not in over]
    return found


def test_no_source_file_over_the_hard_limit():
    """RULE: at most FILE_HARD_LIMIT (1,000) lines per source file."""
    assert over_limit(ROOT, FILE_HARD_LIMIT) == []


def test_no_source_file_over_the_headroom():
    """RULE: at most FILE_HEADROOM (850) lines: a file near the limit is
    split along its design, not trimmed."""
    assert over_limit(ROOT, FILE_HEADROOM) == [], (
        f"over {FILE_HEADROOM} lines (split along the file's design):")


def test_pending_splits_neither_grow_nor_stay_listed(tmp_path):
    (tmp_path / "mpc-server" / "src").mkdir(parents=True)
    line = "int x;\n"
    (tmp_path / "mpc-server" / "src" / "big.cc").write_text(line * 950)
    (tmp_path / "mpc-server" / "src" / "grown.cc").write_text(line * 1200)
    (tmp_path / "mpc-server" / "src" / "split.cc").write_text(line * 400)
    pending = {"mpc-server/src/big.cc": (951, "x"), "mpc-server/src/grown.cc": (1100, "y"),
               "mpc-server/src/split.cc": (900, "z")}
    assert over_limit(str(tmp_path), FILE_HEADROOM, pending) == [
        "mpc-server/src/grown.cc: 1200 lines, grew past the 1100 listed (split it: y)",
        f"mpc-server/src/split.cc: no longer over {FILE_HEADROOM} lines: drop it from "
        "SPLIT_PENDING"]
    assert over_limit(str(tmp_path), FILE_HARD_LIMIT, pending) == [
        "mpc-server/src/grown.cc: 1200 lines, grew past the 1100 listed (split it: y)"]
    assert over_limit(str(tmp_path), FILE_HEADROOM, {}) == [
        "mpc-server/src/big.cc: 950 lines", "mpc-server/src/grown.cc: 1200 lines"]


def test_file_length_check_catches_a_long_source(tmp_path):
    for tree in FILE_TREES:
        (tmp_path / tree / "src").mkdir(parents=True)
        (tmp_path / tree / "test").mkdir()
    line = "int x;\n"
    (tmp_path / "mpc-server" / "src" / "big.cc").write_text(line * (FILE_HEADROOM + 1))
    (tmp_path / "mpc-server" / "src" / "huge.h").write_text(line * (FILE_HARD_LIMIT + 1))
    (tmp_path / "proto" / "src" / "at_limit.cc").write_text(line * FILE_HEADROOM)
    (tmp_path / "kdc-plugin" / "src" / "big_test.cc").write_text(line * 2000)
    (tmp_path / "kdc-plugin" / "test" / "fixture.h").write_text(line * 2000)
    assert long_source_files(str(tmp_path)) == [
        f"mpc-server/src/big.cc: {FILE_HEADROOM + 1} lines",
        f"mpc-server/src/huge.h: {FILE_HARD_LIMIT + 1} lines"]
    assert long_source_files(str(tmp_path), limit=FILE_HARD_LIMIT) == [
        f"mpc-server/src/huge.h: {FILE_HARD_LIMIT + 1} lines"]
