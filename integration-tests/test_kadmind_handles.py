"""kadmind's own keys (kadmin/admin, kadmin/changepw) in the MPC cluster.

Moved with `kmpc-admin share --from-existing --service
--enctype=aes256-cts-hmac-sha1-96` (key, kvno and salt kept), the KDB holds
a 40-byte handle for each, which libk5crypto refuses. kadmind reads them
through the KDB: keytab and accepts AP-REQs all the same: krb5 patch
0026-Decrypt-tickets hands the ticket to the key dealer module, which has
the servers DECRYPT it under key usage 2 (kdc-plugin/dealer/
ticket_decrypt.h), the EncTicketPart revealed only if its tag holds.

Real processes only: three kmpc-mpc-server, krb5kdc with the real module,
kadmind with kmpc's key dealer, and Debian's own /usr/bin/kadmin (remote,
with a password), /usr/bin/kpasswd and /usr/bin/kinit.

The attack control: a thief with the KDB and its stash reads every key of
kadmin/changepw with the master key (kmpc-kdb-handle, kadmin.local ktadd
-norandkey). Before the move that key decrypts a recorded kpasswd ticket
(MIT's libk5crypto), i.e. the thief could forge INITIAL tickets to it and
set any user's password; after it, the KDB yields handles only, and the
handle decrypts nothing.
"""
import os
import struct
import subprocess
import time

import pytest

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import tickets
from test_cts_as import Stock
from test_cts_handles import COLD_PROGRAMS, CTS256, ENCTYPES, assert_only_handles
from test_cts_jobs import krb5_tool  # noqa: F401
from test_cts_service import user_ticket
from test_metrics import parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server",
                           "mpc-server/libkmpc_dealer.so")

ADMIN, ADMIN_PW = "root/admin", "Admin-pw-4821"
USER, USER_PW, USER_NEW = "carol", "Carol-pw-1357", "Carol-new-2468"
KADMIND = ("kadmin/admin", "kadmin/changepw")
STOCK_KADMIN = "/usr/bin/kadmin"


@pytest.fixture
def kr(kmpc_factory):
    if not os.path.exists(STOCK_KADMIN):
        pytest.fail(f"{STOCK_KADMIN} missing: run deploy/install-deps.sh (krb5-user)")
    kr = kmpc_factory(module="real", dealer=True, enctypes=ENCTYPES,
                      module_options=COLD_PROGRAMS)
    kr.kadmin_local(f"setstr {kr.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    kr.kadmin_local(f"cpw -randkey {kr.tgs}")
    # Keys in the KDB (no MPC enctype, no protect pattern), as unmodified
    # clients negotiate them.
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw {ADMIN_PW} {ADMIN}")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw {USER_PW} {USER}")
    # kadmind's keys as in a stock realm: a real aes256-cts key each.
    for p in KADMIND:
        kr.kadmin_local(f"cpw -randkey -e {CTS256}:normal {p}")
    return kr


def ticket_of(ccache, server):
    """(etype, ciphertext) of the ccache's ticket for server."""
    _, etype, _, ciphertext, _ = user_ticket(ccache, tuple(server.split("/")))
    return etype, ciphertext


def stolen_key(kr, princ):
    """What kmpc-kdb-handle reads of princ's aes256-cts key with the master
    key: the key (hex), or None if the KDB holds none."""
    p = subprocess.run([kmpc_cluster.find_built("kdc-plugin/kmpc-kdb-handle"), "-r",
                        kr.realm, "get-key", princ, CTS256], capture_output=True,
                       text=True, env=kr.env, timeout=60)
    return p.stdout.strip() if p.returncode == 0 else None


def stock_kadmin(kr, c, query):
    """Debian's kadmin, remote (kadmind over loopback), with the admin's
    password on stdin: (returncode, output)."""
    p = subprocess.run([STOCK_KADMIN, "-r", kr.realm, "-p", ADMIN, "-q", query],
                       input=ADMIN_PW + "\n", capture_output=True, text=True,
                       env=c.env, timeout=90)
    return p.returncode, p.stdout + p.stderr


def recorded_changepw_ticket(kr, c, password=USER_PW):
    """A kpasswd exchange's ticket, as recorded on the wire: an INITIAL
    ticket to kadmin/changepw (what kpasswd gets with the user's password)."""
    rc, out = c.run("kinit", "-S", "kadmin/changepw", USER, input=password + "\n")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    return ticket_of(c.ccache, "kadmin/changepw")


def test_kadmind_accepts_tickets_under_handles(kr, krb5_tool):  # noqa: F811
    c = Stock(kr)
    kr.start()
    # Control: with the key in the KDB, the thief's read decrypts the
    # recorded ticket.
    key = stolen_key(kr, "kadmin/changepw")
    assert key is not None
    etype, cipher = recorded_changepw_ticket(kr, c)
    assert etype == 18
    assert krb5_tool("dec", "18", key, "2", cipher.hex(), ok=False).returncode == 0
    before = {p: kr.kdb_keys(p) for p in KADMIND}

    rc, out, err = kr.admin("share", "--from-existing", "--service", f"--enctype={CTS256}",
                            *KADMIND)
    for p in KADMIND:
        rows = assert_only_handles(kr, p)
        # The aes256-cts key moved with its kvno; no other key stays.
        kvno = max(int(r[0]) for r in before[p] if r[1] == CTS256)
        assert [(int(r[0]), r[1]) for r in rows] == [(kvno, CTS256)], rows
    rc, out, err = kr.admin("status", "--kdb", expected_code=None)
    for p in KADMIND:
        assert not any(p in line for line in out.splitlines() if "real key" in line), out
    kr.start_kadmind()

    # Debian's kadmin, remote, with a password: an AP-REQ to kadmin/admin.
    rc, out = stock_kadmin(kr, c, f"getprinc {USER}")
    assert rc == 0 and f"Principal: {USER}@{kr.realm}" in out, out + kadmind_log(kr)
    rc, out = stock_kadmin(kr, c, "addprinc -randkey dave")
    assert rc == 0 and "created" in out, out + kadmind_log(kr)

    # Debian's kpasswd: an AP-REQ to kadmin/changepw; the new password works.
    rc, out = c.run("kpasswd", USER, input=f"{USER_PW}\n{USER_NEW}\n{USER_NEW}\n")
    assert rc == 0 and "Password changed" in out, out + kadmind_log(kr)
    rc, out = c.kinit(USER, USER_NEW)
    assert rc == 0, out
    rc, out = c.kinit(USER, USER_PW)
    assert rc != 0

    # The attack: the KDB now gives no key of kadmin/changepw (every
    # key_data entry read with the master key is a handle, ktadd
    # -norandkey extracts nothing), and the handle's bytes decrypt no ticket.
    assert stolen_key(kr, "kadmin/changepw") is None
    assert_only_handles(kr, "kadmin/changepw")
    etype, cipher = recorded_changepw_ticket(kr, c, USER_NEW)
    (kid,) = [r[3] for r in kr.kdb_keys("kadmin/changepw")]
    handle = b"kmpc-key" + bytes.fromhex(kid)
    assert krb5_tool("dec", "18", handle.hex(), "2", cipher.hex(), ok=False).returncode != 0
    assert krb5_tool("dec", "18", key, "2", cipher.hex(), ok=False).returncode == 0, \
        "the moved key is the old one: an older stolen KDB still holds it"


def kadmind_log(kr):
    path = os.path.join(kr.dir, "kadmind.log")
    return open(path).read()[-4000:] if os.path.exists(path) else ""


def kadmin_with_ccache(kr, c, query):
    """Debian's kadmin with the kadmin/admin ticket already in c's ccache."""
    p = subprocess.run([STOCK_KADMIN, "-r", kr.realm, "-c", c.ccache, "-q", query],
                       capture_output=True, text=True, env=c.env, timeout=90)
    return p.returncode, p.stdout + p.stderr


def test_kadmind_asks_the_cluster_and_refuses_what_does_not_verify(kr):
    """The AP-REQ's ticket is decrypted in the cluster, nowhere else: with a
    server down kadmind cannot accept a ticket the KDC issued before, and
    says why; a ticket whose ciphertext was changed is refused by the
    cluster's tag check."""
    c = Stock(kr)
    kr.start()
    kr.admin("share", "--from-existing", "--service", f"--enctype={CTS256}", *KADMIND)
    kr.start_kadmind()
    rc, out = c.run("kinit", "-S", "kadmin/admin", ADMIN, input=ADMIN_PW + "\n")
    assert rc == 0, out
    kr.cluster.stop_party(1)
    rc, out = kadmin_with_ccache(kr, c, f"getprinc {USER}")
    assert rc != 0, out
    assert "kmpc: a ticket under an MPC-held key" in kadmind_log(kr), kadmind_log(kr)
    kr.cluster.start_party(1)
    kr.cluster.wait_ring()
    # Each ring worker reconnects on its next batch: retry a little.
    deadline = time.monotonic() + 60
    while True:
        rc, out = kadmin_with_ccache(kr, c, f"getprinc {USER}")
        if rc == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rc == 0 and f"Principal: {USER}@{kr.realm}" in out, out + kadmind_log(kr)

    # One bit of the ticket's ciphertext flipped in the ccache.
    creds = [x for x in tickets.ccache_credentials(c.ccache)
             if "/".join(x["server"]) == "kadmin/admin"]
    start, length = creds[0]["ticket"]
    with open(c.ccache, "r+b") as f:
        f.seek(start + length - 20)
        b = f.read(1)
        f.seek(start + length - 20)
        f.write(bytes([b[0] ^ 1]))
    seen = len(full_kadmind_log(kr))
    rc, out = kadmin_with_ccache(kr, c, f"getprinc {USER}")
    assert rc != 0, out
    # KRB5KRB_AP_ERR_BAD_INTEGRITY from the cluster's tag check, which
    # krb5_rd_req words as for any key that does not decrypt the ticket.
    after = full_kadmind_log(kr)[seen:]
    assert "Cannot decrypt ticket for kadmin/admin" in after, after
    assert "unreachable" not in after, after


def full_kadmind_log(kr):
    with open(os.path.join(kr.dir, "kadmind.log")) as f:
        return f.read()


def keytab_key(c, keytab, princ):
    """The hex of princ's newest aes256-cts key in keytab (Debian's klist
    -k -K)."""
    rc, out = c.run("klist", "-k", "-K", "-e", keytab)
    assert rc == 0, out
    rows = [line.split() for line in out.splitlines() if f"{princ}@" in line and CTS256 in line]
    kvno, key = max((int(r[0]), r[-1].strip("()")) for r in rows)
    return key[2:] if key.startswith("0x") else key


def test_kadmind_keys_stay_in_the_cluster_through_randkey_and_ktadd(kr, krb5_tool):  # noqa: F811
    """Once in the cluster, kadmind's keys are protected services: cpw
    -randkey (kadmin.local, Debian's kadmin through kadmind) deals a new
    random key there, and kadmin.local's ktadd (Debian's usual ktadd -k
    kadm5.keytab) returns a new key to the keytab while the KDB gets its
    handle. Before, both wrote real keys back to the KDB and dropped the
    handles. (kadmind itself returns no key of kadmin/* to a remote ktadd:
    MIT's lockdown_keys, which kdb5_util create sets on them.)"""
    c = Stock(kr)
    kr.start()
    kr.admin("share", "--from-existing", "--service", f"--enctype={CTS256}", *KADMIND)
    before = {r[0] for r in kr.kdb_keys("kadmin/admin")}
    kr.kadmin_local(f"cpw -randkey -e {CTS256}:normal kadmin/admin")
    rows = assert_only_handles(kr, "kadmin/admin")
    assert {r[1] for r in rows} == {CTS256} and not {r[0] for r in rows} & before, rows
    kr.start_kadmind()
    # kadmind accepts tickets under the new kadmin/admin key (a service's).
    rc, out = stock_kadmin(kr, c, f"getprinc {USER}")
    assert rc == 0 and f"Principal: {USER}@{kr.realm}" in out, out + kadmind_log(kr)
    # cpw -randkey through kadmind, by Debian's kadmin.
    before = {r[0] for r in kr.kdb_keys("kadmin/changepw")}
    rc, out = stock_kadmin(kr, c, f"cpw -randkey -e {CTS256}:normal kadmin/changepw")
    assert rc == 0 and "randomized" in out, out + kadmind_log(kr)
    rows = assert_only_handles(kr, "kadmin/changepw")
    assert not {r[0] for r in rows} & before, rows
    # kadmin.local ktadd: the keytab holds the key the cluster holds; it
    # decrypts a fresh kpasswd ticket, and kpasswd through kadmind works.
    kt = os.path.join(kr.dir, "kadm5.keytab")
    out = kr.kadmin_local(f"ktadd -e {CTS256}:normal -k {kt} kadmin/changepw")
    assert "added to keytab" in out, out
    assert_only_handles(kr, "kadmin/changepw")
    etype, cipher = recorded_changepw_ticket(kr, c)
    key = keytab_key(c, kt, "kadmin/changepw")
    assert krb5_tool("dec", "18", key, "2", cipher.hex(), ok=False).returncode == 0
    rc, out = c.run("kpasswd", USER, input=f"{USER_PW}\n{USER_NEW}\n{USER_NEW}\n")
    assert rc == 0 and "Password changed" in out, out + kadmind_log(kr)
    # A password is no key for kadmind's principals in the cluster.
    out = kr.kadmin_local("cpw -pw Kadmin-pw-1 kadmin/admin", expected_code=None)
    assert "never a password" in out, out
    assert_only_handles(kr, "kadmin/admin")


def _ccache_spans(buf):
    """(header end, [(cred start, server start, server end, cred end)]) of
    a v4 FILE ccache's bytes (the layout kmpc_harness.tickets reads)."""
    pos = 4 + struct.unpack_from(">H", buf, 2)[0]

    def data(p):
        return p + 4 + struct.unpack_from(">I", buf, p)[0]

    def principal(p):
        ncomp = struct.unpack_from(">I", buf, p + 4)[0]
        p = data(p + 8)
        for _ in range(ncomp):
            p = data(p)
        return p

    pos = principal(pos)
    header, creds = pos, []
    while pos < len(buf):
        start = pos
        sstart = principal(pos)
        send = principal(sstart)
        pos = data(send + 2) + 16 + 1 + 4
        for _ in range(2):  # addresses, authdata
            n = struct.unpack_from(">I", buf, pos)[0]
            pos += 4
            for _ in range(n):
                pos = data(pos + 2)
        pos = data(data(pos))
        creds.append((start, sstart, send, pos))
    return header, creds


def ccache_posing_as(src, dst, real, posed, realm):
    """Writes to dst a ccache whose credential for `posed` (name
    components) holds the ticket and session key src has for `real`: a
    client that asks for `posed` sends `real`'s ticket."""
    with open(src, "rb") as f:
        buf = f.read()
    header, creds = _ccache_spans(buf)
    name = struct.pack(">II", 1, len(posed)) + struct.pack(">I", len(realm)) + realm.encode()
    for part in posed:
        name += struct.pack(">I", len(part)) + part.encode()
    out = buf[:header]
    for (start, sstart, send, end), cred in zip(creds, tickets.ccache_credentials(src)):
        if cred["server"] == list(real):
            out += buf[start:sstart] + name + buf[send:end]
    with open(dst, "wb") as f:
        f.write(out)


def runs(kr):
    """The servers' count of Runs (alike on all three)."""
    counts = [value(parse(scrape(kr.cluster.metrics_url(i))), "kmpc_batches_total",
                    missing=0, kind="run") for i in range(3)]
    assert counts[0] == counts[1] == counts[2], counts
    return counts[0]


def test_kadmind_decrypts_no_ticket_to_another_service(kmpc_factory):
    """The attack: kadmind reads keys through the KDB: keytab, which hands
    it any principal's key, so an AP-REQ to kadmind carrying a valid ticket
    to another service in the cluster (host/svc) had that ticket decrypted
    in the cluster, a DECRYPT Run. The dealer's hook now refuses any ticket
    but one to kadmind's own principals before any Run."""
    kr = kmpc_factory(module="real", dealer=True, enctypes=ENCTYPES,
                      module_options=COLD_PROGRAMS, metrics=True)
    kr.kadmin_local(f"setstr {kr.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    kr.kadmin_local(f"cpw -randkey {kr.tgs}")
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw {ADMIN_PW} {ADMIN}")
    svc = "host/svc.kmpc.test"
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey {svc}")
    kr.start()
    kr.admin("share", "--from-existing", "--service", f"--enctype={CTS256}", svc, *KADMIND)
    kr.start_kadmind()
    c = Stock(kr)
    rc, out = c.run("kinit", ADMIN, input=ADMIN_PW + "\n")
    assert rc == 0, out
    rc, out = c.run("kvno", svc)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    posed = os.path.join(kr.dir, "posed.cc")
    ccache_posing_as(c.ccache, posed, svc.split("/"), ["kadmin", "admin"], kr.realm)
    deadline = time.monotonic() + 5
    before = runs(kr)
    while time.monotonic() < deadline:  # the kvno's Runs, counted
        time.sleep(0.5)
        before, settled = runs(kr), before
        if before == settled:
            break
    p = subprocess.run([STOCK_KADMIN, "-r", kr.realm, "-c", posed, "-q", "getprinc carol"],
                       capture_output=True, text=True, env=c.env, timeout=90)
    assert p.returncode != 0, p.stdout + p.stderr
    time.sleep(1)
    assert runs(kr) == before, kadmind_log(kr)
    assert "decrypts tickets to its own principals only" in full_kadmind_log(kr), \
        kadmind_log(kr)
