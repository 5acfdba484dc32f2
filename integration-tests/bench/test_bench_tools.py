"""The bench tools' choice of binaries and their checks of their arguments:
storm_bench.find_storm takes kmpc-storm from $KMPC_CMAKE_BUILD as the rest
of the harness takes its binaries (cluster.find_built), and kdc_cpu_ab's
label=DIR / label=FILE.so arguments are checked with an error naming what
is wrong. No realm, no storm: well under a second."""
import os
import re
import stat
import subprocess
import sys
import time

import pytest

from bench import kdc_cpu_ab, storm_bench
from kmpc_harness import storm_users

T0 = time.monotonic()


def executable(path, age_s=0):
    """An executable file at path, modified age_s seconds ago."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexit 0\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """A build/ with a newer kmpc-storm in one cmake tree and an older one
    in another (own), the environment naming neither."""
    build = tmp_path / "build"
    newest = executable(str(build / "cmake" / "mpc-server" / "kmpc-storm"))
    own = executable(str(build / "cmake-own" / "mpc-server" / "kmpc-storm"), age_s=3600)
    monkeypatch.setattr(storm_users, "BUILD", str(build))
    monkeypatch.delenv("KMPC_STORM", raising=False)
    monkeypatch.delenv("KMPC_CMAKE_BUILD", raising=False)
    return newest, own


def test_find_storm_prefers_kmpc_cmake_build(builds, monkeypatch):
    newest, own = builds
    assert storm_bench.find_storm() == newest
    monkeypatch.setenv("KMPC_CMAKE_BUILD", os.path.dirname(os.path.dirname(own)))
    assert storm_bench.find_storm() == own
    monkeypatch.setenv("KMPC_STORM", "/opt/other/kmpc-storm")
    assert storm_bench.find_storm() == "/opt/other/kmpc-storm"


def test_find_storm_falls_back_when_that_build_has_none(builds, tmp_path, monkeypatch):
    newest, _ = builds
    monkeypatch.setenv("KMPC_CMAKE_BUILD", str(tmp_path / "empty-build"))
    assert storm_bench.find_storm() == newest
    os.remove(newest)
    os.remove(builds[1])
    with pytest.raises(storm_bench.kmpc_realm.RealmError, match="kmpc-storm is not built"):
        storm_bench.find_storm()


@pytest.fixture
def cmake_tree(tmp_path):
    """A cmake build directory holding the kdcmpc module, and a module file."""
    tree = tmp_path / "cmake"
    module = tree / "kdc-plugin" / "libkmpc_kdc.so"
    module.parent.mkdir(parents=True)
    module.write_bytes(b"\x7fELF")
    return tree, module


def test_kdc_cpu_ab_accepts_a_build_dir_or_a_module(cmake_tree):
    tree, module = cmake_tree
    assert kdc_cpu_ab.parse_build(f"after={tree}") == ("after", str(tree), "")
    assert kdc_cpu_ab.parse_build(f"m={module}") == ("m", str(module), "")


@pytest.mark.parametrize("spec, says", [
    ("{tmp}/missing.so", "expected label=DIR"),
    ("x={tmp}/missing.so", "module {tmp}/missing.so does not exist"),
    ("x={tmp}", "not a kmpc cmake build: no kdc-plugin/libkmpc_kdc.so"),
    ("x={tmp}/nothing", "neither a cmake build directory nor a kdcmpc module"),
    ("x={tmp}/cmake@{tmp}", "no sbin/krb5kdc under"),
])
def test_kdc_cpu_ab_says_what_is_wrong(cmake_tree, tmp_path, spec, says):
    spec, says = (s.format(tmp=tmp_path) for s in (spec, says))
    with pytest.raises(ValueError, match=re.escape(says)):
        kdc_cpu_ab.parse_build(spec)


def test_kdc_cpu_ab_command_line_error(tmp_path):
    """The tool exits 2 (argparse) with the reason, before any realm."""
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kdc_cpu_ab.py")
    p = subprocess.run([sys.executable, tool, f"a={tmp_path}/lib.so"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert f"module {tmp_path}/lib.so does not exist" in p.stderr
    print(f"bench tools' tests: {time.monotonic() - T0:.1f} s")


def test_cts_bench_module_options_are_name_value_pairs():
    from bench import cts_bench
    assert cts_bench.parse_module_options(["max_inflight=1", " batch_window_ms = 400 "]) == {
        "max_inflight": "1", "batch_window_ms": "400"}
    assert cts_bench.parse_module_options([]) == {}
    for bad in ("max_inflight", "=1"):
        with pytest.raises(SystemExit, match="NAME=VALUE"):
            cts_bench.parse_module_options([bad])


def test_tgs_bench_clients_and_per_tgs_figures():
    """tgs_bench: clients spread over the name lengths; a block's counters
    become Runs, rounds and CPU per TGS (the servers' largest Run count,
    their disagreement noted)."""
    from bench import tgs_bench
    names = [f"{'x' * n}" for n in range(2, 41)]
    picked = tgs_bench.pick_clients(names, 4)
    assert [len(n) for n in picked] == [2, 15, 27, 40]
    assert tgs_bench.pick_clients(names[:3], 8) == names[:3]
    t = tgs_bench.Totals()
    kdc = lambda ex, runs: {("kmpc_kdc_exchanges_total", "tgs", "ok"): ex,  # noqa: E731
                            ("kmpc_kdc_exchange_runs_total", "tgs", "ok"): runs}
    mpc = lambda runs: {i: {"kmpc_batches_run_ok_total": runs[i]} for i in range(3)}  # noqa: E731
    cts = lambda r: [{"kmpc_cts_ands_total": 10 * r, "kmpc_cts_and_rounds_total": r}  # noqa: E731
                     for _ in range(3)]
    t.block({"kdc": kdc(5, 5), "mpc": mpc([7, 7, 7]), "cts": cts(0)},
            {"kdc": kdc(15, 15), "mpc": mpc([27, 27, 27]), "cts": cts(100)},
            {"mpc-server-0": 1.0}, {"mpc-server-0": 1.2})
    p = tgs_bench.per_tgs(t)
    assert p["runs_per_tgs"] == 2 and p["module_runs_per_tgs"] == 1
    assert p["and_rounds_per_tgs"] == 10 and p["ands_per_tgs"] == 100
    assert p["cpu_ms_per_tgs"] == {"mpc-server-0": 20.0}
    assert p["servers_disagreed_on_runs"] == 0
    t.block({"kdc": kdc(0, 0), "mpc": mpc([0, 0, 0]), "cts": None},
            {"kdc": kdc(10, 10), "mpc": mpc([20, 21, 20]), "cts": None},
            {"mpc-server-0": 0.0}, {"mpc-server-0": 0.0})
    p = tgs_bench.per_tgs(t)
    assert p["server_runs"] == 41 and p["servers_disagreed_on_runs"] == 1
    assert tgs_bench.per_tgs(tgs_bench.Totals()) == {"tgs_exchanges": 0}


def test_pkinit_bench_runs_and_results_rows(capsys):
    """pkinit_bench: the module's per-login counts become Runs per login,
    their distribution and whether each was expected; bench_results reads
    pkinit.json into its "pkinit" section and prints a row per side."""
    from bench import bench_results, pkinit_bench
    per = [{"exchanges": 3, "runs": 3}] * 3 + [{"exchanges": 3, "runs": 4}]
    sec = pkinit_bench.runs_section("armored_password", per)
    assert sec["runs_per_login"] == 3.25 and sec["runs_distribution"] == {"3": 3, "4": 1}
    assert sec["exchanges_per_login"] == {"3": 4} and sec["as_expected"]
    assert not pkinit_bench.runs_section("certificate", per)["as_expected"]
    assert pkinit_bench.runs_section("anonymous", []) is None
    side = {"n": 4, "p50_ms": 10.0, "p99_ms": 12.0, "min_ms": 9.0, "max_ms": 12.0, "failed": 0}
    pk = {"logins": 4, "servers": "malicious",
          "kinds": {"armored_password": {"stock": side, "kmpc": dict(side, p50_ms=30.0),
                                         "ratio_p50": 3.0, "kmpc_runs": sec,
                                         "cold": {"stock": {"ms": 20.0}}}}}
    res = {"pkinit": bench_results.pkinit_side(pk)}
    row = res["pkinit"]["kinds"]["armored_password"]
    assert row["kmpc"]["p50_ms"] == 30.0 and row["kmpc_runs_per_login"] == 3.25
    bench_results.print_pkinit(res)
    out = capsys.readouterr().out
    assert "password, anonymous armor (kinit -T)" in out and "3.00x stock's p50" in out
    bench_results.print_pkinit({"pkinit": bench_results.pkinit_side({"error": "boom"})})
    assert "failed: boom" in capsys.readouterr().out
