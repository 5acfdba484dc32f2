"""The bench tools' choice of binaries and their checks of their arguments:
storm_bench.find_storm takes kmpc-storm from $KMPC_CMAKE_BUILD as the rest
of the harness takes its binaries (cluster.find_built), and kdc_cpu_ab's
label=DIR / label=FILE.so arguments are checked with an error naming what
is wrong; both ring relays (ring_relay.py and the C++ kmpc-ring-relay,
which fails its case where a build tree lacks it) pass the same test. No
realm, no storm: about a second."""
import contextlib
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


def snapshots(per_login, logins, base=1000):
    """Two mpc_metrics()-shaped snapshots `logins` logins apart: party i
    sent per_login[i] bytes and 40 messages a login, ran 1 Run a login,
    spun in 20 receive waits a login of which 5 ran out."""
    m0 = {i: {"kmpc_ring_bytes_sent_total": base, "kmpc_ring_messages_sent_total": base,
              "kmpc_batches_run_ok_total": 7} for i in range(3)}
    m1 = {i: {"kmpc_ring_bytes_sent_total": base + per_login[i] * logins,
              "kmpc_ring_messages_sent_total": base + 40 * logins,
              "kmpc_batches_run_ok_total": 7 + logins,
              "kmpc_cts_and_rounds_total": 30 * logins,
              "kmpc_ring_spinning_waits_total": 20 * logins,
              "kmpc_ring_spins_ran_out_total": 5 * logins} for i in range(3)}
    return m0, m1


def test_ring_cost_bytes_per_login_per_server(capsys):
    """ring_cost: each server's ring bytes per login between two readings
    of its counters; cts_bench's ring_per_login into results.json and the
    table (bench_results)."""
    from bench import bench_results, ring_cost
    m0, m1 = snapshots([205000, 205010, 204990], 10)
    srv = ring_cost.per_server(m0, m1, 10)
    assert srv["mpc-server-1"] == {"ring_bytes_per_login": 205010.0,
                                   "ring_messages_per_login": 40.0,
                                   "and_rounds_per_login": 30.0, "ands_per_login": 0.0,
                                   "runs_per_login": 1.0, "spinning_waits_per_login": 20.0,
                                   "waits_slept_first_per_login": 0.0,
                                   "spins_ran_out_per_login": 5.0,
                                   "waits_spun_through_per_login": 0.0}
    assert ring_cost.bytes_row(srv) == {
        "by_server": {"mpc-server-0": 205000.0, "mpc-server-1": 205010.0,
                      "mpc-server-2": 204990.0}, "mean": 205000.0, "spread": 20.0}
    assert ring_cost.per_server(m0, {0: m1[0], 1: m1[1]}, 10) is None
    assert ring_cost.per_server(m0, m1, 0) is None
    k0, k1 = snapshots([65000] * 3, 10)
    rp = {"logins": 10, "cts": srv, "kdb": ring_cost.per_server(k0, k1, 10),
          "cts_failed": 0, "kdb_failed": 1,
          "cpu_ms": {"cts": {"krb5kdc": 2.5, "mpc-server-0": 61.0, "mpc-server-1": 62.5,
                             "mpc-server-2": 60.25}}}
    cts = {"when": "t", "modes": {"malicious": {"one_client": {"ring_per_login": rp}}}}
    row = bench_results.cts_side(cts)["modes"]["malicious"]["ring_per_login"]
    assert row["cts"]["bytes"]["mean"] == 205000.0 and row["kdb"]["failed"] == 1
    assert row["kdb"]["ring_messages_per_login"] == 40.0
    assert row["cts"]["cpu_ms_per_login"]["mpc-server-1"] == 62.5
    assert row["kdb"]["cpu_ms_per_login"] is None
    assert ring_cost.login_line(row) == (
        "ring per login, each server (10 logins a user): aes256-cts user "
        "205,000 / 205,010 / 204,990 bytes (servers 0 / 1 / 2), 40 messages, "
        "61.0 / 62.5 / 60.2 ms of CPU; krbtgt-only 65,000 / 65,000 / 65,000 bytes "
        "(servers 0 / 1 / 2), 40 messages")


def delay_point(label, via, delay_ms, cts_ms, kdb_ms, rounds=(4400, 77), lateness=None):
    side = lambda ms, r: {  # noqa: E731
        "p50_ms": ms, "failed": 0,
        "servers": {f"mpc-server-{i}": {"ring_messages_per_login": r} for i in range(3)}}
    return {"label": label, "via": via, "delay_ms": delay_ms,
            "cts": side(cts_ms, rounds[0]), "kdb": side(kdb_ms, rounds[1]),
            "relay": lateness and [{"lateness": {"p50_us": x}} for x in lateness]}


def test_ring_delay_summary_against_rounds_times_delay():
    """ring_cost.delay_summary: each delay's added p50 over the relay's
    0 ms control against rounds x delay, the relay's cost against the
    servers dialling directly, the drift of the last 0 ms point; the
    results section and its lines (bench_results)."""
    from bench import bench_results, ring_cost
    points = [delay_point("direct", "direct", 0, 100.0, 15.0),
              delay_point("relay 0 ms", "relay", 0, 122.0, 15.5, lateness=[15, 16, 17]),
              delay_point("relay 0.5 ms", "relay", 0.5, 2322.0, 54.0),
              delay_point("relay 2 ms", "relay", 2, 8922.0, 170.0, lateness=[20, 21, 22]),
              delay_point("relay 0 ms again", "relay", 0, 125.0, 15.0)]
    s = ring_cost.delay_summary(points)
    assert s["control"] == "relay 0 ms"
    assert s["relay_overhead"]["cts"] == {"ms_per_login": 22.0, "us_per_round": 5.0}
    assert s["drift_ms"] == {"cts": 3.0, "kdb": -0.5}
    half, two = s["by_delay"]
    assert half["cts"] == {"p50_ms": 2322.0, "failed": 0, "rounds": 4400.0,
                           "predicted_added_ms": 2200.0, "predicted_p50_ms": 2322.0,
                           "added_ms": 2200.0, "ratio": 1.0}
    assert two["cts"]["ratio"] == 1.0 and two["relay_lateness_p50_us"] == [20, 21, 22]
    assert two["kdb"]["predicted_added_ms"] == 154.0 and two["kdb"]["added_ms"] == 154.5
    assert "relay_lateness_p50_us" not in half
    netns = {"ring_delay": {"via": "relay", "logins": 15, "points": points, "summary": s}}
    sec = ring_cost.results_section(netns["ring_delay"])
    assert [p["cts_p50_ms"] for p in sec["points"]] == [100.0, 122.0, 2322.0, 8922.0, 125.0]
    lines = ring_cost.delay_lines(sec)
    assert lines[7].startswith(
        "  2 ms one way: cts +8800.0 ms against 4400 rounds x 2 = +8800.0 ms (1.00x); kdb ")
    assert ring_cost.results_section({"error": "boom"}) == {"error": "boom"}
    # A netem sweep has no direct point and no relay: no overhead row.
    s = ring_cost.delay_summary([p for p in points if p["via"] != "direct"])
    assert "relay_overhead" not in s and len(s["by_delay"]) == 2
    assert ring_cost.delay_summary([points[0]]) == {"control": None, "by_delay": []}
    bench_results.ring_cost.print_delay(sec, lambda line: None)


def relay_argv(impl):
    """The argv of one relay implementation: ring_relay.py, or the C++
    kmpc-ring-relay as ring_delay.py finds it (find_relay: $KMPC_RING_RELAY,
    $KMPC_MPC_BIN_DIR, the build trees). A build tree without it fails the
    C++ case (it is a target of the build); no build tree at all skips it."""
    from bench import ring_delay
    from kmpc_harness import cluster as kmpc_cluster
    if impl == "python":
        return [sys.executable, ring_delay.RELAY]
    binary = ring_delay.find_relay()
    if binary and os.access(binary, os.X_OK):
        return [binary]
    trees = [d for d in [os.environ.get("KMPC_CMAKE_BUILD"), os.environ.get("KMPC_MPC_BIN_DIR"),
                         *kmpc_cluster.cmake_build_dirs()] if d and os.path.isdir(d)]
    if trees or os.environ.get("KMPC_RING_RELAY"):
        pytest.fail(f"kmpc-ring-relay is not built ({binary or 'none'} in {trees}): make "
                    "build, or KMPC_RING_RELAY=PATH")
    pytest.skip("no build tree: kmpc-ring-relay not built")


@contextlib.contextmanager
def running_relay(impl, tmp_path):
    """A relay of implementation impl in front of an echo server, 30 ms one
    way: (address, command(line) on its control socket)."""
    import select
    import socket
    import threading
    argv = relay_argv(impl)
    echo = socket.create_server(("127.0.0.1", 0))

    def serve_echo():
        c, _ = echo.accept()
        with c:
            while data := c.recv(65536):
                c.sendall(data)
    threading.Thread(target=serve_echo, daemon=True).start()
    ctl = str(tmp_path / "ctl.sock")
    p = subprocess.Popen([*argv, "--listen", "127.0.0.1:0", "--to",
                          f"127.0.0.1:{echo.getsockname()[1]}", "--control", ctl,
                          "--delay-ms", "30"], stdout=subprocess.PIPE, text=True)

    def command(line):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(ctl)
            s.sendall(line.encode() + b"\n")
            return s.makefile().readline().strip()
    try:
        ready, _, _ = select.select([p.stdout], [], [], 10)
        line = p.stdout.readline() if ready else ""
        assert line.startswith("listening 127.0.0.1:"), (argv, line)
        yield ("127.0.0.1", int(line.rsplit(":", 1)[1])), command
        p.terminate()  # SIGTERM ends it, the control socket removed
        assert p.wait(timeout=10) == 0 and not os.path.exists(ctl)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        echo.close()


@pytest.mark.parametrize("impl", ["python", "c++"])
def test_ring_relay_delays_both_ways_in_order(impl, tmp_path):
    """Both relays (ring_relay.py, kmpc-ring-relay): every chunk waits the
    configured delay each way, lowering the delay mid-stream keeps the
    order, "stats" reports the chunks with the same fields and resets;
    SIGTERM ends the relay and removes its control socket."""
    with running_relay(impl, tmp_path) as (addr, command):
        check_relay(addr, command)


def check_relay(addr, command):
    import json
    import socket
    totals = {"chunks": 0, "bytes": 0}

    def stats():
        s = json.loads(command("stats"))
        assert set(s) == {"delay_ms", "chunks", "bytes", "connections", "lead_us",
                          "lateness", "read_lag"}, s
        for k in totals:
            totals[k] += s[k]
        return s

    def receive(c, n):
        got = b""
        while len(got) < n:
            got += c.recv(65536)
        return got
    assert command("ping") == "ok"
    with socket.create_connection(addr) as c:
        t0 = time.monotonic()
        c.sendall(b"x")
        assert receive(c, 1) == b"x"
        assert time.monotonic() - t0 >= 0.058  # 30 ms out, 30 ms back
        s = stats()
        assert s["connections"] == 1 and s["delay_ms"] == 30
        assert s["lateness"]["n"] == 2 and set(s["lateness"]) == {
            "n", "p50_us", "p90_us", "p99_us", "max_us"}
        t0 = time.monotonic()
        c.sendall(b"a" * 1000)
        while stats()["read_lag"]["n"] < 1:  # "a" read (and queued)
            assert time.monotonic() - t0 < 5, "the relay did not read \"a\""
            time.sleep(0.001)
        assert command("delay 0") == "ok 0"  # the queued chunk keeps its due time
        c.sendall(b"b" * 1000)
        assert receive(c, 2000) == b"a" * 1000 + b"b" * 1000
        assert 0.025 <= time.monotonic() - t0 < 1.0
    last = stats()
    assert totals["chunks"] >= 4 and totals["bytes"] == 4002 and last["delay_ms"] == 0
    assert stats()["chunks"] == 0
    assert command("delay 0.5") == "ok 0.5" and json.loads(command("stats"))["delay_ms"] == 0.5
    assert command("delay x").startswith("error")
    assert command("nonsense").startswith("error")


def test_ring_delay_picks_the_cpp_relay_where_built(tmp_path, monkeypatch):
    """ring_delay.relay_command: $KMPC_RING_RELAY ("python" forces the
    Python one), else $KMPC_MPC_BIN_DIR's kmpc-ring-relay, else
    $KMPC_CMAKE_BUILD's; ring_relay.py where none is built."""
    from bench import ring_delay
    from kmpc_harness import cluster as kmpc_cluster
    for var in ("KMPC_RING_RELAY", "KMPC_MPC_BIN_DIR", "KMPC_CMAKE_BUILD"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(kmpc_cluster, "BUILD", str(tmp_path / "none"))
    assert ring_delay.relay_command() == ("python", [sys.executable, ring_delay.RELAY])
    built = executable(str(tmp_path / "cmake" / "mpc-server" / "kmpc-ring-relay"))
    monkeypatch.setenv("KMPC_CMAKE_BUILD", str(tmp_path / "cmake"))
    assert ring_delay.relay_command() == ("c++", [built])
    snap = executable(str(tmp_path / "bin" / "kmpc-ring-relay"))
    monkeypatch.setenv("KMPC_MPC_BIN_DIR", os.path.dirname(snap))
    assert ring_delay.relay_command() == ("c++", [snap])
    monkeypatch.setenv("KMPC_RING_RELAY", "python")
    assert ring_delay.relay_command()[0] == "python"
    monkeypatch.setenv("KMPC_RING_RELAY", "/opt/relay")
    assert ring_delay.relay_command() == ("c++", ["/opt/relay"])


def test_tgs_bench_tickets_per_run_and_shape_cuts():
    """tgs_bench: the module's /metrics text into its batch counters, and
    a mix's tickets per server Run and Runs cut at the cts shape bound."""
    from bench import tgs_bench
    text = ("# HELP kmpc_kdc_batches_total batches started\n"
            "kmpc_kdc_batches_total 240\n"
            "kmpc_kdc_cts_shape_cuts_total 6\n"
            'kmpc_kdc_batch_jobs_sum{kind="run"} 2400\n'
            'kmpc_kdc_batch_jobs_count{kind="run"} 120\n'
            'kmpc_kdc_batch_jobs_sum{kind="finalize_only"} 99\n'
            'kmpc_kdc_exchanges_total{exchange="tgs",result="ok"} 500\n'
            'kmpc_kdc_exchanges_total{exchange="as",result="ok"} 700\n'
            'kmpc_kdc_exchanges_total{exchange="as",result="failed"} 3\n')
    k1 = tgs_bench.parse_batch_counters(text)
    assert k1 == {"tickets": 1200.0, "module_steps": 240.0, "cuts": 6.0, "run_jobs": 2400.0,
                  "run_batches": 120.0}
    k0 = {"tickets": 200.0, "module_steps": 40.0, "cuts": 1.0, "run_jobs": 400.0,
          "run_batches": 20.0}
    mpc = lambda runs: {i: {"kmpc_batches_run_ok_total": runs[i]} for i in range(3)}  # noqa: E731
    b = tgs_bench.batch_figures(k0, k1, mpc([5, 5, 5]), mpc([105, 105, 104]))
    assert b == {"tickets": 1000, "module_runs": 100, "module_steps": 200,
                 "module_jobs_per_run": 20.0,
                 "cts_shape_cuts": 5, "cut_fraction": 0.05, "server_runs": 100,
                 "tickets_per_run": 10.0}
    assert tgs_bench.batch_figures(None, k1, None, None) is None
    assert "10.0 tickets per Run" in tgs_bench.batch_line(b)
    cts = lambda runs, masked, compiles: [  # noqa: E731
        {"kmpc_cts_evaluations_total": runs, "kmpc_cts_masked_evaluations_total": masked,
         "kmpc_cts_masked_compiles_total": compiles, "kmpc_cts_masked_drops_total": 1}] * 3
    m = tgs_bench.masked_figures(cts(10, 4, 2), cts(50, 9, 6))
    assert m == {"cts_runs": 40, "masked_runs": 5, "masked_compiles": 12, "masked_drops": 0}
    assert tgs_bench.masked_figures(None, cts(50, 9, 6)) == {}
    assert ("5 of 40 aes*-cts Runs over masked wires, 12 masked compiles and 0 drops"
            in tgs_bench.batch_line({**b, **m}))
