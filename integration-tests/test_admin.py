"""kmpc-admin against three real MPC servers and a real KDB.

Sharing from a password and from the key already in the KDB; afterwards the
KDB (read with the master key) holds only handles, and the servers' LMDB
files and every log hold none of the key's bytes, its round
keys or H (computed here independently: ctr_mpc_ref's string-to-key and
python3-cryptography's AES); all-or-nothing when a server is down; explicit
errors for an unknown principal, a principal without an AES key and a wrong
certificate; `status`; and kinit/kvno through the KDC with shared keys.
"""
import glob
import hashlib
import os
import re
import secrets
import subprocess

import pytest

import ctr_mpc_ref as ref
from aes_ref import expand_key
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.kmpc_realm import KADMIND_KEYS
from kmpc_harness.realm import binpath

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

REALM = kmpc_cluster.REALM


# ---- independent key material ------------------------------------------

def test_key_expansion_matches_fips197():
    # FIPS-197 Appendix A.1 / A.3: last round key of the example keys.
    rk = expand_key(bytes.fromhex("2b7e151628aed2a6abf7158809cf4f3c"))
    assert rk[10].hex() == "d014f9a8c9ee2589e13f0cc8b6630ca6"
    rk = expand_key(bytes.fromhex(
        "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4"))
    assert rk[14].hex() == "fe4890d1e6188d0b046df344706c631e"


def secret_patterns(key):
    """Byte strings that must appear nowhere on disk: the key, each round
    key (both 16-byte halves of the key are round keys 0/1), H and H^2."""
    h = ref.aes_block(key, bytes(16))
    hi = int.from_bytes(h, "big")
    h2 = ref.gf_mult(hi, hi).to_bytes(16, "big")
    pats = {"key": key, "H": h, "H^2": h2}
    for r, k in enumerate(expand_key(key)):
        pats[f"round key {r}"] = k
    return pats


def assert_nowhere(pats, blobs):
    for name, data in blobs.items():
        for what, p in pats.items():
            # The first 12 bytes of a pattern are enough to be sure.
            assert p[:12] not in data, f"{what} found in {name}"


def store_blobs(realm):
    blobs = {}
    for f in glob.glob(os.path.join(realm.cluster.dir, "store-*", "**"), recursive=True):
        if os.path.isfile(f):
            with open(f, "rb") as fh:
                blobs[os.path.relpath(f, realm.dir)] = fh.read()
    assert blobs, "no store files found"
    return blobs


def all_files(realm):
    """Every file of the realm (logs, configs, stores, the KDB), except the
    test module's key file and keytabs, which hold keys by design."""
    blobs = {}
    for f in glob.glob(os.path.join(realm.dir, "**"), recursive=True):
        base = os.path.basename(f)
        if not os.path.isfile(f) or base == "mpc-test-keys" or base.endswith(".keytab"):
            continue
        with open(f, "rb") as fh:
            blobs[os.path.relpath(f, realm.dir)] = fh.read()
    return blobs


def assert_kdb_lacks(realm, princs, keys):
    """The KDB entries of princs, read with the master key, hold handles only
    and none of keys (compared by SHA-256; kmpc-kdb-handle never prints a
    key). A dump would not do: its key data is encrypted."""
    hashes = {hashlib.sha256(k).hexdigest() for k in keys}
    for p in princs:
        rows = realm.kdb_keys(p)
        assert rows, p
        for kvno, enctype, kind, value in rows:
            assert kind == "handle", f"{p} kvno {kvno} {enctype}: a real key in the KDB"
            assert value not in hashes


def _unhex_runs(data):
    return b"".join(bytes.fromhex(m.decode()) for m in
                    re.findall(rb"[0-9a-f]{32,}", data) if len(m) % 2 == 0)


def salt_of(princ):
    # Normal salt: realm followed by the name's components.
    name, realm = princ.split("@")
    return (realm + "".join(name.split("/"))).encode()


def keys_of(realm, princ):
    out = realm.kadmin_local(f"getprinc {princ}")
    return re.findall(r"Key: vno (\d+), (\S+)", out)


def handle_key_ids(realm):
    _, out, _ = realm.admin("status", "--kdb", expected_code=None)
    return out


EXPOSED_TGT = "kdb: krbtgt/KMPC.TEST@KMPC.TEST should be MPC-protected but holds real keys"


def migrated(princ):
    return f"kdb: {princ}@KMPC.TEST kvno"


# kadmind's own keys, which kdb5_util create made: these realms keep them
# in the KDB (nothing here uses kadmind), so status --kdb names each.
KADMIND_REAL = tuple(f"kdb: {p}@KMPC.TEST holds real keys in the KDB: "
                     for p in KADMIND_KEYS)


def status_kdb(realm, *problems):
    """kmpc-admin status --kdb: exactly one "kdb:" problem line per entry of
    problems (a substring of it) and per kadmind key still in the KDB
    (KADMIND_REAL), and exit 1."""
    rc, out, _ = realm.admin("status", "--kdb", expected_code=None)
    lines = [l for l in out.splitlines()
             if l.startswith("kdb: ") and not l.startswith("kdb: realm ")]
    problems += KADMIND_REAL
    for p in problems:
        assert any(p in l for l in lines), (p, out)
    assert len(lines) == len(problems), out
    assert rc == 1, out
    return out


def server_key_counts(out):
    return {int(m[0]): int(m[1]) for m in
            re.findall(r"server (\d) \(\S+\): (?:ok|DEGRADED), .*?, (\d+) keys", out)}


@pytest.fixture
def kr(kmpc_factory):
    return kmpc_factory(module="test", extra_client_cns=("kmpc-rogue",))


# ---- sharing -----------------------------------------------------------

def test_share_from_password(kr):
    pw = "pw-" + secrets.token_hex(8)
    kr.addprinc("alice", pw, enctypes=["aes256-ctr-mpc"])
    assert keys_of(kr, "alice") == [("1", "aes256-ctr-mpc")]
    rc, out, err = kr.admin("share", "--password-stdin", "alice", input=pw + "\n")
    assert re.search(r"\[1/1\] alice: shared from a password as aes256-ctr-mpc kvno 2, "
                     r"key id [0-9a-f]{64}$", out.strip()), out
    assert pw not in out + err
    assert keys_of(kr, "alice") == [("2", "aes256-ctr-mpc")]

    key = ref.string_to_key("aes256-ctr-mpc", pw.encode(), salt_of(f"alice@{REALM}"))
    pats = secret_patterns(key)
    assert_kdb_lacks(kr, ["alice"], [key])
    assert_nowhere(pats, store_blobs(kr))
    assert key.hex() not in out + err
    # Nor in any log or other file of the realm and its servers, in binary
    # or hex; nor the password.
    files = all_files(kr)
    assert_nowhere(pats, files)
    for name, data in files.items():
        assert key.hex().encode() not in data.lower(), name
        assert pw.encode() not in data, name

    # The handle's key id is on all three servers, labelled with the name.
    # (The krbtgt still holds the key kdb5_util made: status says so.)
    st = status_kdb(kr, EXPOSED_TGT)
    kid = re.search(r"key id ([0-9a-f]{64})", out).group(1)
    assert "keys: 1 on all three servers, 0 incomplete" in st, st
    assert "0 handles without shares" in st, st
    assert server_key_counts(st) == {0: 1, 1: 1, 2: 1}, st

    # A new password: a new key, the old key id removed from the servers.
    pw2 = "pw-" + secrets.token_hex(8)
    _, out2, _ = kr.admin("share", "--password-stdin", "--enctype=aes128-ctr-mpc",
                          "alice", input=pw2 + "\n")
    assert "as aes128-ctr-mpc kvno 3" in out2, out2
    assert kid not in out2
    st = status_kdb(kr, EXPOSED_TGT)
    assert "keys: 1 on all three servers, 0 incomplete" in st, st
    assert kid not in st


def test_share_refuses_a_password_as_a_service_key(kr):
    """A password-derived key must not be dealt as KEY_KIND_SERVICE by a
    bare --service flag: the servers would then DECRYPT tickets (usage 2)
    under it and release its AS reply without a gate, an offline password
    verifier (engine.h kCtsServiceDecryptUsages). set-kind asks for
    allow_ungate for the same change; share must refuse it outright."""
    pw = "pw-" + secrets.token_hex(8)
    kr.addprinc("alice", pw, enctypes=["aes256-cts-hmac-sha1-96"])
    rc, out, err = kr.admin("share", "--password-stdin", "--service",
                            "--enctype=aes256-cts-hmac-sha1-96", "alice",
                            input=pw + "\n", expected_code=None)
    assert rc == 2, (rc, out, err)
    assert "--service" in err, err
    assert pw not in out + err


def test_share_from_existing(kr):
    kr.addprinc("bob", enctypes=["aes256-cts-hmac-sha1-96", "aes128-cts-hmac-sha1-96"])
    kr.addprinc("carol", enctypes=["aes256-ctr-mpc", "aes128-ctr-mpc"])
    tool = kmpc_cluster.find_built("kdc-plugin/kmpc-kdb-handle")

    def get_key(p, e):
        r = subprocess.run([tool, "-r", REALM, "get-key", p, e], capture_output=True,
                           text=True, env=kr.env, timeout=60, check=True)
        return bytes.fromhex(r.stdout.strip())

    keys = {"bob": get_key("bob", "aes256-cts-hmac-sha1-96"),
            "carol": get_key("carol", "aes256-ctr-mpc"),
            "krbtgt": get_key(kr.tgs, "aes256-ctr-mpc")}
    side = {"bob aes128": get_key("bob", "aes128-cts-hmac-sha1-96"),
            "carol aes128": get_key("carol", "aes128-ctr-mpc")}
    _, out, err = kr.admin("share", "--from-existing", "--force", "bob", "carol", kr.tgs)
    # aes-cts -> next kvno; already aes256-ctr-mpc (krbtgt, carol) -> same kvno,
    # so tickets issued under it stay valid.
    assert re.search(r"\[1/3\] bob: shared from its aes256-cts-hmac-sha1-96 key kvno 1 "
                     r"as aes256-ctr-mpc kvno 2", out), out
    assert re.search(r"\[2/3\] carol: shared from its aes256-ctr-mpc key kvno 1 "
                     r"as aes256-ctr-mpc kvno 1", out), out
    assert "[3/3] krbtgt/KMPC.TEST@KMPC.TEST: shared" in out, out
    assert "3 shared, 0 already shared, 0 failed" in out, out
    assert keys_of(kr, "bob") == [("2", "aes256-ctr-mpc")]
    assert keys_of(kr, "carol") == [("1", "aes256-ctr-mpc")]
    assert keys_of(kr, kr.tgs) == [("1", "aes256-ctr-mpc")]
    assert_kdb_lacks(kr, ["bob", "carol", kr.tgs],
                     list(keys.values()) + list(side.values()))
    blobs = {**store_blobs(kr), **all_files(kr)}
    for k in list(keys.values()) + list(side.values()):
        assert_nowhere(secret_patterns(k), blobs)
        assert k.hex() not in out + err
    # Again: nothing to do.
    _, out, _ = kr.admin("share", "--from-existing", "bob")
    assert "already shared" in out, out
    # Migrated keys: older copies of the KDB hold them, and status says so.
    st = status_kdb(kr, migrated("bob") + " 2: migrated from the KDB",
                    migrated("carol") + " 1: migrated from the KDB",
                    "kdb: krbtgt/KMPC.TEST@KMPC.TEST kvno 1: migrated from the KDB")
    assert "keys: 3 on all three servers, 0 incomplete" in st, st


def test_share_from_existing_leaves_no_password_history(kr):
    """A user under a policy with a password history (history 3) moved into
    the cluster with share --from-existing as aes*-cts: the KDB's kadm5
    history (read with the kadmin/history key from the KDB) no longer holds
    the real keys of its earlier password. On a kmpc without the fix it
    kept them: an offline verifier of an old password, often the next one's
    neighbour."""
    kr.kadmin_local("addpol -history 3 hist3")
    ets = "aes256-cts-hmac-sha1-96:normal,aes128-cts-hmac-sha1-96:normal"
    kr.kadmin_local(f"addprinc -policy hist3 -e {ets} -pw Dan-pw-1111 dan")
    kr.kadmin_local(f"cpw -e {ets} -pw Dan-pw-2222 dan")
    salt = salt_of(f"dan@{REALM}")
    old = {hashlib.sha256(ref.string_to_key(e, b"Dan-pw-1111", salt)).hexdigest()
           for e in ("aes256-ctr-mpc", "aes128-ctr-mpc")}
    hist = kr.kdb_history("dan")
    # Control: both keys of the first password are in the history.
    assert old <= {r[4] for r in hist if r[3] == "key"}, hist
    _, out, _ = kr.admin("share", "--from-existing", "--enctype=aes256-cts-hmac-sha1-96",
                         "dan")
    assert "shared" in out, out
    assert kr.kdb_history("dan") == []
    assert {r[2] for r in kr.kdb_keys("dan")} == {"handle"}


def _read_syscall_nr():
    import platform
    return {"x86_64": 0, "aarch64": 63}.get(platform.machine())


def _wait_reading_stdin(pid, timeout=60):
    """Wait until process pid (its main thread) is blocked reading fd 0,
    e.g. kmpc-admin share --password-stdin past its pre-check, waiting for
    the password."""
    import time
    nr = _read_syscall_nr()
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/syscall") as f:
                sc = f.read().split()
        except PermissionError:
            # kmpc-admin makes itself non-dumpable (no core dumps): only a
            # process with CAP_SYS_PTRACE (root) may look at it.
            pytest.skip("needs CAP_SYS_PTRACE to see kmpc-admin wait for stdin")
        except OSError:
            sc = []
        try:
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
        except OSError:
            wchan = ""
        if nr is not None and len(sc) > 1 and sc[0] == str(nr) and int(sc[1], 16) == 0:
            return
        if nr is None and "pipe" in wchan:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never read its stdin")


def test_all_or_nothing(kr):
    pw = "pw-" + secrets.token_hex(8)
    kr.addprinc("dave", pw, enctypes=["aes256-ctr-mpc"])
    kr.admin("share", "--from-existing", "--force", kr.tgs)
    before = keys_of(kr, "dave")
    dump_before = kr.kadmin_local("getprinc dave")
    addr2 = kr.cluster.addr(2)

    # Server 2 passes the pre-check, then dies before PutKey (kmpc-admin
    # reads the password only after the pre-check): servers 0 and 1 take
    # their shares, server 2 fails; the shares are removed again and the
    # KDB is unchanged.
    p = subprocess.Popen([kmpc_cluster.find_built("mpc-server/kmpc-admin"), "share",
                          "--password-stdin", "dave"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=kr.env)
    try:
        _wait_reading_stdin(p.pid)
        kr.cluster.stop_party(2)
        out, err = p.communicate(pw + "\n", timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 1, (p.returncode, out, err)
    assert f"server 2 ({addr2}) is unreachable" in err, err
    assert "dave@KMPC.TEST: not shared, the KDB is unchanged" in err, err
    assert "the shares already stored on server 0, 1 were removed again" in err, err
    assert "WARNING" not in err, err
    assert pw not in out + err
    assert keys_of(kr, "dave") == before
    assert kr.kadmin_local("getprinc dave") == dump_before

    # The pre-check names the server and touches nothing.
    rc, out, err = kr.admin("share", "--password-stdin", "dave", input=pw + "\n",
                            expected_code=1)
    assert f"server 2 ({addr2}) is unreachable" in err, err
    assert "nothing was shared" in err, err
    assert keys_of(kr, "dave") == before
    _, st, _ = kr.admin("status", expected_code=1)
    assert f"ERROR: server 2 ({addr2}) is unreachable" in st, st
    # Only the krbtgt key on the two live servers: no orphan.
    assert server_key_counts(st) == {0: 1, 1: 1}, st


def test_no_core_dumps(kr):
    """The servers hold key shares: they run with RLIMIT_CORE 0 (and
    non-dumpable, not visible from outside)."""
    for i in range(3):
        with open(f"/proc/{kr.cluster.pid(i)}/limits") as f:
            line = [l for l in f if l.startswith("Max core file size")][0]
        assert line.split()[4:6] == ["0", "0"], line


def test_ca_key_kept_apart(kr):
    """The CA's private key is not among the daemons' keys (a KDC given
    `certs = DIR` finds only ca.pem and its own kdc.{pem,key} there)."""
    import stat
    certs = kr.cluster.certs
    assert not os.path.exists(os.path.join(certs, "ca.key"))
    priv = os.path.join(certs, "ca-private")
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o700
    assert os.path.isfile(os.path.join(priv, "ca.key"))
    assert not [f for f in os.listdir(certs) if f.startswith("ca.") and f != "ca.pem"]


def _swapped_admin_conf(kr):
    """kr's kmpc-admin config with servers 0 and 1 swapped."""
    a = [kr.cluster.addr(i) for i in range(3)]
    conf = os.path.join(kr.dir, "kmpc-admin-swapped.conf")
    with open(kr.admin_conf) as f:
        text = f.read()
    text = text.replace(f"servers = {kr.cluster.servers}",
                        f"servers = {a[1]},{a[0]},{a[2]}")
    assert f"{a[1]},{a[0]},{a[2]}" in text
    with open(conf, "w") as f:
        f.write(text)
    return conf, a


def test_swapped_servers_refused(kr):
    """Each server must present its own party's certificate: with servers 0
    and 1 swapped in the config, kmpc-admin refuses both before sending a
    single share (a compromised party redirecting another's address gets
    nothing), and names the position that is wrong."""
    pw = "pw-" + secrets.token_hex(8)
    kr.addprinc("gina", pw, enctypes=["aes256-ctr-mpc"])
    before = keys_of(kr, "gina")
    _, st0, _ = kr.admin("status")
    counts0 = server_key_counts(st0)
    conf, a = _swapped_admin_conf(kr)
    env = dict(kr.env, KMPC_ADMIN_CONFIG=conf)
    rc, out, err = kr.admin("share", "--password-stdin", "gina", input=pw + "\n",
                            expected_code=1, env=env)
    assert f"the server at position 0 ({a[1]}) is not party 0" in err, err
    assert "nothing was shared" in err, err
    assert pw not in out + err
    rc, out, err = kr.admin("share", "--from-existing", "gina", expected_code=1, env=env)
    assert "is not party 0" in err, err
    _, st, _ = kr.admin("status", expected_code=1, env=env)
    assert f"the server at position 1 ({a[0]}) is not party 1" in st, st
    # Nothing reached any server, the KDB is unchanged.
    assert keys_of(kr, "gina") == before
    _, st1, _ = kr.admin("status")
    assert server_key_counts(st1) == counts0, st1


def test_unknown_principal_and_no_aes_key(kr):
    rc, out, err = kr.admin("share", "--from-existing", "nosuch", expected_code=1)
    assert "principal nosuch@KMPC.TEST does not exist in the KDB" in err, err
    rc, out, err = kr.admin("share", "--password-stdin", "nosuch", input="x\n",
                            expected_code=1)
    assert "does not exist in the KDB" in err, err
    kr.kadmin_local("addprinc -nokey erin")
    rc, out, err = kr.admin("share", "--from-existing", "erin", expected_code=1)
    assert "erin@KMPC.TEST has no AES key to migrate" in err, err
    rc, out, err = kr.admin("share", "--from-existing", f"K/M@{REALM}", expected_code=1)
    assert "cannot be shared" in err, err
    # One bad name among good ones: the others are still shared.
    kr.addprinc("frank")
    rc, out, err = kr.admin("share", "--from-existing", "nosuch", "frank",
                            expected_code=1)
    assert "[2/2] frank: shared" in out, out
    assert "1 shared, 0 already shared, 1 failed" in out, out
    _, st, _ = kr.admin("status")
    assert "keys: 1 on all three servers" in st, st


def test_wrong_certificate(kr, tmp_path):
    certs = kr.cluster.certs
    # The KDC's certificate is valid, but not for the Admin service.
    rc, out, err = kr.admin(f"--cert={certs}/kdc.pem", f"--key={certs}/kdc.key",
                            "status", expected_code=1)
    assert re.search(r"server 0 \(127\.0\.0\.1:\d+\) refused our certificate for the "
                     r"Admin service \(client 'kmpc-kdc' may not call Admin\)", out), out
    kr.addprinc("gina")
    rc, out, err = kr.admin(f"--cert={certs}/kdc.pem", f"--key={certs}/kdc.key",
                            "share", "--from-existing", "gina", expected_code=1)
    assert "refused our certificate" in err and "nothing was shared" in err, err
    assert keys_of(kr, "gina")[0][0] == "1"
    # Another CN signed by the CA: refused the same way.
    rc, out, err = kr.admin(f"--cert={certs}/kmpc-rogue.pem",
                            f"--key={certs}/kmpc-rogue.key", "status", expected_code=1)
    assert "client 'kmpc-rogue' may not call Admin" in out, out
    # A certificate from another CA: the TLS handshake fails.
    other = str(tmp_path / "other-ca")
    subprocess.run(["bash", kmpc_cluster.GEN_CERTS, other],
                   check=True, capture_output=True, timeout=120)
    rc, out, err = kr.admin(f"--cert={other}/admin.pem", f"--key={other}/admin.key",
                            "share", "--from-existing", "gina", expected_code=1)
    assert re.search(r"server \d \(127\.0\.0\.1:\d+\) closed the connection during "
                     r"the TLS handshake \(does it trust our client certificate", err), err
    assert "nothing was shared" in err, err
    # Trusting another CA: the servers' certificates fail our verification.
    rc, out, err = kr.admin(f"--ca={other}/ca.pem", "share", "--from-existing", "gina",
                            expected_code=1)
    assert re.search(r"server \d \(127\.0\.0\.1:\d+\): TLS handshake failed", err), err
    assert keys_of(kr, "gina")[0][0] == "1"
    _, st, _ = kr.admin("status")
    assert "keys: 0 on all three servers" in st, st


def test_status(kr):
    _, out, _ = kr.admin("status")
    lines = out.strip().splitlines()
    for i in range(3):
        assert re.match(rf"server {i} \(127\.0\.0\.1:\d+\): ok, party {i}, ring up, "
                        r"2 workers, 0 keys, batches ok \d+ failed \d+, "
                        r"security malicious$", lines[i]), out  # the servers' default
    assert lines[-1] == "status: OK", out
    kr.addprinc("hank")
    kr.admin("share", "--from-existing", "hank")
    out = status_kdb(kr, migrated("hank") + " 1: migrated from the KDB", EXPOSED_TGT)
    assert re.search(r"kdb: realm KMPC.TEST, \d+ principals, 1 with key handles, "
                     r"1 exposed, 0 handles without shares, 1 migrated", out), out
    kr.cluster.stop_party(1)
    rc, out, _ = kr.admin("--timeout-ms=3000", "status", "--kdb", expected_code=1)
    assert re.search(r"ERROR: server 1 \(127\.0\.0\.1:\d+\) is unreachable",
                     out), out
    assert "keys: cannot compare" in out and "status: PROBLEMS" in out, out


def test_usage_and_config_errors(kr, tmp_path):
    rc, _, err = kr.admin("share", "alice", expected_code=2)
    assert "exactly one of --password-stdin, --from-existing and --randkey" in err
    bad = tmp_path / "bad.conf"
    bad.write_text("servers = a:1,b:2\n")
    rc, _, err = kr.admin(f"--config={bad}", "status", expected_code=1)
    assert "servers needs three" in err, err
    bad.write_text("colour = blue\n")
    rc, _, err = kr.admin(f"--config={bad}", "status", expected_code=1)
    assert "unknown setting" in err, err



# Each subcommand with an option of another subcommand (and otherwise a
# command line it accepts): (subcommand, its arguments, the foreign option).
FOREIGN_OPTIONS = [
    ("share", ["--dry-run", "--randkey", "alice"], "--dry-run"),
    ("status", ["--kdb", "--all"], "--all"),
    ("purge-unreferenced", ["--dry-run", "--kdb"], "--kdb"),
    ("refresh", ["--all", "--yes"], "--yes"),
    ("rewrite-kdb", ["--force"], "--force"),
    ("drop-user-ctr", ["--all", "--i-am-primary"], "--i-am-primary"),
    ("breaker-reset", ["--kind=user"], "--kind"),
    ("set-kind", ["--kind=user", "--randkey", "alice"], "--randkey"),
    ("rebuild-party", ["--all", "1"], "--all"),
]


def test_each_subcommand_refuses_options_not_its_own(kr):
    """Every subcommand accepts its own options only: another subcommand's
    is a usage error (exit 2) naming whose it is, and nothing is done.
    `share --dry-run --randkey alice` (--dry-run is purge-unreferenced's)
    leaves alice's key in the KDB as it was and puts no key on the servers."""
    kr.addprinc("alice", "pw-" + secrets.token_hex(8),
                enctypes=["aes256-cts-hmac-sha1-96"])
    before = kr.kdb_keys("alice")
    assert [kind for _, _, kind, _ in before] == ["key"], before
    assert sorted(c for c, _, _ in FOREIGN_OPTIONS) == sorted(
        ["share", "status", "purge-unreferenced", "refresh", "rewrite-kdb",
         "drop-user-ctr", "breaker-reset", "set-kind", "rebuild-party"])
    for command, args, foreign in FOREIGN_OPTIONS:
        _, out, err = kr.admin(command, *args, expected_code=2)
        assert f"kmpc-admin: {command}: {foreign} is an option of " in err, err
        assert f", not of {command}\n" in err, err
        assert out == "", out
    _, out, err = kr.admin("share", "--dry-run", "--randkey", "alice", expected_code=2)
    assert ("share: --dry-run is an option of purge-unreferenced and drop-user-ctr, "
            "not of share") in err, err
    assert kr.kdb_keys("alice") == before
    _, out, _ = kr.admin("status")
    assert server_key_counts(out) == {0: 0, 1: 0, 2: 0}, out
    # Global options go before or after the subcommand, as --opt=value or
    # --opt value; its own options only after its name.
    kr.admin("--timeout-ms", "5000", "status", "--kdb", "-r", REALM, expected_code=1)
    _, _, err = kr.admin("--kdb", "status", expected_code=2)
    assert "status: --kdb goes after the subcommand's name" in err, err


# ---- through the KDC ----------------------------------------------------

def _etypes(realm):
    out = realm.run(["klist", "-e"])
    return re.findall(r"Etype \(skey, tkt\): (\S+), (\S+)", out), out


@pytest.mark.parametrize("module", ["test", "real"])
def test_kinit_kvno_with_shared_keys(kmpc_factory, module):
    if module == "real" and kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so",
                                                    required=False) is None:
        pytest.fail("the real kdcmpc module (kdc-plugin/libkmpc_kdc.so) is not built (make build)")
    r = kmpc_factory(module=module)
    pw = "pw-" + secrets.token_hex(8)
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_service()
    r.add_users({"alice": pw}, n_random=3)
    r.start()
    for p in ("alice", "user0", r.tgs):
        assert [k[1] for k in keys_of(r, p)] == ["aes256-ctr-mpc"], p
    r.kinit("alice", pw)
    etypes, out = _etypes(r)
    assert etypes == [("aes256-cts-hmac-sha1-96", "aes256-ctr-mpc")], out
    out = r.run(["kvno", kmpc_cluster.SERVICE])
    assert "kvno = 1" in out, out
    etypes, out = _etypes(r)
    assert ("aes256-cts-hmac-sha1-96", "aes256-cts-hmac-sha1-96") in etypes, out
    # A random-key user migrated with --from-existing, from its keytab.
    r.run(["kinit", "-k", "-t", r.users_keytab, "user2"])
    r.run(["kvno", kmpc_cluster.SERVICE])
    # A wrong password still fails.
    r.kinit("alice", "wrong", expected_code=1, expected_msg="Password incorrect")
    assert r.kdc_alive() and r.cluster.alive()
    if module == "real":
        _, st, _ = r.admin("status")
        oks = [int(x) for x in re.findall(r"batches ok (\d+)", st)]
        assert len(oks) == 3 and all(n > 0 for n in oks), st


@pytest.mark.parametrize("module", ["test", "real"])
def test_migrated_key_keeps_its_salt(kmpc_factory, module):
    """A key with a non-default (random, "special") salt: the handle carries
    the same salt, so clients still derive the shared key from the password."""
    if module == "real" and kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so",
                                                    required=False) is None:
        pytest.fail("the real kdcmpc module is not built (make build)")
    r = kmpc_factory(module=module)
    r.setup_krbtgt()
    r.setup_warmup()
    pw = "pw-" + secrets.token_hex(8)
    r.kadmin_local(f"addprinc +requires_preauth -e aes256-ctr-mpc:special -pw {pw} ivan")
    before = r.kadmin_local("getprinc ivan")
    assert "aes256-ctr-mpc" in before and "special" in before, before
    out = r.share_existing(["ivan"])
    assert "as aes256-ctr-mpc kvno 1" in out, out
    after = r.kadmin_local("getprinc ivan")
    assert re.search(r"Key: vno 1, aes256-ctr-mpc:special", after), after
    r.start()
    r.kinit("ivan", pw)
    assert r.kdc_alive() and r.cluster.alive()


def test_outstanding_tgt_survives_krbtgt_migration(kmpc_factory):
    """The krbtgt key already was aes256-ctr-mpc: it is shared at the same
    kvno, so a TGT issued from the KDB key before the migration is decrypted
    by the cluster afterwards (kvno semantics kept)."""
    if kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so", required=False) is None:
        pytest.fail("the real kdcmpc module is not built (make build)")
    r = kmpc_factory(module="real")
    r.kadmin_local(f"setstr {r.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    r.add_service()
    pw = "pw-" + secrets.token_hex(8)
    r.addprinc("judy", pw, enctypes=["aes256-ctr-mpc"])
    r.start_kdc()
    r.kinit("judy", pw)  # everything still from the KDB's own keys
    assert ("1", "aes256-ctr-mpc") in keys_of(r, r.tgs)
    # A krbtgt key the KDB held is refused unless forced (older dumps and
    # backups hold it), and nothing changes.
    _, _, err = r.admin("share", "--from-existing", r.tgs, expected_code=1)
    assert "every older dump, backup, iprop log and replica" in err, err
    assert ("1", "aes256-ctr-mpc") in keys_of(r, r.tgs)
    _, out, _ = r.admin("share", "--from-existing", "--force", r.tgs, "judy")
    assert "as aes256-ctr-mpc kvno 1" in out, out
    # Only the handle is left (the krbtgt's aes128/aes-cts keys are gone).
    assert keys_of(r, r.tgs) == [("1", "aes256-ctr-mpc")]
    # The old TGT, now decrypted inside the MPC cluster.
    out = r.run(["kvno", kmpc_cluster.SERVICE])
    assert "kvno = 1" in out, out
    _, st, _ = r.admin("status")
    assert all(int(n) > 0 for n in re.findall(r"batches ok (\d+)", st)), st
    # And a new login from the password, pre-auth checked by the cluster.
    r.kinit("judy", pw)
    assert r.kdc_alive() and r.cluster.alive()


def test_kdb_refusal_removes_the_shares(kr):
    """The KDB refuses the handle (a policy allows no MPC enctype): the shares
    already on the three servers are removed again, the principal keeps its
    key."""
    kr.kadmin_local("addpol -allowedkeysalts aes256-cts-hmac-sha1-96:normal ctsonly")
    kr.addprinc("kim", enctypes=["aes256-cts-hmac-sha1-96"])
    kr.kadmin_local("modprinc -policy ctsonly kim")
    before = keys_of(kr, "kim")
    rc, out, err = kr.admin("share", "--from-existing", "kim", expected_code=1)
    assert "kim@KMPC.TEST: the KDB refused the key handle, the KDB is unchanged" in err, err
    assert "the shares were removed again" in err, err
    assert keys_of(kr, "kim") == before
    st = status_kdb(kr, EXPOSED_TGT, "kdb: kim@KMPC.TEST holds real keys in the KDB")
    assert "keys: 0 on all three servers, 0 incomplete" in st, st


def test_krbtgt_rotation_with_keepold(kmpc_factory):
    """kadmin's `cpw -randkey -keepold krbtgt` in the cluster: a new random
    krbtgt key at the next kvno, the old handle and its shares kept, so
    TGTs issued before still work; the next rotation without --keepold
    removes the old handles from the KDB and their shares from the servers."""
    if kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so", required=False) is None:
        pytest.fail("the real kdcmpc module is not built (make build)")
    r = kmpc_factory(module="real")
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_service()
    pw = "pw-" + secrets.token_hex(8)
    r.add_users({"lena": pw})
    r.start()
    r.kinit("lena", pw)  # a TGT under krbtgt kvno 2 (made in the cluster)
    # --keepold refuses to keep real keys.
    r.addprinc("mike")
    _, _, err = r.admin("share", "--randkey", "--keepold", "mike", expected_code=1)
    assert "would keep keys that are not MPC key handles" in err, err

    _, out, _ = r.admin("share", "--randkey", "--keepold", r.tgs)
    assert "shared from a random key as aes256-ctr-mpc kvno 3" in out, out
    assert "1 old key handle(s) kept" in out, out
    assert keys_of(r, r.tgs) == [("3", "aes256-ctr-mpc"), ("2", "aes256-ctr-mpc")]
    r.run(["kvno", kmpc_cluster.SERVICE])  # the kvno-2 TGT still decrypts
    r.kinit("lena", pw)  # a new TGT under kvno 3
    r.run(["kvno", kmpc_cluster.SERVICE])

    # Without --keepold every TGT would stop working at once: refused
    # unless forced, and nothing changes.
    before = keys_of(r, r.tgs)
    _, _, err = r.admin("share", "--randkey", r.tgs, expected_code=1)
    assert "without --keepold makes every ticket issued under the current key " \
           "unusable" in err, err
    assert "--force to replace it anyway. Nothing was changed" in err, err
    assert keys_of(r, r.tgs) == before
    r.run(["kvno", kmpc_cluster.SERVICE])  # the kvno-3 TGT still works
    _, out, _ = r.admin("share", "--randkey", "--force", r.tgs)
    assert "kvno 4" in out, out
    assert keys_of(r, r.tgs) == [("4", "aes256-ctr-mpc")]
    # mike still holds the real keys addprinc made, and so does the service;
    # the warm-up principal's key was migrated from the KDB.
    st = status_kdb(r, "kdb: mike@KMPC.TEST should be MPC-protected",
                    migrated("kmpc/warmup") + " 1: migrated from the KDB",
                    f"kdb: {kmpc_cluster.SERVICE}@KMPC.TEST holds real keys in the KDB")
    # krbtgt (1 key), warm-up, lena: the two old krbtgt keys are gone.
    assert "keys: 3 on all three servers, 0 incomplete" in st, st
    assert "0 unreferenced keys" in st, st
    # The kvno-3 TGT is now unusable (its key is gone): a clean error for a
    # new service ticket, and a new login works.
    r.add_service("host/svc2.kmpc.test")
    out = r.run(["kvno", "host/svc2.kmpc.test"], expected_code=1)
    assert "host/svc2.kmpc.test" in out, out
    r.kinit("lena", pw)
    r.run(["kvno", "host/svc2.kmpc.test"])
    assert r.kdc_alive() and r.cluster.alive()
