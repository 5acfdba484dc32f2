#!/usr/bin/env python3
"""A/B of the S-box circuits by batch size (the engine's depth3_max_blocks
rule): three real servers on loopback over mutual TLS, one worker each,
ENCRYPT batches of N AES blocks through `kmpc-mpc-bench keystream`, once with
every batch on the depth-3 S-box (--depth3_max_blocks=1000000) and once on
the depth-4 one (--depth3_max_blocks=0), both clusters up at once and
measured alternately (the machine may be shared: alternation keeps drift
out of the comparison). Prints, per security mode, cipher and size, the
batch latency p50 and the three servers' CPU per block per party of each
circuit and their ratio; writes the records as JSON.

  sbox_ab.py [--security semi-honest,malicious] [--blocks 28,128,512,2048,8192]
             [--cipher aes256] [--reps 2] [--out build/bench/sbox_ab.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCAL = os.path.join(ROOT, "integration-tests", "kmpc_harness", "mpc-local.sh")
CIRCUITS = {"depth3": "--depth3_max_blocks=1000000", "depth4": "--depth3_max_blocks=0"}
HZ = os.sysconf("SC_CLK_TCK")


def bin_dir():
    d = os.environ.get("KMPC_MPC_BIN_DIR") or os.path.join(
        os.environ.get("KMPC_BUILD", os.path.join(ROOT, "build")), "cmake", "mpc-server")
    if not os.access(os.path.join(d, "kmpc-mpc-bench"), os.X_OK):
        sys.exit(f"sbox_ab: {d}/kmpc-mpc-bench not built")
    return d


def cpu_ticks(work):
    t = 0
    for i in range(3):
        with open(os.path.join(work, f"party-{i}.pid")) as f:
            pid = f.read().strip()
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        t += int(fields[11]) + int(fields[12])  # utime, stime
    return t


def iters_for(security, blocks):
    n = max(4, min(200, 40000 // blocks))
    return max(3, n // 4) if security == "malicious" else n


def measure(bindir, work, servers, cipher, blocks, security):
    iters = iters_for(security, blocks)
    c0 = cpu_ticks(work)
    p = subprocess.run([os.path.join(bindir, "kmpc-mpc-bench"), f"--servers={servers}",
                        f"--certs={work}/certs", "keystream", f"--cipher={cipher}",
                        f"--blocks={blocks}", "--threads=1", f"--iters={iters}"],
                       capture_output=True, text=True, timeout=900)
    c1 = cpu_ticks(work)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        sys.exit(f"sbox_ab: bench failed: {p.stdout}{p.stderr}")
    r = json.loads(line[len("RESULT "):])
    # The warm-up batch is one more batch of `blocks`.
    r["server_cpu_us_per_block_per_party"] = (c1 - c0) / HZ * 1e6 / 3 / ((iters + 1) * blocks)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--security", default="semi-honest,malicious")
    ap.add_argument("--blocks", default="28,128,512,2048,8192")
    ap.add_argument("--cipher", default="aes256")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "bench", "sbox_ab.json"))
    a = ap.parse_args()
    bindir = bin_dir()
    env = dict(os.environ, KMPC_MPC_BIN_DIR=bindir)
    recs = []
    t0 = time.monotonic()
    for security in a.security.split(","):
        works, servers = {}, {}
        try:
            for name, flag in CIRCUITS.items():
                works[name] = tempfile.mkdtemp(prefix=f"kmpc-sbox-{name}-")
                e = dict(env, KMPC_MPC_FLAGS=f"--security={security} {flag}")
                servers[name] = subprocess.run(["bash", LOCAL, "start", works[name], "", "1"],
                                               env=e, check=True, capture_output=True,
                                               text=True).stdout.strip().splitlines()[-1]
            for rep in range(a.reps):
                for blocks in [int(x) for x in a.blocks.split(",")]:
                    order = list(CIRCUITS) if rep % 2 == 0 else list(reversed(CIRCUITS))
                    for name in order:
                        r = measure(bindir, works[name], servers[name], a.cipher, blocks, security)
                        r.update(circuit=name, security=security, rep=rep)
                        recs.append(r)
        finally:
            for w in works.values():
                subprocess.run(["bash", LOCAL, "stop", w], env=env, capture_output=True)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(recs, f, indent=1)
    print(f"{'security':11} {'cipher':7} {'blocks':>6} {'p50 d3':>8} {'p50 d4':>8} {'d3/d4':>6} "
          f"{'cpu d3':>8} {'cpu d4':>8} {'d3/d4':>6} {'rounds d3/d4':>12}  (ms; us/block/party)")
    for security in a.security.split(","):
        for blocks in [int(x) for x in a.blocks.split(",")]:
            sel = {n: [r for r in recs if r["security"] == security and r["blocks"] == blocks
                       and r["circuit"] == n] for n in CIRCUITS}
            if not all(sel.values()):
                continue
            # The best (least disturbed) repetition of each.
            lat = {n: min(r["latency_p50_ms"] for r in v) for n, v in sel.items()}
            cpu = {n: min(r["server_cpu_us_per_block_per_party"] for r in v) for n, v in sel.items()}
            rnd = {n: v[0]["rounds"] for n, v in sel.items()}
            print(f"{security:11} {a.cipher:7} {blocks:>6} {lat['depth3']:>8.2f} {lat['depth4']:>8.2f} "
                  f"{lat['depth3'] / lat['depth4']:>6.2f} {cpu['depth3']:>8.2f} {cpu['depth4']:>8.2f} "
                  f"{cpu['depth3'] / cpu['depth4']:>6.2f} {rnd['depth3']:>5.0f}/{rnd['depth4']:<6.0f}")
    print(f"written: {a.out} ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
