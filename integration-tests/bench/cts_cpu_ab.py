#!/usr/bin/env python3
"""Each MPC server's CPU per aes*-cts login at closed-loop saturation,
alternated between kmpc builds in one run (issue 48 item 7's A/Bs).

For every round, mode and build (the order of the builds rotates from
round to round, so that neither always runs first on a shared machine
whose speed drifts), a child process brings up cts_bench.py's realm of
--users directory-like aes256-cts users (cts_realm.py: names of 2-40
characters, their keys in the cluster; TCP; the mode's servers) from that
build, and runs kmpc-storm's closed loop of --concurrency logins for
--seconds after a warm-up. Each server's CPU per login is its utime +
stime (/proc, kmpc-storm --watch-pid) over the measured phase divided by
the logins completed in it; user and system parts apart from /proc too.

A build is NAME=DIR: a cmake build tree or a snapshot holding
mpc-server/kmpc-mpc-server, kmpc-admin and kdc-plugin/libkmpc_kdc.so.
The KDC is $KRB5_PREFIX's and kmpc-storm the first build's for every
build.

Usage: cts_cpu_ab.py --build base=DIR --build head=DIR [--rounds 2]
                     [--modes malicious,semi-honest] [--users 200]
                     [--concurrency 256] [--seconds 12] [--out FILE]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def proc_times(pid):
    """(utime, stime) of pid in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def child(args):
    """In the child: one realm, one closed loop; prints one JSON line."""
    from bench import cts_bench, storm_bench
    os.makedirs(storm_bench.BENCH_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cts-cpu-ab-", dir=storm_bench.BENCH_DIR)
    r, _ = cts_bench.bring_up(work, args.mode, args.users)
    try:
        t = cts_bench.SharedTarget(r, "cts", args.users, False)
        storm_bench.run_storm(t, ["-c", 4, "-d", 2], "warm", work)
        servers = {n: p for n, p in t.watch.items() if n != "krb5kdc"}
        # /proc before and after the storm's run as a whole (its warm-up
        # included) give user and system apart; kmpc-storm's own figure
        # (measured phase only) is the headline.
        t0 = {n: proc_times(p) for n, p in servers.items()}
        res = storm_bench.run_storm(
            t, ["-c", args.concurrency, "-d", args.seconds, "-w", 2,
                "--timeout", t.timeout_s], "closed", work)
        t1 = {n: proc_times(p) for n, p in servers.items()}
        hz = os.sysconf("SC_CLK_TCK")
        total = res.get("ok_all_phases", res["ok"]) + res.get("failed_all_phases", 0)
        out = {"logins_per_s": res["logins_per_s"], "ok": res["ok"],
               "failed": res.get("failed_all_phases", 0),
               "servers_us_per_login": {n: res["cpu"][n]["us_per_login"] for n in servers},
               "user_us_per_login": {n: (t1[n][0] - t0[n][0]) / hz * 1e6 / total
                                     for n in servers},
               "sys_us_per_login": {n: (t1[n][1] - t0[n][1]) / hz * 1e6 / total
                                    for n in servers},
               "kdc_us_per_login": res["cpu"]["krb5kdc"]["us_per_login"],
               "logins_per_run": (res.get("mpc") or {}).get("logins_per_run_batch"),
               "machine_busy_cores": res["machine_busy_cores"]}
        print("RESULT " + json.dumps(out), flush=True)
    finally:
        r.stop()
        subprocess.run(["rm", "-rf", work])


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", default=[], metavar="NAME=DIR")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="malicious,semi-honest")
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child-mode", dest="mode", help=argparse.SUPPRESS)
    return ap


def main():
    args = parser().parse_args()
    if args.mode:
        return child(args)
    builds = [b.split("=", 1) for b in args.build]
    if len(builds) < 2 or any(len(b) != 2 or not os.path.isdir(b[1]) for b in builds):
        print("cts_cpu_ab: give two or more --build NAME=DIR", file=sys.stderr)
        return 2
    rows = []
    for rnd in range(args.rounds):
        order = builds[rnd % len(builds):] + builds[:rnd % len(builds)]
        for mode in args.modes.split(","):
            for name, d in order:
                # One generator for every build: the first build's.
                env = dict(os.environ, KMPC_CMAKE_BUILD=os.path.abspath(d),
                           KMPC_STORM=os.path.join(os.path.abspath(builds[0][1]),
                                                   "mpc-server", "kmpc-storm"))
                argv = [sys.executable, os.path.abspath(__file__), "--child-mode", mode,
                        "--users", str(args.users), "--concurrency", str(args.concurrency),
                        "--seconds", str(args.seconds)]
                p = subprocess.run(argv, env=env, capture_output=True, text=True)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                if p.returncode != 0 or not line:
                    print(f"{name} {mode} round {rnd + 1}: failed\n{p.stderr[-3000:]}",
                          file=sys.stderr)
                    continue
                res = json.loads(line[0][7:])
                res.update(build=name, mode=mode, round=rnd + 1,
                           at=time.strftime("%H:%M:%S", time.gmtime()),
                           load=os.getloadavg()[0])
                rows.append(res)
                cpu = " / ".join(f"{v:.0f}" for v in res["servers_us_per_login"].values())
                us = " / ".join(f"{v:.0f}" for v in res["user_us_per_login"].values())
                sy = " / ".join(f"{v:.0f}" for v in res["sys_us_per_login"].values())
                print(f"round {rnd + 1} {mode:11} {name:8} {res['logins_per_s']:6.0f}/s "
                      f"failed {res['failed']} servers us/login {cpu} "
                      f"(user {us}; sys {sy}) logins/Run {res['logins_per_run']} "
                      f"load {res['load']:.1f} at {res['at']}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
