"""KmpcRealm: the kmpc realm on 127.0.0.1, the realm class every test, benchmark
and the demo uses. A realm.Realm (the patched KDC alone) whose long-term keys
live in an MpcCluster (cluster.py: three MPC servers), the KDB holding only
key handles; cluster.py's docstring lists what it adds and its command line.
bring_up() makes one with a service and users, the KDC running.
"""

import json
import os
import re
import secrets
import subprocess
import time

from kmpc_harness import realm
from kmpc_harness.cluster import (ENCTYPES, REAL_MODULE_NAME, SERVICE, SESSION_ENCTYPES,
                                  STATE, MpcCluster, dealer_conf, default_salt,
                                  find_built, kdcmpc_conf, password, stop_pids,
                                  test_module_path)
from kmpc_harness.realm import RealmError


# kadmind's own keys, which kdb5_util create makes (kadm5_create.c), and
# the enctype they take in the cluster (MIT's default, which unmodified
# kadmin and kpasswd clients negotiate).
KADMIND_KEYS = ("kadmin/admin", "kadmin/changepw")
CTS256 = "aes256-cts-hmac-sha1-96"

# [kdcdefaults] kdc_tcp_max_connections and kdc_tcp_listen_backlog of kmpc
# realms, as in deploy/debian/examples/kdc.conf.example.
TCP_MAX_CONNECTIONS = 1024
TCP_LISTEN_BACKLOG = 1024


class KmpcRealm(realm.Realm):
    """A realm.Realm whose long-term keys live in an MpcCluster."""

    def __init__(self, workdir, module="auto", mpc_workers=2, kdc_workers=0,
                 extra_client_cns=(), server_flags="", test_module_delay_ms=5,
                 module_options=None, enctypes=ENCTYPES, realm_extra="",
                 udp_recv_buffer=4 << 20, udp_max_wait_ms=0,
                 tcp_max_connections=TCP_MAX_CONNECTIONS,
                 tcp_listen_backlog=TCP_LISTEN_BACKLOG, dealer=False,
                 protect=None, metrics=False, clusters=1, user_ctr_mpc=True, **kw):
        """module: "real" (kdc-plugin's libkmpc_kdc.so), "test" (krb5's test
        module) or "auto" (real when built). module_options: extra relations
        for the real module's [kdcmpc] -> kmpc section (e.g. {"early_flush":
        "true", "batch_window_ms": 20}; kdc-plugin/src/options.h).
        server_flags: extra kmpc-mpc-server flags (KMPC_MPC_FLAGS).
        udp_recv_buffer: [kdcdefaults] kdc_udp_recv_buffer (krb5's UDP receive buffer patch;
        0 for the OS default): the batched replies make the clients' next
        requests arrive in bursts, which overflow the default ~208 KB.
        udp_max_wait_ms: [kdcdefaults] kdc_udp_max_wait_ms (krb5's stale UDP request patch;
        0, the default, = off as in MIT krb5): drop UDP requests that waited
        longer than this in the KDC's socket. It sheds work for clients that
        gave up under overload, but with a bounded client population it
        makes more logins fail (they wait for their retransmit), so it is
        opt-in.
        tcp_max_connections: [kdcdefaults] kdc_tcp_max_connections (krb5's
        TCP connection limit patch; 0 for MIT's fixed 45): every login over
        TCP holds its connection for the MPC Run's latency, and beyond the
        limit the KDC closes the oldest idle connection (its client:
        KRB5_KDC_UNREACH). The default is the deploy templates' value.
        dealer: load kmpc's key dealer (kdc-plugin/dealer/dealer_module.cc)
        into kadmin.local, kadmind and kdb5_util, so that every new key of an
        MPC-protected principal goes to the cluster and only handles reach
        the KDB; protect: its [mpcdealer] protect patterns (default
        krbtgt/*).
        metrics: Prometheus /metrics over HTTP on 127.0.0.1 from each server
        (cluster.metrics_url(i)) and, with the real module, from the KDC
        (kdc_metrics_url; module option metrics_addr), on free ports.
        clusters: how many MPC clusters of three servers (each in its own
        directory, mpc/ then mpc2/, ..., with its own CA and certificates);
        every key is dealt to each (kmpc-admin's servers2 = ..., the
        module's servers2 = ...). self.cluster is the first, self.clusters
        all of them. clusters=0: no MPC server; krb5's test module (module
        "test") holds the keys in DIR/mpc-test-keys, journals every job to
        DIR/mpc-journal (journal_lines) and fails them all while
        DIR/mpc-unavailable (test_failflag) exists; keys get there with
        migrate() (kmpc-kdb-handle), and the KDC logs every job (debug)."""
        super().__init__(workdir, enctypes=enctypes, realm_extra=realm_extra, **kw)
        self.clusters = [
            MpcCluster(os.path.join(self.dir, "mpc" if n == 0 else f"mpc{n + 1}"),
                       workers=mpc_workers, extra_client_cns=extra_client_cns,
                       server_flags=server_flags, metrics=metrics)
            for n in range(clusters)]
        self.cluster = self.clusters[0] if self.clusters else None
        self.metrics = metrics
        self.kdc_metrics_url = None
        if module == "auto":
            module = "real" if clusters and find_built("kdc-plugin/libkmpc_kdc.so",
                                                       False) else "test"
        if module not in ("real", "test"):
            raise RealmError(f"module must be auto, real or test, not {module}")
        if module == "real" and not clusters:
            raise RealmError("the real module needs a cluster (clusters >= 1)")
        self.module = module
        self.kdc_workers = kdc_workers
        self.test_module_delay_ms = test_module_delay_ms
        self.module_options = dict(module_options or {})
        self.udp_recv_buffer = udp_recv_buffer
        self.udp_max_wait_ms = udp_max_wait_ms
        self.tcp_max_connections = tcp_max_connections
        self.tcp_listen_backlog = tcp_listen_backlog
        self.admin_conf = os.path.join(self.dir, "kmpc-admin.conf")
        self.test_keyfile = os.path.join(self.dir, "mpc-test-keys")
        self.test_journal = os.path.join(self.dir, "mpc-journal")
        self.test_failflag = os.path.join(self.dir, "mpc-unavailable")
        self.users_keytab = os.path.join(self.dir, "users.keytab")
        self._plugin_conf = ""
        self.dealer = dealer
        self.protect = list(protect or [])
        # The dealer's kind patterns: ("service" | "user_service", pattern).
        self.dealer_kinds = []
        # Users' passwords (add_users), in memory only: for logging them in.
        self.passwords = {}
        # kmpc-admin's user_ctr_mpc (mpc-server/admin/config.h), which the
        # dealer reads too: most tests deal users' keys under aes*-ctr-mpc
        # as well (their patched clients); a product realm (the demo) and
        # the tests of the refusal leave it off: users under aes*-cts only.
        self.user_ctr_mpc = user_ctr_mpc

    # ---- set-up -------------------------------------------------------
    def create(self):
        os.makedirs(self.dir, exist_ok=True)
        # The rings connect while the KDB is made (waited for at the end).
        for cl in self.clusters:
            cl.start(wait=False)
        c = self.cluster
        if self.module == "real":
            so = find_built("kdc-plugin/libkmpc_kdc.so")
            opts = {}
            for n, cl in enumerate(self.clusters):
                sfx = "" if n == 0 else str(n + 1)
                opts.update({f"servers{sfx}": cl.servers, f"ca{sfx}": f"{cl.certs}/ca.pem",
                             f"cert{sfx}": f"{cl.certs}/kdc.pem",
                             f"key{sfx}": f"{cl.certs}/kdc.key"})
            if self.metrics:
                port = realm.free_port_block((0,), udp=False)
                opts["metrics_addr"] = f"127.0.0.1:{port}"
                self.kdc_metrics_url = f"http://127.0.0.1:{port}/metrics"
            # module_options may also replace these (e.g. servers).
            opts.update(self.module_options)
            name = REAL_MODULE_NAME
        else:
            so = test_module_path()
            if not os.path.exists(so):
                raise RealmError(f"{so} missing: the krb5 patch series is not built")
            open(self.test_keyfile, "w").close()
            os.chmod(self.test_keyfile, 0o600)
            opts = {"keyfile": self.test_keyfile, "delay_ms": self.test_module_delay_ms}
            if not self.clusters:
                opts.update({"journal": self.test_journal,
                             "fail_if_exists": self.test_failflag})
            opts.update(self.module_options)  # e.g. inline (test module)
            name = "test"
        self._plugin_conf = kdcmpc_conf(name, so, opts)
        if not self.clusters:
            self._plugin_conf += "[logging]\n    debug = true\n"
        if self.dealer:
            self._plugin_conf += self._dealer_conf()
        # Relations before [plugins] land in [kdcdefaults].
        rcvbuf = (f"    kdc_udp_recv_buffer = {self.udp_recv_buffer}\n"
                  if self.udp_recv_buffer else "")
        if self.udp_max_wait_ms:
            rcvbuf += f"    kdc_udp_max_wait_ms = {int(self.udp_max_wait_ms)}\n"
        if self.tcp_max_connections:
            rcvbuf += f"    kdc_tcp_max_connections = {int(self.tcp_max_connections)}\n"
        if self.tcp_listen_backlog:
            rcvbuf += f"    kdc_tcp_listen_backlog = {int(self.tcp_listen_backlog)}\n"
        self.kdc_conf_extra = rcvbuf + self._plugin_conf + self.kdc_conf_extra
        super().create()
        for cl in self.clusters:
            cl.wait_ring()
        if c is None:
            self.save_state()
            return self
        with open(self.admin_conf, "w") as f:
            f.write(f"# kmpc-admin for realm {self.realm} (generated)\n"
                    f"servers = {c.servers}\nca = {c.certs}/ca.pem\n"
                    f"cert = {c.certs}/admin.pem\nkey = {c.certs}/admin.key\n"
                    f"realm = {self.realm}\n"
                    f"user_ctr_mpc = {'true' if self.user_ctr_mpc else 'false'}\n")
            for n, cl in enumerate(self.clusters[1:], start=2):
                f.write(f"servers{n} = {cl.servers}\nca{n} = {cl.certs}/ca.pem\n"
                        f"cert{n} = {cl.certs}/admin.pem\nkey{n} = {cl.certs}/admin.key\n")
        self.env["KMPC_ADMIN_CONFIG"] = self.admin_conf
        self.save_state()
        return self

    def _dealer_conf(self):
        return dealer_conf(find_built("mpc-server/libkmpc_dealer.so"), self.admin_conf,
                           self.protect, self.dealer_kinds)

    def enable_dealer(self):
        """Load the key dealer from now on (kdc.conf is read by every new
        kadmin.local, kadmind and kdb5_util): principals set up before keep
        the keys they were given (e.g. load-test users migrated from a
        keytab), every key change after goes to the cluster."""
        if self.dealer:
            return
        with open(self.kdc_conf, "a") as f:
            f.write(self._dealer_conf())
        self.dealer = True

    def make_env(self):
        env = super().make_env()
        env["KMPC_ADMIN_CONFIG"] = self.admin_conf
        return env

    @property
    def tgs(self):
        return f"krbtgt/{self.realm}@{self.realm}"

    # ---- kmpc-admin ----------------------------------------------------
    def admin(self, *args, input=None, expected_code=0, env=None, timeout=120):
        """Run kmpc-admin; return (returncode, stdout, stderr)."""
        p = subprocess.run([find_built("mpc-server/kmpc-admin"), *args], input=input,
                           capture_output=True, text=True, env=env or self.env,
                           timeout=timeout)
        if expected_code is not None and p.returncode != expected_code:
            raise RealmError(f"kmpc-admin {' '.join(args)} exited {p.returncode}, "
                             f"expected {expected_code}:\n{p.stdout}{p.stderr}")
        return p.returncode, p.stdout, p.stderr

    def _export_for_test_module(self, princs):
        """Test module only: it computes with real keys, so it gets each key
        (read out before sharing) in its key file."""
        tool = find_built("kdc-plugin/kmpc-kdb-handle")
        keys = {}
        for pr in princs:
            p = subprocess.run([tool, "-r", self.realm, "get-key", pr, "aes256-ctr-mpc"],
                               capture_output=True, text=True, env=self.env, timeout=60)
            if p.returncode != 0:
                p = subprocess.run([tool, "-r", self.realm, "get-key", pr,
                                    "aes128-ctr-mpc"],
                                   capture_output=True, text=True, env=self.env, timeout=60)
            if p.returncode != 0:
                raise RealmError(f"kmpc-kdb-handle get-key {pr}: {p.stderr}")
            keys[pr] = p.stdout.strip()
        return keys

    def _record_test_keys(self, keys, admin_out):
        """Pair each principal's exported key with the key id kmpc-admin
        printed for it, into the test module's key file."""
        ids = dict(re.findall(r"\] (\S+): shared .*key id ([0-9a-f]{64})", admin_out))
        with open(self.test_keyfile, "a") as f:
            for pr, key in keys.items():
                kid = ids.get(pr)
                if kid is None:
                    raise RealmError(f"kmpc-admin printed no key id for {pr}")
                f.write(f"{kid} {key}\n")

    def share_existing(self, princs, expected_code=0):
        princs = list(princs)
        keys = self._export_for_test_module(princs) if self.module == "test" else None
        out = ""
        for i in range(0, len(princs), 500):
            rc, o, e = self.admin("share", "--from-existing", *princs[i:i + 500],
                                  expected_code=expected_code)
            out += o
        if keys is not None:
            self._record_test_keys(keys, out)
        return out

    def share_passwords(self, pairs, enctype="aes256-ctr-mpc", expected_code=0):
        """pairs: [(princ, password)]; the passwords go to kmpc-admin's stdin."""
        pairs = list(pairs)
        names = [p for p, _ in pairs]
        keys = self._export_for_test_module(names) if self.module == "test" else None
        _, out, _ = self.admin("share", "--password-stdin", f"--enctype={enctype}",
                               *names, input="".join(pw + "\n" for _, pw in pairs),
                               expected_code=expected_code)
        if keys is not None:
            self._record_test_keys(keys, out)
        return out

    def kdb_keys(self, princ):
        """What the KDB holds for princ, read with the master key
        (kmpc-kdb-handle keys; a dump's key data is encrypted, so scanning one
        proves nothing): [(kvno, enctype, kind, value)], kind "handle" (value:
        the key id, hex) or "key" (value: SHA-256 of the key, hex)."""
        out = self.kdb_handle("keys", princ)
        return [tuple(line.split()) for line in out.splitlines()]

    def kdb_history(self, princ):
        """princ's kadm5 password history as the KDB holds it, decrypted
        with the kadmin/history key read with the master key (kmpc-kdb-handle
        history): [(entry, kvno, enctype, kind, value)] as kdb_keys, [] for
        an empty history."""
        out = self.kdb_handle("history", princ)
        return [tuple(line.split()) for line in out.splitlines()]

    def kdb_handle(self, *args):
        """kmpc-kdb-handle on the realm's KDB (keys, get-key, set): its
        stdout; RealmError with its stderr when it fails."""
        p = subprocess.run([find_built("kdc-plugin/kmpc-kdb-handle"), "-r", self.realm,
                            *args], capture_output=True, text=True,
                           env=self.env, timeout=60)
        if p.returncode != 0:
            raise RealmError(f"kmpc-kdb-handle {' '.join(args[:2])}: {p.stderr}")
        return p.stdout

    def key_id(self, princ):
        """The key id of princ's (one) key handle in the KDB."""
        ids = [v for _, _, kind, v in self.kdb_keys(princ) if kind == "handle"]
        if len(ids) != 1:
            raise RealmError(f"{princ} has {len(ids)} key handles, not one")
        return ids[0]

    # ---- principals ----------------------------------------------------
    def setup_krbtgt(self):
        """Session keys of an ordinary enctype; a new krbtgt key made in the
        cluster (share --randkey), so that no KDB, dump or backup ever held
        the key that signs TGTs. The test module computes with real keys, so
        there the key kdb5_util made is moved instead (--from-existing
        --force)."""
        self.kadmin_local(f"setstr {self.tgs} session_enctypes {SESSION_ENCTYPES}")
        if not self.clusters:
            pw = "tgs-" + secrets.token_hex(16)
            self.kadmin_local(f"cpw -e aes256-ctr-mpc:normal -pw {pw} {self.tgs}")
            return self.migrate(self.tgs, pw)
        if self.module == "test":
            keys = self._export_for_test_module([self.tgs])
            _, out, _ = self.admin("share", "--from-existing", "--force", self.tgs)
            self._record_test_keys(keys, out)
            return out
        # Nothing was issued under the realm's first krbtgt key: replacing it
        # invalidates no ticket (hence --force).
        _, out, _ = self.admin("share", "--randkey", "--force", self.tgs)
        return out

    def move_kadmind_keys(self, princs=KADMIND_KEYS):
        """kadmind's own keys into the cluster as an administrator moves them
        (docs/admin-guide.md, "Moving kadmind's keys"): a new random
        aes256-cts key of each, of a service's kind, made in the cluster
        (share --randkey --service: no KDB ever held it, so status --kdb
        reports nothing migrated), the KDB holding only the handle. kadmind
        then has the cluster decrypt each ticket to them (krb5 patch
        0026-Decrypt-tickets); with the cluster down remote kadmin and
        kpasswd fail (kadmin.local does not). The test module cannot
        compute with these keys: remote kadmin and kpasswd need the real
        one. Returns kmpc-admin's output."""
        _, out, _ = self.admin("share", "--randkey", "--service", f"--enctype={CTS256}",
                               *princs)
        return out

    def add_service(self, name=SERVICE):
        """An ordinary service: its key stays in the KDB."""
        self.addprinc(name, enctypes=["aes256-cts-hmac-sha1-96"], flags="")

    def kinit_until_ok(self, princ="alice", password=None, timeout=60, pause=0.5,
                       only=None):
        """kinit until it works (a cluster coming back, the KDC's channels to
        a restarted server reconnecting): password defaults to the one
        add_users kept. A failure without `only` in its message (when
        given), the KDC's death, or `timeout` seconds raise the last
        RealmError."""
        if password is None:
            password = self.passwords[princ]
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.kinit(princ, password, timeout=30)
            except RealmError as e:
                if ((only is not None and only not in str(e))
                        or time.monotonic() > deadline or not self.kdc_alive()):
                    raise
            time.sleep(pause)

    def add_users(self, passwords=None, n_random=0, fmt="user{}"):
        """Users with passwords ({name: password}) shared from the password,
        and n_random random-key users (keys in users.keytab) migrated with
        --from-existing. The KDC must not be running yet with the test module
        (it reads its key file at start-up)."""
        passwords = passwords or {}
        if not self.clusters:
            if n_random:
                raise RealmError("random-key users need a cluster (clusters >= 1)")
            for name, pw in passwords.items():
                self.add_user(name, pw)
            return self
        for name, pw in passwords.items():
            self.addprinc(name, pw, enctypes=["aes256-ctr-mpc"])
        if passwords:
            self.share_passwords(passwords.items())
            self.passwords.update(passwords)
        if n_random:
            names = [fmt.format(i) for i in range(n_random)]
            cmds = [f"addprinc +requires_preauth -e aes256-ctr-mpc:normal -randkey {u}"
                    for u in names]
            for i in range(0, n_random, 200):
                cmds.append(f"ktadd -norandkey -k {self.users_keytab} "
                            + " ".join(names[i:i + 200]))
            out = self.run(["kadmin.local", "-r", self.realm],
                           input="\n".join(cmds) + "\n", timeout=600)
            if out.count("created.") != n_random:
                raise RealmError(f"expected {n_random} principals, kadmin.local "
                                 f"created {out.count('created.')}:\n{out[-3000:]}")
            if os.path.exists(self.users_keytab):
                os.chmod(self.users_keytab, 0o600)
            self.share_existing(names)
        return self

    def add_user(self, name, pw=None, enctype="aes256-ctr-mpc"):
        """One user with a password (pw, else a random one) and a key of
        enctype in the cluster (or, with clusters=0, in the test module's
        key file); returns the password. With the test module the KDC reads
        its keys at start-up: restart it for a user added while it runs."""
        pw = pw or password()
        self.addprinc(name, pw, enctypes=[enctype])
        if self.clusters:
            self.share_passwords([(name, pw)], enctype=enctype)
        else:
            self.migrate(name, pw, enctype)
        self.passwords[name] = pw
        return pw

    def setup(self, users=()):
        """The krbtgt key into the cluster, an ordinary service (its key
        stays in the KDB), then the users with random passwords. The KDC is
        not started."""
        self.setup_krbtgt()
        self.add_service()
        for u in users:
            self.add_user(u)
        return self

    # ---- clusters=0: krb5's test module holds the keys ---------------------
    def kdb_handle_run(self, *args, expected_code=0):
        """kmpc-kdb-handle on the realm's KDB: (stdout, stderr); RealmError
        unless it exits with expected_code."""
        p = subprocess.run([find_built("kdc-plugin/kmpc-kdb-handle"), "-r", self.realm,
                            *args], capture_output=True, text=True, env=self.env, timeout=60)
        if p.returncode != expected_code:
            raise RealmError(f"kmpc-kdb-handle {args[0]} exited {p.returncode}:\n{p.stderr}")
        return p.stdout, p.stderr

    def migrate(self, princ, pw, enctype="aes256-ctr-mpc"):
        """clusters=0, as an administrator migrates a key: princ's key of
        enctype (made from password pw) is read out (kmpc-kdb-handle
        get-key), checked against the independent string-to-key
        (ctr_mpc_ref.py), put in the test module's key file under a fresh
        key id, and replaced by a handle in the KDB. Returns the key id. No
        key or password is printed."""
        import ctr_mpc_ref
        if self.clusters:
            raise RealmError("migrate() is for clusters=0 (kmpc-admin share otherwise)")
        out, _ = self.kdb_handle_run("get-key", princ, enctype)
        key = out.strip()
        if not re.fullmatch(r"[0-9a-f]{32}|[0-9a-f]{64}", key):
            raise RealmError(f"kmpc-kdb-handle get-key {princ}: not a key")
        ref = ctr_mpc_ref.string_to_key(enctype, pw.encode(), default_salt(princ).encode())
        # Compared as a bool: an error must not print keys.
        if not secrets.compare_digest(key, ref.hex()):
            raise RealmError(f"{princ}: the KDB key is not the reference string-to-key")
        key_id = secrets.token_hex(32)
        with open(self.test_keyfile, "a") as f:
            f.write(f"{key_id} {key}\n")
        self.kdb_handle_run("set", princ, enctype, key_id)
        return key_id

    def journal_lines(self):
        """clusters=0: the test module's journal ("submit JOB usage N ...",
        "done ...") so far."""
        if not os.path.exists(self.test_journal):
            return []
        with open(self.test_journal) as f:
            return [line.strip() for line in f]

    # ---- clients -------------------------------------------------------
    def login(self, name="alice", **kw):
        """kinit as a user added with a password (add_user, add_users)."""
        return self.kinit(name, self.passwords[name], **kw)

    def timed_login(self, name="alice", **kw):
        """login, and how long it took (seconds)."""
        t0 = time.monotonic()
        out = self.login(name, **kw)
        return out, time.monotonic() - t0

    def login_until_ok(self, name="alice", timeout=60, pause=0.5):
        """Log in until it works (the cluster coming back, connections being
        made); RealmError with the last failure after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.login(name, timeout=30)
            except RealmError:
                if time.monotonic() > deadline or not self.kdc_alive():
                    raise
                time.sleep(pause)

    def kdc_log_text(self):
        with open(self.kdc_log) as f:
            return f.read()

    def trace_env(self):
        """The realm's environment with KRB5_TRACE on stdout."""
        return {**self.env, "KRB5_TRACE": "/dev/stdout"}

    # ---- daemons -------------------------------------------------------
    WARMUP = "kmpc/warmup"

    def setup_warmup(self):
        """A random-key principal in the cluster whose keytab lets start()
        make the KDC's first login itself (connections up before anyone
        else logs in)."""
        kt = os.path.join(self.dir, "warmup.keytab")
        self.addprinc(self.WARMUP, enctypes=["aes256-ctr-mpc"])
        self.kadmin_local(f"ktadd -norandkey -k {kt} {self.WARMUP}")
        os.chmod(kt, 0o600)
        self.share_existing([self.WARMUP])

    def warm_up(self, timeout=15):
        """Log the warm-up principal in until it works: the first login
        makes the kdcmpc module's connections (TCP and TLS to the three
        servers), so nobody else's pays for them; retried while the servers
        are still coming up."""
        kt = os.path.join(self.dir, "warmup.keytab")
        if not os.path.exists(kt):
            return
        env = dict(self.env, KRB5CCNAME="FILE:" + os.path.join(self.dir, "warmup.ccache"))
        deadline = time.time() + timeout
        while True:
            try:
                self.run(["kinit", "-k", "-t", kt, self.WARMUP], env=env)
                return
            except RealmError:
                if time.time() > deadline or not self.kdc_alive():
                    raise
                time.sleep(0.3)

    def start(self):
        self.start_kdc(extra_args=("-w", str(self.kdc_workers)) if self.kdc_workers else ())
        self.warm_up()
        self.save_state()
        return self

    def alive(self):
        return self.kdc_alive() and all(cl.alive() for cl in self.clusters)

    def dead_daemons(self):
        """Realm.dead_daemons, and every MPC server that died without being
        stopped (MpcCluster.dead_parties)."""
        return super().dead_daemons() + [
            f"MPC server {i}" + (f" of cluster {n + 1}" if len(self.clusters) > 1 else "")
            for n, cl in enumerate(self.clusters) for i in cl.dead_parties()]

    def logs(self):
        if len(self.clusters) == 1:
            return super().logs() + "\n" + self.cluster.logs()
        return super().logs() + "".join(
            f"\n----- cluster {n + 1} -----\n" + cl.logs()
            for n, cl in enumerate(self.clusters))

    def stop(self):
        """kadmind, the KDC and every MPC server are sent SIGTERM at once and
        waited for together: the stop takes as long as the slowest (a
        process with a /metrics exposer takes 1-2 s), not the sum."""
        procs = [p for p in (self.kadmind_proc, self.kdc_proc)
                 if p is not None and p.poll() is None]
        for p in procs:
            p.terminate()
        pids = []
        for cl in self.clusters:
            cl._stopped.update(range(3))
            pids += [cl.pid(i) for i in range(3)]
        stop_pids(pids)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.kadmind_proc = self.kdc_proc = None
        for cl in self.clusters:
            cl.stop()  # nothing left running: its pid files
        self.stop_ldap()

    def save_state(self):
        c = self.cluster
        st = {"realm": self.realm, "module": self.module, "servers": c and c.servers,
              "mpc_dir": c and c.dir, "kdc_port": self.kdc_port,
              "kdc_pid": self.kdc_proc.pid if self.kdc_proc else None,
              "admin_conf": self.admin_conf,
              "metrics": {"kdc": self.kdc_metrics_url,
                          "servers": [c.metrics_url(i) for i in range(3)] if c else []},
              "env": {k: self.env[k] for k in ("KRB5_CONFIG", "KRB5_KDC_PROFILE",
                                                "KRB5CCNAME", "KMPC_ADMIN_CONFIG")}
              if self.env else {}}
        with open(os.path.join(self.dir, STATE), "w") as f:
            json.dump(st, f, indent=1)


def ready(r, users=None, n_random=0, service=SERVICE):
    """r, a created KmpcRealm, made ready for logins: the krbtgt key and the
    users (add_users: {name: password}, n_random random-key users) in its
    cluster(s), an ordinary service, the KDC started and warmed up."""
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_service(service)
    r.add_users(users or {}, n_random=n_random)
    return r.start()


def bring_up(workdir, users=None, n_random=0, **kw):
    """The realm everyone uses: cluster, realm, krbtgt and users shared, a
    service principal, the KDC running. Stops what it started on failure."""
    r = KmpcRealm(workdir, **kw)
    try:
        r.create()
        ready(r, users, n_random=n_random)
    except BaseException:
        r.stop()
        raise
    return r


STORM_ENCTYPE = "aes256-ctr-mpc"


def storm_realm(make, users, tmp, **kw):
    """The realm of the tests that storm it: make(module="real", **kw)
    (kmpc_factory, or a function returning a realm made already) with the
    krbtgt and `users` password users user0.. in the cluster(s), a service,
    the KDC running; and tmp/storm.keytab for kmpc-storm, holding the keys
    the users' clients derive (kvno 2: sharing took the next kvno).
    Returns (realm, {user: password}, keytab).

    A storm logs each user in many times at once (rate / users per second,
    each for as long as the loaded KDC takes), and the module holds each
    user key to gate_failures pre-authentications failed or in flight
    (kdc-plugin/src/gate_failures.h): its realm runs gate_failures = 0, as
    its servers run no per-Run gate bound (cluster.py); test_gate_budget
    and test_as_plan_review test the bound."""
    from kmpc_harness import storm_users
    kw["module_options"] = {"gate_failures": "0", **(kw.get("module_options") or {})}
    pws = {f"user{i}": "pw-" + secrets.token_hex(8) for i in range(users)}
    r = ready(make(module="real", **kw), pws)
    kt = os.path.join(str(tmp), "storm.keytab")
    storm_users.client_keytab_from_passwords(
        r.env, {f"{u}@{r.realm}": pw for u, pw in pws.items()}, [STORM_ENCTYPE], kt, kvno=2)
    return r, pws, kt
