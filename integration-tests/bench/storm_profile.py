#!/usr/bin/env python3
"""Where a login's CPU goes under the AS storm: perf on the KDC and the
three MPC servers at one open-loop rate.

Brings up the kmpc realm (storm_bench's KmpcTarget, or KmpcMaliciousTarget with
--malicious; headline settings; the
build from $KMPC_CMAKE_BUILD and $KRB5_PREFIX as for storm_bench.py), runs
kmpc-storm at --rate for --duration seconds and, over a window in the
middle of it:
  - `perf stat` of each process: task-clock, context switches, CPU
    migrations and system calls (raw_syscalls:sys_enter), printed per
    login (logins = the storm's completions per second x the window);
  - `perf record -g` of the three servers (and the KDC), whose report
    (self time by symbol, per process) goes to --out-dir.
Needs perf (linux-perf) and root (the tracepoint). Prints how long it took.

With --cts USERS the storm is cts_bench.py's instead: USERS users whose
aes256-cts key the cluster holds (cts_bench.bring_up, its SharedTarget "cts":
TCP, servers malicious unless --semi-honest), or with --cts-kdb the same
realm's krbtgt-only users (keys in the KDB).

Usage: storm_profile.py [--rate 1000] [--duration 14] [--window 8] [--malicious]
                        [--cts USERS [--cts-kdb] [--semi-honest]]
                        [--out-dir build/bench/profile]
"""

import argparse
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# integration-tests/ (kmpc_harness, bench) on the path when run as a script.
sys.path.insert(0, os.path.dirname(HERE))
from bench import cts_bench, storm_bench  # noqa: E402

EVENTS = "task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter"


def perf_stat(pid, window, out):
    return subprocess.Popen(["perf", "stat", "-x", ",", "-e", EVENTS, "-p", str(pid),
                             "-o", out, "--", "sleep", str(window)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_stat(path):
    """{event: value} from perf stat -x , output (task-clock in ms)."""
    vals = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[0] and not line.startswith("#"):
                try:
                    vals[parts[2]] = float(parts[0])
                except ValueError:
                    pass
    return vals


def report(data, out, pids, sort="symbol", top=40):
    """Self time of the processes PIDS (comma list), as percentages of
    their own samples."""
    p = subprocess.run(["perf", "report", "-i", data, "--no-children", "--stdio",
                        "--pid", pids, "--percentage", "relative", "--sort", sort,
                        "--percent-limit", "0.7", "-g", "none"],
                       capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    with open(out, "w") as f:
        f.write("\n".join(lines[:top]) + "\n")
    return lines[:top]


def profile_target(args, work):
    """The storm's target for these arguments, its realm running in work
    (test_bench_targets.py builds it this way)."""
    if args.cts:
        mode = "semi-honest" if args.semi_honest else "malicious"
        cts_bench.MODES[mode] = " ".join(f for f in (cts_bench.MODES[mode],
                                                     args.server_flags) if f)
        r, _ = cts_bench.bring_up(work, mode, args.cts, args.tcp_max_connections,
                                  cts_bench.parse_module_options(args.module_option))
        t = cts_bench.SharedTarget(r, "kdb" if args.cts_kdb else "cts", args.cts, False)
        t.stop = r.stop
        return t
    cls = storm_bench.KmpcMaliciousTarget if args.malicious else storm_bench.KmpcTarget
    return cls(work, "headline", 1000)


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=14)
    ap.add_argument("--window", type=float, default=8)
    ap.add_argument("--freq", type=int, default=499, help="perf record -F")
    ap.add_argument("--dwarf", action="store_true",
                    help="perf record --call-graph dwarf (callers of malloc and the like; "
                         "the binaries have no frame pointers)")
    ap.add_argument("--malicious", action="store_true",
                    help="the servers in --security=malicious (storm_bench's kmpc-malicious)")
    ap.add_argument("--cts", type=int, default=0, metavar="USERS",
                    help="cts_bench.py's realm and storm of USERS aes256-cts users")
    ap.add_argument("--cts-kdb", action="store_true",
                    help="with --cts: the same realm's krbtgt-only users")
    ap.add_argument("--semi-honest", action="store_true", help="with --cts")
    ap.add_argument("--tcp-max-connections", type=int, default=None,
                    help="with --cts: the KDC's kdc_tcp_max_connections (0: MIT's 45)")
    ap.add_argument("--module-option", action="append", default=[], metavar="NAME=VALUE",
                    help="with --cts: a relation of the KDC module's section; repeatable")
    ap.add_argument("--server-flags", default="",
                    help="with --cts: extra kmpc-mpc-server flags (A/B of a server setting)")
    ap.add_argument("--out-dir", default=os.path.join(storm_bench.BENCH_DIR, "profile"))
    return ap


def main():
    args = parser().parse_args()
    t0 = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    work = os.path.join(args.out_dir, "realm")
    subprocess.run(["rm", "-rf", work], check=True)
    t = profile_target(args, work)
    try:
        storm_bench.run_storm(t, ["-c", 1, "-d", 1], "warm", args.out_dir)
        box = {}
        th = threading.Thread(target=lambda: box.update(res=storm_bench.run_storm(
            t, ["-r", args.rate, "-d", args.duration, "-w", 1, "--timeout", t.timeout_s,
                "--max-inflight", t.max_inflight], f"profile-{args.rate}", args.out_dir)))
        th.start()
        time.sleep(1 + (args.duration - args.window) / 2)
        stats = {n: perf_stat(pid, args.window, os.path.join(args.out_dir, f"stat-{n}.txt"))
                 for n, pid in t.watch.items()}
        data = os.path.join(args.out_dir, "perf.data")
        cg = ["--call-graph", "dwarf,16384"] if args.dwarf else ["-g"]
        rec = subprocess.Popen(["perf", "record", "-q", *cg, "-F", str(args.freq), "-o", data,
                                "-p", ",".join(str(p) for p in t.watch.values()),
                                "--", "sleep", str(args.window)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for p in [*stats.values(), rec]:
            p.wait()
        th.join()
        res = box["res"]
        logins = res["logins_per_s"] * args.window
        print(f"storm at {args.rate}/s: {storm_bench.brief(res)}")
        mpc = res.get("mpc") or {}
        print(f"logins per Run batch {mpc.get('logins_per_run_batch')}, "
              f"AES blocks per login {mpc.get('aes_blocks_per_login')}")
        print(f"per login over the {args.window:.0f} s window ({logins:.0f} logins):")
        print(f"{'process':>14} {'CPU us':>8} {'ctx sw':>8} {'syscalls':>9} {'migr':>6}")
        for n in t.watch:
            v = read_stat(os.path.join(args.out_dir, f"stat-{n}.txt"))
            print(f"{n:>14} {v.get('task-clock', 0) * 1e3 / logins:8.1f} "
                  f"{v.get('context-switches', 0) / logins:8.2f} "
                  f"{v.get('raw_syscalls:sys_enter', 0) / logins:9.2f} "
                  f"{v.get('cpu-migrations', 0) / logins:6.2f}")
        servers = ",".join(str(p) for n, p in t.watch.items() if n != "krb5kdc")
        for n, pids in (("krb5kdc", str(t.watch["krb5kdc"])), ("servers", servers)):
            for sort in ("comm", "symbol"):
                top = report(data, os.path.join(args.out_dir, f"report-{n}-{sort}.txt"),
                             pids, sort)
                print(f"--- {n}: self time by {sort}")
                print("\n".join(re.sub(r"\s+", " ", ln).strip() for ln in top[:18]))
    finally:
        t.stop()
    print(f"storm_profile: {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
