"""Tickets presented back under a service's aes*-cts key held by the cluster
(kmpc.proto KEY_KIND_SERVICE; docs/design/exchange-plan.md section 2,
"Tickets presented back"): the header ticket of a renewal and an S4U2Proxy
evidence ticket are decrypted by the servers (DECRYPT, usage 2, released
only if the tag holds) and their PAC server signature checked by a
CHECKSUM under usage 17; under a user's key (KEY_KIND_USER_SERVICE) the
servers refuse the DECRYPT, so a renewal of a ticket to a user is refused.

Real processes: three kmpc-mpc-server, kmpc-admin, krb5kdc with the real
kdcmpc module (db2, and LDAP for S4U2Proxy's delegation policy), Debian's
own kinit, kvno and klist. The service keeps its keytab (kmpc-admin share
--from-existing): Debian's kvno -k checks the renewed ticket with it.
"""
import os
import re

import pytest

from kmpc_harness import cluster as kmpc_cluster
from test_cts_as import Stock
from test_cts_handles import COLD_PROGRAMS, CTS256, ENCTYPES, assert_only_handles
from test_metrics import parse, scrape, value
import test_ldap
from test_ldap import ldap_factory  # noqa: F401
import test_unmodified_clients as tu

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

CLIENT, CLIENT_PW = "olly", "Olly-pw-1"
SVC = "host/back.kmpc.test"
# A user used as a service (a password-derived key of kind user+service).
USER, USER_PW = "alice", "Alice-pw-9182"


def make_realm(kmpc_factory, kind_flag, name, password=None):
    """CLIENT's key in the KDB; `name` (keytab extracted first) moved into
    the cluster with share --from-existing and `kind_flag`."""
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    kr.addprinc(CLIENT, CLIENT_PW, enctypes=[CTS256])
    kr.addprinc(name, password, enctypes=[CTS256])
    kt = kr.extract_keytab(name, os.path.join(kr.dir, "svc.keytab"))
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", kind_flag, name)
    assert [(r[1], r[2]) for r in assert_only_handles(kr, name)] == [(CTS256, "handle")]
    kr.start()
    return kr, kt


def renew(kr, c, name):
    """Stock kinit -r as CLIENT, kvno name, then kinit -R -S name (MIT's
    krb5_get_renewed_creds: a TGS-REQ whose header ticket is the ticket to
    name). (returncode, output, the servers' Runs of the renewal)."""
    rc, out = c.run("kinit", "-r", "1d", CLIENT, input=CLIENT_PW + "\n")
    assert rc == 0, out
    rc, out = c.run("kvno", name)
    assert rc == 0 and f"{name}@{kr.realm}: kvno = 1" in out, out + kr.kdc_log_text()[-3000:]
    before = server_runs(kr)
    rc, out = c.run("kinit", "-R", "-S", name)
    return rc, out, server_runs(kr) - before


def server_runs(kr):
    """The Runs the servers ran (kmpc_batches_total{kind="run"}, alike on
    all three): jobs outside the exchange's plan are counted there too."""
    runs = [value(parse(scrape(kr.cluster.metrics_url(i))), "kmpc_batches_total",
                  missing=0, kind="run") for i in range(3)]
    assert runs[0] == runs[1] == runs[2], runs
    return runs[0]


def tgs_lines(kr, name):
    return [l for l in kr.kdc_log_text().splitlines()
            if "TGS_REQ" in l and f"for {name}@" in l]


def test_renewal_of_a_ticket_to_a_service_key_in_the_cluster(kmpc_factory):
    kr, kt = make_realm(kmpc_factory, "--service", SVC)
    c = Stock(kr)
    rc, out, runs = renew(kr, c, SVC)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    # The header ticket's Run (with the new ticket's KDC signature pads);
    # the presented PAC's signatures (its server signature's CHECKSUM, its
    # krbtgt signatures' VERIFYs); the new ticket's ENCRYPT with its server
    # and KDC signatures made and spliced in the cluster
    # (docs/design/exchange-plan.md section 2, "Tickets presented back").
    assert runs == 3, runs
    lines = tgs_lines(kr, SVC)
    assert len(lines) == 2 and all(": ISSUE: " in l for l in lines), lines
    # The ccache holds the renewed ticket alone; the service's old keytab
    # decrypts it (Debian's kvno -k, with the cached ticket).
    rc, out = c.run("klist")
    assert rc == 0 and f"{SVC}@{kr.realm}" in out and "krbtgt/" not in out, out
    rc, out = c.run("kvno", "-k", kt, SVC)
    assert rc == 0 and "keytab entry valid" in out, out
    # And again: a renewed ticket renews (its PAC re-signed by the cluster).
    rc, out = c.run("kinit", "-R", "-S", SVC)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    rc, out = c.run("kvno", "-k", kt, SVC)
    assert rc == 0 and "keytab entry valid" in out, out
    log = kr.kdc_log_text()
    assert "did not verify" not in log and "refusing a job" not in log, log[-3000:]
    assert kr.kdc_alive()


def test_renewal_of_a_ticket_to_a_user_key_is_refused(kmpc_factory):
    """A user's key (kind user+service: tickets to it are issued) never
    decrypts under usage 2: whoever runs the KDC must not read every
    recorded ticket to a user. The renewal fails, the KDC lives on, and a
    new ticket to the user is still issued."""
    kr, _ = make_realm(kmpc_factory, "--also-service", USER, USER_PW)
    c = Stock(kr)
    rc, out, _ = renew(kr, c, USER)
    assert rc != 0, out
    lines = tgs_lines(kr, USER)
    assert len(lines) == 2 and ": ISSUE: " not in lines[-1], lines
    rc, out = c.run("kinit", "-r", "1d", CLIENT, input=CLIENT_PW + "\n")
    assert rc == 0, out
    rc, out = c.run("kvno", USER)
    assert rc == 0, out
    assert kr.kdc_alive()


def test_s4u2proxy_with_the_proxys_key_in_the_cluster(ldap_factory, tmp_path):  # noqa: F811
    """LDAP's delegation policy (test_ldap.py), the proxy's key moved into
    the cluster as a service's: its S4U2Self ticket is encrypted by the
    servers, and the S4U2Proxy evidence ticket (that ticket, presented
    back) decrypted by them; Debian's kvno -U -P gets the delegated ticket,
    which the target's keytab decrypts."""
    tu._check_stock_binaries()
    r = ldap_factory(module="real", module_options=COLD_PROGRAMS)
    r.setup_krbtgt()
    test_ldap._delegation_principals(r)
    r.admin("share", "--from-existing", f"--enctype={CTS256}", "--service", tu.SERVICE)
    assert {row[2] for row in r.kdb_keys(tu.SERVICE)} == {"handle"}
    r.start()
    d = tmp_path / "clients"
    d.mkdir()
    c = tu.Clients(r, str(d))
    code, out, out_cc = test_ldap._proxy(c, tu.SERVICE, test_ldap.TARGET, patched=False)
    assert code == 0, out + open(r.kdc_log).read()[-3000:]
    word, delegated = test_ldap._last_s4u2proxy_status(r, test_ldap.TARGET)
    assert word == "ISSUE" and delegated, word
    test_ldap._delegated_ticket_ok(c, out_cc, test_ldap.TARGET)
    kdc = open(r.kdc_log).read()
    assert not re.search(r"refusing|did not verify", kdc), kdc[-3000:]
    assert r.alive()
