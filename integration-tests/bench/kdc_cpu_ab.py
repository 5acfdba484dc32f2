#!/usr/bin/env python3
"""KDC CPU per login, A/B: stock and one or more kmpc module builds, in
one session, back to back, repeated (the machine is shared: compare the
ratios of one round, not absolutes across rounds). With --mix, the same
for make bench's 16-client login,tgs,renew,forward mix (per operation).

Each round runs, for stock and then for every build given, the closed-loop
AS storm `make bench` takes the KDC's CPU per login from (storm_bench.py:
each target's saturation_concurrency, warm-up and ramp; -c overrides) and
prints the KDC's CPU per login (kmpc-storm --watch-pid, from /proc),
logins/s, and for kmpc the
module's request counters per login (/metrics: kmpc_kdc_run_requests_total,
_finalize_requests_total, _sign_batches_total where the build has it: each
one call per server; _sign_requests_total: signatures). Each build's realm is made afresh (integration-tests/kmpc_harness/cluster.py).

Usage (label=DIR: a KMPC_CMAKE_BUILD directory; label=FILE.so: that kdcmpc
module, KMPC_KDC_MODULE, with everything else from $KMPC_CMAKE_BUILD):
  KRB5_PREFIX=/work/main/build/krb5 /usr/bin/python3 integration-tests/bench/kdc_cpu_ab.py \
      before=/work/main/build/cmake after=$PWD/build/cmake --rounds 2
A build may name its own patched krb5 (krb5kdc and libraries) with
@PREFIX: label=DIR@PREFIX, e.g. to compare krb5 patch series; such a
target runs in a child process with KRB5_PREFIX=PREFIX (kmpc_harness.realm reads
it at import). --stock-prefix does the same for stock.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
# integration-tests/ (kmpc_harness, bench) on the path when run as a script.
sys.path.insert(0, os.path.dirname(HERE))
from bench import storm_bench  # noqa: E402

COUNTERS = ("run_requests", "finalize_requests", "sign_requests",
            "sign_batches")


def scrape(url):
    """The module's kmpc_kdc_<name>_total counters of COUNTERS."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in COUNTERS:
        m = re.search(rf"^kmpc_kdc_{name}_total (\S+)$", text, re.M)
        if m:
            out[name] = float(m.group(1))
    return out


def storm(target, args, label, outdir):
    res = storm_bench.run_storm(target, args, label, outdir, check=True)
    logins = res.get("ok_all_phases", res["ok"]) + res.get("failed_all_phases", 0)
    return res, logins


def make_target(kind, wd, users):
    """kind "stock" or kmpc, in wd (test_bench_targets.py builds it this way)."""
    if kind == "stock":
        return storm_bench.stock_factory(wd, "headline", users)
    return storm_bench.kmpc_factory(wd, "headline", users, metrics=True)


def one(kind, build, users, conc, secs, outdir, label, mix=False):
    """One target: {'rate', 'kdc_us', ...per-login counters}. With mix, the
    closed-loop mix of make bench (storm_bench.MIX, the sync engine, a thread
    per operation in flight) at `conc` clients (default MIX_CONCURRENCY)
    instead of the AS storm: figures per operation."""
    if build and build.endswith(".so"):
        os.environ["KMPC_KDC_MODULE"] = build
    elif build:
        os.environ.pop("KMPC_KDC_MODULE", None)
        os.environ["KMPC_CMAKE_BUILD"] = build
    wd = tempfile.mkdtemp(prefix=f"ab-{label}-", dir=outdir)
    t = make_target(kind, wd, users)
    c = conc or (storm_bench.MIX_CONCURRENCY if mix else t.saturation_concurrency)
    wu = getattr(t, "warmup_s", 1.0)
    extra = ["--ramp", wu] if c > 64 else []
    if mix:  # as storm_bench's mix_closed_loop
        extra = ["--engine", "sync", "--mix", storm_bench.MIX, "--tgs", t.service]
    try:
        # Warm-up (connections, pads, page cache) outside the figures.
        storm(t, ["-c", 8, "-d", 2], label + "-warm", wd)
        c0 = scrape(t.metrics_urls["krb5kdc"]) if kind != "stock" else {}
        res, logins = storm(t, ["-c", c, "-d", secs, "-w", wu, *extra], label, wd)
        c1 = scrape(t.metrics_urls["krb5kdc"]) if kind != "stock" else {}
    finally:
        t.stop()
    out = {"concurrency": c, "rate": res["logins_per_s"],
           "kdc_us": res["cpu"]["krb5kdc"]["us_per_login"],
           "kdc_cores": res["cpu"]["krb5kdc"]["cores"],
           "machine_busy_cores": res["machine_busy_cores"]}
    servers = [v["us_per_login"] for n, v in res["cpu"].items()
               if n.startswith("mpc-server")]
    if servers:  # the three MPC servers together
        out["servers_us"] = round(sum(servers), 1)
    for k in c1:
        out[k + "_per_login"] = round((c1[k] - c0.get(k, 0)) / max(logins, 1), 3)
    return out


def one_in_child(kind, build, prefix, users, conc, secs, outdir, label, mix=False):
    """one() in a child process whose KRB5_PREFIX is `prefix`."""
    env = dict(os.environ, KRB5_PREFIX=prefix)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                        json.dumps([kind, build, users, conc, secs, outdir, label, mix])],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{label} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def measure(kind, build, prefix, *rest):
    if prefix:
        return one_in_child(kind, build, prefix, *rest)
    return one(kind, build, *rest)


MODULE = os.path.join("kdc-plugin", "libkmpc_kdc.so")


def parse_build(spec):
    """(label, path, prefix) of a build argument, label=DIR[@PREFIX] (a
    cmake build tree holding kdc-plugin/libkmpc_kdc.so) or
    label=FILE.so[@PREFIX] (a kdcmpc module); ValueError saying what is
    wrong with it otherwise."""
    label, sep, path = spec.partition("=")
    path, _, prefix = path.partition("@")
    if not sep or not label or not path:
        raise ValueError(f"{spec!r}: expected label=DIR (a cmake build) or label=FILE.so "
                         "(a kdcmpc module), optionally @KRB5_PREFIX")
    if prefix and not os.path.isfile(os.path.join(prefix, "sbin", "krb5kdc")):
        raise ValueError(f"{spec!r}: no sbin/krb5kdc under {prefix}")
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, MODULE)):
            raise ValueError(f"{spec!r}: {path} is a directory but not a kmpc cmake build: "
                             f"no {MODULE} in it (cmake --build {path})")
    elif not path.endswith(".so"):
        raise ValueError(f"{spec!r}: {path} is neither a cmake build directory nor a "
                         "kdcmpc module (FILE.so)")
    elif not os.path.isfile(path):
        raise ValueError(f"{spec!r}: module {path} does not exist (build it, or give "
                         "its cmake build directory: label=DIR)")
    return label, os.path.abspath(path), os.path.abspath(prefix) if prefix else ""


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(*json.loads(sys.argv[2]))), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("builds", nargs="+",
                    help="label=DIR (a KMPC_CMAKE_BUILD) or label=FILE.so[@KRB5_PREFIX]")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("-c", "--concurrency", type=int, default=0,
                    help="closed-loop clients (default: as make bench)")
    ap.add_argument("-d", "--seconds", type=int, default=8)
    ap.add_argument("--json", help="write every round's figures here")
    ap.add_argument("--alternate", action="store_true",
                    help="the builds in reverse order every other round "
                         "(the machine drifts within a round)")
    ap.add_argument("--mix", action="store_true",
                    help="the login,tgs,renew,forward mix (sync engine, -c "
                         "default 16) instead of the AS storm; per operation")
    ap.add_argument("--stock-prefix", default="",
                    help="stock's krb5 prefix (default: $KRB5_PREFIX)")
    a = ap.parse_args()
    try:
        builds = [parse_build(b) for b in a.builds]
    except ValueError as e:
        ap.error(str(e))
    outdir = tempfile.mkdtemp(prefix="kdc-cpu-ab-")
    rounds = []
    for r in range(a.rounds):
        row = {"stock": measure("stock", None, a.stock_prefix, a.users,
                                a.concurrency, a.seconds, outdir, f"r{r}-stock",
                                a.mix)}
        order = builds[::-1] if a.alternate and r % 2 else builds
        for label, path, prefix in order:
            row[label] = measure("kmpc", path, prefix, a.users, a.concurrency,
                                 a.seconds, outdir, f"r{r}-{label}", a.mix)
        s = row["stock"]
        for label, _, _ in builds:
            x = row[label]
            x["cpu_ratio_to_stock"] = round(x["kdc_us"] / s["kdc_us"], 2)
            x["rate_ratio_to_stock"] = round(x["rate"] / s["rate"], 3)
        print(f"round {r + 1}: " + json.dumps(row), flush=True)
        rounds.append(row)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rounds, f, indent=1)


if __name__ == "__main__":
    main()
