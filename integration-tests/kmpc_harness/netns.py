"""Emulated hosts for kmpc: Linux network namespaces joined by veth links to
one bridge (ns <tag>-sw holds bridge br0), with netem delay and rate on
every host's link.  The addresses (10.77.0.0/24) exist only inside these
namespaces: nothing is routed to or from the machine's own network.  If the
kernel has no sch_netem (CONFIG_NET_SCH_NETEM not set), Lan says so and
goes on with no added delay (rate alone through tbf when the kernel has
that, else no shaping).

Namespaces left by a run that was killed (-9) carry the dead run's PID in
their tag; cleanup_stale() removes them.  Used by the netns benchmark
(bench/netns_bench.py) and the package test (kmpc_harness/packages.py).
"""

import os
import re
import subprocess
import sys

from kmpc_harness import cluster as kmpc_cluster

NS_PREFIX = "kmpcbench"
SUBNET = "10.77.0"
HOSTS = {"kdc": f"{SUBNET}.1", "p0": f"{SUBNET}.11", "p1": f"{SUBNET}.12",
         "p2": f"{SUBNET}.13", "cl": f"{SUBNET}.100"}


class NetnsError(Exception):
    pass


def sh(argv, check=True, timeout=30):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def bridged_hosts(ns, hosts, made, run=sh):
    """Namespace ns("sw") with a bridge br0, and one namespace ns(h) per
    host h of hosts {name: address}, its eth0 (address/24) a veth into the
    bridge; every namespace made is appended to made as soon as it exists
    (so that a failure half-way leaves nothing the caller cannot remove)."""
    sw = ns("sw")
    for h in ["sw", *hosts]:
        run(["ip", "netns", "add", ns(h)])
        made.append(ns(h))
        run(["ip", "-n", ns(h), "link", "set", "lo", "up"])
    run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
    run(["ip", "-n", sw, "link", "set", "br0", "up"])
    for h, addr in hosts.items():
        port = f"sw-{h}"
        run(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
             "netns", ns(h)])
        run(["ip", "-n", sw, "link", "set", port, "master", "br0"])
        run(["ip", "-n", sw, "link", "set", port, "up"])
        run(["ip", "-n", ns(h), "addr", "add", f"{addr}/24", "dev", "eth0"])
        run(["ip", "-n", ns(h), "link", "set", "eth0", "up"])


def list_ns():
    p = sh(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def cleanup_stale(only_tag=None):
    """Delete our namespaces (NS_PREFIX<pid>-*) whose run is gone (or those
    of only_tag).  Processes still inside are killed first, by PID."""
    removed = []
    for ns in list_ns():
        m = re.match(rf"^({NS_PREFIX}(\d+))-\w+$", ns)
        if not m:
            continue
        tag, pid = m.group(1), int(m.group(2))
        if only_tag is not None:
            if tag != only_tag:
                continue
        elif kmpc_cluster.pid_alive(pid) and pid != os.getpid():
            continue  # another live run's
        for p in sh(["ip", "netns", "pids", ns], check=False).stdout.split():
            kmpc_cluster.stop_pid(int(p), timeout=3)
        sh(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    return removed


class Lan:
    """The namespaces, the bridge and the links."""

    def __init__(self, rtt_ms, rate):
        self.tag = f"{NS_PREFIX}{os.getpid()}"
        self.rtt_ms = rtt_ms
        self.rate = rate
        self.shaping = None
        self.note = ""
        self.made = []

    def ns(self, host):
        return f"{self.tag}-{host}"

    def exec_prefix(self, host):
        return ["ip", "netns", "exec", self.ns(host)]

    def up(self):
        bridged_hosts(self.ns, HOSTS, self.made)
        self.shape()
        return self

    def shape(self):
        """netem delay RTT/2 + rate on every host's egress; tbf (rate only)
        if the kernel lacks netem; nothing if it lacks both."""
        half_us = max(int(round(self.rtt_ms * 1000 / 2)), 0)
        errors = []
        for kind in ("netem", "tbf"):
            ok = True
            for h in HOSTS:
                argv = ["tc", "-n", self.ns(h), "qdisc", "replace", "dev", "eth0", "root"]
                if kind == "netem":
                    argv += ["netem", "delay", f"{half_us}us", "rate", self.rate,
                             "limit", "100000"]
                else:
                    argv += ["tbf", "rate", self.rate, "burst", "4mb", "latency", "20ms"]
                p = sh(argv, check=False)
                if p.returncode != 0:
                    ok = False
                    errors.append(f"{kind}: {p.stderr.strip()}")
                    break
            if ok:
                self.shaping = kind
                break
        cfg = ""
        try:
            import gzip
            with gzip.open("/proc/config.gz", "rt") as f:
                cfg = " ".join(line.strip() for line in f if "NET_SCH_NETEM" in line)
        except OSError:
            pass
        if self.shaping == "netem":
            self.note = (f"netem on every host link: delay {half_us} us each way "
                         f"(RTT {self.rtt_ms} ms), rate {self.rate}")
        else:
            why = (f"kernel {os.uname().release} has no sch_netem "
                   f"({cfg or 'CONFIG_NET_SCH_NETEM unknown'}; tc: {errors[0] if errors else '?'})")
            if self.shaping == "tbf":
                self.note = (f"NO DELAY EMULATED: {why}. Links shaped to {self.rate} with tbf "
                             f"only; the RTT is the veth/bridge path's own (~tens of us), "
                             f"not {self.rtt_ms} ms")
            else:
                self.note = (f"NO DELAY AND NO RATE EMULATED: {why}, and tbf failed too; "
                             f"plain veth/bridge links")
        return self.shaping

    ECHO_SERVER = ("import socket,sys\n"
                   "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                   "s.bind((sys.argv[1],0));print(s.getsockname()[1],flush=True)\n"
                   "s.settimeout(10)\n"
                   "while True:\n"
                   "  try: d,a=s.recvfrom(64)\n"
                   "  except OSError: break\n"
                   "  if d==b'q': break\n"
                   "  s.sendto(d,a)\n")
    ECHO_CLIENT = ("import socket,sys,time\n"
                   "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.settimeout(1)\n"
                   "a=(sys.argv[1],int(sys.argv[2]));r=[]\n"
                   "for i in range(int(sys.argv[3])):\n"
                   "  t=time.perf_counter();s.sendto(b'x',a)\n"
                   "  try: s.recvfrom(64)\n"
                   "  except OSError: continue\n"
                   "  r.append(time.perf_counter()-t)\n"
                   "s.sendto(b'q',a);r.sort()\n"
                   "print(r[len(r)//2]*1e3 if r else -1)\n")

    def udp_rtt_ms(self, src="kdc", dst="p0", count=200):
        """Median round trip of a small UDP datagram from host src to host
        dst (a Python echo in dst's namespace): what the links add, plus two
        Python processes' own time (~tens of us)."""
        srv = subprocess.Popen([*self.exec_prefix(dst), sys.executable, "-c", self.ECHO_SERVER,
                                HOSTS[dst]], stdout=subprocess.PIPE, text=True)
        try:
            port = srv.stdout.readline().strip()
            p = sh([*self.exec_prefix(src), sys.executable, "-c", self.ECHO_CLIENT, HOSTS[dst],
                    port, str(count)], check=False, timeout=60)
            v = float(p.stdout.strip() or -1)
            return round(v, 3) if v >= 0 else None
        except (ValueError, subprocess.TimeoutExpired):
            return None
        finally:
            try:
                srv.wait(5)
            except subprocess.TimeoutExpired:
                kmpc_cluster.stop_pid(srv.pid)

    def down(self):
        cleanup_stale(only_tag=self.tag)
        self.made = []
