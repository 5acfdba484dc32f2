#!/usr/bin/python3
"""Alternated A/B of one-client latency: kmpc built in two trees, stock beside.

    one_client_ab.py --a /work/main/build/cmake --b build/cmake --rounds 3

Each round brings up a kmpc realm (storm_bench's KmpcTarget, the default
configuration) from tree A, then from tree B (order alternating between
rounds, so a drift in the machine's load falls on both), and a stock realm;
on each it runs storm_bench's one-client mix (kmpc-storm -c 1 --engine sync
--mix login,tgs,renew,forward) and prints each exchange's own p50 / p99
(by_op step latency). The trees differ only in what they built: the
harness takes every binary from $KMPC_CMAKE_BUILD (cluster.find_built).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import storm_bench as sb  # noqa: E402

OPS = sb.MIX.split(",")


def one(target, label, outdir, dur):
    res = sb.run_storm(target, ["-c", 1, "-d", dur, "-w", 1, "--engine", "sync",
                                "--mix", sb.MIX, "--tgs", target.service], label, outdir)
    out = {}
    for op in OPS:
        m = res["mix"][op]
        out[op] = (m["step_p50_us"] / 1e3, m["step_p99_us"] / 1e3)
    return out


def kmpc_target(wd, users):
    """A variant's realm (test_bench_targets.py builds it this way)."""
    return sb.KmpcTarget(wd, "default", users)


def stock_target(wd, users):
    return sb.StockTarget(wd, "default", users)


def run_variant(name, build, outdir, users, dur):
    os.environ["KMPC_CMAKE_BUILD"] = os.path.abspath(build)
    wd = tempfile.mkdtemp(prefix=f"ab-{name}-", dir=outdir)
    t = kmpc_target(wd, users)
    try:
        return one(t, f"{name}-{int(time.time())}", outdir, dur)
    finally:
        t.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="cmake build tree A")
    ap.add_argument("--b", required=True, help="cmake build tree B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=int, default=6, help="seconds per mix run")
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--no-stock", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    outdir = tempfile.mkdtemp(prefix="kmpc-one-client-ab-")
    rows = {"A": [], "B": [], "stock": []}
    t0 = time.monotonic()
    for r in range(args.rounds):
        order = ("A", "B") if r % 2 == 0 else ("B", "A")
        for v in order:
            rows[v].append(run_variant(v, args.a if v == "A" else args.b, outdir,
                                       args.users, args.duration))
            print(f"round {r} {v}: " + ", ".join(
                f"{op} {p50:.2f}/{p99:.2f}" for op, (p50, p99) in rows[v][-1].items()),
                flush=True)
        if not args.no_stock:
            wd = tempfile.mkdtemp(prefix="ab-stock-", dir=outdir)
            st = stock_target(wd, args.users)
            try:
                rows["stock"].append(one(st, f"stock-{r}", outdir, args.duration))
            finally:
                st.stop()
            print(f"round {r} stock: " + ", ".join(
                f"{op} {p50:.2f}/{p99:.2f}" for op, (p50, p99) in rows["stock"][-1].items()),
                flush=True)
    print("median over rounds, p50 / p99 ms:")
    for v, rs in rows.items():
        if rs:
            print(f"  {v:5s} " + ", ".join(
                f"{op} {statistics.median(x[op][0] for x in rs):.2f}/"
                f"{statistics.median(x[op][1] for x in rs):.2f}" for op in OPS))
    print(f"took {time.monotonic() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
