#!/usr/bin/env python3
"""TGS exchanges to a service whose aes256-cts-hmac-sha1-96 key the cluster
holds (issue 50 item 7), servers with their defaults ("malicious": small
Runs over masked wires), the same on Rep3 ANDs only
(--cts_masked_gates=false: "rep3") and in semi-honest, one realm per
mode, same processes for every figure of a mode:

  one client   Debian's unmodified /usr/bin/kvno -k SERVICE-KEYTAB for the
               service, run as a user runs it (a process per ticket, from
               a ccache holding the client's TGT only, copied before each
               run outside the timing), clients of varied name lengths in
               turn; in alternating blocks with the same kvno to a service
               whose key is in the KDB (the same realm, KDC and TGT Run:
               what the ticket's own Run adds). The first ticket of each
               client is the cold one (the servers compile the ticket's
               program for its length) and is reported apart. Heimdal's
               kgetcred (heimdal-clients, unpacked privately) for a few
               tickets beside: another client family's request.
  per TGS      over the measured blocks to the cts service only: Runs per
               exchange (the servers' kmpc_batches_total{kind="run"} against
               the KDC module's kmpc_kdc_exchanges_total{exchange="tgs",
               result="ok"}: the ticket's Run is outside the exchange's
               plan, so the module's own count does not see it), the
               module's count beside, ANDs and AND rounds (kmpc_cts_ands_total,
               kmpc_cts_and_rounds_total), and the CPU of each server and of
               the KDC (utime + stime of /proc/PID/stat, read from outside:
               nothing attaches to the measured processes).
  mix          storm_bench's operation mix (kmpc-storm --mix login,tgs,renew,
               forward, sync engine, 16 clients, TCP) of the same users
               (names of 2-40 characters, keys in the cluster) with --tgs the
               cts service, then with --tgs the KDB-key service: ops/s and
               their ratio, each exchange's p50, failures, the module's Runs
               per exchange kind, the servers' Runs per operation, tickets
               per Run (batch_figures: the module's exchanges ended ok
               against each server's Runs), the module's jobs per Run and
               the Runs it cut at the servers' bound on one Run's aes*-cts
               programs, and the CPU per operation of each process.
  login_tgs    kmpc-storm's closed loop of the same users (async engine, 64
               logins in flight, TCP), each operation a login then one TGS:
               with --tgs the cts service, then with --tgs a service whose
               key is an aes256-ctr-mpc handle in the cluster (the "ctr"
               service, same realm and processes): ops/s of each and their
               ratio cts/ctr (target >= 0.6), p50/p99, failures, the
               servers' Runs per operation, tickets per Run and the CPU per
               operation of each process, as the mix's.

The cts service was a KDB service first: its keytab is extracted, then its
key moved with `kmpc-admin share --from-existing --service` (as
integration-tests/test_cts_service.py does), so kvno -k validates every
ticket with the keytab the host already has. The ctr service gets a new
random key made in the cluster (`kmpc-admin share --randkey --service
--enctype=aes256-ctr-mpc`), so no KDB ever held it. The clients are users
of the directory-like population of cts_realm.py (their keys in the
cluster too).

Writes build/bench/tgs.json and prints the judged targets
(bench_results.tgs_targets: one-client p50 <= 150 ms malicious, <= 120 ms
semi-honest; exactly 2 Runs per TGS; the login+TGS storm's cts/ctr ratio
>= 0.6 in every mode); bench_results.py puts them in results.json.

Usage: tgs_bench.py [--modes malicious,rep3,semi-honest] [--runs 40] [--clients 8]
                    [--users 64] [--mix-seconds 10] [--no-mix] [--no-heimdal]
                    [--storm-seconds 10] [--no-login-tgs]
                    [--out FILE] [--server-flags FLAGS]
                    [--module-option NAME=VALUE]
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench import bench_results, cts_bench, cts_realm, storm_bench  # noqa: E402
from kmpc_harness import realm as kmpc_realm  # noqa: E402

CTS256 = cts_bench.CTS256
CTR256 = "aes256-ctr-mpc"
KVNO = "/usr/bin/kvno"
# cts_bench.MODES: "malicious" the servers' defaults, "rep3" Rep3 ANDs only.
MODES = dict(cts_bench.MODES)
# Three hosts' services: the one moved into the cluster, one whose key
# stays in the KDB (the baseline of the same run), and one whose key is an
# aes256-ctr-mpc handle in the cluster (the login+TGS storm's baseline).
SERVICES = {"cts": "host/files01.kmpc.test", "kdb": "host/build.kmpc.test",
            "ctr": "host/print01.kmpc.test"}
BENCH_DIR = storm_bench.BENCH_DIR
# kvno runs per block; blocks alternate cts, kdb.
BLOCK = 10
COLD_RETRY_S = 120
KVNO_TIMEOUT_S = 30
HEIMDAL_TICKETS = 8
WARM_PASSES = 3
# The login+TGS storm's logins in flight (closed loop, async engine).
LOGIN_TGS_CONCURRENCY = 64


def bring_up(workdir, mode, n_users, module_options=None, server_flags=""):
    """The mode's realm, KDC running: the cts and kdb services (keytabs in
    r.service_keytabs), the cts one moved into the cluster, and the ctr
    service, its aes256-ctr-mpc key made in the cluster; n_users users
    named as in a directory, keys in the cluster (r.clients)."""
    from kmpc_harness.kmpc_realm import KmpcRealm
    extra = storm_bench.dbmodules_block(kmpc_realm.REALM, disable_last_success="true",
                                        disable_lockout="true")
    flags = " ".join(f for f in (MODES[mode], server_flags) if f)
    r = KmpcRealm(workdir, module="real", enctypes=cts_bench.ENCTYPES, metrics=True,
                  server_flags=flags, kdc_conf_extra=extra, module_options=module_options)
    try:
        r.create()
        r.setup_krbtgt()
        r.setup_warmup()
        r.service_keytabs = {}
        for which in ("cts", "kdb"):
            svc = SERVICES[which]
            kt = os.path.join(r.dir, f"{which}-service.keytab")
            r.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {svc}")
            r.kadmin_local(f"ktadd -norandkey -k {kt} {svc}")
            os.chmod(kt, 0o600)
            r.service_keytabs[which] = kt
        r.admin("share", "--from-existing", f"--enctype={CTS256}", "--service",
                SERVICES["cts"])
        # A service's random aes256-ctr-mpc key, made in the cluster (the
        # create-time key replaced: the KDB holds the handle only).
        r.kadmin_local(f"addprinc -e {CTR256}:normal -randkey {SERVICES['ctr']}")
        r.admin("share", "--randkey", "--service", f"--enctype={CTR256}", SERVICES["ctr"])
        r.clients = cts_realm.add_population(r, "clients", cts_realm.directory_names(n_users))
        r.start()
    except BaseException:
        r.stop()
        raise
    return r


def pick_clients(names, k):
    """k of the population's names spread over its lengths (shortest to
    longest): each a different ticket length."""
    by_len = sorted(names, key=lambda n: (len(n), n))
    if k >= len(by_len):
        return by_len
    return [by_len[round(i * (len(by_len) - 1) / max(k - 1, 1))] for i in range(k)]


def timed(argv, env):
    """(ms, ok, output) of one client process."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env,
                           timeout=KVNO_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return (time.perf_counter() - t0) * 1e3, False, f"no answer in {KVNO_TIMEOUT_S} s"
    return (time.perf_counter() - t0) * 1e3, p.returncode == 0, (p.stdout + p.stderr).strip()


class Client:
    """One client principal: its TGT ccache (Debian's kinit -k) and a work
    ccache each ticket starts from (a copy of the TGT's: every kvno makes
    a TGS exchange, as a new login session would)."""

    def __init__(self, r, stock, name, i):
        self.name = name
        self.tgt = os.path.join(r.dir, f"tgt-{i}.cc")
        self.work = os.path.join(r.dir, f"work-{i}.cc")
        self.env = dict(stock.env, KRB5CCNAME="FILE:" + self.work)
        env = dict(stock.env, KRB5CCNAME="FILE:" + self.tgt)
        argv = [cts_bench.STOCK_KINIT, "-k", "-t", r.clients.keytabs["all"],
                f"{name}@{r.realm}"]
        # Its first login compiles its AS programs: retried as cts_bench's.
        deadline = time.time() + COLD_RETRY_S
        while True:
            _, ok, out = timed(argv, env)
            if ok or time.time() > deadline:
                break
            time.sleep(1)
        if not ok:
            raise kmpc_realm.RealmError(f"kinit {name}: {out}")

    def fresh(self):
        """The work ccache from the TGT's, owner-only as kinit makes one
        (Heimdal refuses a group- or world-readable ccache)."""
        shutil.copyfile(self.tgt, self.work)
        os.chmod(self.work, 0o600)

    def kvno(self, service, keytab):
        self.fresh()
        ms, ok, out = timed([KVNO, "-k", keytab, service], self.env)
        return ms, ok and "keytab entry valid" in out, out

    def kgetcred(self, heimdal, service):
        self.fresh()
        return timed([heimdal["kgetcred"], service], heimdal["env"](self.env))


def snapshot_counters(r):
    """The servers' Run batches and cts counters, the KDC module's exchange
    counters (kmpc-mpc-client metrics and the KDC's /metrics)."""
    return {"kdc": storm_bench.kdc_exchange_counters(r.kdc_metrics_url),
            "mpc": storm_bench.mpc_metrics(r.cluster.servers, r.cluster.certs),
            "cts": cts_bench.cts_counters(r)}


def tgs_ok(kdc):
    return (kdc or {}).get(("kmpc_kdc_exchanges_total", "tgs", "ok"), 0)


def settle(r, before, n, timeout=5.0):
    """The KDC's counters once the block's n TGS exchanges are counted (the
    module counts an exchange when the KDC releases it)."""
    deadline = time.time() + timeout
    while True:
        kdc = storm_bench.kdc_exchange_counters(r.kdc_metrics_url)
        if tgs_ok(kdc) - tgs_ok(before) >= n or time.time() > deadline:
            return kdc
        time.sleep(0.05)


class Totals:
    """The cts blocks' sums: exchanges, Runs, cts counters, CPU seconds."""

    def __init__(self):
        self.d = {}

    def add(self, key, v):
        self.d[key] = self.d.get(key, 0) + v

    def block(self, c0, c1, cpu0, cpu1):
        """One block's differences (CPU before the metrics queries, which
        cost the servers work of their own)."""
        k0, k1 = c0["kdc"] or {}, c1["kdc"] or {}
        self.add("tgs", tgs_ok(k1) - tgs_ok(k0))
        key = ("kmpc_kdc_exchange_runs_total", "tgs", "ok")
        self.add("module_runs", k1.get(key, 0) - k0.get(key, 0))
        if c0["mpc"] and c1["mpc"]:
            runs = [c1["mpc"][i].get("kmpc_batches_run_ok_total", 0)
                    - c0["mpc"][i].get("kmpc_batches_run_ok_total", 0) for i in range(3)]
            self.add("server_runs", max(runs))
            self.add("server_runs_disagree", int(len(set(runs)) != 1))
        if c0["cts"] and c1["cts"]:
            for name in ("kmpc_cts_ands_total", "kmpc_cts_and_rounds_total"):
                self.add(name, sum(c1["cts"][i].get(name, 0) - c0["cts"][i].get(name, 0)
                                   for i in range(3)) / 3)
        for name in cpu0:
            self.add("cpu:" + name, cpu1[name] - cpu0[name])


def one_block(r, clients, which, start, n, lat, errors):
    """n kvno runs to the `which` service, clients in turn from start."""
    svc = f"{SERVICES[which]}@{r.realm}"
    for k in range(n):
        ms, ok, out = clients[(start + k) % len(clients)].kvno(svc, r.service_keytabs[which])
        (lat if ok else errors).append(ms if ok else out[-200:])


def cold_tickets(r, clients):
    """Each client's first ticket to the cts service (the servers compile
    the ticket program of its length), retried for COLD_RETRY_S."""
    svc = f"{SERVICES['cts']}@{r.realm}"
    out = []
    for c in clients:
        ms, ok, text = c.kvno(svc, r.service_keytabs["cts"])
        failed = 0
        deadline = time.time() + COLD_RETRY_S
        while not ok and time.time() < deadline:
            failed += 1
            time.sleep(1)
            _, ok, text = c.kvno(svc, r.service_keytabs["cts"])
        if not ok:
            raise kmpc_realm.RealmError(f"kvno {svc} as {c.name}: {text}\n"
                                        + r.logs()[-3000:])
        out.append({"client_name_length": len(c.name), "ms": round(ms, 1),
                    "failed_before_ok": failed})
    return out


def per_tgs(t):
    """The cts blocks' per-TGS figures from Totals."""
    d, n = t.d, t.d.get("tgs", 0)
    if not n:
        return {"tgs_exchanges": 0}
    out = {"tgs_exchanges": int(n),
           "module_runs_per_tgs": round(d.get("module_runs", 0) / n, 4)}
    if "server_runs" in d:
        out["server_runs"] = int(d["server_runs"])
        out["runs_per_tgs"] = round(d["server_runs"] / n, 4)
        out["servers_disagreed_on_runs"] = int(d["server_runs_disagree"])
    if "kmpc_cts_ands_total" in d:
        out["ands_per_tgs"] = round(d["kmpc_cts_ands_total"] / n)
        out["and_rounds_per_tgs"] = round(d["kmpc_cts_and_rounds_total"] / n)
    out["cpu_ms_per_tgs"] = {k[4:]: round(v * 1e3 / n, 2) for k, v in d.items()
                             if k.startswith("cpu:")}
    return out


def one_client(r, runs, k, heimdal, log):
    """The cold tickets, then alternating blocks of kvno to the cts and
    the KDB service; counters around the cts blocks only."""
    stock = cts_bench.Stock(r, "tgs-stock")
    names = pick_clients(r.clients.names, k)
    clients = [Client(r, stock, name, i) for i, name in enumerate(names)]
    cold = cold_tickets(r, clients)
    log("  cold first tickets (a compile per ticket length): "
        + ", ".join(f"{c['ms']:.0f}" for c in cold) + " ms")
    for c in clients:  # the KDB service's first tickets too
        c.kvno(f"{SERVICES['kdb']}@{r.realm}", r.service_keytabs["kdb"])
    # With --cts_masked_gates: the tickets' programs over masked wires.
    cts_bench.wait_masked(r, log, "after the cold tickets")
    lat = {"cts": [], "kdb": []}
    errors = {"cts": [], "kdb": []}
    tot = Totals()
    done = 0
    while done < runs:
        n = min(BLOCK, runs - done)
        c0 = snapshot_counters(r)
        cpu0 = cts_realm.cpu_seconds(cts_realm.pids(r))
        ok0 = len(lat["cts"])
        one_block(r, clients, "cts", done, n, lat["cts"], errors["cts"])
        kdc1 = settle(r, c0["kdc"], len(lat["cts"]) - ok0)
        cpu1 = cts_realm.cpu_seconds(cts_realm.pids(r))
        c1 = snapshot_counters(r)
        c1["kdc"] = kdc1
        tot.block(c0, c1, cpu0, cpu1)
        one_block(r, clients, "kdb", done, n, lat["kdb"], errors["kdb"])
        done += n
    sec = {"clients": [{"name_length": len(c.name)} for c in clients],
           "cold_first_tickets": cold,
           "cts": {**cts_bench.summary(lat["cts"]), "failed": len(errors["cts"]),
                   "errors": sorted(set(errors["cts"]))[:3]},
           "kdb": {**cts_bench.summary(lat["kdb"]), "failed": len(errors["kdb"]),
                   "errors": sorted(set(errors["kdb"]))[:3]},
           "per_tgs": per_tgs(tot)}
    p = sec["per_tgs"]
    if p.get("and_rounds_per_tgs") and sec["kdb"]["p50_ms"] is not None:
        sec["us_per_and_round"] = round(
            (sec["cts"]["p50_ms"] - sec["kdb"]["p50_ms"]) * 1e3 / p["and_rounds_per_tgs"], 1)
    if heimdal:
        sec["heimdal_kgetcred"] = heimdal_tickets(r, clients, heimdal)
    cts, kdb = sec["cts"], sec["kdb"]
    log(f"  one client, {KVNO} -k: cts service p50 {cts['p50_ms']} ms p99 {cts['p99_ms']} ms "
        f"(failed {cts['failed']}); KDB service p50 {kdb['p50_ms']} ms; Runs per TGS "
        f"{p.get('runs_per_tgs')} (module's count {p.get('module_runs_per_tgs')}); "
        f"ANDs {p.get('ands_per_tgs')}, AND rounds {p.get('and_rounds_per_tgs')} per TGS; "
        f"CPU ms per TGS {p.get('cpu_ms_per_tgs')}")
    return sec


def heimdal_tickets(r, clients, heimdal):
    """Heimdal's kgetcred to the cts service from the same TGTs."""
    lat, errors = [], []
    svc = f"{SERVICES['cts']}@{r.realm}"
    for i in range(HEIMDAL_TICKETS):
        ms, ok, out = clients[i % len(clients)].kgetcred(heimdal, svc)
        (lat if ok else errors).append(ms if ok else out[-200:])
    return {**cts_bench.summary(lat), "failed": len(errors), "errors": errors[:3]}


def prepare_heimdal(log):
    """{"kgetcred": path, "env": f(env)} or None (the reason logged)."""
    from kmpc_harness import heimdal as kmpc_heimdal
    try:
        progs = kmpc_heimdal.prepare()
    except (kmpc_heimdal.HeimdalError, OSError) as e:
        log(f"  Heimdal's clients unavailable ({str(e)[:200]}): Debian's MIT kvno only")
        return None
    return {"kgetcred": progs["kgetcred"], "env": kmpc_heimdal.env}


class MixTarget:
    """storm_bench's target for the mix and the login+TGS storm: the
    realm's users (keytab), TGS to one of the services, TCP, every
    server-side process watched."""

    def __init__(self, r, which):
        self.realm = r
        self.keytab = r.clients.keytabs["all"]
        self.principal_fmt = None
        self.n_users = len(r.clients.names)
        self.service = f"{SERVICES[which]}@{r.realm}"
        self.env = r.env
        self.watch = cts_realm.pids(r)
        self.metrics_urls = {"krb5kdc": r.kdc_metrics_url}
        self.udp_ports = [r.kdc_port]
        # A cts login can outlast the 1 s UDP retransmit on a loaded host.
        self.transport = "tcp"
        # storm_bench's target interface; the mix is a closed loop only.
        self.p99_bound_ms = 2000.0
        self.max_inflight = storm_bench.MIX_CONCURRENCY
        self.saturation_concurrency = storm_bench.MIX_CONCURRENCY

    def mpc_counters(self):
        return storm_bench.mpc_metrics(self.realm.cluster.servers, self.realm.cluster.certs)

    def alive(self):
        return self.realm.alive()

    def logs(self):
        return self.realm.logs()

    def stop(self):
        pass


# The KDC module's batch counters (kdc-plugin/src/kdc_metrics.cc): the Run
# and Finalize steps it started, the Runs it ended before the next job
# because that job's aes*-cts programs would pass the servers' bound on one
# Run's distinct programs (contract::kCtsBatchBytes), and its histogram of
# jobs per Run batch (its count: the Runs).
BATCH_SERIES = {"module_steps": "kmpc_kdc_batches_total",
                "cuts": "kmpc_kdc_cts_shape_cuts_total",
                "run_jobs": 'kmpc_kdc_batch_jobs_sum{kind="run"}',
                "run_batches": 'kmpc_kdc_batch_jobs_count{kind="run"}'}


def parse_batch_counters(text):
    """{key: value} of BATCH_SERIES in the module's /metrics text, and
    "tickets": its exchanges ended ok, every kind (each issued a ticket)."""
    out = {"tickets": 0.0}
    for line in text.splitlines():
        series, _, val = line.rpartition(" ")
        if not series or line.startswith("#"):
            continue
        for key, want in BATCH_SERIES.items():
            if series == want:
                out[key] = float(val)
        if series.startswith("kmpc_kdc_exchanges_total{") and 'result="ok"' in series:
            out["tickets"] += float(val)
    return out


def batch_counters(url):
    """parse_batch_counters() of the KDC's /metrics; None when unreadable."""
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return parse_batch_counters(resp.read().decode())
    except (OSError, ValueError):
        return None


def batch_figures(k0, k1, m0, m1):
    """Tickets per Run over one mix, and the Runs the shape bound cut:
    tickets (the module's exchanges ended ok) per server Run (each server's
    kmpc_batches_total{kind="run",result="ok"}, the largest of the three),
    the module's jobs per Run batch, and its cuts against its Runs. None
    without the module's counters."""
    if not k0 or not k1:
        return None
    d = {k: k1.get(k, 0) - k0.get(k, 0) for k in (*BATCH_SERIES, "tickets")}
    runs = d["run_batches"]
    out = {"tickets": int(d["tickets"]), "module_runs": int(runs),
           "module_steps": int(d["module_steps"]),
           "module_jobs_per_run": round(d["run_jobs"] / runs, 2) if runs else None,
           "cts_shape_cuts": int(d["cuts"]),
           "cut_fraction": round(d["cuts"] / runs, 4) if runs else None}
    if m0 and m1:
        runs = [m1[i].get("kmpc_batches_run_ok_total", 0)
                - m0[i].get("kmpc_batches_run_ok_total", 0) for i in range(3)]
        out["server_runs"] = max(runs)
        out["tickets_per_run"] = round(d["tickets"] / max(runs), 2) if max(runs) else None
    return out


def masked_figures(c0, c1):
    """{"cts_runs", "masked_runs", "masked_compiles", "masked_drops"}:
    party 0's aes*-cts Runs over one storm and those of them over masked
    wires (the three agree on each Run), and the masked compiles that
    ended and masked programs dropped past the cache's bound meanwhile,
    summed over the three servers (background CPU); {} without the
    servers' counters."""
    if not c0 or not c1:
        return {}

    def delta(name, parties):
        return int(sum(c1[i].get(name, 0) - c0[i].get(name, 0) for i in parties))
    return {"cts_runs": delta("kmpc_cts_evaluations_total", [0]),
            "masked_runs": delta("kmpc_cts_masked_evaluations_total", [0]),
            "masked_compiles": delta("kmpc_cts_masked_compiles_total", range(3)),
            "masked_drops": delta("kmpc_cts_masked_drops_total", range(3))}


def batch_line(b):
    if not b:
        return "tickets per Run: the KDC's counters unreadable"
    masked = (f"; {b['masked_runs']} of {b['cts_runs']} aes*-cts Runs over masked wires, "
              f"{b['masked_compiles']} masked compiles and {b['masked_drops']} drops "
              f"(three servers)" if "cts_runs" in b else "")
    return (f"{b['tickets']} tickets in {b.get('server_runs')} server Runs: "
            f"{b.get('tickets_per_run')} tickets per Run; the module's "
            f"{b['module_jobs_per_run']} jobs per Run; {b['cts_shape_cuts']} of its "
            f"{b['module_runs']} Runs cut by the cts shape bound{masked}")


def kdc_errors(r, start):
    """The module's error lines in the KDC's log after offset start, by
    message with numbers blanked: {message: count}, the five commonest."""
    import collections
    import re
    try:
        with open(r.kdc_log, errors="replace") as f:
            f.seek(start)
            text = f.read()
    except OSError:
        return None
    msgs = collections.Counter(
        re.sub(r"\d+", "N", line.split("(Error): ", 1)[1])[:200]
        for line in text.splitlines() if "(Error): kdcmpc" in line)
    return dict(msgs.most_common(5))


def log_size(r):
    try:
        return os.path.getsize(r.kdc_log)
    except OSError:
        return 0


def warm_users(r, outdir, log):
    """One login + TGS to the cts service per user, until none fails (at
    most WARM_PASSES): the servers compile the ticket program of every
    client name length before the mix, as a realm's first day would."""
    t = MixTarget(r, "cts")
    passes = []
    for k in range(WARM_PASSES):
        t0 = time.time()
        res = storm_bench.run_storm(
            t, ["-c", 4, "--count", t.n_users, "-w", 0, "--tgs", t.service,
                "--max-errors", t.n_users], f"warm-{k}", outdir, timeout=600)
        passes.append({"ok": res["ok"], "failed": res["failed_all_phases"],
                       "s": round(time.time() - t0, 1)})
        if not res["failed_all_phases"]:
            break
    log(f"  warm-up, login + TGS to the cts service per user: {passes}")
    return passes


def storm_outdir():
    outdir = os.path.join(BENCH_DIR, "storm", "tgs")
    os.makedirs(outdir, exist_ok=True)
    return outdir


def one_storm(r, which, args, label, outdir, seconds):
    """One closed-loop kmpc-storm (args) with --tgs the `which` service:
    ops/s, p50/p99, failures, CPU per operation, the servers' Runs per
    operation, the module's Runs per exchange, its error lines and the
    batch figures over the storm."""
    t = MixTarget(r, which)
    at = log_size(r)
    k0, m0 = batch_counters(r.kdc_metrics_url), t.mpc_counters()
    c0 = cts_bench.cts_counters(r)
    res = storm_bench.run_storm(t, [*args, "--tgs", t.service], label, outdir,
                                timeout=seconds + 300)
    batches = batch_figures(k0, batch_counters(r.kdc_metrics_url), m0, t.mpc_counters())
    if batches is not None:
        batches.update(masked_figures(c0, cts_bench.cts_counters(r)))
    return res, {
        "service": t.service,
        "ops_per_s": res["logins_per_s"], "p50_ms": res["latency_us"]["p50"] / 1e3,
        "p99_ms": res["latency_us"]["p99"] / 1e3, "failed": res["failed_all_phases"],
        "errors": res.get("errors"),
        "cpu_us_per_op": {n: round(v["us_per_login"], 1) for n, v in res["cpu"].items()},
        "server_runs_per_op": (res.get("mpc") or {}).get("run_batches_per_login"),
        "runs_per_exchange": res.get("exchanges"), "module_errors": kdc_errors(r, at),
        "batches": batches}


def mix(r, seconds, log):
    """The 16-client mix with TGS to the cts service, then to the KDB one,
    after every user's ticket program is warm."""
    outdir = storm_outdir()
    out = {"warm_up": warm_users(r, outdir, log)}
    cts_bench.wait_masked(r, log, "after the mix's warm-up")
    for which in ("cts", "kdb"):
        res, m = one_storm(
            r, which, ["-c", storm_bench.MIX_CONCURRENCY, "-d", seconds, "-w", 3,
                       "--engine", "sync", "--mix", storm_bench.MIX],
            f"mix-{which}", outdir, seconds)
        by_op = res.get("mix") or {}
        out[which] = m = {
            **m, "ops": storm_bench.MIX, "concurrency": storm_bench.MIX_CONCURRENCY,
            "step_p50_ms": {op: round(v["step_p50_us"] / 1e3, 2) for op, v in by_op.items()
                            if v.get("step_p50_us") is not None},
            "by_op": by_op}
        log(f"  mix {storm_bench.MIX} c={storm_bench.MIX_CONCURRENCY}, TGS to the {which} "
            f"service: {m['ops_per_s']:.1f} ops/s, failed {m['failed']}, step p50 "
            f"{m['step_p50_ms']}, CPU us/op {m['cpu_us_per_op']}")
        log(f"    {batch_line(m['batches'])}")
    a, b = out["cts"]["ops_per_s"], out["kdb"]["ops_per_s"]
    out["ratio_cts_to_kdb_ops"] = round(a / b, 3) if b else None
    # What a TGS to the cts service costs each process beyond one to the
    # KDB service, from the two mixes' CPU per operation (a TGS is one
    # operation in four): the difference, per TGS.
    ops = out["cts"]["by_op"]
    share = ((ops.get("tgs") or {}).get("ok", 0)
             / max(sum(v.get("ok", 0) for v in ops.values()), 1))
    if share:
        out["extra_cpu_us_per_cts_tgs"] = {
            n: round((v - out["kdb"]["cpu_us_per_op"].get(n, 0)) / share, 1)
            for n, v in out["cts"]["cpu_us_per_op"].items() if n != "kmpc-storm"}
    return out


def login_tgs(r, seconds, warm, log):
    """The login+TGS storm (LOGIN_TGS_CONCURRENCY logins in flight, each
    a login then one TGS) with TGS to the cts service, then to the ctr
    one; warm: the mix did not run, so its warm-up first (every client
    name length's ticket program compiled for the cts service)."""
    outdir = storm_outdir()
    out = {"concurrency": LOGIN_TGS_CONCURRENCY, "seconds": seconds}
    if warm:
        out["warm_up"] = warm_users(r, outdir, log)
        cts_bench.wait_masked(r, log, "after the login+TGS storm's warm-up")
    for which in ("cts", "ctr"):
        _, m = one_storm(r, which, ["-c", LOGIN_TGS_CONCURRENCY, "-d", seconds, "-w", 3],
                         f"login-tgs-{which}", outdir, seconds)
        out[which] = m
        log(f"  login+TGS storm c={LOGIN_TGS_CONCURRENCY}, TGS to the {which} service: "
            f"{m['ops_per_s']:.1f} ops/s, p50 {m['p50_ms']:.1f} ms p99 {m['p99_ms']:.1f} ms, "
            f"failed {m['failed']}, server Runs per op {m['server_runs_per_op']}, "
            f"CPU us/op {m['cpu_us_per_op']}")
        log(f"    {batch_line(m['batches'])}")
    a, b = out["cts"]["ops_per_s"], out["ctr"]["ops_per_s"]
    out["ratio_cts_to_ctr_ops"] = round(a / b, 3) if b else None
    log(f"  login+TGS storm, TGS to the cts service / to the ctr-mpc service: "
        f"{out['ratio_cts_to_ctr_ops']} (target >= "
        f"{bench_results.TARGET_LOGIN_TGS_RATIO:g})")
    return out


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modes", default="malicious,rep3,semi-honest")
    ap.add_argument("--runs", type=int, default=40, help="measured kvno runs per service")
    ap.add_argument("--clients", type=int, default=8,
                    help="client principals of distinct name lengths, in turn")
    ap.add_argument("--users", type=int, default=64, help="the realm's users (the mix's)")
    ap.add_argument("--mix-seconds", type=float, default=10)
    ap.add_argument("--no-mix", dest="mix", action="store_false")
    ap.add_argument("--storm-seconds", type=float, default=10,
                    help="the login+TGS storm's measured seconds, per service")
    ap.add_argument("--no-login-tgs", dest="login_tgs", action="store_false")
    ap.add_argument("--no-heimdal", dest="heimdal", action="store_false")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "tgs.json"))
    ap.add_argument("--server-flags", default="",
                    help="extra kmpc-mpc-server flags for every mode (A/B of a server setting)")
    ap.add_argument("--module-option", action="append", default=[], metavar="NAME=VALUE",
                    help="a relation of the KDC module's section (repeatable)")
    return ap


def run_mode(mode, args, module_options, heimdal, log):
    """One mode's section (an "error" key when it failed)."""
    work = tempfile.mkdtemp(prefix=f"tgs-{mode}-", dir=BENCH_DIR)
    r = None
    try:
        t0 = time.time()
        r = bring_up(os.path.join(work, "realm"), mode, args.users, module_options,
                     args.server_flags)
        sec = {"loadavg_before": os.getloadavg()[0], "setup_s": round(time.time() - t0, 1),
               "services": SERVICES,
               "kdb_holds_for_the_cts_service": [row[2] for row in
                                                 r.kdb_keys(SERVICES["cts"])]}
        sec["one_client"] = one_client(r, args.runs, args.clients, heimdal, log)
        if args.mix:
            sec["mix"] = mix(r, args.mix_seconds, log)
        if args.login_tgs:
            sec["login_tgs"] = login_tgs(r, args.storm_seconds, not args.mix, log)
        sec["loadavg_after"] = os.getloadavg()[0]
        if not r.alive():
            raise kmpc_realm.RealmError("a daemon died:\n" + r.logs()[-3000:])
        return sec
    except Exception as e:
        # Every daemon's log, whole, beside the JSON; its tail here.
        logs = r.logs() if r else ""
        path = os.path.join(BENCH_DIR, f"tgs-{mode}-failure.log")
        with open(path, "w") as f:
            f.write(logs)
        sys.stderr.write(logs[-4000:] + "\n")
        log(f"  {mode}: FAILED: {str(e)[:500]} (the daemons' logs: {path})")
        return {"error": f"{type(e).__name__}: {e}"[:2000], "logs": path}
    finally:
        if r:
            r.stop()
        shutil.rmtree(work, ignore_errors=True)


def main():
    args = parser().parse_args()
    module_options = cts_bench.parse_module_options(args.module_option)
    os.makedirs(BENCH_DIR, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    res = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cores": os.cpu_count(), "loadavg_start": os.getloadavg()},
           "kvno": KVNO, "server_flags": args.server_flags, "module_options": module_options,
           "runs": args.runs, "modes": {}}
    heimdal = prepare_heimdal(log) if args.heimdal else None
    for mode in [m for m in args.modes.split(",") if m]:
        log(f"== TGS to a service whose aes256-cts key the cluster holds, servers {mode}")
        res["modes"][mode] = run_mode(mode, args, module_options, heimdal, log)
    res["machine"]["loadavg_end"] = os.getloadavg()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    for t in bench_results.tgs_targets({"tgs": bench_results.tgs_side(res)}):
        log(f"  [{'met ' if t['met'] else 'MISS'}] {t['what']}: {t['measured']}"
            + (f"; missed by {t['miss_by']}" if t.get("miss_by") else ""))
    log(f"written: {args.out}")
    return 0 if all("error" not in s for s in res["modes"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
