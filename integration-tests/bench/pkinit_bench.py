#!/usr/bin/env python3
"""PKINIT logins with Debian's unmodified /usr/bin/kinit and krb5-pkinit,
one client, against stock MIT's KDC and a kmpc realm side by side on
loopback in the same run:

  stock   kmpc_harness.realm.Realm: the patched krb5kdc without the kdcmpc
          module, every key (krbtgt, users) in the KDB
  kmpc    kmpc_harness.kmpc_realm.KmpcRealm: the real kdcmpc module,
          servers in their default (malicious) mode, the krbtgt in the
          cluster (setup_krbtgt), the users' aes256-cts keys shared out
          (kmpc-admin share --from-existing), metrics on

Both: PKINIT on (the KDC certificate of deploy/gen-pkinit-certs.sh, one CA
for both realms, freshness tokens offered, not required),
WELLKNOWN/ANONYMOUS without keys (kmpc_harness.pkinit.add_anonymous),
carol (a random aes256-cts key, a client certificate) and alice (an
aes256-cts password key); last-success and lockout off as in the storms.

Three logins, each a kinit process timed by its wall time (as a user runs
it), after one cold login on each side; the iterations alternate stock and
kmpc, the order swapped every iteration:
  certificate       kinit -X X509_user_identity=FILE:carol.pem,carol.key carol
  anonymous         kinit -n @REALM (anonymous PKINIT: the FAST armor
                    realms use)
  armored_password  kinit -T ARMOR alice, ARMOR one ccache of kinit -n made
                    before the phase (FAST with the anonymous armor)
For kmpc, the KDC module's count of each login's Runs (kmpc_kdc_exchanges_total
and kmpc_kdc_exchange_runs_total, result "ok", read from its /metrics
before and after each kmpc login, outside the timing): 1 for a
certificate or an anonymous login (exchange "as"); 3 for an armored
password login (exchange "as_fast": its two requests each open the armor,
and the second is the login's own Run; 4 when the reply had a shape no
login had proven yet).

Writes build/bench/pkinit.json and prints a table; bench_results.py turns
it into results.json's "pkinit" section.

Usage: pkinit_bench.py [--logins 30] [--out FILE]
"""

import argparse
import collections
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench import bench_results, cts_bench, storm_bench  # noqa: E402
from kmpc_harness import pkinit  # noqa: E402
from kmpc_harness import realm as kmpc_realm  # noqa: E402

CTS256 = cts_bench.CTS256
STOCK_KINIT = cts_bench.STOCK_KINIT
PLUGIN = "/usr/lib/x86_64-linux-gnu/krb5/plugins/preauth/pkinit.so"
CERT_USER = "carol"
PASSWORD_USER = "alice"
SIDES = ("stock", "kmpc")
KINDS = ("certificate", "anonymous", "armored_password")
# The module's exchange kind of each login and how many exchanges of it one
# login makes (the armored login's two requests, each opening the armor,
# and the second's own exchange: integration-tests/test_pkinit.py).
EXCHANGES = {"certificate": ("as", 1), "anonymous": ("as", 1),
             "armored_password": ("as_fast", 3)}
EXPECTED_RUNS = {"certificate": [1], "anonymous": [1], "armored_password": [3, 4]}
BENCH_DIR = storm_bench.BENCH_DIR
COLD_RETRY_S = cts_bench.COLD_RETRY_S
COUNTED_WAIT_S = 3.0


class Client(cts_bench.Stock):
    """cts_bench's Debian-kinit client (its own krb5.conf and ccache) with
    the realms' PKINIT anchor in the realm's block."""

    def __init__(self, realm, name, certs):
        super().__init__(realm, name)
        with open(self.conf) as f:
            text = f.read()
        kdc = f"        kdc = 127.0.0.1:{realm.kdc_port}\n"
        with open(self.conf, "w") as f:
            f.write(text.replace(kdc, kdc + pkinit.client_relation(certs)))


def add_principals(r, password, share):
    """WELLKNOWN/ANONYMOUS, the certificate user and the password user;
    share: both users' aes256-cts keys moved to the cluster."""
    pkinit.add_anonymous(r)
    r.addprinc(CERT_USER, None, enctypes=[CTS256])
    r.addprinc(PASSWORD_USER, password, enctypes=[CTS256])
    if share:
        r.admin("share", "--from-existing", f"--enctype={CTS256}", CERT_USER, PASSWORD_USER)


def bring_up(workdir, side, certs, password):
    """The side's realm with PKINIT, its KDC running."""
    extra = storm_bench.dbmodules_block(kmpc_realm.REALM, disable_last_success="true",
                                        disable_lockout="true")
    relations = pkinit.kdc_relations(certs)
    if side == "stock":
        r = kmpc_realm.Realm(workdir, enctypes=[CTS256], kdc_conf_extra=extra,
                             realm_extra=relations)
    else:
        from kmpc_harness.kmpc_realm import KmpcRealm
        r = KmpcRealm(workdir, module="real", enctypes=cts_bench.ENCTYPES, metrics=True,
                      kdc_conf_extra=extra, realm_extra=relations)
    try:
        r.create()
        if side == "kmpc":
            r.setup_krbtgt()
            r.setup_warmup()
        add_principals(r, password, share=side == "kmpc")
        if side == "kmpc":
            r.start()
        else:
            r.start_kdc()
    except BaseException:
        r.stop()
        raise
    return r


def login_argv(kind, r, certs, armor):
    """kinit's arguments for one login of kind."""
    if kind == "certificate":
        return ["-X", f"X509_user_identity={pkinit.identity(certs, CERT_USER)}", CERT_USER]
    if kind == "anonymous":
        return ["-n", f"@{r.realm}"]
    return ["-T", armor, PASSWORD_USER]


def make_armor(c, r):
    """An anonymous PKINIT ccache (kinit -n) for kinit -T: its path."""
    path = os.path.join(r.dir, "anon-armor.cc")
    p = subprocess.run([STOCK_KINIT, "-n", f"@{r.realm}"],
                       env=dict(c.env, KRB5CCNAME="FILE:" + path),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise kmpc_realm.RealmError(f"armor ccache (kinit -n): {(p.stdout + p.stderr).strip()}")
    return path


def module_counts(r):
    """The kmpc KDC module's exchange counters, or None (stock: no module)."""
    url = getattr(r, "kdc_metrics_url", None)
    return storm_bench.kdc_exchange_counters(url) if url else None


def counted(r, before, kind, n):
    """module_counts(r) once the module counted n more ok exchanges of kind
    than before (it counts an exchange after the KDC released it, after the
    reply), or after COUNTED_WAIT_S."""
    deadline = time.time() + COUNTED_WAIT_S
    key = ("kmpc_kdc_exchanges_total", kind, "ok")
    while True:
        now = module_counts(r)
        if (now is None or before is None or now.get(key, 0) - before.get(key, 0) >= n
                or time.time() > deadline):
            return now
        time.sleep(0.01)


def cold_login(side, kind):
    """The side's first login of kind, retried for up to COLD_RETRY_S (the
    servers compile its programs on first use); what it took."""
    c, argv, stdin = side["client"], side["argv"][kind], side["input"][kind]
    ms, rc, out = c.timed(argv, input=stdin)
    cold = {"ms": round(ms, 1), "ok": rc == 0, "error": None if rc == 0 else out[-300:],
            "failed_before_ok": 0}
    deadline = time.time() + COLD_RETRY_S
    while rc != 0 and time.time() < deadline:
        cold["failed_before_ok"] += 1
        time.sleep(1)
        ms, rc, out = c.timed(argv, input=stdin)
    if rc != 0:
        raise kmpc_realm.RealmError(f"{kind}: kinit {' '.join(argv)} failed for "
                                    f"{COLD_RETRY_S} s: {out}")
    settle(side)
    return cold


def settle(side):
    """The side's counters read after whatever a login left to count (a
    cold or failed login's exchanges) has been counted."""
    if getattr(side["realm"], "kdc_metrics_url", None):
        time.sleep(0.3)
        side["counts"] = module_counts(side["realm"])


def ok_delta(before, after, name):
    """How much name grew, summed over exchange kinds, result "ok"."""
    return int(sum(v - before.get(k, 0) for k, v in after.items()
                   if k[0] == name and k[2] == "ok"))


def timed_login(side, kind, lat, fails, runs):
    """One measured login of kind on side; for kmpc the Runs and exchanges
    the module counted for it appended to runs."""
    ms, rc, out = side["client"].timed(side["argv"][kind], input=side["input"][kind])
    (lat if rc == 0 else fails).append(ms if rc == 0 else out[-300:])
    before = side.get("counts")
    if before is None:
        return
    if rc != 0:
        settle(side)
        return
    after = side["counts"] = counted(side["realm"], before, *EXCHANGES[kind])
    if after is not None:
        runs.append({"exchanges": ok_delta(before, after, "kmpc_kdc_exchanges_total"),
                     "runs": ok_delta(before, after, "kmpc_kdc_exchange_runs_total")})


def runs_section(kind, per_login):
    """The module's count over one kind's measured kmpc logins: Runs per
    login (mean and how many logins took each count), exchanges per login,
    and whether every login took an expected count."""
    if not per_login:
        return None
    runs = collections.Counter(x["runs"] for x in per_login)
    exchanges = collections.Counter(x["exchanges"] for x in per_login)
    return {"logins": len(per_login),
            "runs_per_login": round(sum(x["runs"] for x in per_login) / len(per_login), 3),
            "runs_distribution": {str(k): runs[k] for k in sorted(runs)},
            "exchanges_per_login": {str(k): exchanges[k] for k in sorted(exchanges)},
            "expected_runs": EXPECTED_RUNS[kind],
            "as_expected": set(runs) <= set(EXPECTED_RUNS[kind])}


def phase(kind, sides, logins, log):
    """One kind: a cold login on each side, then logins iterations
    alternating the sides; the kind's section."""
    cold = {name: cold_login(s, kind) for name, s in sides.items()}
    lat = {name: [] for name in sides}
    fails = {name: [] for name in sides}
    runs = []
    for i in range(logins):
        for name in (SIDES if i % 2 == 0 else SIDES[::-1]):
            timed_login(sides[name], kind, lat[name], fails[name], runs)
    sec = {"cold": cold}
    for name in SIDES:
        sec[name] = {**cts_bench.summary(lat[name]), "failed": len(fails[name]),
                     "errors": sorted(set(fails[name]))[:3]}
    a, b = sec["kmpc"]["p50_ms"], sec["stock"]["p50_ms"]
    sec["ratio_p50"] = round(a / b, 2) if a and b else None
    sec["kmpc_runs"] = runs_section(kind, runs)
    r = sec["kmpc_runs"] or {}
    log(f"  {kind}: stock p50 {b} ms, kmpc p50 {a} ms ({sec['ratio_p50']}x); failed "
        f"{sec['stock']['failed']} / {sec['kmpc']['failed']}; kmpc Runs per login "
        f"{r.get('runs_per_login')} {r.get('runs_distribution')}")
    return sec


def sides_of(realms, certs, password):
    """{side: its realm, client, each kind's kinit argv and input}; the
    armor ccache of each side made here (before any phase)."""
    out = {}
    for name, r in realms.items():
        c = Client(r, "pkinit", certs)
        armor = make_armor(c, r)
        out[name] = {"realm": r, "client": c, "counts": None,
                     "argv": {k: login_argv(k, r, certs, armor) for k in KINDS},
                     "input": {"certificate": None, "anonymous": None,
                               "armored_password": password + "\n"}}
    return out


def run(work, logins, log):
    """Both realms, the three phases; the results' body."""
    if not os.path.exists(PLUGIN):
        raise SystemExit(f"{PLUGIN} missing: deploy/install-deps.sh (krb5-pkinit)")
    password = "Alice-" + os.urandom(9).hex()
    t0 = time.time()
    certs = pkinit.make_certs(os.path.join(work, "pkinit"), kmpc_realm.REALM, [CERT_USER])
    realms = {}
    try:
        for name in SIDES:
            realms[name] = bring_up(os.path.join(work, name), name, certs, password)
        sides = sides_of(realms, certs, password)
        res = {"setup_s": round(time.time() - t0, 1), "loadavg_before": os.getloadavg()[0],
               "kinds": {}}
        for kind in KINDS:
            res["kinds"][kind] = phase(kind, sides, logins, log)
        res["loadavg_after"] = os.getloadavg()[0]
        dead = [f"{n}: {d}" for n, r in realms.items() for d in r.dead_daemons()]
        if dead:
            raise kmpc_realm.RealmError(f"daemons died: {dead}")
        return res
    except Exception:
        for r in realms.values():
            sys.stderr.write(r.logs()[-3000:] + "\n")
        raise
    finally:
        for r in realms.values():
            r.stop()


def parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logins", type=int, default=30,
                    help="measured logins of each kind on each side")
    ap.add_argument("--out", default=os.path.join(BENCH_DIR, "pkinit.json"))
    return ap


def main():
    args = parser().parse_args()
    os.makedirs(BENCH_DIR, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    res = {"when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cores": os.cpu_count(), "loadavg_start": os.getloadavg()},
           "kinit": STOCK_KINIT, "logins": args.logins, "servers": "malicious"}
    log(f"== PKINIT, Debian's kinit, one client: stock and kmpc, {args.logins} logins each")
    work = tempfile.mkdtemp(prefix="pkinit-", dir=BENCH_DIR)
    rc = 0
    try:
        res.update(run(work, args.logins, log))
    except Exception as e:
        res["error"] = f"{type(e).__name__}: {e}"[:2000]
        log(f"  FAILED: {res['error']}")
        rc = 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["machine"]["loadavg_end"] = os.getloadavg()
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    bench_results.print_pkinit({"pkinit": bench_results.pkinit_side(res)})
    log(f"written: {args.out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
