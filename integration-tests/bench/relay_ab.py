#!/usr/bin/env python3
"""The ring relay's own cost, ring_relay.py against kmpc-ring-relay: a
loopback ping-pong (one client, an echo server in a process of its own,
small messages one at a time, as the MPC ring's rounds go) straight to the
echo server ("direct") and through each relay at each one-way delay. A
round trip through a relay crosses it twice (out and back), so its
overhead per message is (round trip - 2 x delay - direct round trip) / 2;
"stats" gives the relay's own lateness over the same round trips.

  relay_ab.py [--delays 0,0.5] [--round-trips 2000] [--size 48] [--passes 2]
              [--rt] [--cpp PATH] [--json FILE]

--rt runs each relay under chrt -f 1 (as ring_delay.py does where chrt
runs); --cpp names the C++ relay (default: ring_delay.find_relay). Each
point is the median round trip of --round-trips after 50 warm-up ones, the
implementations alternating over --passes passes (the medians' median).

Usage (the echo server, by this script):
  relay_ab.py echo
"""

import argparse
import json
import os
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from bench import ring_delay  # noqa: E402

WARMUP = 50


def echo():
    """Echoes each connection in turn; prints its port first."""
    srv = socket.create_server(("127.0.0.1", 0))
    print(srv.getsockname()[1], flush=True)
    while True:
        c, _ = srv.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with c:
            while data := c.recv(65536):
                c.sendall(data)


def first_line(p, what):
    ready, _, _ = select.select([p.stdout], [], [], 10)
    line = p.stdout.readline() if ready else ""
    if not line:
        raise RuntimeError(f"{what} did not start")
    return line.strip()


def ping_pong(port, n, size):
    """Round trips (us) of n messages of size bytes, one at a time."""
    msg = b"m" * size
    out = []
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(WARMUP + n):
            t0 = time.perf_counter_ns()
            c.sendall(msg)
            got = 0
            while got < size:
                got += len(c.recv(65536))
            if i >= WARMUP:
                out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


class Relay:
    """One relay process in front of the echo server."""

    def __init__(self, impl, argv, echo_port, work, rt):
        self.impl = impl
        self.ctl = os.path.join(work, f"{impl}.sock")
        self.p = subprocess.Popen([*(["chrt", "-f", "1"] if rt else []), *argv,
                                   "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{echo_port}",
                                   "--control", self.ctl], stdout=subprocess.PIPE, text=True)
        self.port = int(first_line(self.p, impl).rsplit(":", 1)[1])

    def command(self, line):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.ctl)
            s.sendall(line.encode() + b"\n")
            return s.makefile().readline().strip()

    def stop(self):
        self.p.terminate()
        self.p.wait(10)


def point(rtts):
    xs = sorted(rtts)
    return {"p50_us": round(statistics.median(xs), 1),
            "p90_us": round(xs[int(0.9 * len(xs))], 1)}


def run(args, log):
    cpp = args.cpp or ring_delay.find_relay()
    impls = {"python": [sys.executable, ring_delay.RELAY]}
    if cpp:
        impls["c++"] = [cpp]
    rt = args.rt and bool(shutil.which("chrt"))
    delays = [float(x) for x in args.delays.split(",") if x.strip()]
    work = tempfile.mkdtemp(prefix="relay-ab-")
    ep = subprocess.Popen([sys.executable, os.path.abspath(__file__), "echo"],
                          stdout=subprocess.PIPE, text=True)
    relays = {}
    try:
        echo_port = int(first_line(ep, "echo"))
        relays = {k: Relay(k, v, echo_port, work, rt) for k, v in impls.items()}
        runs = {}
        for _ in range(args.passes):
            runs.setdefault("direct", []).append(
                point(ping_pong(echo_port, args.round_trips, args.size)))
            for d in delays:
                for k, r in relays.items():
                    r.command(f"delay {d}")
                    r.command("stats")
                    pp = point(ping_pong(r.port, args.round_trips, args.size))
                    pp["lateness_p50_us"] = json.loads(r.command("stats"))["lateness"].get("p50_us")
                    runs.setdefault((k, d), []).append(pp)
    finally:
        for r in relays.values():
            r.stop()
        ep.kill()
        ep.wait()
    return summary(runs, args, cpp, rt, log)


def summary(runs, args, cpp, rt, log):
    med = lambda ps, key: round(statistics.median(p[key] for p in ps), 1)  # noqa: E731
    direct = med(runs.pop("direct"), "p50_us")
    out = {"round_trips": args.round_trips, "size": args.size, "passes": args.passes,
           "sched_fifo": rt, "cpp": cpp, "loadavg": os.getloadavg()[0],
           "direct_rtt_p50_us": direct, "points": []}
    log(f"direct: round trip p50 {direct} us ({args.round_trips} x {args.size} B, "
        f"{args.passes} passes{', SCHED_FIFO' if rt else ''})")
    for (impl, d), ps in runs.items():
        rtt = med(ps, "p50_us")
        row = {"impl": impl, "delay_ms": d, "rtt_p50_us": rtt, "rtt_p90_us": med(ps, "p90_us"),
               "rtt_minus_2_delays_us": round(rtt - 2e3 * d, 1),
               "overhead_per_message_us": round((rtt - 2e3 * d - direct) / 2, 1),
               "lateness_p50_us": [p["lateness_p50_us"] for p in ps]}
        out["points"].append(row)
        log(f"{impl:6s} {d:g} ms: round trip p50 {rtt} us, minus 2 x delay "
            f"{row['rtt_minus_2_delays_us']} us, {row['overhead_per_message_us']} us a "
            f"message over direct (lateness p50 {row['lateness_p50_us']} us)")
    return out


def main():
    if sys.argv[1:] == ["echo"]:
        return echo()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--delays", default="0,0.5")
    ap.add_argument("--round-trips", type=int, default=2000)
    ap.add_argument("--size", type=int, default=48)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--rt", action="store_true")
    ap.add_argument("--cpp")
    ap.add_argument("--json")
    args = ap.parse_args()
    out = run(args, print)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
