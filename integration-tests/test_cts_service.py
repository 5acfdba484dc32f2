"""A user whose aes256-cts-hmac-sha1-96 key lives only in the cluster, used
as a service (`kvno user`), and a service moved into the cluster with
`kmpc-admin share --from-existing --service`: the TGS ticket for it is
encrypted by the servers (ENCRYPT, usage 2 KRB5_KEYUSAGE_KDC_REP_TICKET)
with its PAC server signature (usage 17 KRB5_KEYUSAGE_APP_DATA_CKSUM,
hmac-sha1-96-aes256) and the KDC signature over it made and spliced in by
them in the same Run (kdcmpc interface 1.3 submit_ticket, Job.sign_pad),
the EncTicketPart and the PAC dealt to them as XOR shares only
(docs/design/exchange-plan.md section 2): two Runs per exchange.

Real processes: three kmpc-mpc-server (semi-honest and the default
malicious mode), kmpc-admin, krb5kdc with the real kdcmpc module, Debian's
own /usr/bin/kinit and /usr/bin/kvno. The ticket is checked with MIT's own
code, which knows the user's password: Debian's kvno -k decrypts it with a
keytab ktutil derived from the password, and MIT libk5crypto (the patched
prefix's, through test_cts_jobs.py's helper) decrypts it and recomputes the
PAC server signature with the password's key. The KDC signatures are the
krbtgt's gmac-aes256-mpc ones, as for every ticket.
"""
import os
import subprocess
import time

import pytest

import pac_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import tickets
from krb_der import children, content
from test_cts_as import STOCK, Stock
from test_cts_handles import (COLD_PROGRAMS, CTS256, ENCTYPES, assert_only_handles,
                              keys_of)
from test_cts_jobs import krb5_tool  # noqa: F401
from test_metrics import keytab_keys, parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

MODES = {"semi-honest": "--security=semi-honest", "malicious": ""}
USER, USER_PW = "alice", "Alice-pw-9182"
CLIENT, CLIENT_PW = "olly", "Olly-pw-1"
HMAC_SHA1_96_AES256 = 16
KTUTIL = "/usr/bin/ktutil"


def make_realm(kmpc_factory, also_service=True, **kw):
    """The user shared as also a service (kmpc-admin share --also-service:
    its ticket and PAC material dealt; without it, a user's key gets none)."""
    for path in list(STOCK.values()) + [KTUTIL]:
        if not os.path.exists(path):
            pytest.fail(f"{path} missing: run deploy/install-deps.sh (krb5-user)")
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS, **kw)
    kr.setup_krbtgt()
    kr.addprinc(CLIENT, CLIENT_PW, enctypes=[CTS256])  # its key in the KDB
    kr.addprinc(USER, USER_PW, enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}",
             *(["--also-service"] if also_service else []), USER)
    assert [(r[1], r[2]) for r in assert_only_handles(kr, USER)] == [(CTS256, "handle")]
    kr.start()
    return kr


def tgs_counts(kr):
    """(TGS exchanges the KDC module counted, Runs the servers ran): the
    ticket's job goes outside the exchange's plan, so the servers' count
    of Runs (kmpc_batches_total{kind="run"}, alike on all three) is the
    one that sees it."""
    m = parse(scrape(kr.kdc_metrics_url))
    runs = [value(parse(scrape(kr.cluster.metrics_url(i))), "kmpc_batches_total",
                  missing=0, kind="run") for i in range(3)]
    assert runs[0] == runs[1] == runs[2], runs
    return value(m, "kmpc_kdc_exchanges_total", missing=0, exchange="tgs",
                 result="ok"), runs[0]


def unspent_pads(kr):
    """PAD jobs the KDC module drew, less those a Sign or verification
    spent (kmpc_kdc_pads_drawn_total - pads_used - verify_pads_used)."""
    m = parse(scrape(kr.kdc_metrics_url))
    return (value(m, "kmpc_kdc_pads_drawn_total", missing=0)
            - value(m, "kmpc_kdc_pads_used_total", missing=0)
            - value(m, "kmpc_kdc_verify_pads_used_total", missing=0))


def tgs_delta(kr, before):
    """(TGS exchanges, Runs) since `before`, once the exchange is counted
    (when the KDC releases it)."""
    deadline = time.time() + 5
    while True:
        ex, runs = (a - b for a, b in zip(tgs_counts(kr), before))
        if ex >= 1 or time.time() > deadline:
            return ex, runs
        time.sleep(0.05)


def user_ticket(ccache, server=(USER,)):
    """(session key, etype, kvno, ciphertext, DER) of the ticket for USER
    (or `server`, its name components)."""
    creds = [c for c in tickets.ccache_credentials(ccache) if c["server"] == list(server)]
    assert len(creds) == 1, tickets.ccache_credentials(ccache)
    start, length = creds[0]["ticket"]
    with open(ccache, "rb") as f:
        f.seek(start)
        der_ticket = f.read(length)
    fields = {t & 0x1F: b for t, _, b in children(content(content(der_ticket)))}
    enc = {t & 0x1F: b for t, _, b in children(content(fields[3]))}
    etype = int.from_bytes(content(enc[0]), "big", signed=True)
    kvno = int.from_bytes(content(enc[1]), "big") if 1 in enc else None
    return creds[0]["key"], etype, kvno, bytes(content(enc[2])), der_ticket


def session_key_of(plain):
    """The key value of an EncTicketPart ([1] EncryptionKey, [1] keyvalue)."""
    items = {t & 0x1F: b for t, _, b in children(content(content(plain)))}
    ek = {t & 0x1F: b for t, _, b in children(content(items[1]))}
    return bytes(content(ek[1]))


def get_user_ticket(kr, c):
    """Stock kinit as CLIENT, stock kvno USER: the ticket, and the TGS
    exchange's Runs."""
    rc, out = c.kinit(CLIENT, CLIENT_PW)
    assert rc == 0, out
    before = tgs_counts(kr)
    rc, out = c.run("kvno", USER)
    assert rc == 0 and f"{USER}@{kr.realm}: kvno = 1" in out, out + kr.kdc_log_text()[-3000:]
    return user_ticket(c.ccache), before


def check_ticket(kr, krb5_tool, ticket, key=None):  # noqa: F811
    """The ticket decrypts with the password's key (or `key`: MIT libk5crypto), holds
    the session key the client got, and its PAC server signature is the
    hmac-sha1-96-aes256 checksum of the PAC under that key, usage 17; the
    KDC and ticket signatures are the krbtgt's (gmac-aes256-mpc)."""
    skey, etype, kvno, cipher, _ = ticket
    key = key or keys_of(kr, USER, USER_PW)[CTS256]
    assert etype == 18 and kvno == 1, (etype, kvno)
    r = krb5_tool("dec", "18", key.hex(), "2", cipher.hex())
    plain = bytes.fromhex(r.stdout.strip())
    assert session_key_of(plain) == skey
    etp = pac_ref.EncTicketPart(plain)
    ctype, _, sval = pac_ref.signature(etp.pac, pac_ref.PAC_SERVER_CHECKSUM)
    assert ctype == HMAC_SHA1_96_AES256 and len(sval) == 12, (ctype, sval.hex())
    want = krb5_tool("cksum", "18", key.hex(), "17", pac_ref.zeroed(etp.pac).hex())
    assert bytes.fromhex(want.stdout.strip()) == sval, "PAC server signature"
    # Control: not a signature under another usage.
    other = krb5_tool("cksum", "18", key.hex(), "56", pac_ref.zeroed(etp.pac).hex())
    assert bytes.fromhex(other.stdout.strip()) != sval
    for t in (pac_ref.PAC_PRIVSVR_CHECKSUM, pac_ref.PAC_TICKET_CHECKSUM):
        ctype, _, val = pac_ref.signature(etp.pac, t)
        assert ctype == pac_ref.GMAC_AES256_MPC and len(val) == 32, (t, ctype)
    # A flipped ciphertext bit: MIT's decryption refuses it (exit 2).
    bad = bytearray(cipher)
    bad[20] ^= 1
    assert krb5_tool("dec", "18", key.hex(), "2", bytes(bad).hex(), ok=False).returncode == 2
    return plain, etp.pac


def kvno_with_keytab(kr, c):
    """Debian's kvno -k: the ticket decrypts with the key ktutil derives from
    the password (MIT's keytab path, independent of this test's parsing)."""
    kt = os.path.join(kr.dir, "alice.keytab")
    script = (f"addent -password -p {USER}@{kr.realm} -k 1 -e {CTS256}\n{USER_PW}\n"
              f"wkt {kt}\nquit\n")
    p = subprocess.run([KTUTIL], input=script, capture_output=True, text=True,
                       env=c.env, timeout=60)
    assert p.returncode == 0 and os.path.exists(kt), p.stdout + p.stderr
    rc, out = c.run("kvno", "-k", kt, USER)
    assert rc == 0 and "keytab entry valid" in out, out
    # Control: a keytab of another password does not decrypt it.
    bad = os.path.join(kr.dir, "wrong.keytab")
    script = (f"addent -password -p {USER}@{kr.realm} -k 1 -e {CTS256}\nnot-{USER_PW}\n"
              f"wkt {bad}\nquit\n")
    subprocess.run([KTUTIL], input=script, capture_output=True, text=True,
                   env=c.env, timeout=60, check=True)
    rc, out = c.run("kvno", "-k", bad, USER)
    assert rc != 0, out


@pytest.mark.parametrize("mode", sorted(MODES))
def test_kvno_user_gets_a_ticket_under_the_users_key(kmpc_factory, krb5_tool, mode):  # noqa: F811
    kr = make_realm(kmpc_factory, server_flags=MODES[mode])
    c = Stock(kr)
    ticket, before = get_user_ticket(kr, c)
    check_ticket(kr, krb5_tool, ticket)
    # The header ticket's Run, then the ticket's, which makes its PAC
    # server and KDC signatures too (outside the plan: no gate).
    ex, runs = tgs_delta(kr, before)
    assert ex == 1 and runs == 2, (ex, runs)
    kvno_with_keytab(kr, c)
    # A second ticket: a fresh session key, still right.
    rc, out = c.run("kdestroy")
    ticket2, _ = get_user_ticket(kr, c)
    assert ticket2[0] != ticket[0]
    check_ticket(kr, krb5_tool, ticket2)
    # The user still logs in (its AS exchange on the plan) and gets a
    # ticket to itself.
    rc, out = c.kinit(USER, USER_PW)
    assert rc == 0, out
    rc, out = c.run("kvno", USER)
    assert rc == 0, out
    check_ticket(kr, krb5_tool, user_ticket(c.ccache))
    log = kr.kdc_log_text()
    assert "finishing the issued ticket failed" not in log, log[-3000:]
    for key in keys_of(kr, USER, USER_PW).values():
        assert key.hex() not in log
    assert kr.kdc_alive()


def test_a_user_not_marked_as_a_service_gets_no_ticket(kmpc_factory):
    """A user's key shared without --also-service: the servers hold no
    ticket (usage 2) or PAC signature (17) material for it, so no ticket
    to the user is issued (each would be an offline password verifier for
    whoever asks); the user still logs in."""
    kr = make_realm(kmpc_factory, also_service=False)
    c = Stock(kr)
    rc, out = c.kinit(CLIENT, CLIENT_PW)
    assert rc == 0, out
    rc, out = c.run("kvno", USER)
    assert rc != 0, out
    rc, out = c.kinit(USER, USER_PW)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert kr.kdc_alive()


def test_no_window_of_the_ticket_or_pac_reaches_any_server(kmpc_factory, krb5_tool,  # noqa: F811
                                                           tmp_path, monkeypatch):
    """--debug_record_requests (every KeyOps request as a server received
    it): no 8-byte window of the EncTicketPart the servers encrypted, nor
    of the PAC they signed, is in any server's recording: both went as XOR
    shares. Control: the recordings hold the user's key id."""
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    kr = make_realm(kmpc_factory,
                    server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    c = Stock(kr)
    ticket, _ = get_user_ticket(kr, c)
    plain, pac = check_ticket(kr, krb5_tool, ticket)
    key_id = bytes.fromhex(kr.key_id(USER))
    for i in range(3):
        with open(os.path.join(tmp_path, f"keyops-{i}.bin"), "rb") as f:
            rec = f.read()
        assert key_id in rec, f"control: party {i} recorded no job under {USER}'s key"
        for name, secret in (("EncTicketPart", plain), ("PAC", pac)):
            for k in range(len(secret) - 8 + 1):
                assert secret[k:k + 8] not in rec, \
                    f"party {i} received bytes {k}..{k + 8} of the {name}"


SERVICE = "host/moved.kmpc.test"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_moved_service_keeps_its_keytab_and_gets_tickets_in_two_runs(
        kmpc_factory, krb5_tool, mode):  # noqa: F811
    """A service whose key was in the KDB, moved with `kmpc-admin share
    --from-existing --service` (enctype, kvno and salt kept): Debian's
    `kvno -k` with its old keytab validates the ticket (MIT's rd_req
    checks the PAC's server signature under that key), and each TGS
    exchange for it is two Runs, the TGT's and the ticket's."""
    kr = make_realm(kmpc_factory, server_flags=MODES[mode])
    kt = os.path.join(kr.dir, "moved.keytab")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {SERVICE}")
    kr.kadmin_local(f"ktadd -norandkey -k {kt} {SERVICE}")
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "--service", SERVICE)
    assert [(r[1], r[2]) for r in assert_only_handles(kr, SERVICE)] == [(CTS256, "handle")]
    [key] = [bytes.fromhex(k) for k in keytab_keys(kr, kt)]
    c = Stock(kr)
    for _ in range(2):
        rc, out = c.kinit(CLIENT, CLIENT_PW)
        assert rc == 0, out
        before, pads = tgs_counts(kr), unspent_pads(kr)
        rc, out = c.run("kvno", "-k", kt, SERVICE)
        assert rc == 0 and "keytab entry valid" in out, out + kr.kdc_log_text()[-3000:]
        ex, runs = tgs_delta(kr, before)
        assert ex == 1 and runs == 2, (ex, runs)
        # One pad unspent by a Sign: the ticket's own (Job.sign_pad),
        # spent inside its Run. None was drawn for the KDC signature in
        # the TGT's Run, which no job would spend (two before krb5 patch
        # 0030-KDC-two-Run-TGS-tickets, checked).
        assert unspent_pads(kr) - pads == 1, (unspent_pads(kr), pads)
        # The PAC's server signature checked under the service's key (kvno
        # -k alone would take a ticket whose PAC MIT discards).
        check_ticket(kr, krb5_tool, user_ticket(c.ccache, SERVICE.split("/")), key)
        c.run("kdestroy")
    log = kr.kdc_log_text()
    assert "finishing the issued ticket failed" not in log, log[-3000:]
    assert kr.kdc_alive()


INDICATOR = "ec-ind"


def test_a_ticket_with_auth_indicators_to_a_moved_service_and_its_renewal(
        kmpc_factory, krb5_tool):  # noqa: F811
    """CLIENT logs in with encrypted challenge (FAST armored), which adds
    an auth indicator: the ticket to a service moved into the cluster
    carries a CAMMAC whose service verifier (RFC 7751, usage 64) the
    cluster makes under the service's key. Debian's kvno -k with the old
    keytab validates it, the verifier is MIT's checksum under that key,
    the exchange is three Runs (the TGT's, the verifier's, the ticket's);
    the ticket renews (kinit -R -S) and the renewed one validates too."""
    kr = make_realm(kmpc_factory, realm_extra=(
        f"        encrypted_challenge_indicator = {INDICATOR}\n"))
    kt = os.path.join(kr.dir, "moved.keytab")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {SERVICE}")
    kr.kadmin_local(f"ktadd -norandkey -k {kt} {SERVICE}")
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "--service", SERVICE)
    [key] = [bytes.fromhex(k) for k in keytab_keys(kr, kt)]
    c = Stock(kr)
    armor = "FILE:" + os.path.join(kr.dir, "armor.cc")
    rc, out = c.run("kinit", "-c", armor, CLIENT, input=CLIENT_PW + "\n")
    assert rc == 0, out
    rc, out = c.run("kinit", "-T", armor, "-r", "1d", CLIENT, input=CLIENT_PW + "\n")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    before = tgs_counts(kr)
    rc, out = c.run("kvno", "-k", kt, SERVICE)
    assert rc == 0 and "keytab entry valid" in out, out + kr.kdc_log_text()[-3000:]
    ex, runs = tgs_delta(kr, before)
    assert ex == 1 and runs == 3, (ex, runs)

    def check_cammac():
        plain, _ = check_ticket(kr, krb5_tool, user_ticket(c.ccache, SERVICE.split("/")), key)
        [cm] = pac_ref.cammacs(plain)
        assert cm.indicators() == [INDICATOR], cm.indicators()
        ctype, val = cm.svc
        assert ctype == HMAC_SHA1_96_AES256 and len(val) == 12, (ctype, val.hex())
        want = krb5_tool("cksum", "18", key.hex(), "64", bytes(cm.elements).hex())
        assert bytes.fromhex(want.stdout.strip()) == val, "CAMMAC service verifier"

    check_cammac()
    rc, out = c.run("kinit", "-R", "-S", SERVICE)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    rc, out = c.run("kvno", "-k", kt, SERVICE)
    assert rc == 0 and "keytab entry valid" in out, out
    check_cammac()
    log = kr.kdc_log_text()
    assert "refusing a job" not in log and "did not verify" not in log, log[-3000:]
    assert kr.kdc_alive()
