"""A realm that looks like a directory, for cts_bench.py (issue 48 item 9).

Users named cts0..cts199 all make requests of three lengths, so every login
hits the same few aes*-cts programs: a realm of them hides what varied
names cost (the request's length follows the client name's, the options
and the client). This module makes the realm's populations and measures
them:

  varied    directory_names(): first.last names of 2-40 characters (each
            length about as often), some with an instance (first.last/admin,
            ops/root), a few short ones (jo, kim);
  uniform   the same number of users whose names have one length (u10000..);

each split into clients that send no addresses (MIT's default) and a
quarter that do (krb5.conf noaddresses = false with extra_addresses), and
Heimdal's kinit (heimdal-clients, unpacked by kmpc_harness.heimdal) for a
share of the logins: MIT's and Heimdal's request shapes.

phase() runs one population's closed-loop storm over TCP (kmpc-storm, one
process per address setting, plus a Heimdal kinit loop beside them) and
reports what the issue's acceptance reads: logins/s, failed logins, Runs
per 1,000 logins (the KDC module's kmpc_kdc_exchange_runs_total against the
logins made), the servers' program-cache misses (compiles; kmpc_cts_program
_cache_total), the distinct program shapes the servers compiled (each
server's STORE/cts-programs, one line per compile), and each server's and
the KDC's CPU per login (utime + stime from /proc/PID/stat before and
after: nothing attaches to the measured processes).
"""

import os
import random
import re
import statistics
import subprocess
import threading
import time

from bench import storm_bench
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import realm as kmpc_realm

CTS256 = "aes256-cts-hmac-sha1-96"
GIVEN = ("jo", "ann", "li", "eva", "john", "maria", "ahmed", "yuki", "olga", "peter",
         "fatima", "chen", "lucas", "sofia", "noah", "amelie", "mohammed", "isabella",
         "alexander", "guadalupe", "bartholomew", "kim", "raj", "ines", "tom")
SURNAMES = ("ng", "wu", "lee", "diaz", "smith", "muller", "kowalski", "nakamura",
            "okonkwo", "fernandez", "johansson", "papadopoulos", "van.der.berg",
            "abdulrahman", "castellanos", "wojciechowski", "vasquez.de.la.cruz")
INSTANCES = ("admin", "root", "ops")
LENGTHS = (2, 40)
# The share of each population that sends addresses, and the addresses
# (documentation ranges, RFC 5737: never routed; the KDC only copies them).
ADDRESS_SHARE = 0.25
EXTRA_ADDRESSES = ("192.0.2.17", "198.51.100.4")
CACHE_SERIES = re.compile(r'^(kmpc_cts_\w+)\{([^}]*)\} (\S+)$', re.M)
# cts-programs lines: "type nr n cf2 usage splice_m splice_off [weight]" (type 1
# ENCRYPT: replies; 2 DECRYPT: timestamps, challenges; 3 CHECKSUM: requests).
SHAPE_KINDS = {"1": "encrypt", "2": "decrypt", "3": "checksum"}


def _fill(rng, s, n):
    """s cut or padded with letters to n characters."""
    s = s[:n]
    return s + "".join(rng.choice("aeiourstln") for _ in range(n - len(s)))


def directory_name(rng, length, retry=False):
    """A name of exactly length characters as directories have them:
    short ones bare, most first.last, about one in eight with an
    instance. retry (the name was taken): more of it random."""
    if length <= 4:
        given = rng.choice(GIVEN)[:rng.randrange(length)] if retry else rng.choice(GIVEN)
        return _fill(rng, given, length)
    inst = rng.choice(INSTANCES) if length >= 9 and rng.random() < 0.125 else None
    body = length - (len(inst) + 1 if inst else 0)
    first = rng.choice(GIVEN)[:max(1, body - 2)]
    last = rng.choice(SURNAMES)
    last = _fill(rng, last[:rng.randrange(len(last))] if retry else last, body - len(first) - 1)
    name = f"{first}.{last}"
    return f"{name}/{inst}" if inst else name


def directory_names(n, seed=48):
    """n distinct names whose lengths run over LENGTHS about evenly (every
    length once n reaches 39), the same for the same n and seed."""
    rng = random.Random(seed)
    lo, hi = LENGTHS
    names, seen = [], set()
    retry = False
    while len(names) < n:
        length = lo + len(names) % (hi - lo + 1)
        name = directory_name(rng, length, retry)
        retry = True
        if (name not in seen and len(name) == length and not name.endswith(".")
                and ".." not in name and "./" not in name):
            seen.add(name)
            names.append(name)
            retry = False
    rng.shuffle(names)
    return names


def uniform_names(n):
    """n names of one length (6 characters up to 90,000 users)."""
    return [f"u{10000 + i}" for i in range(n)]


class Population:
    """A population's names and its keytabs: all, and the users that send
    no addresses (plain) and those that do (addr)."""

    def __init__(self, r, label, names):
        self.label = label
        self.names = list(names)
        cut = len(self.names) - int(len(self.names) * ADDRESS_SHARE)
        self.groups = {"plain": self.names[:cut], "addr": self.names[cut:]}
        self.keytabs = {k: os.path.join(r.dir, f"{label}-{k}.keytab")
                        for k in ("all", *self.groups)}

    def lengths(self):
        return (min(map(len, self.names)), max(map(len, self.names)))


def add_population(r, label, names, share=True):
    """The users (random aes256-cts keys, +requires_preauth) and their
    keytabs in one kadmin.local; share: their keys moved to the cluster."""
    pop = Population(r, label, names)
    cmds = [f"addprinc +requires_preauth -e {CTS256}:normal -randkey {u}" for u in names]
    for k, members in (("all", pop.names), *pop.groups.items()):
        for i in range(0, len(members), 200):
            cmds.append(f"ktadd -norandkey -k {pop.keytabs[k]} " + " ".join(members[i:i + 200]))
    out = r.run(["kadmin.local", "-r", r.realm], input="\n".join(cmds) + "\n", timeout=1200)
    if out.count("created.") != len(names):
        raise kmpc_realm.RealmError(f"expected {len(names)} principals:\n{out[-2000:]}")
    for kt in pop.keytabs.values():
        os.chmod(kt, 0o600)
    for i in range(0, len(names) if share else 0, 500):
        r.admin("share", "--from-existing", f"--enctype={CTS256}", *names[i:i + 500])
    return pop


def with_addresses(conf_in, conf_out):
    """conf_in's krb5.conf with the client sending addresses."""
    with open(conf_in) as f:
        text = f.read()
    extra = (f"    noaddresses = false\n"
             f"    extra_addresses = {', '.join(EXTRA_ADDRESSES)}\n")
    if "[libdefaults]\n" not in text:
        raise kmpc_realm.RealmError(f"{conf_in}: no [libdefaults]")
    with open(conf_out, "w") as f:
        f.write(text.replace("[libdefaults]\n", "[libdefaults]\n" + extra, 1))
    return conf_out


class PopTarget:
    """storm_bench's target for one group of a population: its keytab's
    principals, TCP, the realm's krb5.conf or its address-sending copy. CPU
    is read around the whole phase (phase()), not per storm."""

    def __init__(self, r, pop, group, conf):
        self.realm = r
        self.keytab = pop.keytabs[group]
        self.principal_fmt = None
        self.n_users = len(pop.groups[group])
        self.service = f"{storm_bench.SERVICE}@{r.realm}"
        self.env = dict(r.env, KRB5_CONFIG=conf)
        self.watch = {}
        self.udp_ports = []
        self.transport = "tcp"
        self.timeout_s = 10
        self.p99_bound_ms = 2000.0
        self.max_inflight = 1024
        self.saturation_concurrency = 64

    def alive(self):
        return self.realm.alive()

    def logs(self):
        return self.realm.logs()

    def stop(self):
        pass


def pids(r):
    """{process: pid} of a realm's KDC and its three servers."""
    return {"krb5kdc": r.kdc_proc.pid, **{f"mpc-server-{i}": r.cluster.pid(i)
                                          for i in range(3)}}


def cpu_seconds(pids):
    """utime + stime of each pid (proc(5) /proc/PID/stat fields 14, 15)."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # the name may hold spaces
        out[name] = (int(fields[11]) + int(fields[12])) / hz
    return out


def cts_series(r):
    """Per server, {series or series:result: value} of the kmpc_cts_*
    counters (kmpc-mpc-client metrics, which brings them up to date); None
    when they cannot be read."""
    client = kmpc_cluster.find_built("mpc-server/kmpc-mpc-client", required=False)
    if not client:
        return None
    c = r.cluster
    try:
        p = subprocess.run([client, f"--servers={c.servers}", f"--certs={c.certs}", "metrics"],
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    out = [{}, {}, {}]
    for name, labels, v in CACHE_SERIES.findall(p.stdout):
        lab = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if lab.get("party", "").isdigit() and int(lab["party"]) < 3:
            key = name + (":" + lab["result"] if "result" in lab else "")
            out[int(lab["party"])][key] = float(v)
    return out if p.returncode == 0 and all(out) else None


def shape_lines(r):
    """Each server's STORE/cts-programs lines (one per program compiled,
    precompiles included): what the servers were asked to run."""
    out = []
    for i in range(3):
        try:
            with open(os.path.join(r.cluster.store_dir(i), "cts-programs")) as f:
                # The shape's seven fields; a weight may follow (a line
                # the server rewrote when it compacted its log).
                out.append([ln.split()[:7] for ln in f if ln.strip()])
        except OSError:
            out.append([])
    return out


def shape_figures(before, after):
    """Compiles recorded and distinct shapes among them, per server, and
    the distinct shapes by kind (the servers see the same jobs: party 0's)."""
    new = [a[len(b):] for b, a in zip(before, after)]
    kinds = {}
    seen = {tuple(x) for x in new[0]}
    for s in seen:
        k = SHAPE_KINDS.get(s[0], s[0])
        kinds[k] = kinds.get(k, 0) + 1
    # A reply's ENCRYPT: n its length, splice_m the request spliced in.
    enc = [s for s in seen if s[0] == "1" and len(s) >= 7]
    return {"compiles_recorded": [len(x) for x in new],
            "distinct_shapes": [len({tuple(s) for s in x}) for x in new],
            "distinct_shapes_by_kind": kinds,
            "distinct_reply_lengths": len({s[2] for s in enc}),
            "distinct_request_lengths": len({s[5] for s in enc if s[5] != "0"}),
            "distinct_shapes_ever": len({tuple(s) for s in after[0]})}


KINIT_TIMEOUT_S = 20
# Seconds of one-at-a-time logins per client at most (a collapsed realm's
# logins take up to KINIT_TIMEOUT_S each).
SAMPLE_BUDGET_S = 60


def kinit(argv, user, env):
    """(exit code, output) of one kinit process; a kinit still running
    after KINIT_TIMEOUT_S is killed and counts as failed."""
    try:
        p = subprocess.run([*argv, user], capture_output=True, text=True, env=env,
                           timeout=KINIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"{user}: no answer in {KINIT_TIMEOUT_S} s"
    return p.returncode, (p.stdout + p.stderr).strip()


class HeimdalLoop(threading.Thread):
    """Heimdal's kinit (a process per login, its keytab option), one login
    after another over the users until stop(): Heimdal's request shape in
    the storm. Latencies of the logins that started after mark()."""

    def __init__(self, kinit, env, keytab, users, realm, ccache):
        super().__init__(daemon=True)
        self.argv = [kinit, "-k", "-t", keytab]
        self.env = dict(env, KRB5CCNAME="FILE:" + ccache)
        self.users = [f"{u}@{realm}" for u in users]
        self.halt = threading.Event()
        self.mark_t = None
        self.ok, self.failed, self.errors = [], 0, []

    def run(self):
        i = 0
        while not self.halt.is_set():
            u = self.users[i % len(self.users)]
            i += 1
            t0 = time.perf_counter()
            rc, out = kinit(self.argv, u, self.env)
            ms = (time.perf_counter() - t0) * 1e3
            if self.mark_t is None or t0 < self.mark_t:
                continue
            if rc == 0:
                self.ok.append(ms)
            else:
                self.failed += 1
                self.errors.append(out[-200:])

    def mark(self):
        self.mark_t = time.perf_counter()

    def stop(self):
        self.halt.set()
        self.join(90)


def run_storms(targets, conc, seconds, label, outdir):
    """The groups' closed-loop storms at once (a kmpc-storm each): their
    summaries by group."""
    res, errors = {}, []

    def one(group):
        try:
            res[group] = storm_bench.run_storm(
                targets[group], ["-c", conc[group], "-d", seconds, "-w", 0, "--timeout", 10,
                                 "--max-errors", 10 ** 9], f"{label}-{group}", outdir,
                timeout=seconds + 180)
        except Exception as e:  # raised below, after both ended
            errors.append(e)

    threads = [threading.Thread(target=one, args=(g,)) for g in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return res


def snapshot(r, pids):
    return {"cpu": cpu_seconds(pids), "cts": cts_series(r), "shapes": shape_lines(r),
            "kdc": (storm_bench.kdc_exchange_counters(r.kdc_metrics_url)
                    if r.kdc_metrics_url else None)}


def cache_misses(s0, s1):
    """Program-cache misses (compiles) and hits per server between two
    snapshots; None when unread."""
    if not s0["cts"] or not s1["cts"]:
        return None
    k = "kmpc_cts_program_cache_total:"
    return {res: [int(b.get(k + res, 0) - a.get(k + res, 0))
                  for a, b in zip(s0["cts"], s1["cts"])] for res in ("miss", "hit")}


def pop_targets(r, pop, confs):
    """The population's storm targets by group (test_bench_targets.py
    builds them this way)."""
    return {g: PopTarget(r, pop, g, confs[g]) for g in pop.groups}


def phase(r, pop, confs, opts, heimdal, outdir, log):
    """One population's closed-loop storm (module docstring), after a
    warm-up of the same load; its figures. opts: seconds, warmup_s,
    concurrency. heimdal: Heimdal's kinit path, or None."""
    targets = pop_targets(r, pop, confs)
    n_addr = max(1, round(opts["concurrency"] * ADDRESS_SHARE))
    conc = {"plain": opts["concurrency"] - n_addr, "addr": n_addr}
    loop = None
    if heimdal:
        loop = HeimdalLoop(heimdal["kinit"], heimdal["env"], pop.keytabs["all"],
                           pop.names[::7], r.realm, os.path.join(r.dir, f"{pop.label}-h.cc"))
        loop.start()
    try:
        run_storms(targets, conc, opts["warmup_s"], f"{pop.label}-warm", outdir)
        procs = pids(r)
        s0 = snapshot(r, procs)
        if loop:
            loop.mark()
        res = run_storms(targets, conc, opts["seconds"], pop.label, outdir)
    finally:
        if loop:
            loop.stop()
    s1 = snapshot(r, procs)
    return phase_figures(pop, conc, res, loop, s0, s1, opts["seconds"], log)


def all_runs(c0, c1):
    """The Runs of every exchange that ended between two
    kdc_exchange_counters() snapshots, failed ones included (a collapsed
    realm's logins fail after their Runs)."""
    if c0 is None or c1 is None:
        return None
    return int(sum(v - c0.get(k, 0) for k, v in c1.items()
                   if k[0] == "kmpc_kdc_exchange_runs_total"))


def phase_figures(pop, conc, res, loop, s0, s1, seconds, log):
    ok = sum(x.get("ok_all_phases", x["ok"]) for x in res.values())
    failed = sum(x.get("failed_all_phases", 0) for x in res.values())
    h_ok = len(loop.ok) if loop else 0
    h_failed = loop.failed if loop else 0
    made = ok + failed + h_ok + h_failed
    rate = sum(x["logins_per_s"] for x in res.values()) + h_ok / seconds
    ex = storm_bench.runs_per_exchange(s0["kdc"], s1["kdc"])
    runs = all_runs(s0["kdc"], s1["kdc"])
    cpu = {n: s1["cpu"][n] - s0["cpu"][n] for n in s0["cpu"]}
    out = {
        "users": len(pop.names), "name_lengths": pop.lengths(),
        "concurrency": conc, "seconds": seconds, "logins_per_s": round(rate, 1),
        "logins_made": made, "failed_logins": failed + h_failed,
        "errors": sorted({f"{e.get('name')} x{e.get('count')}" for x in res.values()
                          for e in (x.get("errors") or [])})[:5]
        + (loop.errors[:2] if loop else []),
        "by_group": {g: {"logins_per_s": round(x["logins_per_s"], 1),
                         "p50_ms": round(x["latency_us"]["p50"] / 1e3, 1),
                         "p99_ms": round(x["latency_us"]["p99"] / 1e3, 1),
                         "failed": x.get("failed_all_phases", 0)} for g, x in res.items()},
        "heimdal": ({"logins": h_ok, "failed": h_failed,
                     "p50_ms": round(statistics.median(loop.ok), 1) if loop.ok else None}
                    if loop else "not run"),
        "exchanges": ex,
        "runs": runs,
        "runs_per_1000_logins": round(1000 * runs / made, 1) if runs is not None and made
        else None,
        "program_cache": cache_misses(s0, s1),
        "shapes": shape_figures(s0["shapes"], s1["shapes"]),
        "cpu_ms_per_login": {n: round(1e3 * v / max(made, 1), 3) for n, v in cpu.items()},
    }
    pc = out["program_cache"] or {}
    log(f"  {pop.label} ({len(pop.names)} users, names {out['name_lengths'][0]}-"
        f"{out['name_lengths'][1]} characters): {out['logins_per_s']} logins/s, "
        f"{out['failed_logins']} failed of {made}; Runs per 1,000 logins "
        f"{out['runs_per_1000_logins']}; compiles (misses) per server {pc.get('miss')}; "
        f"distinct shapes {out['shapes']['distinct_shapes_by_kind']} (reply lengths "
        f"{out['shapes']['distinct_reply_lengths']}, spliced request lengths "
        f"{out['shapes']['distinct_request_lengths']}); CPU ms/login "
        + ", ".join(f"{n} {v}" for n, v in out["cpu_ms_per_login"].items()))
    return out


# Issue 48's acceptance for a realm of varied names against uniform ones.
TARGET_RATIO = 0.9
TARGET_RUNS_PER_LOGIN = 1.05


def compare(r, pops, confs, opts, heimdal, outdir, log):
    """The uniform population's phase, then the varied one's (the same
    processes; a shape the first compiled is a hit for the second), and
    their ratio against the acceptance."""
    out = {}
    for label in ("uniform", "varied"):
        out[label] = phase(r, pops[label], confs, opts, heimdal, outdir, log)
    u, v = out["uniform"], out["varied"]
    out["ratio_varied_to_uniform"] = (round(v["logins_per_s"] / u["logins_per_s"], 3)
                                      if u["logins_per_s"] else None)
    rpl = (v["runs_per_1000_logins"] / 1000 if v["runs_per_1000_logins"] is not None
           else None)
    out["acceptance"] = {
        "ratio": {"measured": out["ratio_varied_to_uniform"], "target": TARGET_RATIO,
                  "met": (out["ratio_varied_to_uniform"] or 0) >= TARGET_RATIO},
        "failed_logins": {"measured": v["failed_logins"], "target": 0,
                          "met": v["failed_logins"] == 0},
        "runs_per_login": {"measured": rpl, "target": TARGET_RUNS_PER_LOGIN,
                           "met": rpl is not None and rpl <= TARGET_RUNS_PER_LOGIN},
    }
    log(f"  varied / uniform: {out['ratio_varied_to_uniform']}x logins/s (target >= "
        f"{TARGET_RATIO}); failed {v['failed_logins']}; Runs per login {rpl} (target <= "
        f"{TARGET_RUNS_PER_LOGIN})")
    return out


def client_confs(r, stock_conf):
    """krb5.conf files: the storms' (the realm's, and with addresses) and
    the sampled kinits' (stock: the standard AES enctypes only, and with
    addresses)."""
    return {"plain": r.krb5_conf,
            "addr": with_addresses(r.krb5_conf, os.path.join(r.dir, "krb5-addr.conf")),
            "stock": stock_conf,
            "stock-addr": with_addresses(stock_conf, os.path.join(r.dir, "stock-addr.conf"))}


def sample(r, pop, n, stock_env, confs, heimdal, seed=9):
    """One login at a time by n users of pop for each client: Debian's MIT
    kinit with the population's keytab, without and with addresses, and
    Heimdal's kinit, each for SAMPLE_BUDGET_S at most: {client: p50, max,
    failed, errors}."""
    rng = random.Random(seed)
    users = [rng.choice(pop.names) for _ in range(n)]
    clients = {"mit": ("/usr/bin/kinit", confs["stock"], stock_env),
               "mit-addresses": ("/usr/bin/kinit", confs["stock-addr"], stock_env)}
    if heimdal:
        clients["heimdal"] = (heimdal["kinit"], confs["stock"], heimdal["env"])
    out = {}
    for name, (prog, conf, env) in clients.items():
        env = dict(env, KRB5_CONFIG=conf,
                   KRB5CCNAME="FILE:" + os.path.join(r.dir, f"sample-{name}.cc"))
        lat, errors = [], []
        end = time.time() + SAMPLE_BUDGET_S
        for u in users:
            if time.time() > end:
                break
            t0 = time.perf_counter()
            rc, text = kinit([prog, "-k", "-t", pop.keytabs["all"]], f"{u}@{r.realm}", env)
            ms = (time.perf_counter() - t0) * 1e3
            if rc == 0:
                lat.append(ms)
            else:
                errors.append(f"{u}: " + text[-160:])
        out[name] = {"n": len(lat), "p50_ms": round(statistics.median(lat), 1) if lat else None,
                     "max_ms": round(max(lat), 1) if lat else None,
                     "failed": len(errors), "errors": errors[:3]}
    return out
