#!/usr/bin/env python3
"""Login storms against kmpc with the KDC and the three MPC servers on their
own emulated "hosts": Linux network namespaces joined by veth links to one
bridge, with netem delay and rate on every host's link (make bench-netns).

    ns <tag>-sw    bridge br0 (the LAN switch)
    ns <tag>-kdc   eth0 10.77.0.1/24    krb5kdc + kdcmpc module
    ns <tag>-p0    eth0 10.77.0.11/24   kmpc-mpc-server party 0
    ns <tag>-p1    eth0 10.77.0.12/24   kmpc-mpc-server party 1
    ns <tag>-p2    eth0 10.77.0.13/24   kmpc-mpc-server party 2
    ns <tag>-cl    eth0 10.77.0.100/24  kmpc-storm (the clients)

Every host's eth0 gets `netem delay RTT/2 rate RATE` on egress, so any two
hosts see RTT (default 0.13 ms, 10 Gbit/s: the LAN of Araki et al., CCS
2016).  The addresses exist only inside these namespaces: nothing is routed
to or from the machine's own network.  If the kernel has no sch_netem
(CONFIG_NET_SCH_NETEM not set), the run says so and goes on with no added
delay (rate alone through tbf when the kernel has that, else no shaping).

The realm is made on loopback first (integration-tests/kmpc_harness/kmpc_realm.py bring_up: certs
with the namespace addresses in their SANs, keys shared, KDB of handles),
then the KDC and the servers are stopped and started again inside their
namespaces with the same stores, KDB and certificates, the way
deploy/THREE-HOSTS.md deploys them: each server from the ExecStart line of
deploy/systemd/kmpc-mpc-server@.service with a flag file written by
deploy/kmpc_deploy.py (the guide's tool), the KDC from the ExecStart line
of deploy/systemd/kmpc-krb5kdc.service; only the installed paths are
mapped to the build and work directories.

Measured (kmpc-storm from the client namespace, headline settings):
  one client with batch_window_ms = 100, open-loop points at 50% and 90% of
  the loopback peak (build/bench/storm.json, else --rate), closed-loop
  saturation; then the KDC restarted with early_flush = true: one client.
Then ring_delay.py's sweep (--ring-delays, default 0.1, 0.5 and 2 ms one way
between the MPC servers; netem's where the kernel has it, else a delaying
relay on each server's ring link): Debian's kinit p50, one client, for a
user whose key is an aes256-cts handle and for a krbtgt-only user, beside
rounds x delay from the servers' own counters.
Writes build/bench/netns.json.  The namespaces and every process are removed
at the end, also on failure or SIGTERM/SIGINT; namespaces left by a run
that was killed (-9) are removed by the next run (their tag holds the dead
run's PID) or by `netns_bench.py cleanup`.

Usage: netns_bench.py [--rtt-ms 0.13] [--rate 10gbit] [--users 1000]
                        [--duration 4] [--quick] [--ring-delays 0.1,0.5,2]
                        [--delay-logins 15] [--ring-delay-via auto|relay|netem]
                        [--ring-delay-only] [--masked-server-flag FLAG ...]
       netns_bench.py cleanup
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# integration-tests/ (kmpc_harness, bench) on the path when run as a script.
sys.path.insert(0, os.path.dirname(HERE))
from bench import ring_delay, storm_bench  # noqa: E402
from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from kmpc_harness.kmpc_realm import bring_up  # noqa: E402
from kmpc_harness import realm as kmpc_realm  # noqa: E402
from kmpc_harness.deploy_tool import kmpc_deploy  # noqa: E402
from kmpc_harness.netns import HOSTS, Lan, NetnsError, cleanup_stale, list_ns  # noqa: E402

BENCH_DIR = storm_bench.BENCH_DIR


class NetnsKmpc:
    """A storm target (storm_bench's interface) whose KDC and servers run in
    the Lan's namespaces."""

    def __init__(self, lan, workdir, n_users, headline=True, delay_users=False):
        """delay_users: also ring_delay.py's two users (ring_delay.add_users),
        their passwords in delay_passwords."""
        self.lan = lan
        extra = ""
        if headline:
            extra = storm_bench.dbmodules_block(kmpc_realm.REALM, disable_last_success="true",
                                                disable_lockout="true")
        os.environ["KMPC_CERT_EXTRA_SAN"] = ",".join(
            f"IP:{HOSTS[f'p{i}']}" for i in range(3))
        try:
            self.realm = bring_up(workdir, n_random=n_users, kdc_conf_extra=extra)
        finally:
            os.environ.pop("KMPC_CERT_EXTRA_SAN", None)
        r = self.realm
        self.delay_passwords = ring_delay.add_users(r) if delay_users else {}
        self.server_procs = {}
        # Party i's --ring_prev over its flag file's (a relay), if any.
        self.ring_prev = {}
        self.n_users = n_users
        self.keytab = r.users_keytab
        self.principal_fmt = "user%d@" + r.realm
        self.service = f"{kmpc_cluster.SERVICE}@{r.realm}"
        self.env = r.env
        self.udp_ports = []
        self.enctype = "aes256-ctr-mpc"
        self.p99_bound_ms = 2000.0
        self.max_inflight = 4096
        self.saturation_concurrency = 1024
        self.warmup_s = 3.0
        self.timeout_s = 10
        self.exec_prefix = lan.exec_prefix("cl")
        base = r.cluster.base
        self.servers = ",".join(f"{HOSTS[f'p{i}']}:{base + i}" for i in range(3))
        # Move into the namespaces: stop, re-address, start.
        r.stop()
        self._readdress()
        self._start_servers()
        self._start_kdc()
        self.watch = {"krb5kdc": r.kdc_proc.pid,
                      **{f"mpc-server-{i}": self.server_procs[i].pid for i in range(3)}}

    def _readdress(self):
        r = self.realm
        base = r.cluster.base
        with open(r.kdc_conf) as f:
            conf = f.read()
        conf = conf.replace(f"127.0.0.1:{r.kdc_port}", f"{HOSTS['kdc']}:{r.kdc_port}")
        for i in range(3):
            conf = conf.replace(f"127.0.0.1:{base + i}", f"{HOSTS[f'p{i}']}:{base + i}")
        with open(r.kdc_conf, "w") as f:
            f.write(conf)
        with open(r.krb5_conf) as f:
            conf = f.read()
        conf = conf.replace(f"kdc = 127.0.0.1:{r.kdc_port}", f"kdc = {HOSTS['kdc']}:{r.kdc_port}")
        with open(r.krb5_conf, "w") as f:
            f.write(conf)

    def server_argv(self, i):
        """Party i's command line: the unit's ExecStart with the flag file
        kmpc_deploy.py writes (the guide's steps), installed paths mapped to
        the build tree and DIR/etc."""
        c = self.realm.cluster
        base = c.base
        etc = os.path.join(self.realm.dir, "etc-kmpc")
        os.makedirs(etc, exist_ok=True)
        hosts = [HOSTS[f"p{j}"] for j in range(3)]
        # The store of party i is STORE/store-i (kmpc_deploy's layout), the
        # loopback cluster's c.store_dir(i) == c.dir/store-i.
        text = kmpc_deploy.server_flags(
            i, hosts, port=[base + j for j in range(3)],
            ring_port=[base + 10 + j for j in range(3)], certs=c.certs, store=c.dir,
            workers=c.workers, crl=os.path.exists(os.path.join(c.certs, "crl.pem")))
        if i in self.ring_prev:
            text = re.sub(r"^--ring_prev=.*$", f"--ring_prev={self.ring_prev[i]}", text,
                          flags=re.M)
        # Flags a sweep adds to the deployment's (ring_delay.py: the masked
        # Runs' points), one per line as the flag file holds them.
        for flag in getattr(self, "extra_server_flags", []):
            text = text.rstrip("\n") + "\n" + flag + "\n"
        with open(os.path.join(etc, f"party{i}.flags"), "w") as f:
            f.write(text)
        server = kmpc_cluster.find_built("mpc-server/kmpc-mpc-server")
        argv = kmpc_deploy.unit_exec_start(kmpc_deploy.SERVER_UNIT, instance=i)
        return kmpc_deploy.relocate(argv, {
            os.path.join(kmpc_deploy.BIN_DIR, "kmpc-mpc-server"): server,
            kmpc_deploy.CONF_DIR: etc})

    def _start_servers(self):
        c = self.realm.cluster
        for i in range(3):
            log = open(c.log_path(i), "a")
            argv = [*self.lan.exec_prefix(f"p{i}"), *self.server_argv(i)]
            self.server_procs[i] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            log.close()
        # ring up on all three (kmpc-admin status from the KDC's host)
        admin = kmpc_cluster.find_built("mpc-server/kmpc-admin")
        flags = [f"--servers={self.servers}", f"--ca={c.certs}/ca.pem",
                 f"--cert={c.certs}/admin.pem", f"--key={c.certs}/admin.key"]
        deadline = time.time() + 30
        out = ""
        while time.time() < deadline:
            p = subprocess.run([*self.lan.exec_prefix("kdc"), admin, *flags,
                                "--timeout-ms=2000", "status"], capture_output=True, text=True,
                               timeout=60, env={k: v for k, v in os.environ.items()
                                                if k != "KMPC_ADMIN_CONFIG"})
            out = p.stdout + p.stderr
            if out.count(", ring up,") == 3:
                return
            if any(pr.poll() is not None for pr in self.server_procs.values()):
                raise NetnsError("an MPC server died in its namespace:\n" + c.logs())
            time.sleep(0.2)
        raise NetnsError(f"the MPC ring did not come up in the namespaces:\n{out}\n{c.logs()}")

    def _start_kdc(self):
        r = self.realm
        offset = os.path.getsize(r.kdc_log) if os.path.exists(r.kdc_log) else 0
        # The unit's ExecStart (kmpc-krb5kdc.service), the private prefix
        # mapped to this build's.
        argv = kmpc_deploy.relocate(
            kmpc_deploy.unit_exec_start(kmpc_deploy.KDC_UNIT, env={"KMPC_REALM": r.realm}),
            {kmpc_deploy.KRB5_PREFIX: kmpc_realm.PREFIX})
        r.kdc_proc = subprocess.Popen(
            [*self.lan.exec_prefix("kdc"), *argv],
            env=r.env, stdout=open(os.path.join(r.dir, "krb5kdc.out"), "ab"),
            stderr=subprocess.STDOUT)
        with open(os.path.join(r.dir, "krb5kdc.pid"), "w") as f:
            f.write(str(r.kdc_proc.pid))
        deadline = time.time() + 20
        while True:
            if r.kdc_proc.poll() is not None:
                raise NetnsError("krb5kdc exited in its namespace:\n" + r.logs())
            with open(r.kdc_log) as f:
                f.seek(offset)
                if "commencing operation" in f.read():
                    break
            if time.time() > deadline:
                raise NetnsError("krb5kdc did not start in its namespace:\n" + r.logs())
            time.sleep(0.05)
        # First login from the client host (the module connects on demand).
        kt = os.path.join(r.dir, "warmup.keytab")
        env = dict(r.env, KRB5CCNAME="FILE:" + os.path.join(r.dir, "warmup.ccache"))
        deadline = time.time() + 20
        while True:
            p = subprocess.run([*self.exec_prefix, kmpc_realm.binpath("kinit"), "-k", "-t", kt,
                                r.WARMUP], env=env, capture_output=True, text=True, timeout=30)
            if p.returncode == 0:
                break
            if time.time() > deadline or r.kdc_proc.poll() is not None:
                raise NetnsError(f"warm-up login failed: {p.stderr}\n" + r.logs())
            time.sleep(0.3)

    def restart_kdc(self, options):
        r = self.realm
        r.stop_kdc()
        with open(r.kdc_conf) as f:
            conf = f.read()
        for k, v in options.items():
            conf, n = re.subn(rf"^(\s*){k}\s*=.*$", rf"\g<1>{k} = {v}", conf, flags=re.M)
            if not n:
                conf = re.sub(r"^(\s*)key = (.*kdc\.key)$", rf"\g<0>\n\g<1>{k} = {v}", conf,
                              count=1, flags=re.M)
        with open(r.kdc_conf, "w") as f:
            f.write(conf)
        self._start_kdc()
        self.watch["krb5kdc"] = r.kdc_proc.pid

    def restart_servers(self, ring_prev=None):
        """The three servers stopped and started again, party i dialling
        ring_prev[i] for its predecessor where given (else the flag file's)."""
        for p in self.server_procs.values():
            kmpc_cluster.stop_pid(p.pid)
        self.ring_prev = dict(ring_prev or {})
        self._start_servers()
        self.watch.update({f"mpc-server-{i}": self.server_procs[i].pid for i in range(3)})

    def mpc_counters(self):
        return storm_bench.mpc_metrics(self.servers, self.realm.cluster.certs,
                                       prefix=self.lan.exec_prefix("kdc"))

    def alive(self):
        return (self.realm.kdc_alive()
                and all(p.poll() is None for p in self.server_procs.values()))

    def logs(self):
        return self.realm.logs()

    def stop(self):
        self.realm.stop_kdc()
        for p in self.server_procs.values():
            kmpc_cluster.stop_pid(p.pid)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        self.realm.cluster.stop()  # pid files from the loopback start: already gone


def loopback_peak(path):
    try:
        with open(path) as f:
            return json.load(f)["kmpc"]["settings"]["headline"]["peak_logins_per_s"] or None
    except (OSError, ValueError, KeyError):
        return None


def figures(res):
    lat = res["latency_us"]
    return {"logins_per_s": res["logins_per_s"], "ok": res["ok"],
            "failed": res["failed_all_phases"], "dropped": res["dropped"],
            "retransmits": res["retransmits"],
            **{k + "_ms": v / 1e3 for k, v in lat.items()
               if k in ("p50", "p90", "p99", "p999", "max")},
            "cpu": res["cpu"], "mpc": res.get("mpc")}


def netns_target(lan, work, users, delay_users=False):
    """The storm's target in the Lan's namespaces, its realm in work
    (test_bench_targets.py builds it this way)."""
    return NetnsKmpc(lan, os.path.join(work, "realm"), users, delay_users=delay_users)


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", nargs="?", default="run", choices=("run", "cleanup"))
    ap.add_argument("--rtt-ms", type=float, default=0.13, help="round trip between hosts")
    ap.add_argument("--rate", default="10gbit", help="link rate (tc syntax)")
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=4.0, help="seconds per point")
    ap.add_argument("--peak", type=float, default=None,
                    help="logins/s the open-loop points are fractions of "
                         "(default: kmpc/headline peak in storm.json, else 1000)")
    ap.add_argument("--storm-json", default=os.path.join(BENCH_DIR, "storm.json"))
    ap.add_argument("--quick", action="store_true", help="one-client points only")
    ap.add_argument("--ring-delays", default="0.1,0.5,2",
                    help="one-way delays (ms) between the MPC servers for ring_delay.py's "
                         "sweep, comma-separated; empty: no sweep")
    ap.add_argument("--delay-logins", type=int, default=15,
                    help="sequential kinit logins of each user per delay")
    ap.add_argument("--ring-delay-via", default="auto", choices=("auto", "relay", "netem"),
                    help="how the delay is made (auto: netem where the kernel has it)")
    ap.add_argument("--ring-delay-only", action="store_true",
                    help="no storms: the ring delay sweep alone")
    ap.add_argument("--masked-server-flag", action="append", default=[],
                    help="a server flag added for the sweep's masked points (repeat; "
                         "a variant to measure, e.g. --ring_spin_us=300)")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "netns.json"))
    return ap


def storms(target, args, peak, outdir, out, log):
    """The storm points (module docstring) into out."""
    d = args.duration
    storm_bench.run_storm(target, ["-c", 1, "-d", 1], "warm", outdir)
    one = storm_bench.run_storm(target, ["-c", 1, "-d", d, "-w", 0.5], "one-client",
                                outdir, check=True)
    out["one_client_window_100ms"] = figures(one)
    log(f"  one client, window 100 ms: {storm_bench.brief(one)}")
    if not args.quick:
        for name, fr in (("at_50pct_of_peak", 0.5), ("at_90pct_of_peak", 0.9)):
            rate = round(peak * fr)
            res = storm_bench.run_storm(
                target, ["-r", rate, "-d", d, "-w", target.warmup_s, "--timeout",
                         target.timeout_s, "--max-inflight", target.max_inflight,
                         "--max-errors", 1000000], f"open-{rate}", outdir)
            out[name] = {"offered": rate, **figures(res)}
            log(f"  open loop {rate}/s ({int(fr * 100)}% of loopback peak): "
                f"{storm_bench.brief(res)}")
        sat = storm_bench.run_storm(
            target, ["-c", target.saturation_concurrency, "-d", d, "-w", target.warmup_s,
                     "--ramp", target.warmup_s, "--max-errors", 1000000],
            "saturation", outdir)
        out["saturation_closed_loop"] = {"concurrency": target.saturation_concurrency,
                                         **figures(sat)}
        log(f"  saturation (closed loop, c={target.saturation_concurrency}): "
            f"{storm_bench.brief(sat)}")
    target.restart_kdc({"early_flush": "true"})
    storm_bench.run_storm(target, ["-c", 1, "-d", 1], "warm-ef", outdir)
    one = storm_bench.run_storm(target, ["-c", 1, "-d", d, "-w", 0.5],
                                "one-client-early-flush", outdir, check=True)
    out["one_client_early_flush"] = figures(one)
    log(f"  one client, early flush: {storm_bench.brief(one)}")


def delay_sweep(target, args, work, log):
    """ring_delay.py's sweep, or {"error"} (the storms' figures stand)."""
    delays = [float(x) for x in args.ring_delays.split(",") if x.strip()]
    log(f"== ring delay between the MPC servers: {delays} ms one way, "
        f"{args.delay_logins} logins of each user a point")
    try:
        return ring_delay.sweep(target, delays, args.delay_logins, args.ring_delay_via,
                                work, log, masked_flags=args.masked_server_flag)
    except Exception as e:  # noqa: BLE001 -- reported in netns.json
        log(f"  ring delay sweep FAILED: {e}")
        sys.stderr.write(target.logs()[-5000:] + "\n")
        return {"error": f"{type(e).__name__}: {e}"[:2000]}


def main():
    args = parser().parse_args()

    def log(msg):
        print(msg, flush=True)

    if os.geteuid() != 0:
        log("netns bench: needs root (ip netns); skipped")
        return 2
    if args.cmd == "cleanup":
        gone = cleanup_stale()
        log(f"removed: {' '.join(gone) or 'nothing'}")
        return 0
    gone = cleanup_stale()
    if gone:
        log(f"removed namespaces of a dead run: {' '.join(gone)}")

    # SIGTERM/SIGHUP: unwind through the finally blocks (teardown).
    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    peak = args.peak or loopback_peak(args.storm_json) or 1000.0
    os.makedirs(BENCH_DIR, exist_ok=True)
    outdir = os.path.join(BENCH_DIR, "storm", "kmpc-netns")
    os.makedirs(outdir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="netns-", dir=BENCH_DIR)
    t0 = time.time()
    out = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"cores": os.cpu_count(), "loadavg_start": os.getloadavg()[0],
                       "kernel": os.uname().release},
           "rtt_ms_requested": args.rtt_ms, "rate_requested": args.rate,
           "hosts": HOSTS, "settings": "headline", "peak_basis": peak}
    lan = Lan(args.rtt_ms, args.rate)
    target = None
    try:
        lan.up()
        out["shaping"] = lan.shaping
        out["delay_emulated"] = lan.shaping == "netem"
        out["note"] = lan.note
        out["udp_rtt_ms_kdc_p0"] = lan.udp_rtt_ms("kdc", "p0")
        out["udp_rtt_ms_p0_p1"] = lan.udp_rtt_ms("p0", "p1")
        log(f"== netns LAN: {lan.note}")
        log(f"   UDP echo RTT (median of 200, Python both ends) kdc->p0 "
            f"{out['udp_rtt_ms_kdc_p0']} ms, p0->p1 {out['udp_rtt_ms_p0_p1']} ms")
        target = netns_target(lan, work, args.users, delay_users=bool(args.ring_delays))
        out["setup_s"] = round(time.time() - t0, 1)
        if not args.ring_delay_only:
            storms(target, args, peak, outdir, out, log)
        if args.ring_delays:
            out["ring_delay"] = delay_sweep(target, args, work, log)
    except BaseException:
        if target is not None:
            sys.stderr.write(target.logs()[-5000:] + "\n")
        raise
    finally:
        if target is not None:
            target.stop()
        lan.down()
        left = [n for n in list_ns() if n.startswith(lan.tag + "-")]
        if left:
            sys.stderr.write(f"netns bench: could not remove {left}\n")
        shutil.rmtree(work, ignore_errors=True)
    out["torn_down"] = True
    out["machine"]["loadavg_end"] = os.getloadavg()[0]
    out["elapsed_s"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    log(f"  namespaces removed; written: {args.out} ({out['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
