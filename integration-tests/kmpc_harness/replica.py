#!/usr/bin/env python3
"""A kmpc realm with a primary KDC and replica KDCs on 127.0.0.1.

The primary is a KmpcRealm with kmpc's key dealer loaded
(every new key of a protected principal goes to the MPC cluster, the KDB
gets a handle) and kadmind serving kadmin, kpasswd and iprop. Each replica
is a kmpc_realm.Realm of its own directory: its own KDB (a copy of the
primary's, kept current by kpropd), the primary's master key stash, its own
krb5kdc and its own kdcmpc module instance with its own client certificate.

Propagation is MIT's own (kadmin/admin_server.html "Configuring replica
KDCs", "Incremental database propagation"):
  - full: `kdb5_util dump` on the primary, `kprop` to the replica's kpropd,
    which loads the dump with `kdb5_util load`;
  - incremental: kpropd in iprop mode (iprop_enable = true in the replica's
    kdc.conf) polls kadmind's iprop service as kiprop/HOST and replays the
    primary's update log; a replica too far behind gets a full resync
    (kadmind dumps and runs kprop itself).
Both copy the KDB's key data as it is, encrypted under the master key:
handles stay handles, so a replica holds no key the primary does not hold
either. The replica's module finds the shares by the handles' key ids in the
same cluster.

Certificates: the MPC servers authenticate KDCs by TLS client certificate
(CN kmpc-kdc). Every KDC here gets its own (DIR/mpc/certs/kdc-<name>.pem),
and the servers pin exactly those (--keyops_clients=kmpc-kdc,sha256:...),
so each can be revoked on its own (deploy/gen-certs.sh --revoke).

Host names: kprop authenticates as host/<local host name> and kpropd as
the same principal (both take it from gethostname(), kprop/kprop_util.c);
kadmind hands a full resync to `kprop <host of the kiprop principal>`. All of
them are on this machine, so the local host name must resolve to loopback
only; check_loopback_hostname() refuses to run otherwise.

CLI:  python3 -m kmpc_harness.replica start DIR [--replicas N]   (prints the client krb5.conf)
      python3 -m kmpc_harness.replica stop DIR
"""

import argparse
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time

if __name__ == "__main__" and not __package__:
    # Run as a script: the package's parent on the path (same as python3 -m).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from kmpc_harness.kmpc_realm import (TCP_LISTEN_BACKLOG, TCP_MAX_CONNECTIONS,  # noqa: E402
                                     KmpcRealm)
from kmpc_harness import realm as kmpc_realm  # noqa: E402
from kmpc_harness.realm import RealmError, binpath, libdefaults  # noqa: E402

ADMIN = "root/admin"
PRIMARY = "primary"


def local_hostname():
    """The name kprop/kpropd build host/<name> from: gethostname(),
    lower-cased (dns_canonicalize_hostname = false below)."""
    return socket.gethostname().lower()


def check_loopback_hostname(name=None):
    """The local host name must resolve to loopback addresses only: kprop
    connects to it (kadmind's full resync) and nothing may leave loopback."""
    name = name or local_hostname()
    try:
        addrs = {a[4][0] for a in socket.getaddrinfo(name, None)}
    except socket.gaierror as e:
        raise RealmError(f"the host name {name!r} does not resolve ({e}); "
                         "add it to /etc/hosts as 127.0.0.1") from None
    bad = sorted(a for a in addrs if not ipaddress.ip_address(a).is_loopback)
    if bad:
        raise RealmError(f"the host name {name!r} resolves to {bad}, not only "
                         "loopback; kprop would leave 127.0.0.1")
    return name


# libdefaults for every krb5.conf here: service principal names are taken
# as given (no DNS), and an acceptor (kpropd) accepts any host/<name> key of
# its keytab.
KRB5_LIBDEFAULTS = ("    dns_canonicalize_hostname = false\n"
                    "    ignore_acceptor_hostname = true\n")


def fingerprint(pem):
    """SHA-256 fingerprint of a certificate, as --keyops_clients pins it."""
    p = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256",
                        "-in", pem], capture_output=True, text=True, timeout=30,
                       check=True)
    return p.stdout.strip().split("=", 1)[1]


def gen_certs(certs, *args):
    p = subprocess.run(["bash", kmpc_cluster.GEN_CERTS, certs, *args],
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RealmError(f"gen-certs.sh {' '.join(args)} failed:\n{p.stderr}")
    return p.stdout


class Daemon:
    """A daemon started in a session of its own, output to a log file;
    stopped by its process group (kpropd in iprop mode forks a listener)."""

    def __init__(self, argv, env, log):
        self.log = log
        self.offset = os.path.getsize(log) if os.path.exists(log) else 0
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, env=env, stdout=out,
                                         stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def text(self, since=None):
        with open(self.log, errors="replace") as f:
            f.seek(self.offset if since is None else since)
            return f.read()

    def size(self):
        return os.path.getsize(self.log)

    def wait_for(self, what, since=None, timeout=30):
        """Wait until the log (from offset since) holds what; its text."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            t = self.text(since)
            if what in t:
                return t
            if self.proc.poll() is not None:
                raise RealmError(f"{self.log}: exited {self.proc.returncode}:\n{t[-4000:]}")
            time.sleep(0.05)
        raise RealmError(f"{what!r} not in {self.log} after {timeout}s:\n"
                         + self.text(since)[-4000:])

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self):
        """SIGTERM to the whole group (a forked child may outlive the
        leader; a group's id is not reused while it has members), then
        SIGKILL what is left after 10 s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                continue
            time.sleep(0.1)
        self.proc.wait()


class ReplicaKdc(kmpc_realm.Realm):
    """A replica KDC of primary (a KmpcRealm): its own directory, KDB,
    krb5kdc, kdcmpc module instance (client certificate kdc-<name>) and
    kpropd; the primary's master key stash."""

    def __init__(self, primary, name, kprop_port, kdc_conf_extra=""):
        """kdc_conf_extra: text appended to the replica's kdc.conf (whole
        sections, e.g. storm_bench.dbmodules_block)."""
        super().__init__(os.path.join(os.path.dirname(primary.dir), name),
                         enctypes=primary.enctypes,
                         realm=primary.realm, krb5_conf_extra=KRB5_LIBDEFAULTS,
                         kdc_conf_extra=kdc_conf_extra)
        self.primary = primary
        self.name = name
        self.kprop_port = kprop_port
        self.kpropd = None
        self.iprop = False
        # Long by default: tests make kpropd poll with SIGUSR1, when they
        # choose (kmpc_replica.py start --iprop sets a few seconds).
        self.poll = "10m"
        self.cert = os.path.join(primary.cluster.certs, f"kdc-{name}")
        self.kpropd_acl = os.path.join(self.dir, "kpropd.acl")
        self.kpropd_log = os.path.join(self.dir, "kpropd.log")
        self.kpropd_conf = os.path.join(self.dir, "kpropd-krb5.conf")
        self.incoming = os.path.join(self.dir, "from_primary")

    def create(self):
        """Directory, configuration, the primary's stash; no KDB yet (the
        first propagation brings it)."""
        os.makedirs(self.dir, exist_ok=True)
        self.kdc_port = kmpc_realm.free_ports(1)[0]
        shutil.copyfile(self.primary.stash, os.path.join(self.dir, "stash"))
        os.chmod(os.path.join(self.dir, "stash"), 0o600)
        with open(self.kpropd_acl, "w") as f:
            f.write(f"host/{local_hostname()}@{self.realm}\n")
        self.write_conf()
        self.env = self.make_env()
        return self

    def write_conf(self):
        p = self.primary
        # The replica's own krb5.conf names only its KDC (tools run with
        # self.env reach this KDC and no other); kpropd's names the primary's
        # too, so that it gets its kiprop credentials while this KDC is not
        # up yet (a new replica's first sync).
        with open(self.krb5_conf, "w") as f:
            f.write(client_krb5_conf(p, [self]))
        with open(self.kpropd_conf, "w") as f:
            f.write(client_krb5_conf(p, [p, self]))
        module = kmpc_cluster.kdcmpc_conf(
            kmpc_cluster.REAL_MODULE_NAME, kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so"),
            {"servers": p.cluster.servers, "ca": f"{p.cluster.certs}/ca.pem",
             "cert": self.cert + ".pem", "key": self.cert + ".key"})
        supported = " ".join(f"{e}:normal" for e in self.enctypes)
        # iprop_port: where kpropd finds the primary's kadmind (iprop mode).
        # iprop_replica_poll: how often kpropd asks for updates; SIGUSR1
        # also makes it ask at once (kprop/kpropd.c usr1_handler).
        iprop = (f"        iprop_enable = true\n        iprop_port = {p.iprop_port}\n"
                 f"        iprop_replica_poll = {self.poll}\n"
                 f"        iprop_logfile = {self.dir}/principal.ulog\n"
                 if self.iprop else "")
        with open(self.kdc_conf, "w") as f:
            f.write(f"""[kdcdefaults]
    kdc_listen = 127.0.0.1:{self.kdc_port}
    kdc_tcp_listen = 127.0.0.1:{self.kdc_port}
    kdc_udp_recv_buffer = {4 << 20}
    kdc_tcp_max_connections = {TCP_MAX_CONNECTIONS}
    kdc_tcp_listen_backlog = {TCP_LISTEN_BACKLOG}
{module}
[realms]
    {self.realm} = {{
        database_name = {self.dir}/principal
        key_stash_file = {self.dir}/stash
        master_key_type = aes256-cts-hmac-sha1-96
        supported_enctypes = {supported}
        max_life = 10h
        max_renewable_life = 7d
{iprop}    }}
[logging]
    kdc = FILE:{self.kdc_log}
    default = FILE:{self.dir}/krb5lib.log
{self.kdc_conf_extra}""")

    def start(self):
        """krb5kdc, then the primary's warm-up login through it (its module's
        connections made before anyone else logs in)."""
        self.start_kdc()
        kt = os.path.join(self.primary.dir, "warmup.keytab")
        if not os.path.exists(kt):
            return self
        env = dict(self.env, KRB5CCNAME="FILE:" + os.path.join(self.dir, "warmup.ccache"))
        deadline = time.time() + 15
        while True:
            try:
                self.run(["kinit", "-k", "-t", kt, self.primary.WARMUP], env=env)
                return self
            except RealmError:
                if time.time() > deadline or not self.kdc_alive():
                    raise
                time.sleep(0.3)

    # ---- kpropd --------------------------------------------------------
    def start_kpropd(self, iprop=False, timeout=30):
        """kpropd listening on kprop_port (full dumps from kprop); with iprop,
        the replica's kdc.conf enables iprop and kpropd polls the primary's
        kadmind for updates (a full resync first if it has no ulog)."""
        if self.kpropd is not None:
            raise RealmError("kpropd already running")
        if iprop and self is not self.primary.replicas_iprop:
            raise RealmError(f"{self.name}: on one host only the first replica can use "
                             "iprop (kadmind sends full resyncs to one kprop port)")
        self.iprop = iprop
        self.write_conf()
        argv = [binpath("kpropd"), "-D", "-d", "-r", self.realm,
                "-P", str(self.kprop_port), "-f", self.incoming,
                "-p", binpath("kdb5_util"), "-a", self.kpropd_acl,
                "-s", self.keytab]
        if iprop:
            # kpropd authenticates to kiprop/<admin server> (kadm5's
            # kiprop service name): the primary's host name, which the
            # kiprop principal of the KDB carries.
            argv += ["-A", local_hostname()]
        self.kpropd = Daemon(argv, dict(self.env, KRB5_CONFIG=self.kpropd_conf),
                             self.kpropd_log)
        self.kpropd.wait_for("ready", timeout=timeout)
        return self.kpropd

    def stop_kpropd(self):
        if self.kpropd is not None:
            self.kpropd.stop()
            self.kpropd = None

    def wait_full_load(self, since, timeout=60):
        """Wait for kpropd to have loaded a full dump received after since."""
        return self.kpropd.wait_for("load process for full propagation completed",
                                    since, timeout)

    def iprop_poll(self, timeout=60):
        """Make kpropd poll kadmind now (SIGUSR1) and wait for the result
        (iprop_wait)."""
        since = self.kpropd.size()
        self.kpropd.signal(signal.SIGUSR1)
        return self.iprop_wait(since, timeout)

    def iprop_wait(self, since, timeout=60):
        """Wait for kpropd's next iprop result after log offset since:
        'incremental' (updates replayed), 'synchronized' (nothing to do) or
        'full' (a full resync was loaded first); then until it sleeps again,
        so that the next SIGUSR1 interrupts the sleep rather than being
        lost (as krb5's tests/t_iprop.py). Returns (kind, log text)."""
        deadline = time.time() + timeout
        while True:
            t = self.kpropd.text(since)
            m = re.search(r"Incremental updates:|KDC is synchronized", t)
            if m and "Waiting for" in t[m.end():]:
                break
            if time.time() > deadline or not self.kpropd.alive():
                raise RealmError(f"kpropd did not sync within {timeout}s:\n{t[-4000:]}")
            time.sleep(0.05)
        if "load process for full propagation completed" in t[:m.start()]:
            return "full", t
        return ("incremental" if m.group(0).startswith("Incremental")
                else "synchronized"), t

    # ---- what the KDB holds ----------------------------------------------
    def kdb_keys(self, princ):
        return kdb_keys(self, princ)

    def has_kdb(self):
        return os.path.exists(os.path.join(self.dir, "principal"))

    def stop(self):
        self.stop_kpropd()
        self.stop_kdc()


def kdb_keys(realm, princ):
    """What realm's KDB holds for princ, read with the master key (see
    KmpcRealm.kdb_keys): [(kvno, enctype, "handle"|"key", key id | SHA-256)]."""
    p = subprocess.run([kmpc_cluster.find_built("kdc-plugin/kmpc-kdb-handle"),
                        "-r", realm.realm, "keys", princ], capture_output=True,
                       text=True, env=realm.env, timeout=60)
    if p.returncode != 0:
        raise RealmError(f"kmpc-kdb-handle keys {princ} ({realm.dir}): {p.stderr}")
    return [tuple(line.split()) for line in p.stdout.splitlines()]


def client_krb5_conf(primary, kdcs):
    """A krb5.conf naming the KDCs of kdcs (the primary or replicas, in
    order) and the primary's kadmind as admin and kpasswd server: clients
    fail over between the kdc lines (MIT tries them in order,
    krb5/src/lib/krb5/os/sendto_kdc.c)."""
    ports = [k.kdc_port for k in kdcs]
    ets = " ".join(primary.enctypes + primary.session_enctypes)
    lines = "".join(f"        kdc = 127.0.0.1:{port}\n" for port in ports)
    return f"""{libdefaults(primary.realm, ets, KRB5_LIBDEFAULTS)}
[realms]
    {primary.realm} = {{
{lines}        admin_server = 127.0.0.1:{primary.kadmin_port}
        kpasswd_server = 127.0.0.1:{primary.kpasswd_port}
    }}
"""


class ReplicaSet:
    """A primary KmpcRealm (key dealer, kadmind with iprop) and replicas,
    one MPC cluster; every KDC with a client certificate of its own, pinned
    by the servers. create() starts the cluster and sets up the primary's
    KDB; start() starts the primary KDC and kadmind; replicas get their KDB
    by the first propagation (propagate_full, or kpropd in iprop mode)."""

    def __init__(self, workdir, replicas=1, admin_password=None, **realm_kw):
        check_loopback_hostname()
        self.dir = os.path.abspath(workdir)
        self.host = local_hostname()
        # One kprop port per replica (all kpropd listen on this host);
        # kadmind's full resyncs go to the first replica's (kadmind -k
        # names one port, as every replica has on its own host).
        ports = kmpc_realm.free_ports(1 + replicas)
        self.iprop_port, self.kprop_ports = ports[0], ports[1:]
        self.kprop_port = self.kprop_ports[0]
        self.names = [PRIMARY] + [f"replica{i + 1}" for i in range(replicas)]
        certs = os.path.join(self.dir, PRIMARY, "mpc", "certs")
        realm_extra = (f"        iprop_enable = true\n"
                       f"        iprop_port = {self.iprop_port}\n"
                       f"        iprop_listen = 127.0.0.1:{self.iprop_port}\n")
        self.primary = KmpcRealm(
            os.path.join(self.dir, PRIMARY), module="real", dealer=False,
            realm_extra=realm_extra + realm_kw.pop("realm_extra", ""),
            krb5_conf_extra=KRB5_LIBDEFAULTS,
            module_options={"cert": f"{certs}/kdc-{PRIMARY}.pem",
                            "key": f"{certs}/kdc-{PRIMARY}.key",
                            **realm_kw.pop("module_options", {})}, **realm_kw)
        self.primary.stash = os.path.join(self.primary.dir, "stash")
        self.primary.iprop_port = self.iprop_port
        self.replicas = [ReplicaKdc(self.primary, n, port,
                                    realm_kw.get("kdc_conf_extra", ""))
                         for n, port in zip(self.names[1:], self.kprop_ports)]
        self.primary.replicas_iprop = self.replicas[0] if self.replicas else None
        # The administrator keeps an ordinary key, so kadmin works while the
        # cluster is down; random, never printed.
        self.admin_password = admin_password or secrets.token_urlsafe(18)
        self.kadmind_dump = os.path.join(self.primary.dir, "iprop-dump")

    @property
    def kdcs(self):
        return [self.primary] + self.replicas

    def cert(self, name):
        return os.path.join(self.primary.cluster.certs, f"kdc-{name}.pem")

    def make_certs(self):
        """The cluster's CA and certificates, plus kdc-<name>.{pem,key}
        (CN kmpc-kdc) for every KDC; the servers allow KeyOps to exactly
        those (CN and pinned fingerprint), so the shared kdc.pem of
        gen-certs.sh is refused."""
        certs = self.primary.cluster.certs
        gen_certs(certs)
        for n in self.names:
            gen_certs(certs, "--client", f"kdc-{n}", "kmpc-kdc")
        pins = ",".join("sha256:" + fingerprint(self.cert(n)) for n in self.names)
        cl = self.primary.cluster
        cl.server_flags = " ".join(f for f in (cl.server_flags,
                                              f"--keyops_clients=kmpc-kdc,{pins}") if f)

    def create(self, users=0):
        """The cluster and the primary's KDB: the krbtgt key made in the
        cluster (no KDB ever held it), an ordinary service, users random-key
        load-test users user0.. (keys in the primary's users.keytab, shared
        with --from-existing before the dealer is on), a warm-up principal;
        then the key dealer on for every later change; the administrator and
        kprop's/kpropd's principals with ordinary keys; the replicas'
        directories."""
        p = self.primary
        os.makedirs(self.dir, exist_ok=True)
        self.make_certs()
        p.create()
        p.setup_krbtgt()
        p.setup_warmup()
        p.add_service()
        if users:
            p.add_users(n_random=users)
        p.enable_dealer()
        p.kadmin_local("addprinc -e aes256-cts-hmac-sha1-96:normal "
                       f"-pw {self.admin_password} {ADMIN}")
        # kprop's and kpropd's identity host/<host> and kpropd's iprop
        # client kiprop/<host>: ordinary keys (not protected), in the
        # primary's keytab (kprop, also when kadmind runs it) and in each
        # replica's (kpropd).
        svc = [f"host/{self.host}", f"kiprop/{self.host}"]
        for s in svc:
            p.addprinc(s, enctypes=["aes256-cts-hmac-sha1-96"], flags="")
        p.kadmin_local(f"ktadd -norandkey -k {p.keytab} {' '.join(svc)}")
        for r in self.replicas:
            r.create()
            p.kadmin_local(f"ktadd -norandkey -k {r.keytab} {' '.join(svc)}")
            os.chmod(r.keytab, 0o600)
        os.chmod(p.keytab, 0o600)
        return self

    def start(self):
        """The primary's KDC and kadmind (kadmin, kpasswd, iprop; kiprop
        may pull updates, and a full resync dumps with kdb5_util and pushes
        with kprop to the replica's kpropd port)."""
        p = self.primary
        p.start()
        p.start_kadmind(acl="*/admin@{realm} *\nkiprop/%s@{realm} p\n" % self.host,
                        extra_args=["-p", binpath("kdb5_util"), "-K", binpath("kprop"),
                                    "-k", str(self.kprop_port), "-F", self.kadmind_dump])
        return self

    def propagate_full(self, replica, timeout=60):
        """kdb5_util dump on the primary, kprop to replica's kpropd (running,
        not in iprop mode), and wait until kpropd has loaded it."""
        p = self.primary
        dump = os.path.join(p.dir, "replica-dump")
        since = replica.kpropd.size()
        p.run(["kdb5_util", "-r", p.realm, "dump", dump])
        out = p.run(["kprop", "-r", p.realm, "-f", dump, "-P", str(replica.kprop_port),
                     "-s", p.keytab, self.host], timeout=timeout)
        if "SUCCEEDED" not in out:
            raise RealmError(f"kprop did not succeed:\n{out}")
        return replica.wait_full_load(since, timeout)

    def client_conf(self, path, kdcs):
        """Write a client krb5.conf listing kdcs (KmpcRealm or ReplicaKdc
        objects, in order) and return an environment using it."""
        with open(path, "w") as f:
            f.write(client_krb5_conf(self.primary, [k for k in kdcs]))
        env = dict(self.primary.env, KRB5_CONFIG=path,
                   KRB5CCNAME="FILE:" + path + ".ccache")
        return env

    def change_password(self, princ, old, new, how="kpasswd"):
        """Through kadmind: the kpasswd protocol (princ's own old password)
        or the kadm5 RPC as the administrator."""
        p = self.primary
        if how == "kpasswd":
            return p.run(["kpasswd", princ], input=f"{old}\n{new}\n{new}\n")
        if how == "kadmin":
            return p.run(["kadmin", "-r", p.realm, "-p", ADMIN, "-w", self.admin_password,
                          "-q", f"cpw -pw {new} {princ}"])
        raise RealmError(f"unknown way to change a password: {how!r}")

    def add_principal(self, princ, password):
        """A protected principal (MPC enctypes) through kadmind's kadm5 RPC."""
        p = self.primary
        out = p.run(["kadmin", "-r", p.realm, "-p", ADMIN, "-w", self.admin_password,
                     "-q", f"addprinc -pw {password} +requires_preauth {princ}"])
        if "created" not in out:
            raise RealmError(f"addprinc {princ} through kadmind failed:\n{out}")
        return out

    def logs(self):
        return self.primary.logs() + "".join(
            f"\n===== {r.name} =====\n" + r.logs() for r in self.replicas)

    def stop(self):
        for r in self.replicas:
            r.stop()
        self.primary.stop()


# ---- CLI -------------------------------------------------------------------

def stop_dir(workdir):
    """Stop what a CLI start left running, by the pid files it wrote."""
    for name in os.listdir(workdir) if os.path.isdir(workdir) else []:
        sub = os.path.join(workdir, name)
        pidf = os.path.join(sub, "kpropd.pid")
        if os.path.exists(pidf):
            with open(pidf) as f:
                pgid = int(f.read().strip() or 0)
            try:
                if pgid > 0:
                    os.killpg(pgid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            os.unlink(pidf)
        if name == PRIMARY:
            kmpc_cluster.stop_dir(sub)
        elif os.path.isdir(sub):
            kmpc_realm.stop_dir(sub)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("dir")
    s.add_argument("--replicas", type=int, default=1)
    s.add_argument("--iprop", action="store_true",
                   help="the first replica's kpropd in iprop mode, polling every "
                        "2 s (the others, and without it all, get one full kprop)")
    sub.add_parser("stop").add_argument("dir")
    args = ap.parse_args()
    d = os.path.abspath(args.dir)
    if args.cmd == "stop":
        stop_dir(d)
        return 0
    if args.replicas < 1:
        ap.error("--replicas must be at least 1")
    if os.path.exists(d):
        stop_dir(d)
        shutil.rmtree(d)
    rs = ReplicaSet(d, replicas=args.replicas)
    try:
        rs.create().start()
        for n, r in enumerate(rs.replicas):
            r.poll = "2s"
            iprop = args.iprop and n == 0
            r.start_kpropd(iprop=iprop)
            if iprop:
                r.iprop_poll()
            else:
                rs.propagate_full(r)
            r.start()
            with open(os.path.join(r.dir, "kpropd.pid"), "w") as f:
                f.write(str(r.kpropd.proc.pid))
    except BaseException:
        rs.stop()
        raise
    # Leave everything running, detached from this process.
    rs.primary.kdc_proc = None
    for r in rs.replicas:
        r.kdc_proc = None
    conf = os.path.join(d, "krb5.conf")
    rs.client_conf(conf, rs.kdcs)
    print(f"primary KDC 127.0.0.1:{rs.primary.kdc_port}, replicas "
          + ", ".join(f"127.0.0.1:{r.kdc_port}" for r in rs.replicas)
          + f"; MPC servers {rs.primary.cluster.servers}")
    print(f"export KRB5_CONFIG={conf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
