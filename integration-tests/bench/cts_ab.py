#!/usr/bin/env python3
"""A/B of two builds on the aes256-cts users' one-client login
(cts_bench.py --no-storm --no-realm): alternated, the order swapped every round, each
side a fresh realm of its build's binaries (KMPC_CMAKE_BUILD), both server
modes; prints each round's Debian-kinit p50/p99, the cold first login, the
ANDs and AND rounds per login and the load average beside them. With
--realm SECONDS: also the directory-like realm's closed loop (varied names
only, --users of them), its logins/s and each process's CPU per login.

Usage: cts_ab.py --a DIR --b DIR [--rounds 2] [--logins 20]
                 [--modes malicious,semi-honest] [--realm S --users N]
DIR: a build tree (or a make bench snapshot) holding mpc-server/ and
kdc-plugin/ binaries; DIR@TREE: driven by TREE's integration-tests/ (the
harness and cts_bench.py of the checkout the build came from, for a build
whose tools take other settings than this tree's).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_side(build, modes, logins, out, realm_s=0, users=200):
    build, _, tree = build.partition("@")
    bench_dir = os.path.join(tree, "integration-tests", "bench") if tree else HERE
    env = dict(os.environ, KMPC_CMAKE_BUILD=build,
               KMPC_MPC_BIN_DIR=os.path.join(build, "mpc-server"),
               KMPC_STORM=os.path.join(build, "mpc-server", "kmpc-storm"))
    realm = (["--realm-seconds", str(realm_s), "--users", str(users), "--no-deep",
              "--samples", "0"] if realm_s else ["--no-realm"])
    p = subprocess.run([sys.executable, os.path.join(bench_dir, "cts_bench.py"), "--no-storm",
                        *realm, "--modes", modes, "--logins", str(logins), "--out", out],
                       env=env, capture_output=True, text=True, timeout=3600)
    try:
        with open(out) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"modes": {}, "error": p.stderr[-2000:]}


def row(label, rnd, mode, sec, load):
    if "error" in sec:
        return f"{rnd:>5} {label:2s} {mode:11s} error: {sec['error'][:100]}"
    one = sec["one_client"]
    c = one["cts"]
    cold = one["cold_first_login"]
    return (f"{rnd:>5} {label:2s} {mode:11s} p50 {c['p50_ms']:8.1f} ms  p99 {c['p99_ms']:8.1f} ms"
            f"  failed {c['failed']:2d}  cold {cold['ms']:7.1f} ms {'ok' if cold['ok'] else 'FAILED'}"
            f"  ANDs {one.get('ands_per_login', '-')}  rounds "
            f"{one.get('and_rounds_per_login', '-')}  kdb p50 {one['kdb']['p50_ms']:.1f} ms"
            f"  load {load:.1f}" + realm_row(sec))


def realm_row(sec):
    """The varied realm's logins/s and CPU ms per login, if it ran."""
    v = sec.get("realm", {}).get("varied")
    if not v:
        return ""
    cpu = v["cpu_ms_per_login"]
    servers = " ".join(f"{cpu[k]:.3f}" for k in sorted(cpu) if k.startswith("mpc-server"))
    return (f"\n        realm {v['logins_per_s']:7.1f}/s failed {v['failed_logins']}"
            f"  CPU ms/login kdc {cpu['krb5kdc']:.3f} servers {servers}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--logins", type=int, default=20)
    ap.add_argument("--modes", default="malicious,semi-honest")
    ap.add_argument("--realm", type=int, default=0,
                    help="seconds of the varied realm's closed loop (0: none)")
    ap.add_argument("--users", type=int, default=200)
    args = ap.parse_args()
    print(f"A = {args.a}\nB = {args.b}", flush=True)
    tmp = tempfile.mkdtemp(prefix="cts-ab-")
    for rnd in range(1, args.rounds + 1):
        order = (("A", args.a), ("B", args.b)) if rnd % 2 else (("B", args.b), ("A", args.a))
        for label, build in order:
            load = os.getloadavg()[0]
            res = run_side(build, args.modes, args.logins,
                           os.path.join(tmp, f"{rnd}-{label}.json"), args.realm, args.users)
            if not res["modes"]:
                print(f"{rnd:>5} {label:2s} run failed: {res.get('error', '')[-300:]}")
            for mode, sec in res["modes"].items():
                print(row(label, rnd, mode, sec, load), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
