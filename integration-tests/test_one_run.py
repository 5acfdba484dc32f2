"""Each exchange is one Run of the MPC cluster, by construction: the KDC
states its plan (kdcmpc interface 1.2, docs/design/exchange-plan.md section
1.5), so the module prepares in that Run everything the exchange's later
jobs need (keystreams for the ticket and the reply, signing pads linked to
the ticket, PAC verification pads at a presented ticket's counters)
without having seen an exchange of that kind before. An AS exchange states
its plan once the ticket and reply are built, with the deferred encrypted
timestamp as its gate; a TGS-type exchange before the presented ticket is
decrypted.

Under concurrent load with no warm-up (no login before the storm, no
learning pass), the KDC module's own count must show, for as, tgs, renew,
forward, u2u and s4u2self exchanges, as many Runs as exchanges
(kmpc_kdc_exchange_runs_total == kmpc_kdc_exchanges_total, ok results),
and no plan miss (kmpc_kdc_plan_misses_total). The storm (kmpc-storm
--mix login,tgs,renew,forward; its login is an AS exchange with encrypted
timestamp pre-authentication under the user's key handle) runs beside
clients that make user-to-user tickets (kvno --u2u) and S4U2Self tickets
(kvno -U) in parallel, with TGTs straight from the AS (an AS exchange links
the TGT's PAC signatures to its ticket, so no renewal is needed first).
"""
import concurrent.futures
import os
import secrets
import subprocess
import time

import pytest

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.realm import PREFIX, RealmError, binpath
from test_metrics import parse, scrape, value

USERS = 4
KINDS = ("as", "tgs", "renew", "forward", "u2u", "s4u2self")
# Exchanges of each kind the assertion wants at least: a count this low
# would show an exchange path that does not state a plan at all.
MIN_EXCHANGES = {"as": 20}
MIN_OTHER = 8


def _realm(kmpc_factory, tmp_path):
    """The real module, the krbtgt and password users in the cluster, an
    ordinary service with a keytab; started without the warm-up login."""
    from bench import storm_bench  # the storm target and kmpc-storm
    pws = {f"user{i}": "pw-" + secrets.token_hex(8) for i in range(USERS)}
    r = kmpc_factory(module="real", metrics=True)
    r.setup_krbtgt()
    r.add_service()
    r.add_users(pws)
    r.start()
    kt = str(tmp_path / "storm.keytab")
    storm_bench.client_keytab_from_passwords(
        r.env, {f"{u}@{r.realm}": pw for u, pw in pws.items()},
        ["aes256-ctr-mpc"], kt, kvno=2)
    svc_kt = r.extract_keytab(kmpc_cluster.SERVICE, str(tmp_path / "svc.keytab"))
    return r, pws, kt, svc_kt


def _tool(r, argv, ccache):
    env = dict(r.env, KRB5CCNAME="FILE:" + ccache)
    p = subprocess.run([binpath(argv[0])] + argv[1:], env=env, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == 0, f"{argv}: {p.stdout}{p.stderr}"


def _tgt(r, kt, princ, ccache):
    """A TGT from the AS exchange, used as it is."""
    _tool(r, ["kinit", "-k", "-t", kt, princ], ccache)


def _tgts(r, kt, svc_kt, tmp_path):
    for i in range(2):
        _tgt(r, kt, f"user{i}@{r.realm}", str(tmp_path / f"u2u-a{i}"))
        _tgt(r, kt, f"user{(i + 1) % USERS}@{r.realm}", str(tmp_path / f"u2u-b{i}"))
        _tgt(r, svc_kt, f"{kmpc_cluster.SERVICE}@{r.realm}",
             str(tmp_path / f"s4u-{i}"))


def _u2u_loop(r, kt, tmp_path, i, n):
    """n user-to-user tickets: user i's TGT in the header, user i+1's in
    the request's second ticket (both under the krbtgt's handle)."""
    a = str(tmp_path / f"u2u-a{i}")
    b = str(tmp_path / f"u2u-b{i}")
    peer = f"user{(i + 1) % USERS}@{r.realm}"
    for _ in range(n):
        _tool(r, ["kvno", "-q", "--no-store", "--u2u", b, peer], a)


def _s4u2self_loop(r, svc_kt, i, tmp_path, n):
    """n S4U2Self tickets: the service, with its TGT, asks one for user i."""
    s = str(tmp_path / f"s4u-{i}")
    svc = f"{kmpc_cluster.SERVICE}@{r.realm}"
    for _ in range(n):
        _tool(r, ["kvno", "-q", "--no-store", "-U", f"user{i}", svc], s)


def _storm(r, kt, n):
    from bench import storm_bench
    p = subprocess.run(
        [storm_bench.find_storm(), "--keytab", kt, "--principals",
         "user%d@" + r.realm, "--users", str(USERS), "-c", "8", "-n", str(n),
         "--engine", "sync", "--mix", "login,tgs,renew,forward",
         "--tgs", f"{kmpc_cluster.SERVICE}@{r.realm}", "-q"],
        env=r.env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def test_each_exchange_is_one_run_under_load(kmpc_factory, tmp_path):
    t0 = time.time()
    r, _, kt, svc_kt = _realm(kmpc_factory, tmp_path)
    m0 = parse(scrape(r.kdc_metrics_url))
    # Counted too: the users' AS exchanges (timestamp under a key handle:
    # the plan's gate) and the service's (its key is not in the cluster:
    # a plan with nothing given, no gate).
    _tgts(r, kt, svc_kt, tmp_path)
    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        jobs = [pool.submit(_storm, r, kt, 48)]
        jobs += [pool.submit(_u2u_loop, r, kt, tmp_path, i, 6) for i in range(2)]
        jobs += [pool.submit(_s4u2self_loop, r, svc_kt, i, tmp_path, 6)
                 for i in range(2)]
        for j in jobs:
            j.result()
    m = parse(scrape(r.kdc_metrics_url))
    counts = {}
    for kind in KINDS:
        counts[kind] = tuple(
            value(m, name, missing=0, exchange=kind, result="ok")
            - value(m0, name, missing=0, exchange=kind, result="ok")
            for name in ("kmpc_kdc_exchanges_total", "kmpc_kdc_exchange_runs_total"))
    misses = {tuple(sorted(lab)): v - m0.get((n, lab), 0) for (n, lab), v in m.items()
              if n == "kmpc_kdc_plan_misses_total" and v != m0.get((n, lab), 0)}
    assert all(ex >= MIN_EXCHANGES.get(kind, MIN_OTHER)
               for kind, (ex, _) in counts.items()), (counts, misses)
    assert all(ex == runs for ex, runs in counts.values()), (counts, misses)
    assert not misses, misses
    assert r.kdc_alive()
    print(f"test_one_run: {counts} in {time.time() - t0:.1f} s")


# A kdcmpc module of interface minor version 1: init and submit only (its
# initvt leaves begin, submit_item and end unset, as MIT's convention has a
# module of an older minor version do).
MINOR1_MODULE = r"""
#include <krb5/krb5.h>
#include <krb5/kdcmpc_plugin.h>

static krb5_error_code
m1_init(krb5_context c, struct verto_ctx *v, const char *const *o,
        krb5_kdcmpc_moddata *d)
{
    *d = NULL;
    return 0;
}

static krb5_error_code
m1_submit(krb5_context c, krb5_kdcmpc_moddata d, const krb5_kdcmpc_job *j,
          krb5_kdcmpc_done_fn done, void *arg)
{
    return KRB5_PLUGIN_OP_NOTSUPP;
}

krb5_error_code
kdcmpc_minor1_initvt(krb5_context c, int maj, int min, krb5_plugin_vtable vt)
{
    krb5_kdcmpc_vtable v = (krb5_kdcmpc_vtable)vt;

    if (maj != 1)
        return KRB5_PLUGIN_VER_NOTSUPP;
    v->name = "minor1";
    v->init = m1_init;
    v->submit = m1_submit;
    return 0;
}
"""


def test_a_module_without_the_plan_stops_the_kdc(realm_factory, tmp_path):
    """The KDC asks interface 1.2 and has no path without the plan: a
    configured module of minor version 1 fails its startup with the reason,
    instead of being skipped (every job under a handle would fail later)."""
    src = tmp_path / "minor1.c"
    src.write_text(MINOR1_MODULE)
    so = str(tmp_path / "minor1.so")
    p = subprocess.run(["cc", "-shared", "-fPIC", "-o", so, str(src),
                        "-I" + os.path.join(PREFIX, "include")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = realm_factory(kdc_conf_extra=kmpc_cluster.kdcmpc_conf("minor1", so, {}))
    with pytest.raises(RealmError) as e:
        r.start_kdc(attempts=1)
    assert ("kdcmpc module minor1 implements interface 1.1; this KDC needs 1.2 "
            "(the exchange plan)") in str(e.value) + r.logs()
    assert not r.kdc_alive()
