#!/usr/bin/env python3
"""Where the KDC's CPU per login goes: perf profile of krb5kdc during the
closed-loop AS storm kdc_cpu_ab.py runs, split into krb5's own work and the
kdcmpc module's, krb5's in buckets (docs/bench-log.md, 2026-11-24 krb5as).

Each target (stock, or kmpc with the module) gets a fresh realm
(storm_bench.py's factories, headline settings), a warm-up, then
`perf record -F 999 --call-graph dwarf -p <krb5kdc>` over the storm.
A sample of the KDC's main thread is krb5's if its innermost known frame is
in a krb5 DSO, the module's if in the module, gRPC, protobuf, absl,
libstdc++ or OpenSSL (the module's callbacks into krb5, the AS
continuations, are krb5's); other threads are the module's. krb5's samples
go to the bucket of the outermost listed function on their stack.
Figures are us per login (samples / 999 Hz / logins of the storm).

Usage (root, perf installed; KRB5_PREFIX and KMPC_CMAKE_BUILD as for
kdc_cpu_ab.py; a target may name its own prefix and build):
  /usr/bin/python3 integration-tests/bench/kdc_profile.py stock \\
      main=/work/main/build/cmake@/work/main/build/krb5 new=build/cmake@build/krb5
"""

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

HZ = 999
K5_DSOS = ("krb5kdc", "libkrb5.so", "libk5crypto", "libkdb5", "db2.so", "otp.so",
           "libkadm5srv", "libkrb5support", "libcom_err", "libverto")
MODULE_MARKS = ("kmpc", "grpc", "gpr", "protobuf", "absl", "libstdc++", "libssl",
                "libcrypto")
# Outermost match on the stack wins (a lookup inside the OTP hints counts as
# the hints' cost).
BUCKETS = {
    "krb5_db_get_principal": "KDB lookups",
    "krb5_dbe_decrypt_key_data": "stored-key decryption",
    "hint_list_next": "preauth hints (PREAUTH_REQUIRED e-data)",
    "krb5_encrypt_tkt_part": "ticket and reply encryption (local)",
    "krb5_encode_kdc_rep": "ticket and reply encryption (local)",
    "krb5_c_decrypt": "timestamp decryption (local)",
    "kdc_mpc_pac_sign": "PAC signer and MPC continuations",
    "signer_finish": "PAC signer and MPC continuations",
    "signer_job_done": "PAC signer and MPC continuations",
    "as_req_mpc_round_done": "PAC signer and MPC continuations",
    "krb5_get_permitted_enctypes": "permitted enctypes",
    "as_req_respond": "respond, send and free",
    "send_to_from": "respond, send and free",
    "krb5_klog_syslog": "logging",
    "log_as_req": "logging",
    "handle_authdata": "authdata (PAC made and signed or stand-in signed)",
    "kdc_check_lookaside": "replay cache",
    "kdc_insert_lookaside": "replay cache",
    "finish_dispatch_cache": "replay cache",
}


def owner(frames):
    # A module given as a file of another name (KMPC_KDC_MODULE=/tmp/a.so)
    # is the module too: its samples are not krb5's.
    mod = os.path.basename(os.environ.get("KMPC_KDC_MODULE", "")) or None
    for _sym, dso in frames:
        d = os.path.basename(dso)
        if d.startswith(K5_DSOS):
            return "krb5"
        if d == mod or any(m in d for m in MODULE_MARKS):
            return "module"
    return "other"


def read_stacks(data):
    """[(tid, [(sym, dso), ...] innermost first)] from perf script."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,ip,sym,dso"],
                         capture_output=True, text=True, check=True).stdout
    stacks, cur = [], None
    for line in out.splitlines():
        if not line.strip():
            if cur:
                stacks.append(cur)
            cur = None
        elif not line[0].isspace():
            cur = (line.split()[1], [])
        elif cur is not None:
            parts = line.strip().split(None, 1)
            if len(parts) == 2:
                sym, _, dso = parts[1].rpartition(" (")
                cur[1].append((sym, dso.rstrip(")")))
    if cur:
        stacks.append(cur)
    return stacks


def attribute(stacks, logins):
    """{'krb5': us, 'module (KDC thread)': us, 'module (other threads)': us,
    'buckets': {name: us}}."""
    us = 1e6 / HZ / max(logins, 1)
    main = collections.Counter(t for t, _ in stacks).most_common(1)[0][0]
    total, buckets = collections.Counter(), collections.Counter()
    for tid, frames in stacks:
        who = owner(frames)
        if tid != main:
            total["module (other threads)" if who != "krb5" else "krb5 (other threads)"] += 1
            continue
        if who != "krb5":
            total["module (KDC thread)"] += 1
            continue
        total["krb5"] += 1
        name = next((BUCKETS[s] for s, _ in reversed(frames) if s in BUCKETS),
                    "everything else")
        buckets[name] += 1
    res = {k: round(v * us, 1) for k, v in total.items()}
    res["buckets"] = {k: round(v * us, 1) for k, v in buckets.most_common()}
    return res


def make_target(kind, wd, users):
    """kind "stock" or kmpc, in wd (test_bench_targets.py builds it this way)."""
    from bench import storm_bench
    return (storm_bench.stock_factory(wd, "headline", users) if kind == "stock"
            else storm_bench.kmpc_factory(wd, "headline", users))


def profile_one(kind, users, secs, outdir, label):
    """Bring up the target, warm it, perf-record its KDC over the storm."""
    from bench import storm_bench
    wd = tempfile.mkdtemp(prefix=f"prof-{label}-", dir=outdir)
    t = make_target(kind, wd, users)
    c = t.saturation_concurrency
    wu = getattr(t, "warmup_s", 1.0)
    ramp = ["--ramp", wu] if c > 64 else []
    data = os.path.join(wd, "perf.data")
    try:
        storm_bench.run_storm(t, ["-c", 8, "-d", 2], "warm", wd, check=True)
        p = subprocess.Popen(["perf", "record", "-F", str(HZ), "-g", "--call-graph",
                              "dwarf,16384", "-o", data, "-p", str(t.watch["krb5kdc"])],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        res = storm_bench.run_storm(t, ["-c", c, "-d", secs, "-w", wu, *ramp],
                                    "storm", wd, check=True)
        p.send_signal(signal.SIGINT)
        p.wait()
    finally:
        t.stop()
    logins = res.get("ok_all_phases", res["ok"]) + res.get("failed_all_phases", 0)
    out = attribute(read_stacks(data), logins)
    out.update(rate=res["logins_per_s"], kdc_us_proc=res["cpu"]["krb5kdc"]["us_per_login"])
    return out


def in_child(kind, build, prefix, users, secs, outdir, label):
    env = dict(os.environ)
    if prefix:
        env["KRB5_PREFIX"] = prefix
    if build:
        env["KMPC_CMAKE_BUILD"] = build
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one",
                        json.dumps([kind, users, secs, outdir, label])],
                       env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"{label} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def table(results):
    labels = list(results)
    rows = ["krb5", "module (KDC thread)", "module (other threads)"]
    names = []
    for r in results.values():
        names += [n for n in r["buckets"] if n not in names]
    print("| us per login | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    print("| KDC, /proc | " + " | ".join(f"{r['kdc_us_proc']:.1f}" for r in results.values()) + " |")
    for n in rows:
        print(f"| **{n}** | " + " | ".join(f"{r.get(n, 0):.1f}" for r in results.values()) + " |")
    for n in names:
        print(f"| krb5: {n} | " + " | ".join(f"{r['buckets'].get(n, 0):.1f}"
                                             for r in results.values()) + " |")
    print("| logins/s | " + " | ".join(f"{r['rate']:,.0f}" for r in results.values()) + " |")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(profile_one(*json.loads(sys.argv[2]))), flush=True)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="+",
                    help="stock, or label=KMPC_CMAKE_BUILD[@KRB5_PREFIX] for kmpc")
    ap.add_argument("--users", type=int, default=200)
    ap.add_argument("-d", "--seconds", type=int, default=8)
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()
    outdir = tempfile.mkdtemp(prefix="kdc-profile-")
    results = {}
    for t in a.targets:
        label, sep, rest = t.partition("=")
        build, _, prefix = rest.partition("@")
        kind = "stock" if label.startswith("stock") else "kmpc"
        results[label] = in_child(kind, os.path.abspath(build) if build else "",
                                  os.path.abspath(prefix) if prefix else "",
                                  a.users, a.seconds, outdir, label)
    table(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
