"""Realms whose KDB holds MPC key handles for krb5's test kdcmpc module
(keys in a file: test_kdc_handles.py, test_fast.py), and helpers on
tickets in a ccache shared with test_kdc_plugin.py (the real module on
kmpc_harness.cluster.KmpcRealm).

Keys are migrated the way an admin would do it: the principal gets an
aes256-ctr-mpc key from a password, the key is read out (kmpc-kdb-handle
get-key) and checked against the independent string-to-key
(ctr_mpc_ref.py), handed to the "cluster" (HandleRealm.store_key: the
subclasses), and the KDB key is replaced by a handle (kmpc-kdb-handle set).
No key or password is ever printed.
"""
import re
import secrets
import struct
import subprocess
import time

import ctr_mpc_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import realm as kmpc_realm
from kmpc_harness.realm import RealmError

REALM = kmpc_realm.REALM
TGS = f"krbtgt/{REALM}@{REALM}"
SERVICE = kmpc_cluster.SERVICE
ENCTYPES = kmpc_cluster.ENCTYPES
# Session keys are never of an MPC enctype; realms say so explicitly too.
SESSION_ENCTYPES = kmpc_cluster.SESSION_ENCTYPES


def password():
    return "pw-" + secrets.token_hex(8)


def default_salt(princ):
    """The default salt of princ (RFC 4120 3.1.3): realm, then components."""
    name, _, realm = princ.partition("@")
    return (realm or REALM) + "".join(name.split("/"))


class HandleRealm:
    """A realm (from the realm_factory fixture) whose KDC loads a kdcmpc
    module and whose krbtgt and users have key handles.  Subclasses put the
    keys where the module finds them (store_key)."""

    def __init__(self, realm_factory, module, so, options, workers=0,
                 **realm_kw):
        extra = kmpc_cluster.kdcmpc_conf(module, so, options) + \
            "[logging]\n    debug = true\n"
        self.realm = realm_factory(enctypes=ENCTYPES, kdc_conf_extra=extra,
                                   **realm_kw)
        self.workers = workers
        self.passwords = {}
        self.key_ids = {}

    # ---- keys -----------------------------------------------------------
    def tool(self, *args, expected_code=0):
        """kmpc-kdb-handle on the realm's KDB: (stdout, stderr)."""
        p = subprocess.run([kmpc_cluster.find_built("kdc-plugin/kmpc-kdb-handle"),
                            "-r", REALM, *args], capture_output=True, text=True,
                           env=self.realm.env, timeout=60)
        if p.returncode != expected_code:
            raise RealmError(f"kmpc-kdb-handle {args[0]} exited "
                             f"{p.returncode}:\n{p.stderr}")
        return p.stdout, p.stderr

    def store_key(self, princ, key_hex, key_id):
        raise NotImplementedError

    def migrate(self, princ, pw, enctype="aes256-ctr-mpc"):
        """Move princ's key of enctype (made from password pw) into the
        cluster under a fresh key id; leave a handle in the KDB."""
        out, _ = self.tool("get-key", princ, enctype)
        key = out.strip()
        assert re.fullmatch(r"[0-9a-f]{32}|[0-9a-f]{64}", key), "bad key output"
        ref = ctr_mpc_ref.string_to_key(enctype, pw.encode(),
                                        default_salt(princ).encode())
        # Compared as a bool: a failing assert must not print keys.
        same = secrets.compare_digest(key, ref.hex())
        assert same, f"{princ}: the KDB key is not the reference string-to-key"
        key_id = secrets.token_hex(32)
        self.store_key(princ, key, key_id)
        self.tool("set", princ, enctype, key_id)
        self.key_ids[princ] = key_id
        return key_id

    def add_user(self, name, enctype="aes256-ctr-mpc"):
        pw = password()
        self.realm.addprinc(name, pw, enctypes=[enctype])
        self.migrate(name, pw, enctype)
        self.passwords[name] = pw
        return pw

    def setup(self, users=()):
        """The krbtgt key (from a random password) into the cluster, an
        ordinary service (its key stays in the KDB, tickets for it are made
        locally), then the users.  The KDC is not started."""
        r = self.realm
        r.kadmin_local(f"setstr {TGS} session_enctypes {SESSION_ENCTYPES}")
        pw = "tgs-" + secrets.token_hex(16)
        r.kadmin_local(f"cpw -e aes256-ctr-mpc:normal -pw {pw} {TGS}")
        self.migrate(TGS, pw)
        r.addprinc(SERVICE, enctypes=["aes256-cts-hmac-sha1-96"], flags="")
        for u in users:
            self.add_user(u)
        return self

    # ---- the KDC and clients ---------------------------------------------
    def start(self):
        self.realm.start_kdc(
            extra_args=("-w", str(self.workers)) if self.workers else ())
        return self

    def kinit(self, name="alice", **kw):
        return self.realm.kinit(name, self.passwords[name], **kw)

    def timed_kinit(self, name="alice", **kw):
        """kinit, and how long it took (seconds)."""
        t0 = time.monotonic()
        out = self.kinit(name, **kw)
        return out, time.monotonic() - t0

    def kinit_until_ok(self, name="alice", timeout=60, pause=0.5):
        """Log in until it works (the cluster coming back, connections being
        made); RealmError with the last failure after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.kinit(name, timeout=30)
            except RealmError:
                if time.monotonic() > deadline or not self.realm.kdc_alive():
                    raise
                time.sleep(pause)

    def kdc_log(self):
        with open(self.realm.kdc_log) as f:
            return f.read()

    def trace_env(self):
        return {**self.realm.env, "KRB5_TRACE": "/dev/stdout"}


# ---- tickets in the ccache ---------------------------------------------------

def ccache_credentials(path):
    """Every credential of a v4 FILE ccache as a dict: server (components),
    key (the session key's bytes), ticket (offset, length of the ticket's
    DER in the file)."""
    with open(path, "rb") as f:
        buf = f.read()
    assert buf[:2] == b"\x05\x04", "not a v4 FILE ccache"
    pos = 2
    hlen, = struct.unpack_from(">H", buf, pos)
    pos += 2 + hlen

    def data():
        nonlocal pos
        n, = struct.unpack_from(">I", buf, pos)
        start = pos + 4
        pos = start + n
        return start, n

    def principal():
        nonlocal pos
        pos += 4                       # name type
        ncomp, = struct.unpack_from(">I", buf, pos)
        pos += 4
        data()                         # realm
        names = []
        for _ in range(ncomp):
            s, n = data()
            names.append(buf[s:s + n].decode())
        return names

    principal()                        # default principal
    creds = []
    while pos < len(buf):
        principal()
        server = principal()
        pos += 2                       # keyblock enctype
        ks, kn = data()                # key
        pos += 16 + 1 + 4              # times, is_skey, flags
        naddr, = struct.unpack_from(">I", buf, pos)
        pos += 4
        for _ in range(naddr):
            pos += 2
            data()
        nad, = struct.unpack_from(">I", buf, pos)
        pos += 4
        for _ in range(nad):
            pos += 2
            data()
        tstart, tlen = data()
        data()                         # second ticket
        creds.append({"server": server, "key": buf[ks:ks + kn],
                      "ticket": (tstart, tlen)})
    return creds


def ccache_ticket_spans(path):
    """(server components, offset, length) of every credential's ticket in a
    v4 FILE ccache."""
    return [(c["server"], *c["ticket"]) for c in ccache_credentials(path)]


def tgt_span(ccache):
    """(offset, length) of the one TGT in ccache."""
    spans = [s for s in ccache_ticket_spans(ccache) if s[0] == ["krbtgt", REALM]]
    assert len(spans) == 1, spans
    return spans[0][1:]


def check_tampered_tgt_is_refused(realm, login):
    """login() (a TGT in realm's ccache), then flip one bit of the TGT's
    cipher text in the ccache: the TGS-REQ fails as an integrity error,
    found by the kdcmpc module's decryption, and the KDC lives on."""
    login()
    start, length = tgt_span(realm.ccache)
    with open(realm.ccache, "r+b") as f:
        # A byte in the middle of the encrypted part (the DER of a Ticket
        # ends with the cipher octets).
        off = start + length - 40
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x01]))
    out = realm.run(["kvno", SERVICE], expected_code=1)
    assert "integrity check failed" in out, out
    with open(realm.kdc_log) as f:
        log = f.read()
    assert "kdcmpc: DECRYPT job (usage 2) failed" in log, log
    assert re.search(r"TGS_REQ .*PROCESS_TGS: .*integrity check failed", log), log
    assert realm.kdc_alive()
