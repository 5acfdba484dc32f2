#!/usr/bin/env python3
"""Two KDCs against one MPC cluster: login storms at a primary and a replica.

The realm is integration-tests/kmpc_harness/replica.py's (primary + one replica, each KDC with
its own kdcmpc module instance and client certificate, one cluster of three
MPC servers), with load-test users whose keys are in the cluster; the
replica gets the KDB by kprop. Then, with kmpc-storm (closed loop, the same
tool and settings as integration-tests/bench/storm_bench.py's saturation runs):
  one     one storm at the primary only, CONC logins in flight;
  two     two storms in parallel, one per KDC (--kdc), CONC/2 in flight
          each: the same load spread over two KDCs;
  two-x2  two storms in parallel, CONC in flight each;
for each CONC of --concurrency (default 256 and 1024: past the knee, more
in flight only queues, so the peak is the best of them).
For each phase: logins/s (sum of the storms; the closed-loop saturation
rate; the "login storm peak" is the best phase of each kind), p50/p99 latency, failed logins, the
MPC servers' Run batches (logins per batch, from their counters), and CPU
per login of the server side (the KDCs and the three servers, read from
/proc over each whole run, warm-up included, against every login made).
Figures to build/bench/replicas.json and a Markdown table on stdout (for
docs/bench-log.md).

Usage: replica_bench.py [--users 1000] [--concurrency 256,1024] [--duration 8]
"""

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# integration-tests/ (kmpc_harness, bench) on the path when run as a script.
sys.path.insert(0, os.path.dirname(HERE))
from bench import storm_bench  # noqa: E402
from kmpc_harness import realm as kmpc_realm  # noqa: E402
from kmpc_harness import replica as kmpc_replica  # noqa: E402

BENCH_DIR = storm_bench.BENCH_DIR


def cpu_seconds(pids):
    """utime + stime of each pid (proc(5) /proc/PID/stat fields 14, 15)."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        with open(f"/proc/{pid}/stat") as f:
            # The command name (field 2) may hold spaces: split after it.
            fields = f.read().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / hz
    return out


class Side:
    """What storm_bench.run_storm needs to storm one KDC of the set: the
    users' keytab and names, the KDC (--kdc), and no watched pids (CPU is
    read here for the whole server side, both storms together)."""

    def __init__(self, rs, kdc, first, n):
        self.rs = rs
        self.env = rs.primary.env
        self.keytab = rs.primary.users_keytab
        self.principal_fmt = "user%d@" + rs.primary.realm
        self.n_users = n
        self.first = first
        self.kdc = kdc
        self.label = getattr(kdc, "name", kmpc_replica.PRIMARY)
        self.watch = {}
        self.udp_ports = [kdc.kdc_port]

    def args(self, conc, dur, warm):
        return ["-c", conc, "-d", dur, "-w", warm, "--ramp", warm,
                "--kdc", f"127.0.0.1:{self.kdc.kdc_port}", "--first-user", self.first,
                "--timeout", 10]

    def alive(self):
        return self.rs.primary.alive() and all(r.kdc_alive() for r in self.rs.replicas)

    def logs(self):
        return self.rs.logs()


def server_pids(rs):
    c = rs.primary.cluster
    pids = {"krb5kdc-primary": rs.primary.kdc_proc.pid,
            **{f"mpc-server-{i}": c.pid(i) for i in range(3)}}
    for r in rs.replicas:
        pids[f"krb5kdc-{r.name}"] = r.kdc_proc.pid
    return pids


def run_phase(rs, name, storms, dur, warm, outdir):
    """Run the storms ([(Side, concurrency)]) in parallel; the phase's
    figures."""
    pids = server_pids(rs)
    c = rs.primary.cluster
    cpu0, m0 = cpu_seconds(pids), storm_bench.mpc_metrics(c.servers, c.certs)
    results = [None] * len(storms)
    errors = []

    def one(i, side, conc):
        try:
            results[i] = storm_bench.run_storm(side, side.args(conc, dur, warm),
                                               f"{name}-{side.label}",
                                               outdir, timeout=dur + warm + 120)
        except Exception as e:  # reported below, after every storm ended
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i, s, k)) for i, (s, k) in enumerate(storms)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    cpu1, m1 = cpu_seconds(pids), storm_bench.mpc_metrics(c.servers, c.certs)
    made = sum(r.get("ok_all_phases", r["ok"]) + r.get("failed_all_phases", 0)
               for r in results)
    cpu = {n: cpu1[n] - cpu0[n] for n in pids}
    mpc = storm_bench.mpc_per_login(m0, m1, made) or {}
    return {
        "phase": name,
        "kdcs": len(storms),
        "concurrency_per_kdc": [k for _, k in storms],
        "logins_per_s": round(sum(r["logins_per_s"] for r in results), 1),
        "per_kdc_logins_per_s": [round(r["logins_per_s"], 1) for r in results],
        "p50_ms": [round(r["latency_us"]["p50"] / 1e3, 1) for r in results],
        "p99_ms": [round(r["latency_us"]["p99"] / 1e3, 1) for r in results],
        "failed": sum(r["failed_all_phases"] for r in results),
        "retransmits": sum(r["retransmits"] for r in results),
        "logins_made": made,
        "logins_per_run_batch": mpc.get("logins_per_run_batch"),
        "run_batches_per_login": mpc.get("run_batches_per_login"),
        "server_cpu_us_per_login": round(1e6 * sum(cpu.values()) / max(made, 1), 1),
        "mpc_cpu_us_per_login": round(1e6 * sum(v for n, v in cpu.items()
                                                if n.startswith("mpc")) / max(made, 1), 1),
        "kdc_cpu_us_per_login": round(1e6 * sum(v for n, v in cpu.items()
                                                if n.startswith("krb5kdc")) / max(made, 1), 1),
    }


def bring_up(work, users, kdc_conf_extra, attempts=2):
    """The primary and one replica (its KDB by kprop), both KDCs running.
    On a loaded machine the first login through a new cluster has failed
    once for the whole warm-up (docs/bench-log.md, 2026-11-24): the set-up
    is then made again from scratch, once."""
    for attempt in range(attempts):
        # Semi-honest servers, as the storm's kmpc target (storm_bench).
        rs = kmpc_replica.ReplicaSet(os.path.join(work, f"set{attempt}"),
                                     kdc_conf_extra=kdc_conf_extra,
                                     server_flags="--security=semi-honest")
        try:
            rs.create(users=users).start()
            r = rs.replicas[0]
            r.start_kpropd()
            rs.propagate_full(r)
            r.stop_kpropd()
            r.start()
            return rs
        except kmpc_realm.RealmError as e:
            rs.stop()
            if attempt + 1 == attempts:
                raise
            print(f"replica_bench: set-up failed, once more: {str(e)[:300]}", flush=True)
    raise AssertionError("unreachable")


def headline_extra():
    return storm_bench.dbmodules_block(kmpc_realm.REALM, disable_last_success="true",
                                       disable_lockout="true")


def sides(rs, users):
    """The storms' sides: all users at the primary; half at the primary
    and half at the replica (test_bench_targets.py builds them this way)."""
    r = rs.replicas[0]
    half = users // 2
    return (Side(rs, rs.primary, 0, users), Side(rs, rs.primary, 0, half),
            Side(rs, r, half, users - half))


def table(res):
    rows = ["| phase | KDCs | in flight per KDC | logins/s (per KDC) | p50 / p99 ms | failed "
            "| logins per Run batch | server CPU µs/login (KDCs + MPC) |",
            "|---|---|---|---|---|---|---|---|"]
    for p in res["phases"]:
        per = " + ".join(f"{x:.0f}" for x in p["per_kdc_logins_per_s"])
        lat = ", ".join(f"{a:.0f} / {b:.0f}" for a, b in zip(p["p50_ms"], p["p99_ms"]))
        rows.append(f"| {p['phase']} | {p['kdcs']} | "
                    f"{'+'.join(str(k) for k in p['concurrency_per_kdc'])} | "
                    f"{p['logins_per_s']:.0f} ({per}) | {lat} | {p['failed']} | "
                    f"{p['logins_per_run_batch']} | {p['server_cpu_us_per_login']:.0f} "
                    f"({p['kdc_cpu_us_per_login']:.0f} + {p['mpc_cpu_us_per_login']:.0f}) |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--concurrency", default="256,1024",
                    help="comma list: logins in flight at one KDC for each "
                         "round of phases (half each at two KDCs, then as many)")
    ap.add_argument("--duration", type=float, default=8)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--json", default=os.path.join(BENCH_DIR, "replicas.json"))
    ap.add_argument("--keep", action="store_true",
                    help="keep the realm's directory (logs; it holds the users' keytab)")
    args = ap.parse_args()
    try:
        concs = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        ap.error(f"--concurrency: not a comma list of integers: {args.concurrency!r}")
    if args.users < 2 or min(concs) < 2 or args.duration <= 0:
        ap.error("--users and every --concurrency must be at least 2, --duration positive")
    os.makedirs(BENCH_DIR, exist_ok=True)
    work = tempfile.mkdtemp(prefix="replicas-", dir=BENCH_DIR)
    outdir = os.path.join(BENCH_DIR, "replicas")
    os.makedirs(outdir, exist_ok=True)
    t0 = time.time()
    rs = bring_up(work, args.users, headline_extra())
    try:
        p_all, p_half, r_half = sides(rs, args.users)
        phases = []
        for c in concs:
            h = c // 2
            for name, storms in ((f"one-c{c}", [(p_all, c)]),
                                 (f"two-c{c}", [(p_half, h), (r_half, c - h)]),
                                 (f"two-x2-c{c}", [(p_half, c), (r_half, c)])):
                load = os.getloadavg()[0]
                ph = run_phase(rs, name, storms, args.duration, args.warmup, outdir)
                ph["loadavg_1min_before"] = round(load, 2)
                print(f"{name}: {ph['logins_per_s']:.0f} logins/s, failed {ph['failed']}, "
                      f"{ph['logins_per_run_batch']} logins/Run batch, "
                      f"{ph['server_cpu_us_per_login']:.0f} us server CPU/login "
                      f"(load average {load:.1f} before)", flush=True)
                phases.append(ph)
    finally:
        rs.stop()
        # The realm's files hold the load-test users' keys (users.keytab).
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    res = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "users": args.users, "duration_s": args.duration, "warmup_s": args.warmup,
           "settings": storm_bench.SETTINGS_DOC["headline"], "cpus": os.cpu_count(),
           "phases": phases, "elapsed_s": round(time.time() - t0, 1)}
    # The peaks: the best closed-loop rate with one KDC and with two.
    for k in (1, 2):
        res[f"peak_{k}_kdc_logins_per_s"] = max(p["logins_per_s"] for p in phases
                                                if p["kdcs"] == k)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=1)
    print(table(res))
    print(f"peak: one KDC {res['peak_1_kdc_logins_per_s']:.0f} logins/s, two KDCs "
          f"{res['peak_2_kdc_logins_per_s']:.0f} logins/s")
    print(f"replica_bench: {res['elapsed_s']} s; {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
