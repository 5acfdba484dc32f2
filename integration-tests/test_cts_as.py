"""Users whose aes256/aes128-cts-hmac-sha1-96 key lives only in the cluster
log in with unmodified clients: the AS exchange on the exchange plan
(docs/design/exchange-plan.md section 2), in one MPC Run (two for a
reply of a shape no earlier login proved: the reply then goes after the
timestamp verified, so that a wrong password compiles nothing,
test_cts_churn.py).

Real processes: three kmpc-mpc-server (semi-honest and the default
malicious mode), kmpc-admin, krb5kdc with the real kdcmpc module, and
Debian's own /usr/bin/kinit, klist and kvno with a krb5.conf naming only
the standard AES enctypes (what an unmodified client offers). The KDB holds
handles of enctypes 18/17 only (test_cts_handles.py checks that and that
the keys are nowhere in the realm). The timestamp is the servers' CBC-CTS
DECRYPT (usage 1), the EncASRepPart their ENCRYPT (usage 3) of XOR shares,
released only if the timestamp's HMAC-SHA1-96 tag held.

A wrong password must be answered as MIT answers it for a user whose key
is in the KDB (same kinit message, the failure counted for lockout). The
reply carries PA-REQ-ENC-PA-REP (RFC 6806 section 11) with enc-pa-rep, as
MIT's KDC sends it: its checksum (usage 56 over the request, a password
verifier) is computed in the cluster and spliced into the reply's plaintext
before the encryption, in the same Run; so the client records fast_avail
and a later kinit -T with that ccache uses FAST.
"""
import os
import re
import subprocess
import time

import pytest

import conftest
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import heimdal as kmpc_heimdal
from kmpc_harness import tickets
from kmpc_harness.kmpc_realm import KmpcRealm
from test_cts_handles import (COLD_PROGRAMS, CTS128, CTS256, ENCTYPES,
                              assert_only_handles, keys_of)
from test_metrics import parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

STOCK = {name: f"/usr/bin/{name}" for name in ("kinit", "klist", "kvno", "kdestroy", "kpasswd")}
TKT_FLG_ENC_PA_REP = 0x00010000  # krb5.h: the reply's enc-pa-rep flag
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
                    f"        kdc = 127.0.0.1:{kr.kdc_port}\n"
                    f"        admin_server = 127.0.0.1:{kr.kadmin_port}\n"
                    f"        kpasswd_server = 127.0.0.1:{kr.kpasswd_port}\n    }}\n")
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


def deferred_sent(kr):
    """Gated aes*-cts jobs the KDC module held back from their timestamp's
    Run (a shape no verified login proved) and sent after it verified, in
    a Run of their own (kdc-plugin planner.h, "Proven shapes")."""
    return value(parse(scrape(kr.kdc_metrics_url)), "kmpc_kdc_cts_deferred_sent_total",
                 missing=0)


def assert_runs(kr, ex, runs, d0):
    """One exchange in one Run, or two if its reply's shape was new (its
    reply then went after the timestamp verified)."""
    d = deferred_sent(kr) - d0
    assert ex == 1 and d in (0, 1) and runs == 1 + d, (ex, runs, d)


def settled(counts, kr, before, n):
    """counts(kr) minus before, once the module counted n exchanges (it
    counts an exchange when the KDC released it, after its reply)."""
    deadline = time.time() + 5
    while True:
        d = tuple(a - b for a, b in zip(counts(kr), before))
        if d[0] >= n or time.time() > deadline:
            return d
        time.sleep(0.05)


def one_more_exchange(kr, before):
    """(exchanges, Runs) since `before`, once the module counted the login."""
    return settled(kdc_counts, kr, before, 1)


def failed_attempts(kr, princ):
    out = kr.kadmin_local(f"getprinc {princ}")
    return int(re.search(r"Failed password attempts: (\d+)", out).group(1))


def assert_login(kr, c, princ, password, enctype):
    """Stock kinit logs princ in, in one Run (two for a reply of a new
    shape); the TGT's session key is a fresh key of a standard AES enctype;
    stock kvno gets a service ticket with it."""
    before, d0 = kdc_counts(kr), deferred_sent(kr)
    rc, out = c.kinit(princ, password)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    ex, runs = one_more_exchange(kr, before)
    assert_runs(kr, ex, runs, d0)
    rc, out = c.run("klist", "-e")
    assert rc == 0 and f"Default principal: {princ}@{kr.realm}" in out, out
    assert f"krbtgt/{kr.realm}@{kr.realm}" in out, out
    assert re.search(r"Etype \(skey, tkt\): aes(256|128)-cts-hmac-sha1-96, ", out), out
    creds = tickets.ccache_credentials(c.ccache)
    tgt = [x for x in creds if x["server"][0] == "krbtgt"]
    assert len(tgt) == 1 and len(tgt[0]["key"]) in (16, 32), creds
    assert tgt[0]["key"] != bytes(len(tgt[0]["key"])), "an all-zero session key"
    # The reply is the servers' aes-cts ENCRYPT with the PA-REQ-ENC-PA-REP
    # checksum spliced in: enc-pa-rep set, and the client verified the
    # checksum (else kinit fails) and recorded FAST as available.
    assert tgt[0]["flags"] & TKT_FLG_ENC_PA_REP, hex(tgt[0]["flags"])
    assert fast_avail(creds), [x["server"] for x in creds]
    rc, out = c.run("kvno", SERVICE)
    assert rc == 0 and f"{SERVICE}@{kr.realm}: kvno = " in out, out
    log = kr.kdc_log_text()
    for key in keys_of(kr, princ, password).values():
        assert key.hex() not in log
    return tgt[0]["key"]


def fast_avail(creds):
    """Whether a ccache's credentials hold MIT's fast_avail config entry
    (written after krb5int_fast_verify_nego() verified PA-REQ-ENC-PA-REP)."""
    return any(x["server"][:2] == ["krb5_ccache_conf_data", "fast_avail"] for x in creds)


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


def _cts_realm(make, mode):
    for path in STOCK.values():
        if not os.path.exists(path):
            pytest.fail(f"{path} missing: run deploy/install-deps.sh (krb5-user)")
    kr = make(module="real", enctypes=ENCTYPES, metrics=True,
              module_options=COLD_PROGRAMS, server_flags=MODES[mode])
    kr.setup_krbtgt()
    kr.addprinc(SERVICE, "Svc-pw-90210", enctypes=[CTS256], flags="")
    kr.addprinc("olly", "Olly-pw-1", enctypes=[CTS256, CTS128])
    kr.start()
    return kr


@pytest.fixture(params=sorted(MODES))
def realm(request, kmpc_factory):
    """A realm of its own (a test that changes the realm's set-up)."""
    return _cts_realm(kmpc_factory, request.param)


@pytest.fixture(scope="module", params=sorted(MODES))
def _shared_realm(request, tmp_path_factory):
    gen = conftest._realms(tmp_path_factory.mktemp(f"cts-as-{request.param}"), request,
                           KmpcRealm, "kmpc")
    yield _cts_realm(next(gen), request.param)
    next(gen, None)  # stopped; a daemon that died fails the module's last test


@pytest.fixture
def shared(_shared_realm, request):
    """One realm per security mode for the tests that only add their own
    users to it: the servers compile each CBC-CTS program once per realm
    (the first login of a length), not once per test. Its daemons' logs
    are printed when a test using it fails."""
    yield _shared_realm
    conftest._dump_on_failure(request, _shared_realm)


@pytest.mark.parametrize("enctype", [CTS256, CTS128])
def test_from_existing_user_logs_in(shared, enctype):
    kr, pw, alice = shared, "Alice-pw-9182", f"alice-{enctype[3:6]}"
    kr.addprinc(alice, pw, enctypes=[enctype])
    _, out, _ = kr.admin("share", "--from-existing", f"--enctype={enctype}", alice)
    assert f"as {enctype} kvno 1" in out, out
    assert [(r[0], r[1]) for r in assert_only_handles(kr, alice)] == [("1", enctype)]
    c = Stock(kr)
    k1 = assert_login(kr, c, alice, pw, enctype)
    k2 = assert_login(kr, c, alice, pw, enctype)
    assert k1 != k2  # a fresh session key per login
    assert_refused_as_stock(kr, c, alice, "wrong-" + pw, "olly", "wrong-Olly-pw-1")


def test_password_stdin_user_logs_in(shared):
    kr, old, new = shared, "Bob-old-5521", "Bob-new-7733"
    kr.addprinc("bob", old, enctypes=[CTS256, CTS128])
    kr.admin("share", "--password-stdin", f"--enctype={CTS256}", "bob", input=new + "\n")
    rows = assert_only_handles(kr, "bob")
    assert {r[1] for r in rows} == {CTS256}
    c = Stock(kr)
    assert_login(kr, c, "bob", new, CTS256)
    assert_refused_as_stock(kr, c, "bob", old, "olly", "Olly-pw-0")


def test_negotiated_fast_armors_the_next_kinit(shared):
    """RFC 6806 section 11 with Debian's kinit: the login's reply verifies
    (the client checks the spliced checksum against its own over the
    request it sent) and says FAST is available, still in one Run (two for
    a new shape); kinit -T
    with that ccache then uses FAST for the same user (MIT t_skew's
    "kinit -T fast_cache"), whose wrong password is still refused."""
    kr, pw = shared, "Nina-pw-6021"
    kr.addprinc("nina", pw, enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "nina")
    c = Stock(kr, "nego")
    c.env["KRB5_TRACE"] = "/dev/stderr"
    before, d0 = kdc_counts(kr), deferred_sent(kr)
    rc, out = c.kinit("nina", pw)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert_runs(kr, *one_more_exchange(kr, before), d0)
    assert "FAST negotiation: available" in out, out
    creds = tickets.ccache_credentials(c.ccache)
    tgt = [x for x in creds if x["server"][0] == "krbtgt"]
    assert len(tgt) == 1 and tgt[0]["flags"] & TKT_FLG_ENC_PA_REP, creds
    assert fast_avail(creds), [x["server"] for x in creds]
    d = Stock(kr, "armored")
    d.env["KRB5_TRACE"] = "/dev/stderr"
    rc, out = d.run("kinit", "-T", "FILE:" + c.ccache, "nina", input=pw + "\n")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert "Using FAST due to armor ccache negotiation result" in out, out
    assert "Encoding request body and padata into FAST request" in out, out
    rc, out = d.run("kinit", "-T", "FILE:" + c.ccache, "nina", input="wrong-" + pw + "\n")
    assert rc != 0 and "Password incorrect" in out, out
    assert "Using FAST due to armor ccache negotiation result" in out, out
    rc, out = c.kinit("nina", "wrong-" + pw)
    assert rc != 0 and "Password incorrect" in out, out
    assert kr.kdc_alive()


def test_request_over_the_splice_cap_goes_without_the_checksum(shared):
    """An AS-REQ longer than the cluster hashes inside MPC (1,015 bytes: 16
    SHA-1 blocks with HMAC's padding, contract.h kMaxCtsSpliceBytes) that
    asks for PA-REQ-ENC-PA-REP is answered, without that checksum and
    without enc-pa-rep, as MIT's client accepts (it records no
    fast_avail). With the KDC's cap for an early checksum (8 KiB) in place
    of the splice's, requests of 1,016 bytes to 8 KiB were planned as a
    splice the servers refuse: KDC_ERR_SVC_UNAVAILABLE."""
    kr, pw = shared, "Lena-pw-4417"
    kr.addprinc("lena", pw, enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "lena")
    c = Stock(kr, "big")
    # kinit -a puts the host's and these addresses (~15 bytes of DER each)
    # into the request body, and the KDC copies them into the reply.
    extra = ",".join(f"10.9.{i}.1" for i in range(60))
    with open(c.conf) as f:
        conf = f.read()
    with open(c.conf, "w") as f:
        f.write(conf.replace("[libdefaults]\n", "[libdefaults]\n"
                             f"    noaddresses = false\n    extra_addresses = {extra}\n"))
    c.env["KRB5_TRACE"] = "/dev/stderr"
    rc, out = c.run("kinit", "-a", "lena", input=pw + "\n")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    sizes = [int(n) for n in re.findall(r"Sending request \((\d+) bytes\)", out)]
    assert sizes and 1015 < sizes[-1] <= 8192, sizes
    creds = tickets.ccache_credentials(c.ccache)
    tgt = [x for x in creds if x["server"][0] == "krbtgt"]
    assert len(tgt) == 1 and not tgt[0]["flags"] & TKT_FLG_ENC_PA_REP, creds
    assert not fast_avail(creds), [x["server"] for x in creds]
    assert kr.kdc_alive()


def test_no_plaintext_of_the_reply_reaches_any_server(kmpc_factory, tmp_path,
                                                      monkeypatch):
    """The servers record every KeyOps request as they receive it
    (--debug_record_requests, test_private_signing.py): the EncASRepPart of
    an aes-cts user's login (its session key, also in the ticket) is in no
    server's view; the REPLY's plaintext went as XOR shares only. Control:
    the recordings hold the user's key id (the jobs were there)."""
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    kr.setup_krbtgt()
    kr.addprinc("vera", "Vera-pw-314", enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "vera")
    kr.start()
    c = Stock(kr)
    keys = set()
    for _ in range(2):
        rc, out = c.kinit("vera", "Vera-pw-314")
        assert rc == 0, out
        keys |= {x["key"] for x in tickets.ccache_credentials(c.ccache)
                 if x["server"][0] == "krbtgt"}
    assert len(keys) == 2 and all(len(k) == 32 for k in keys), keys
    key_id = bytes.fromhex(assert_only_handles(kr, "vera")[0][3])
    for i in range(3):
        with open(os.path.join(tmp_path, f"keyops-{i}.bin"), "rb") as f:
            rec = f.read()
        assert key_id in rec, f"control: party {i} recorded no job under vera's key"
        for k in keys:
            assert k not in rec, f"party {i} received a session key"
            assert k[:8] not in rec and k[-8:] not in rec, f"party {i}: part of a session key"


def test_kpasswd_deals_new_cts_handles(realm):
    """Debian's kpasswd changes such a user's password through kadmind and
    the key dealer: the new keys are handles again (a new kvno, an aes-cts
    one among them), the new password logs in, the old one no longer."""
    kr, old, new = realm, "Kim-old-1357", "Kim-new-2468"
    kr.enable_dealer()
    kr.start_kadmind()
    kr.addprinc("kim", old, enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "kim")
    before = assert_only_handles(kr, "kim")
    c = Stock(kr)
    rc, out = c.run("kpasswd", "kim", input=f"{old}\n{new}\n{new}\n")
    assert rc == 0 and "Password changed" in out, out + kr.kdc_log_text()[-2000:]
    after = assert_only_handles(kr, "kim", {**keys_of(kr, "kim", old),
                                            **{f"new {k}": v for k, v in
                                               keys_of(kr, "kim", new).items()}})
    assert {r[0] for r in after} == {"2"} and {r[3] for r in after}.isdisjoint(
        {r[3] for r in before}), (before, after)
    assert CTS256 in {r[1] for r in after}, after
    assert_login(kr, c, "kim", new, CTS256)
    rc, out = c.kinit("kim", old)
    assert rc != 0 and "Password incorrect" in out, out


def test_heimdal_kinit_logs_in(kmpc_factory):
    """Debian's Heimdal kinit and kgetcred (heimdal-clients, unpacked by
    kmpc_harness.heimdal), default (malicious) servers: the login is one
    Run, a service ticket follows, a wrong password is refused with the
    message Heimdal gives for a user whose key is in the KDB."""
    try:
        progs = kmpc_heimdal.prepare()
    except kmpc_heimdal.HeimdalError as e:
        pytest.fail(f"Debian's Heimdal clients could not be prepared: {e}")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    kr.addprinc(SERVICE, "Svc-pw-90210", enctypes=[CTS256], flags="")
    kr.addprinc("olly", "Olly-pw-1", enctypes=[CTS256, CTS128])
    kr.addprinc("iris", "Iris-pw-2718", enctypes=[CTS256, CTS128])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "iris")
    kr.start()
    c = Stock(kr, "heimdal")
    env = kmpc_heimdal.env(c.env)

    def run(name, *args, input=None):
        p = subprocess.run([progs[name], *args], input=input, capture_output=True,
                           text=True, env=env, timeout=90)
        return p.returncode, p.stdout + p.stderr

    before, d0 = kdc_counts(kr), deferred_sent(kr)
    rc, out = run("kinit", "--password-file=STDIN", "iris", input="Iris-pw-2718\n")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert_runs(kr, *one_more_exchange(kr, before), d0)
    rc, out = run("klist", "-v")
    assert rc == 0 and f"iris@{kr.realm}" in out, out
    assert re.search(r"Session key: aes256-cts-hmac-sha1-96", out) or \
        "aes256-cts-hmac-sha1-96" in out, out
    rc, out = run("kgetcred", SERVICE)
    assert rc == 0, out
    rc, out = run("kinit", "--password-file=STDIN", "iris", input="wrong\n")
    rc2, out2 = run("kinit", "--password-file=STDIN", "olly", input="wrong\n")
    assert rc != 0 and rc2 != 0, (out, out2)
    assert out.replace("iris", "USER") == out2.replace("olly", "USER"), (out, out2)
    assert kr.kdc_alive()
