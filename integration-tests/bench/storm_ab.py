#!/usr/bin/env python3
"""Alternated A/B of the AS storm between kmpc builds, stock in every round.

Each round runs, for every build and for stock, the same open-loop sweep
`make bench` runs (storm_bench.bench_settings, settings "headline": the
closed-loop saturation, the sweep around it, bisection, then the points at
50% and 90% of the peak), each in a realm brought up afresh. The order of
the targets rotates from round to round so that neither build always runs
first on a shared machine whose speed drifts.

A build is NAME=CMAKE_BUILD[:KRB5_PREFIX][@TREE]: the directory holding
mpc-server/kmpc-mpc-server and kdc-plugin/libkmpc_kdc.so (a cmake build
tree or a `make bench` snapshot), and the krb5 prefix its KDC module was
built against (the krb5 patches can differ between commits; default
$KRB5_PREFIX); TREE: the checkout whose integration-tests/ (harness and
bench scripts) drives that build, for a build whose tools take other
settings than this tree's (default: this tree). Every target uses one kmpc-storm ($KMPC_STORM or the first
build's), so the generator is the same throughout.

Each target runs in a child process (the harness reads KRB5_PREFIX and the
build directory when it is imported). Output: one JSON file with every
round's figures, and a table (peak, p99 at 90% of the peak, CPU per login
of the KDC and of each server at the peak and at 90%, logins per Run batch).

Usage: storm_ab.py --build base=/path/a:/prefix/a --build head=/path/b
                   [--rounds 3] [--out build/bench/storm_ab.json]
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def make_target(storm_bench, target, work):
    """The target's realm in work, as the sweep makes it (test_bench_targets.py
    builds it this way)."""
    return storm_bench.TARGETS[target][0](os.path.join(work, "realm"), "headline", 1000)


def fixed_point(storm_bench, target, rate, dur=8):
    """In the child: one open-loop point at RATE in a realm of its own, as
    storm_bench's sweep runs its points; the section's at_90pct_of_peak
    fields (so summary() reads it the same way) and the batch figures."""
    import tempfile
    work = tempfile.mkdtemp(prefix=f"storm-ab-{target}-", dir=storm_bench.BENCH_DIR)
    t = make_target(storm_bench, target, work)
    try:
        storm_bench.run_storm(t, ["-c", 1, "-d", 1], "warm", work)
        res = storm_bench.run_storm(
            t, ["-r", rate, "-d", dur, "-w", getattr(t, "warmup_s", 1.0),
                "--timeout", getattr(t, "timeout_s", 5),
                "--max-inflight", getattr(t, "max_inflight", storm_bench.MAX_INFLIGHT)],
            f"fixed-{rate}", work)
        print(f"  fixed {rate}/s: {storm_bench.brief(res)}", flush=True)
        ok = storm_bench.sustained(res, rate, t.p99_bound_ms, getattr(t, "achieved", "span"))
        return {"peak_logins_per_s": None, "at_90pct_of_peak": {
            "offered": rate, "logins_per_s": res["logins_per_s"], "sustained": ok,
            "mpc": res.get("mpc"), "cpu": res["cpu"], "retransmits": res["retransmits"],
            **{k + "_ms": v / 1e3 for k, v in res["latency_us"].items()
               if k in ("p50", "p90", "p99", "p999", "max")}}}
    finally:
        t.stop()


def worker(target, out, fixed_rate=None):
    """In the child: one storm_bench sweep of TARGET (or one point at
    FIXED_RATE), its section to OUT."""
    sys.path.insert(0, HERE)
    import storm_bench  # noqa: E402 (the harness reads the environment on import)
    t0 = time.time()
    if fixed_rate:
        sec = fixed_point(storm_bench, target, fixed_rate)
    else:
        sec, _rows = storm_bench.bench_settings(target, "headline", 1000, False,
                                                lambda m: print(m, flush=True), repeat="ab")
    sec["elapsed_s"] = round(time.time() - t0, 1)
    with open(out, "w") as f:
        json.dump(sec, f)


def per_login(point):
    """CPU us per login of each watched process at a point, or {}."""
    return {n: round(c["us_per_login"]) for n, c in (point or {}).get("cpu", {}).items()}


def summary(sec):
    peak = sec.get("peak_sustained") or {}
    p90 = sec.get("at_90pct_of_peak") or {}
    mpc = p90.get("mpc") or {}
    return {
        "peak": round(sec.get("peak_logins_per_s") or 0),
        "offered_at_90": p90.get("offered"),
        "p50_at_90": round(p90.get("p50_ms", float("nan")), 1),
        "p99_at_90": round(p90.get("p99_ms", float("nan")), 1),
        "sustained_at_90": p90.get("sustained"),
        "cpu_at_peak": per_login(peak),
        "cpu_at_90": per_login(p90),
        "logins_per_run_batch_at_90": mpc.get("logins_per_run_batch"),
        "elapsed_s": sec.get("elapsed_s"),
    }


def run_target(name, spec, storm, workdir, fixed_rate=None):
    """One sweep in a child process with SPEC's build; its summary."""
    env = dict(os.environ)
    spec, _, tree = spec.partition("@")
    script = (os.path.join(tree, "integration-tests", "bench", "storm_ab.py") if tree
              else __file__)
    if spec:
        build, _, prefix = spec.partition(":")
        env["KMPC_CMAKE_BUILD"] = build
        env["KMPC_MPC_BIN_DIR"] = os.path.join(build, "mpc-server")
        if prefix:
            env["KRB5_PREFIX"] = prefix
    env["KMPC_STORM"] = storm
    out = os.path.join(workdir, f"{name}-{time.time():.0f}.json")
    target = "kmpc" if spec else "stock"
    argv = [sys.executable, script, "--worker", target, "--worker-out", out]
    if fixed_rate:
        argv += ["--fixed-rate", str(fixed_rate)]
    p = subprocess.run(argv,
                       env=env, text=True, capture_output=True, timeout=1800)
    print(p.stdout, end="", flush=True)
    if p.returncode != 0 or not os.path.exists(out):
        raise SystemExit(f"{name}: sweep failed ({p.returncode}):\n{p.stderr[-4000:]}")
    with open(out) as f:
        return summary(json.load(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", default=[],
                    help="NAME=CMAKE_BUILD[:KRB5_PREFIX][@TREE] (two or more)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-stock", dest="stock", action="store_false")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "storm_ab.json"))
    ap.add_argument("--fixed-rate", type=int, default=None,
                    help="instead of the sweep: one open-loop point at this rate "
                         "(CPU per login and the tail at one load for every build)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.worker_out, args.fixed_rate)
    builds = []
    for b in args.build:
        name, eq, spec = b.partition("=")
        build_dir = spec.partition("@")[0].partition(":")[0]
        if not eq or not os.path.isfile(os.path.join(build_dir, "kdc-plugin", "libkmpc_kdc.so")):
            ap.error(f"--build {b}: want NAME=DIR[:PREFIX][@TREE] with "
                     "DIR/kdc-plugin/libkmpc_kdc.so")
        builds.append((name, spec))
    if len(builds) < 1:
        ap.error("at least one --build")
    storm = os.environ.get("KMPC_STORM") or os.path.join(
        builds[0][1].partition("@")[0].partition(":")[0], "mpc-server", "kmpc-storm")
    targets = builds + ([("stock", "")] if args.stock else [])
    workdir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "storm_ab")
    os.makedirs(workdir, exist_ok=True)
    rounds = []
    t0 = time.time()
    for r in range(args.rounds):
        k = r % len(targets)
        order = targets[k:] + targets[:k]
        res = {}
        for name, spec in order:
            print(f"== round {r + 1}/{args.rounds}: {name} "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
            res[name] = run_target(name, spec, storm, workdir, args.fixed_rate)
            print(f"   {name}: {json.dumps(res[name])}", flush=True)
        rounds.append({"order": [n for n, _ in order], "results": res})
        with open(args.out, "w") as f:
            json.dump({"builds": dict(builds), "rounds": rounds}, f, indent=1)
    print(f"\n{'round':>5} {'target':>8} {'peak/s':>7} {'p99@90%':>8} {'p50@90%':>8} "
          f"{'logins/Run@90%':>14}  cpu us/login at 90% (and at the peak)")
    for i, rd in enumerate(rounds):
        for name, s in rd["results"].items():
            cpu = " ".join(f"{n} {v}/{s['cpu_at_peak'].get(n, '-')}"
                           for n, v in s["cpu_at_90"].items())
            print(f"{i + 1:>5} {name:>8} {s['peak']:>7} {s['p99_at_90']:>8} {s['p50_at_90']:>8} "
                  f"{s['logins_per_run_batch_at_90'] or '-':>14}  {cpu}")
    print(f"storm A/B: {len(rounds)} rounds in {time.time() - t0:.0f} s; figures: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
