"""Users whose aes256/aes128-cts-hmac-sha1-96 key lives only in the cluster
log in with unmodified clients: the AS exchange on the exchange plan
(docs/design/exchange-plan.md section 2), in one MPC Run.

Real processes: three kmpc-mpc-server (semi-honest and the default
malicious mode), kmpc-admin, krb5kdc with the real kdcmpc module, and
Debian's own /usr/bin/kinit, klist and kvno with a krb5.conf naming only
the standard AES enctypes (what an unmodified client offers). The KDB holds
handles of enctypes 18/17 only (test_cts_handles.py checks that and that
the keys are nowhere in the realm). The timestamp is the servers' CBC-CTS
DECRYPT (usage 1), the EncASRepPart their ENCRYPT (usage 3) of XOR shares,
released only if the timestamp's HMAC-SHA1-96 tag held.

A wrong password must be answered as MIT answers it for a user whose key
is in the KDB (same kinit message, the failure counted for lockout), and no
PA-REQ-ENC-PA-REP is made for such a user (docs/limitations.md).
"""
import os
import re
import subprocess

import pytest

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import tickets
from test_cts_handles import CTS128, CTS256, ENCTYPES, assert_only_handles, keys_of
from test_metrics import parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

STOCK = {name: f"/usr/bin/{name}" for name in ("kinit", "klist", "kvno", "kdestroy")}
SERVICE = "host/svc.kmpc.test"
MODES = {"semi-honest": "--security=semi-honest", "malicious": ""}


class Stock:
    """Debian's MIT clients with a krb5.conf of the realm's KDC and the
    standard AES enctypes only, and a ccache of their own."""

    def __init__(self, kr, name="stock"):
        self.kr = kr
        self.conf = os.path.join(kr.dir, f"{name}-krb5.conf")
        self.ccache = os.path.join(kr.dir, f"{name}.cc")
        with open(self.conf, "w") as f:
            f.write(f"[libdefaults]\n    default_realm = {kr.realm}\n"
                    f"    dns_lookup_kdc = false\n    rdns = false\n"
                    f"    default_tkt_enctypes = {CTS256} {CTS128}\n"
                    f"    default_tgs_enctypes = {CTS256} {CTS128}\n"
                    f"    permitted_enctypes = {CTS256} {CTS128}\n"
                    f"[realms]\n    {kr.realm} = {{\n"
                    f"        kdc = 127.0.0.1:{kr.kdc_port}\n    }}\n")
        self.env = {k: v for k, v in kr.env.items()
                    if not k.startswith(("KRB5", "KMPC", "LD_"))}
        self.env.update(KRB5_CONFIG=self.conf, KRB5CCNAME="FILE:" + self.ccache,
                        LC_ALL="C")

    def run(self, name, *args, input=None):
        p = subprocess.run([STOCK[name], *args], input=input, capture_output=True,
                           text=True, env=self.env, timeout=90)
        return p.returncode, p.stdout + p.stderr

    def kinit(self, princ, password):
        return self.run("kinit", princ, input=password + "\n")


def kdc_counts(kr):
    """(AS exchanges, their Runs) the KDC module counted, ok results."""
    m = parse(scrape(kr.kdc_metrics_url))
    return tuple(value(m, n, missing=0, exchange="as", result="ok")
                 for n in ("kmpc_kdc_exchanges_total", "kmpc_kdc_exchange_runs_total"))


def failed_attempts(kr, princ):
    out = kr.kadmin_local(f"getprinc {princ}")
    return int(re.search(r"Failed password attempts: (\d+)", out).group(1))


def assert_login(kr, c, princ, password, enctype):
    """Stock kinit logs princ in, in one Run; the TGT's session key is a
    fresh key of a standard AES enctype; stock kvno gets a service ticket
    with it."""
    before = kdc_counts(kr)
    rc, out = c.kinit(princ, password)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    ex, runs = (a - b for a, b in zip(kdc_counts(kr), before))
    assert ex == 1 and runs == 1, (ex, runs)
    rc, out = c.run("klist", "-e")
    assert rc == 0 and f"Default principal: {princ}@{kr.realm}" in out, out
    assert f"krbtgt/{kr.realm}@{kr.realm}" in out, out
    assert re.search(r"Etype \(skey, tkt\): aes(256|128)-cts-hmac-sha1-96, ", out), out
    creds = tickets.ccache_credentials(c.ccache)
    tgt = [x for x in creds if x["server"][0] == "krbtgt"]
    assert len(tgt) == 1 and len(tgt[0]["key"]) in (16, 32), creds
    assert tgt[0]["key"] != bytes(len(tgt[0]["key"])), "an all-zero session key"
    rc, out = c.run("kvno", SERVICE)
    assert rc == 0 and f"{SERVICE}@{kr.realm}: kvno = " in out, out
    # The reply is the servers' aes-cts ENCRYPT: no enc-pa-rep for it.
    log = kr.kdc_log_text()
    for key in keys_of(kr, princ, password).values():
        assert key.hex() not in log
    return tgt[0]["key"]


def assert_refused_as_stock(kr, c, princ, wrong, ordinary, ordinary_wrong):
    """A wrong password fails as it does for `ordinary` (a user whose key is
    in the KDB): the same kinit message, the failure counted the same."""
    n0, m0 = failed_attempts(kr, princ), failed_attempts(kr, ordinary)
    rc, out = c.kinit(princ, wrong)
    rc2, out2 = c.kinit(ordinary, ordinary_wrong)
    assert rc != 0 and rc2 != 0, (out, out2)
    assert out.replace(princ, "USER") == out2.replace(ordinary, "USER"), (out, out2)
    assert "Password incorrect while getting initial credentials" in out, out
    assert failed_attempts(kr, princ) == n0 + 1
    assert failed_attempts(kr, ordinary) == m0 + 1
    assert kr.kdc_alive()


@pytest.fixture(params=sorted(MODES))
def realm(request, kmpc_factory):
    for path in STOCK.values():
        if not os.path.exists(path):
            pytest.fail(f"{path} missing: run deploy/install-deps.sh (krb5-user)")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      server_flags=MODES[request.param])
    kr.setup_krbtgt()
    kr.addprinc(SERVICE, "Svc-pw-90210", enctypes=[CTS256], flags="")
    kr.addprinc("olly", "Olly-pw-1", enctypes=[CTS256, CTS128])
    kr.start()
    return kr


@pytest.mark.parametrize("enctype", [CTS256, CTS128])
def test_from_existing_user_logs_in(realm, enctype):
    kr, pw = realm, "Alice-pw-9182"
    kr.addprinc("alice", pw, enctypes=[enctype])
    _, out, _ = kr.admin("share", "--from-existing", f"--enctype={enctype}", "alice")
    assert f"as {enctype} kvno 1" in out, out
    assert [(r[0], r[1]) for r in assert_only_handles(kr, "alice")] == [("1", enctype)]
    c = Stock(kr)
    k1 = assert_login(kr, c, "alice", pw, enctype)
    k2 = assert_login(kr, c, "alice", pw, enctype)
    assert k1 != k2  # a fresh session key per login
    assert_refused_as_stock(kr, c, "alice", "wrong-" + pw, "olly", "wrong-Olly-pw-1")


def test_password_stdin_user_logs_in(realm):
    kr, old, new = realm, "Bob-old-5521", "Bob-new-7733"
    kr.addprinc("bob", old, enctypes=[CTS256, CTS128])
    kr.admin("share", "--password-stdin", f"--enctype={CTS256}", "bob", input=new + "\n")
    rows = assert_only_handles(kr, "bob")
    assert {r[1] for r in rows} == {CTS256}
    c = Stock(kr)
    assert_login(kr, c, "bob", new, CTS256)
    assert_refused_as_stock(kr, c, "bob", old, "olly", "Olly-pw-0")
