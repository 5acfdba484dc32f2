"""PKINIT (RFC 4556, RFC 8062 anonymous PKINIT, RFC 8070 freshness tokens)
in a realm whose krbtgt, users' and services' keys are in the cluster, with
Debian's unmodified kinit, klist and kvno and Debian's krb5-pkinit plugin.

Real processes: three kmpc-mpc-server (malicious, the default), krb5kdc
with the real kdcmpc module and the KDC certificate of
deploy/gen-pkinit-certs.sh, WELLKNOWN/ANONYMOUS made as the admin guide
says (without keys). What is checked:
- anonymous PKINIT (kinit -n) gets a TGT under the MPC-held krbtgt in one
  MPC Run; its ccache armors (kinit -T) the login of a user whose
  aes256-cts key is a handle: the encrypted challenge is verified on
  shares, the armor ticket opened by the cluster; then kvno to a service
  whose key is a handle;
- a certificate login with a freshness token required gets a TGT in one
  Run, then a service ticket; the token the KDC sends is checksummed under
  PRF+ of the master key (an independent implementation checks it);
- a certificate login of a user whose password key is in the cluster
  submits no job under that key (PKINIT replaced the reply key); the same
  login inside FAST with the anonymous armor;
- no principal of the realm has a real key in the KDB.
"""
import os
import re
import struct
import subprocess
import time

import pytest

import krb_der
from kmpc_harness import pkinit
from test_cts_as import STOCK, SERVICE, Stock, kdc_counts, settled
from test_cts_fast import EC_USED, fast_counts, prf_plus
from test_cts_handles import CTS256, COLD_PROGRAMS, ENCTYPES, assert_only_handles
from test_cts_server_view import rfc3962_checksum

PA_AS_FRESHNESS = 150
KEYUSAGE_PA_AS_FRESHNESS = 514
FRESHNESS_LABEL = b"kmpc-pkinit-freshness-token"
CERT_USERS = ("carol", "erin", "frank")


class PkinitClient(Stock):
    """Debian's clients (test_cts_as.Stock: the realm's KDC, the standard
    AES enctypes, a ccache of their own) with the realm's PKINIT anchor,
    tracing to stderr."""

    def __init__(self, kr, certs, name):
        super().__init__(kr, name)
        kdc = f"        kdc = 127.0.0.1:{kr.kdc_port}\n"
        with open(self.conf) as f:
            text = f.read()
        assert kdc in text, text
        with open(self.conf, "w") as f:
            f.write(text.replace(kdc, kdc + pkinit.client_relation(certs)))
        self.env["KRB5_TRACE"] = "/dev/stderr"

    def run(self, name, *args, input=None, ccache=None):
        env = dict(self.env, KRB5CCNAME=ccache or self.env["KRB5CCNAME"])
        p = subprocess.run([STOCK[name], *args], input=input, capture_output=True,
                           text=True, env=env, timeout=90)
        return p.returncode, p.stdout + p.stderr


@pytest.fixture
def realm(kmpc_factory, tmp_path):
    for path in STOCK.values():
        assert os.path.exists(path), f"{path} missing: deploy/install-deps.sh (krb5-user)"
    plugin = "/usr/lib/x86_64-linux-gnu/krb5/plugins/preauth/pkinit.so"
    assert os.path.exists(plugin), f"{plugin} missing: deploy/install-deps.sh (krb5-pkinit)"
    certs = pkinit.make_certs(str(tmp_path / "pkinit"), "KMPC.TEST", CERT_USERS)
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS,
                      realm_extra=pkinit.kdc_relations(certs, require_freshness=True))
    assert kr.realm == "KMPC.TEST"
    kr.setup_krbtgt()
    kr.move_kadmind_keys()
    pkinit.add_anonymous(kr)
    kr.addprinc(SERVICE, None, enctypes=[CTS256], flags="")
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "--service", SERVICE)
    for user, pw in (("alice", "Alice-pw-9182"), ("carol", "Carol-pw-7302")):
        kr.addprinc(user, pw, enctypes=[CTS256])
        kr.admin("share", "--from-existing", f"--enctype={CTS256}", user)
    kr.addprinc("erin", None, enctypes=[CTS256])  # a random key in the cluster
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "erin")
    kr.kadmin_local("addprinc +requires_preauth -nokey frank")  # no key at all
    kr.start()
    kr.pkinit_certs = certs
    return kr


def assert_no_real_key(kr):
    """Every principal's keys are handles, or it has none (K/M aside)."""
    names = [l.strip() for l in kr.kadmin_local("listprincs").splitlines()
             if "@" in l and not l.startswith("Authenticating")]
    assert pkinit.ANONYMOUS + "@" + kr.realm in names, names
    for name in names:
        if name.startswith("K/M@"):
            continue
        rows = kr.kdb_keys(name.rsplit("@", 1)[0])
        assert all(r[2] == "handle" for r in rows), (name, rows)
    assert kr.kdb_keys(pkinit.ANONYMOUS) == []


def test_anonymous_armor_for_a_cts_user_then_a_service(realm):
    """kinit -n: one Run (the ticket under the krbtgt handle); that ccache
    as armor for alice's password login (her key a handle): the encrypted
    challenge verified in the cluster; the login's request two Runs (the
    armor's and the login's) after one for the first armored request;
    then a service ticket to a service whose key is a handle."""
    kr = realm
    c = PkinitClient(kr, kr.pkinit_certs, "anon")
    armor = "FILE:" + os.path.join(kr.dir, "anon-armor.cc")
    before = kdc_counts(kr)
    rc, out = c.run("kinit", "-n", f"@{kr.realm}", ccache=armor)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert "PKINIT client received freshness token from KDC" in out, out
    assert settled(kdc_counts, kr, before, 1) == (1, 1)
    rc, out = c.run("klist", "-e", ccache=armor)
    assert rc == 0 and f"Default principal: {pkinit.ANONYMOUS_CLIENT}" in out, out
    assert f"krbtgt/{kr.realm}@{kr.realm}" in out, out
    # The KDC issued it under the krbtgt handle (ISSUE line: tkt=).
    issued = [l for l in kr.kdc_log_text().splitlines()
              if "ISSUE:" in l and "WELLKNOWN/ANONYMOUS" in l]
    assert issued and "tkt=aes256-ctr-mpc" in issued[-1], issued

    before = fast_counts(kr)
    rc, out = c.run("kinit", "-T", armor, "alice", input="Alice-pw-9182\n")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert out.count(EC_USED) == 2, out
    ex, runs = settled(fast_counts, kr, before, 3)
    # Two requests, each opening the armor (one Run each), and the AS
    # exchange of the second (one Run; one more if its reply had a shape no
    # login proved yet: planner.h, proven shapes).
    assert ex == 3 and runs in (3, 4), (ex, runs)
    rc, out = c.run("kvno", SERVICE)
    assert rc == 0 and f"{SERVICE}@{kr.realm}: kvno = " in out, out
    assert_no_real_key(kr)


def test_anonymous_tickets_only_to_the_realms_tgs(realm):
    """restrict_anonymous_to_tgt (the admin guide's set-up): an anonymous
    TGT gets no ticket to a service in the cluster (no Kerberoasting by
    anyone who reaches the KDC), nor does an anonymous AS request for one;
    the TGS of the realm it still reaches (FAST armor and its renewal)."""
    kr = realm
    c = PkinitClient(kr, kr.pkinit_certs, "anonly")
    rc, out = c.run("kinit", "-n", f"@{kr.realm}")
    assert rc == 0, out
    rc, out = c.run("kvno", SERVICE)
    assert rc != 0 and "KDC policy rejects request" in out, out
    rc, out = c.run("kvno", kr.tgs)
    assert rc == 0 and f"{kr.tgs}: kvno = " in out, out
    rc, out = c.run("kinit", "-n", "-S", SERVICE, f"@{kr.realm}")
    assert rc != 0 and "KDC policy rejects request" in out, out
    assert "ANONYMOUS NOT ALLOWED" in kr.kdc_log_text()


def test_certificate_login_with_freshness_then_a_service(realm):
    """carol logs in with her certificate (freshness token required by the
    KDC): one Run; then kvno to the service in the cluster; erin, who has
    no password anyone knows, and frank, who has no key, likewise."""
    kr = realm
    for user in CERT_USERS:
        c = PkinitClient(kr, kr.pkinit_certs, user)
        before = kdc_counts(kr)
        rc, out = c.run("kinit", "-X",
                        f"X509_user_identity={pkinit.identity(kr.pkinit_certs, user)}",
                        user)
        assert rc == 0, out + kr.kdc_log_text()[-3000:]
        assert "PKINIT client received freshness token from KDC" in out, out
        assert settled(kdc_counts, kr, before, 1) == (1, 1)
        rc, out = c.run("klist")
        assert rc == 0 and f"Default principal: {user}@{kr.realm}" in out, out
        rc, out = c.run("kvno", SERVICE)
        assert rc == 0 and f"{SERVICE}@{kr.realm}: kvno = " in out, out
    log = kr.kdc_log_text()
    assert "PKINIT: freshness token received from carol@KMPC.TEST" in log, log[-3000:]


def test_certificate_login_under_anonymous_armor(realm):
    """kinit -T with an anonymous armor ccache and a certificate (PKINIT
    inside FAST, as SSSD does for smart cards): each of the two requests
    opens the armor in a Run, the login's ticket is one more; the reply is
    under the PKINIT reply key strengthened with the armor's (no job under
    the user's key, which carol has in the cluster; erin's is random,
    frank has none)."""
    kr = realm
    c = PkinitClient(kr, kr.pkinit_certs, "fastpk")
    armor = "FILE:" + os.path.join(kr.dir, "fastpk-armor.cc")
    rc, out = c.run("kinit", "-n", f"@{kr.realm}", ccache=armor)
    assert rc == 0, out
    for user in CERT_USERS:
        before = fast_counts(kr)
        rc, out = c.run("kinit", "-T", armor, "-X",
                        f"X509_user_identity={pkinit.identity(kr.pkinit_certs, user)}",
                        user)
        assert rc == 0, out + kr.kdc_log_text()[-3000:]
        assert settled(fast_counts, kr, before, 3) == (3, 3)
        rc, out = c.run("klist")
        assert rc == 0 and f"Default principal: {user}@{kr.realm}" in out, out


def _master_key(kr):
    """K/M's key from the stash (klist -K of the stash keytab)."""
    out = subprocess.run(["/usr/bin/klist", "-kK", "FILE:" + os.path.join(kr.dir, "stash")],
                         capture_output=True, text=True, timeout=30).stdout
    m = re.search(r"K/M@\S+ \(0x([0-9a-f]+)\)", out)
    assert m, out
    return bytes.fromhex(m.group(1))


def _freshness_token(kr, cname):
    """The PA-AS-FRESHNESS token of the KDC's PREAUTH_REQUIRED reply to an
    AS-REQ that asks for one."""
    req = krb_der.as_req(kr.realm, cname, 424242,
                         [krb_der.seq(krb_der.ctx(1, krb_der.der_int(PA_AS_FRESHNESS)),
                                      krb_der.ctx(2, krb_der.der(0x04, b"")))])
    rep = krb_der.send_tcp(kr.kdc_port, req)
    assert krb_der.krb_error_code(rep) == 25, rep.hex()  # KDC_ERR_PREAUTH_REQUIRED
    fields = {tag: body for tag, _, body in krb_der.children(krb_der.content(krb_der.content(rep)))}
    assert 0xAC in fields, rep.hex()  # e-data [12]: OCTET STRING of METHOD-DATA
    method_data = krb_der.content(krb_der.content(fields[0xAC]))
    for _, _, pa in krb_der.children(method_data):
        f = {tag: body for tag, _, body in krb_der.children(pa)}
        if int.from_bytes(krb_der.content(f[0xA1]), "big") == PA_AS_FRESHNESS:
            return krb_der.content(f[0xA2])
    raise AssertionError(f"no freshness token in {method_data.hex()}")


def test_freshness_token_is_under_a_key_derived_from_the_master_key(realm):
    """With the krbtgt a handle the token is time || krbtgt kvno ||
    HMAC-SHA1-96 (usage 514) under PRF+(K/M, "kmpc-pkinit-freshness-token"),
    computed here independently (RFC 3961/3962, RFC 6113 PRF+); the same
    KDC accepts it (test_certificate_login_with_freshness...)."""
    kr = realm
    token = _freshness_token(kr, "carol")
    assert len(token) == 8 + 12, token.hex()
    ts, kvno = struct.unpack(">II", token[:8])
    tgt_kvno = max(int(r[0]) for r in kr.kdb_keys(kr.tgs))
    assert abs(ts - time.time()) < 300 and kvno == tgt_kvno, (ts, kvno)
    mkey = _master_key(kr)
    assert len(mkey) == 32
    fkey = prf_plus(mkey, FRESHNESS_LABEL, 32)
    assert token[8:] == rfc3962_checksum(fkey, KEYUSAGE_PA_AS_FRESHNESS, token[:4])
    # Not under the master key itself (the label separates the two uses).
    assert token[8:] != rfc3962_checksum(mkey, KEYUSAGE_PA_AS_FRESHNESS, token[:4])


def test_certificate_login_submits_no_job_under_the_users_key(kmpc_factory, tmp_path,
                                                              monkeypatch):
    """carol's password key is an aes256-cts handle. Her certificate login
    gets a reply under the PKINIT reply key: no server records a job under
    her key (control: her password login does)."""
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    certs = pkinit.make_certs(str(tmp_path / "pkinit"), "KMPC.TEST", ["carol"])
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      realm_extra=pkinit.kdc_relations(certs),
                      server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    kr.setup_krbtgt()
    kr.addprinc("carol", "Carol-pw-7302", enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "carol")
    kr.start()
    key_id = bytes.fromhex(assert_only_handles(kr, "carol")[0][3])
    recs = [tmp_path / f"keyops-{i}.bin" for i in range(3)]
    c = PkinitClient(kr, certs, "carol")
    rc, out = c.run("kinit", "-X", f"X509_user_identity={pkinit.identity(certs, 'carol')}",
                    "carol")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    for i, rec in enumerate(recs):
        data = rec.read_bytes()
        assert b"Run " in data, f"party {i} recorded no Run (the krbtgt's job)"
        assert key_id not in data, f"party {i}: a job under carol's key"
    rc, out = c.run("kinit", "carol", input="Carol-pw-7302\n")
    assert rc == 0, out
    deadline = time.time() + 5
    while not all(key_id in r.read_bytes() for r in recs) and time.time() < deadline:
        time.sleep(0.1)
    for i, rec in enumerate(recs):
        assert key_id in rec.read_bytes(), f"control: party {i} recorded no job under her key"
