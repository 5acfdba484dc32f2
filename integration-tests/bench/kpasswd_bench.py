#!/usr/bin/env python3
"""Time of a password change with kpasswd through kadmind: with kmpc's key
dealer (the new key dealt to the three MPC servers) against the same
kadmind without it (MIT's own behaviour: the keys written to the KDB).

Two realms on 127.0.0.1 run side by side; the runs alternate between them
(A, B, A, B, ...) so that both see the same machine load. Each run is one
real `kpasswd` process (AS exchange for kadmin/changepw, the change-password
protocol, kadmind's change). Prints p50/p90 per realm and their ratio;
--json writes them.

    kpasswd_bench.py [--runs 100] [--json FILE] [--dir DIR]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

# integration-tests/ (kmpc_harness) on the path when run as a script.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kmpc_harness.kmpc_realm import KmpcRealm  # noqa: E402


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def setup(workdir, dealer, early_flush):
    # Explicit both ways: the module's default is early_flush = true.
    opts = {"early_flush": "true" if early_flush else "false"}
    r = KmpcRealm(workdir, module_options=opts)
    r.create()
    r.setup_krbtgt()
    r.setup_warmup()
    if dealer:
        r.enable_dealer()
    # Without the dealer the user keeps ordinary keys in the KDB (what MIT
    # does); with it, the user's keys are handles and every change is dealt.
    if dealer:
        r.kadmin_local("addprinc -pw Bench-pw-0 bench")
    else:
        r.kadmin_local("addprinc -e aes256-cts-hmac-sha1-96:normal -pw Bench-pw-0 bench")
    r.start()
    r.start_kadmind()
    return r


def one_change(r, old, new):
    env = dict(r.env, KRB5CCNAME="FILE:" + os.path.join(r.dir, "bench.ccache"))
    t0 = time.perf_counter()
    r.run(["kpasswd", "bench"], input=f"{old}\n{new}\n{new}\n", env=env)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--json")
    ap.add_argument("--dir")
    ap.add_argument("--early-flush", action="store_true",
                    help="the KDC module's early_flush (a lone login does not "
                         "wait for the 100 ms batch window)")
    a = ap.parse_args()
    base = a.dir or tempfile.mkdtemp(prefix="kmpc-kpasswd-bench-")
    realms = {}
    try:
        realms["dealer"] = setup(os.path.join(base, "dealer"), True, a.early_flush)
        realms["kdb"] = setup(os.path.join(base, "kdb"), False, a.early_flush)
        times = {k: [] for k in realms}
        pw = {k: "Bench-pw-0" for k in realms}
        for i in range(a.runs):
            for k, r in realms.items():
                new = f"Bench-pw-{i + 1}"
                times[k].append(one_change(r, pw[k], new))
                pw[k] = new
            if (i + 1) % 20 == 0:
                print(f"  {i + 1}/{a.runs} changes per realm", flush=True)
        # The dealer realm still holds only handles for the user.
        kinds = {row[2] for row in realms["dealer"].kdb_keys("bench")}
        if kinds != {"handle"}:
            raise SystemExit(f"dealer realm: the KDB holds {kinds} for bench")
        out = {}
        for k, xs in times.items():
            out[k] = {"runs": len(xs), "p50_ms": round(1e3 * statistics.median(xs), 2),
                      "p90_ms": round(1e3 * quantile(xs, 0.9), 2),
                      "max_ms": round(1e3 * max(xs), 2)}
        out["early_flush"] = a.early_flush
        out["ratio_p50"] = round(out["dealer"]["p50_ms"] / out["kdb"]["p50_ms"], 3)
        print(f"kpasswd through kadmind, {a.runs} changes each, alternating "
              f"(KDC module early_flush {'on' if a.early_flush else 'off'}):")
        print(f"  keys dealt to the cluster : p50 {out['dealer']['p50_ms']} ms, "
              f"p90 {out['dealer']['p90_ms']} ms")
        print(f"  keys in the KDB (MIT)     : p50 {out['kdb']['p50_ms']} ms, "
              f"p90 {out['kdb']['p90_ms']} ms")
        print(f"  ratio (p50)               : {out['ratio_p50']}")
        if a.json:
            with open(a.json, "w") as f:
                json.dump(out, f, indent=2)
        return 0
    finally:
        for r in realms.values():
            r.stop()
        if not a.dir:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
