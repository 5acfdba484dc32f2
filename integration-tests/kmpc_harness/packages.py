#!/usr/bin/env python3
"""kmpc's Debian packages on four emulated hosts, the way
deploy/THREE-HOSTS.md installs them: a clean Debian root (debootstrap
minbase of the host's release, or of KMPC_PKG_DIST's) with the packages installed by dpkg, and network
namespaces joined by a bridge as the hosts (kmpc_harness/netns.py's
layout, on 10.77.9.0/24, which exists only inside these namespaces):

    ns <tag>-kdc   10.77.9.1    krb5kdc (kmpc-krb5kdc.service), kmpc-admin
    ns <tag>-p<i>  10.77.9.1<i> kmpc-mpc-server@<i>.service
    ns <tag>-cl    10.77.9.100  Debian's unmodified clients (the machine's)
    ns <tag>-kdc2  10.77.9.2    a replica KDC (test_upgrades.py: REPLICA_HOSTS)

The four hosts share the one root (its /etc/kmpc holds every host's files,
each readable only by its own service user). Daemons run from the
ExecStart=, User= and Environment= lines of the units the packages
installed, chrooted into the root (no systemd runs here); the KDC host's
namespace lets unprivileged processes bind port 88, standing in for the
unit's AmbientCapabilities=CAP_NET_BIND_SERVICE.

A host may have a name of its own (Lan's names: a UTS namespace per
command, as kprop and kpropd name themselves host/<gethostname()>), and a
deployment's KDC may be the replica's (PackagedDeployment's host) with its
kpropd and the primary's kadmind. Used by integration-tests/test_packages.py
and test_upgrades.py.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess
import time

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import netns
from kmpc_harness import pkinit
from kmpc_harness.deploy_tool import kmpc_deploy
from kmpc_harness.kmpc_realm import KADMIND_KEYS

MIRROR = "http://deb.debian.org/debian"


def _host_suite():
    with open("/etc/os-release") as f:
        for line in f:
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return "bookworm"


HOST_SUITE = _host_suite()
# The release the packages are for (make test-packages DIST=...): the
# host's unless KMPC_PKG_DIST names another.
SUITE = os.environ.get("KMPC_PKG_DIST") or HOST_SUITE
RELEASE = {"bookworm": "Debian 12", "trixie": "Debian 13"}.get(SUITE, SUITE)
# Debian's krb5 (replaced by the kmpc build, as on a real host) and the
# run-time libraries of kmpc's packages, so that installing the packages
# needs no network: the cached tarball holds them all (root_tarball adds
# what the built packages depend on). heimdal-clients: Heimdal's kinit
# and kvno for the client host of a release other than the host's.
INCLUDE = ("adduser,krb5-kdc,krb5-user,krb5-admin-server,libkrb5-3,liblmdb0,libsodium23,"
           "libverto1,libverto-libev1" if SUITE == "bookworm" else
           "adduser,krb5-kdc,krb5-user,krb5-admin-server,libkrb5-3,liblmdb0,libsodium23,"
           "heimdal-clients,libre2-11")
# (libre2-11: trixie's libgrpc29t64 depends on the virtual
# libre2-11-absl20240722, which debootstrap's resolver cannot follow.)
SUBNET = "10.77.9"
HOSTS = {"kdc": f"{SUBNET}.1", "p0": f"{SUBNET}.11", "p1": f"{SUBNET}.12",
         "p2": f"{SUBNET}.13", "cl": f"{SUBNET}.100"}
# The same with a replica KDC host.
REPLICA_HOSTS = {**HOSTS, "kdc2": f"{SUBNET}.2"}
NS_PREFIX = "kmpcpkg"
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
ARCH = subprocess.run(["dpkg", "--print-architecture"], capture_output=True,
                      text=True).stdout.strip()


def deb_version(d, pkg, pattern="*"):
    """The version of the one package pkg (this architecture's) in d whose
    version matches pattern."""
    found = sorted(glob.glob(os.path.join(d, f"{pkg}_{pattern}_{ARCH}.deb")))
    assert len(found) == 1, f"{pkg} in {d}: {found}"
    return os.path.basename(found[0]).split("_")[1]


class PackageError(Exception):
    pass


def sh(argv, check=True, timeout=300, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise PackageError(f"{shlex.join(argv)} failed ({p.returncode}):\n"
                           f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def runtime_depends(debs):
    """The Debian packages debs depend on (first alternatives, versions
    dropped), without the krb5 packages' own names and the "-kmpc" names
    only the kmpc krb5 build provides."""
    own = {sh(["dpkg-deb", "-f", d, "Package"]).stdout.strip() for d in debs}
    names = set()
    for d in debs:
        dep = sh(["dpkg-deb", "-f", d, "Depends"]).stdout
        for rel in filter(None, (r.strip() for r in dep.split(","))):
            name = re.split(r"[\s(:]", rel.split("|")[0].strip())[0]
            if name and name not in own and not name.endswith("-kmpc") and "$" not in name:
                names.add(name)
    return sorted(names)


def include_for(debs):
    """INCLUDE plus what the packages to be installed need."""
    extra = [n for n in runtime_depends(debs) if n not in INCLUDE.split(",")]
    return ",".join([INCLUDE, *extra])


def root_tarball(cache_dir, include=None):
    """debootstrap's download of SUITE minbase plus include (default
    INCLUDE), made once from Debian's mirror and kept in cache_dir (make
    deb's build/deb/cache), one tarball per package list."""
    include = include or INCLUDE
    import hashlib
    tag = hashlib.sha256(include.encode()).hexdigest()[:10]
    tgz = os.path.join(cache_dir, f"{SUITE}-minbase-{tag}.tgz")
    if not os.path.exists(tgz):
        os.makedirs(cache_dir, exist_ok=True)
        tmp = os.path.join(cache_dir, "debootstrap-tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        sh(["debootstrap", "--variant=minbase", f"--include={include}",
            f"--make-tarball={tgz}.part", SUITE, tmp, MIRROR], timeout=1200)
        shutil.rmtree(tmp, ignore_errors=True)
        with open(tgz + ".include", "w") as f:
            f.write(include)
        os.rename(tgz + ".part", tgz)
    return tgz


ROOT_MARK = "kmpc-pkgroot-"


def unmount_stale():
    """Unmount the /proc of roots whose run was killed (their directory
    name holds the dead run's PID), so that nothing ever deletes a tree
    with a live /proc inside."""
    with open("/proc/mounts") as f:
        points = [line.split()[1] for line in f]
    for point in points:
        m = re.search(rf"/{ROOT_MARK}(\d+)[a-z]*/proc$", point)
        if m and not kmpc_cluster.pid_alive(int(m.group(1))):
            sh(["umount", "-l", point], check=False)


class DebianRoot:
    """A clean Debian root of SUITE made from the cached tarball (no
    network), in parent/kmpc-pkgroot-<pid><tag>."""

    def __init__(self, parent, tarball, tag=""):
        unmount_stale()
        self.path = path = os.path.join(parent, f"{ROOT_MARK}{os.getpid()}{tag}")
        include = INCLUDE
        if os.path.exists(tarball + ".include"):
            with open(tarball + ".include") as f:
                include = f.read().strip()
        sh(["debootstrap", "--variant=minbase", f"--include={include}",
            f"--unpack-tarball={tarball}", SUITE, path, MIRROR], timeout=900)
        # Packages' maintainer scripts must not start daemons here
        # (invoke-rc.d's policy layer, Debian Policy 9.3.3.1).
        policy = os.path.join(path, "usr/sbin/policy-rc.d")
        with open(policy, "w") as f:
            f.write("#!/bin/sh\nexit 101\n")
        os.chmod(policy, 0o755)
        sh(["mount", "-t", "proc", "proc", os.path.join(path, "proc")])

    def p(self, rel):
        return os.path.join(self.path, rel.lstrip("/"))

    def run(self, argv, env=None, user=None, prefix=(), input=None, check=True):
        ids = []
        if user:
            uid, gid = self.ids(user)
            ids = [f"--userspec={uid}:{gid}", f"--groups={gid}"]
        full_env = {"PATH": PATH, "LANG": "C.UTF-8", **(env or {})}
        return sh([*prefix, "chroot", *ids, self.path, *argv], check=check, env=full_env,
                  input=input)

    def ids(self, user):
        with open(self.p("/etc/passwd")) as f:
            for line in f:
                fields = line.split(":")
                if fields[0] == user:
                    return int(fields[2]), int(fields[3])
        raise PackageError(f"no user {user} in the root (did the package's postinst run?)")

    def _stage_debs(self, debs):
        """The packages copied into the root's /var/cache/kmpc-test-debs
        (emptied first); their paths inside the root."""
        d = self.p("/var/cache/kmpc-test-debs")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for deb in debs:
            shutil.copy(deb, d)
        return [f"/var/cache/kmpc-test-debs/{os.path.basename(x)}" for x in debs]

    def install(self, debs):
        """dpkg -i the packages in one transaction, as an administrator would."""
        names = self._stage_debs(debs)
        # --auto-deconfigure, as apt passes it: 1.21's libkadm5srv-mit12 and
        # libkadm5clnt-mit12 Break Debian 12's krb5-kdc, krb5-admin-server
        # and krb5-user (<< 1.21), which this same transaction upgrades.
        self.run(["dpkg", "-i", "--auto-deconfigure", *names],
                 env={"DEBIAN_FRONTEND": "noninteractive"})

    def apt_install(self, debs):
        """apt-get install ./<package>.deb... as the admin guide upgrades
        (no network here: every dependency must be installed or among
        debs; Recommends left out, as they would come from a mirror)."""
        names = self._stage_debs(debs)
        return self.run(["apt-get", "install", "-y", "--no-install-recommends",
                         "-o", "Dpkg::Options::=--force-confold", *names],
                        env={"DEBIAN_FRONTEND": "noninteractive"})

    def sha256s(self, *dirs):
        """{path: sha256} of every file under dirs (the root's paths):
        what an upgrade must leave as it is."""
        import hashlib
        out = {}
        for d in dirs:
            for top, _, files in os.walk(self.p(d)):
                for name in files:
                    path = os.path.join(top, name)
                    if os.path.islink(path):
                        continue
                    with open(path, "rb") as f:
                        out[os.path.relpath(path, self.path)] = hashlib.sha256(f.read()).hexdigest()
        return out

    def version(self, pkg):
        return self.run(["dpkg-query", "-W", "-f=${Version}", pkg]).stdout.strip()

    def installed(self):
        """The names of the packages installed in the root."""
        have = self.run(["dpkg-query", "-W", "-f=${Package} ${Status}\\n"]).stdout
        return {ln.split()[0] for ln in have.splitlines() if ln.endswith("install ok installed")}

    def close(self):
        """Unmount /proc and delete the root (only once nothing is mounted
        in it: rmtree must never descend into a live /proc)."""
        sh(["umount", "-l", self.p("/proc")], check=False)
        if not os.path.ismount(self.p("/proc")):
            shutil.rmtree(self.path, ignore_errors=True)


def unit_settings(path, key):
    """The values of key= in a unit file (in order)."""
    with open(path) as f:
        return [line.split("=", 1)[1].strip() for line in f
                if line.startswith(key + "=")]


def unit_command(root, unit, instance=None, env_file_vars=None):
    """(argv, user, environment) of an installed unit: ExecStart= with %i
    and the EnvironmentFile's variables expanded, User=, Environment=."""
    path = root.p(f"/lib/systemd/system/{unit}")
    argv = kmpc_deploy.unit_exec_start(path, instance=instance, env=env_file_vars)
    users = unit_settings(path, "User")
    env = {}
    for value in unit_settings(path, "Environment"):
        for word in shlex.split(value):
            k, _, v = word.partition("=")
            env[k] = v
    return argv, (users[0] if users else None), env


class Lan:
    """The hosts' namespaces on one bridge (netns.Lan's layout,
    without traffic shaping)."""

    def __init__(self, hosts=None, names=None):
        """hosts: {host: address} (HOSTS); names: {host: host name} for
        the hosts that need one (each command on them runs in a UTS
        namespace of its own with that name)."""
        self.tag = f"{NS_PREFIX}{os.getpid()}"
        self.hosts = hosts or HOSTS
        self.names = names or {}
        cleanup_stale()

    def ns(self, host):
        return f"{self.tag}-{host}"

    def prefix(self, host):
        name = self.names.get(host)
        uts = (["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', name]
               if name else [])
        return ["ip", "netns", "exec", self.ns(host), *uts]

    def up(self):
        # down() finds the namespaces by their tag, not by this list.
        netns.bridged_hosts(self.ns, self.hosts, [], run=sh)
        # The KDC unit's AmbientCapabilities=CAP_NET_BIND_SERVICE: krb5kdc
        # runs as kmpc-kdc and binds port 88 (kpropd 754; a per-namespace
        # sysctl).
        for host in self.hosts:
            if host.startswith("kdc"):
                sh(["ip", "netns", "exec", self.ns(host), "sysctl", "-q", "-w",
                    "net.ipv4.ip_unprivileged_port_start=88"])
        return self

    def down(self):
        cleanup_stale(only_tag=self.tag)


def cleanup_stale(only_tag=None):
    """Delete our namespaces whose run is gone (or only_tag's), killing
    the processes still inside by PID first."""
    out = sh(["ip", "netns", "list"], check=False).stdout
    for ns in (line.split()[0] for line in out.splitlines() if line.strip()):
        m = re.match(rf"^({NS_PREFIX}(\d+))-\w+$", ns)
        if not m:
            continue
        if only_tag is not None and m.group(1) != only_tag:
            continue
        if only_tag is None and kmpc_cluster.pid_alive(int(m.group(2))):
            continue
        for pid in sh(["ip", "netns", "pids", ns], check=False).stdout.split():
            kmpc_cluster.stop_pid(int(pid), timeout=3)
        sh(["ip", "netns", "del", ns], check=False)


class PackagedDeployment:
    """kmpc as THREE-HOSTS.md deploys it from the root's packages (not a
    realm class of the build tree: the installed units and /etc/kmpc),
    its daemons in the Lan's namespaces. Secrets (the master password,
    users' passwords) are passed on stdin or in files, never logged."""

    def __init__(self, root, lan, workdir, realm, host="kdc", tag=""):
        """host: the KDC's host (kdc, or a replica's); tag: a prefix of
        this deployment's log files (two deployments in one workdir)."""
        self.root, self.lan, self.dir, self.realm = root, lan, workdir, realm
        self.host, self.tag = host, tag
        self.servers = {}
        self.kdc = None
        self.kadmind = None
        self.kpropd = None
        self.env = {"KRB5_CONFIG": "/etc/kmpc/krb5.conf", "KRB5_KDC_PROFILE": "/etc/kmpc/kdc.conf"}
        self.admin = ["kmpc-admin", "--config=/etc/kmpc/admin.conf"]

    def configure(self, repo_root, certs_from=None):
        """Step 4-5 and 8: certificates (new ones, or certs_from's: another
        deployment's /etc/kmpc/certs on the host), flag files, krb5.conf,
        kdc.conf, kdc.env and admin.conf from the packages' examples."""
        r = self.root
        certs = r.p("/etc/kmpc/certs")
        if certs_from:
            shutil.copytree(certs_from, certs, dirs_exist_ok=True)
        else:
            env = dict(os.environ, KMPC_CERT_EXTRA_SAN=",".join(
                f"IP:{HOSTS[f'p{i}']}" for i in range(3)))
            sh(["bash", os.path.join(repo_root, "deploy/gen-certs.sh"), certs], env=env)
            shutil.rmtree(os.path.join(certs, "ca-private"))  # the CA key stays offline
        os.chmod(certs, 0o755)
        for i in range(3):
            r.run(["chown", "root:kmpc", f"/etc/kmpc/certs/party-{i}.key"])
            os.chmod(os.path.join(certs, f"party-{i}.key"), 0o640)
        r.run(["chown", "root:kmpc-kdc", "/etc/kmpc/certs/kdc.key"])
        os.chmod(os.path.join(certs, "kdc.key"), 0o640)
        os.chmod(os.path.join(certs, "admin.key"), 0o600)
        hosts = [HOSTS[f"p{i}"] for i in range(3)]
        for i in range(3):
            self._write(f"/etc/kmpc/party{i}.flags", kmpc_deploy.server_flags(
                i, hosts, crl=os.path.exists(os.path.join(certs, "crl.pem"))), 0o640, "kmpc")
        servers = ",".join(f"{h}:7000" for h in hosts)
        subst = [("EXAMPLE.ORG", self.realm), ("kdc.example.org", HOSTS["kdc"]),
                 ("10.0.0.11:7000,10.0.0.12:7000,10.0.0.13:7000", servers)]
        for name in ("krb5.conf", "kdc.conf", "kdc.env"):
            with open(r.p(f"/etc/kmpc/{name}.example")) as f:
                text = f.read()
            for a, b in subst:
                text = text.replace(a, b)
            self._write(f"/etc/kmpc/{name}", text, 0o644)
        with open(r.p("/etc/kmpc/admin.conf.example")) as f:
            text = re.sub(r"^servers = .*$", f"servers = {servers}", f.read(), flags=re.M)
        self._write("/etc/kmpc/admin.conf", text + f"realm = {self.realm}\n", 0o600)

    def _write(self, rel, text, mode, group=None):
        with open(self.root.p(rel), "w") as f:
            f.write(text)
        os.chmod(self.root.p(rel), mode)
        if group:
            self.root.run(["chown", f"root:{group}", rel])

    def enable_dealer(self):
        """Load the key dealer (package kmpc-admin) into kadmin.local,
        kadmind and kdb5_util: kdc.conf.example's commented dealer lines."""
        path = self.root.p("/etc/kmpc/kdc.conf")
        with open(path) as f:
            text = f.read()
        keep = (r"mpcdealer = \{|kadm5_hook = \{|    module = kmpc:.*/mpcdealer/.*|\}|"
                r"\[mpcdealer\]|    kmpc = \{|        config = .*|        protect = .*|"
                r"        service = .*|    \}")
        text, n = re.subn(rf"^(\s*)# ({keep})$", r"\1\2", text, flags=re.M)
        if n != 12:
            raise PackageError(f"kdc.conf.example's dealer block changed ({n} lines)")
        with open(path, "w") as f:
            f.write(text)

    PKINIT_DIR = "/etc/kmpc/pkinit"

    def configure_pkinit(self, principals=(), require_freshness=True):
        """THREE-HOSTS.md's PKINIT steps on the KDC host: a PKINIT CA, the
        KDC's certificate and principals' client certificates made by
        deploy/gen-pkinit-certs.sh on the admin machine (here: this
        deployment's directory, which keeps the CA key), the CA and the
        KDC's certificate and key copied to PKINIT_DIR (the key 0640
        root:kmpc-kdc), pkinit_identity and pkinit_anchors (and freshness
        tokens required) in kdc.conf's realm block. Returns the admin
        machine's directory (ca.pem and the clients' certificates)."""
        certs = pkinit.make_certs(os.path.join(self.dir, self.tag + "pkinit"), self.realm,
                                  principals)
        d = self.root.p(self.PKINIT_DIR)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        for name, mode in (("ca.pem", 0o644), ("kdc.pem", 0o644), ("kdc.key", 0o640)):
            shutil.copy(os.path.join(certs, name), os.path.join(d, name))
            os.chmod(os.path.join(d, name), mode)
        self.root.run(["chown", "root:kmpc-kdc", f"{self.PKINIT_DIR}/kdc.key"])
        path = self.root.p("/etc/kmpc/kdc.conf")
        with open(path) as f:
            text = f.read()
        block = f"    {self.realm} = {{\n"
        if text.count(block) != 1:
            raise PackageError(f"no realm block {self.realm} in kdc.conf")
        text = text.replace(block, block + pkinit.kdc_relations(
            self.PKINIT_DIR, require_freshness=require_freshness))
        with open(path, "w") as f:
            f.write(text)
        return certs

    def add_anonymous(self):
        """WELLKNOWN/ANONYMOUS for anonymous PKINIT, without keys."""
        self.kdc_run(["kadmin.local", "-r", self.realm, "-q",
                      f"addprinc -nokey {pkinit.ANONYMOUS}"])

    def kdc_run(self, argv, input=None, check=True):
        """A command on the KDC host as root (kadmin.local, kmpc-admin)."""
        return self.root.run(argv, env=self.env, prefix=self.lan.prefix(self.host),
                             input=input, check=check)

    def create(self, users, services, kadmind_keys=True):
        """Step 9: the KDB, users with ordinary password keys (Debian's
        clients know no MPC enctype), the krbtgt key and kadmind's made in
        the cluster (kadmind's left in the KDB without kadmind_keys: the
        1.20.1-based packages' kadmind cannot use keys in the cluster)."""
        master = os.urandom(18).hex()
        self.kdc_run(["kdb5_util", "create", "-s", "-r", self.realm],
                     input=f"{master}\n{master}\n")
        for user, pw in users.items():
            self.kdc_run(["kadmin.local", "-r", self.realm, "-q",
                          f"addprinc -e aes256-cts-hmac-sha1-96:normal {user}"],
                         input=f"{pw}\n{pw}\n")
        for service in services:
            self.kdc_run(["kadmin.local", "-r", self.realm, "-q",
                          f"addprinc -randkey -e aes256-cts-hmac-sha1-96:normal {service}"])
        self.kdc_run([*self.admin, "share", "--randkey", "--force", self.tgs])
        # kadmind's own keys, which kdb5_util create made: new ones in the
        # cluster, as step 9 moves them.
        if kadmind_keys:
            self.kdc_run([*self.admin, "share", "--randkey", "--service",
                          "--enctype=aes256-cts-hmac-sha1-96", *KADMIND_KEYS])
        self.root.run(["chown", "-R", "kmpc-kdc:kmpc-kdc", "/var/lib/kmpc-kdc"])

    @property
    def tgs(self):
        return f"krbtgt/{self.realm}@{self.realm}"

    def handles(self, princ):
        """The KDB's key rows of princ (kvno, enctype, handle and key id)."""
        return self.kdc_run(["kmpc-kdb-handle", "-r", self.realm, "keys", princ]).stdout.split("\n")

    def status(self):
        """kmpc-admin status --kdb: (exit code, output)."""
        p = self.kdc_run([*self.admin, "status", "--kdb"], check=False)
        return p.returncode, p.stdout + p.stderr

    def _spawn(self, host, unit, instance=None, env_vars=None, log=None, extra=()):
        argv, user, env = unit_command(self.root, unit, instance, env_vars)
        argv = [*argv, *extra]
        uid, gid = self.root.ids(user)
        out = open(os.path.join(self.dir, self.tag + log), "ab")
        try:
            return subprocess.Popen(
                [*self.lan.prefix(host), "chroot", f"--userspec={uid}:{gid}", f"--groups={gid}",
                 self.root.path, *argv],
                env={"PATH": PATH, "LANG": "C.UTF-8", **env}, stdout=out,
                stderr=subprocess.STDOUT)
        finally:
            out.close()

    def start_servers(self, timeout=30, suffix=""):
        """Step 7: kmpc-mpc-server@<i>.service on host p<i> (instance
        <i><suffix>: flags /etc/kmpc/party<i><suffix>.flags), then the
        ring (three "ring up" from the KDC host, at admin.conf's servers)."""
        for i in range(3):
            self.servers[i] = self._spawn(f"p{i}", "kmpc-mpc-server@.service",
                                          instance=f"{i}{suffix}", log=f"party-{i}.log")
        deadline = time.time() + timeout
        out = ""
        while time.time() < deadline:
            p = self.kdc_run([*self.admin, "--timeout-ms=2000", "status"], check=False)
            out = p.stdout + p.stderr
            if out.count(", ring up,") == 3:
                return
            if any(s.poll() is not None for s in self.servers.values()):
                break
            time.sleep(0.3)
        raise PackageError(f"the MPC ring did not come up:\n{out}\n{self.logs()}")

    def _kdc_env(self):
        return dict(line.strip().split("=", 1) for line in
                    open(self.root.p("/etc/kmpc/kdc.env")) if "=" in line)

    def start_kdc(self, timeout=20):
        """Step 10: kmpc-krb5kdc.service on the KDC host."""
        log = self.root.p("/var/log/kmpc-kdc/krb5kdc.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        self.kdc = self._spawn(self.host, "kmpc-krb5kdc.service", env_vars=self._kdc_env(),
                               log="krb5kdc.out")
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.kdc.poll() is not None:
                break
            if os.path.exists(log):
                with open(log) as f:
                    f.seek(offset)
                    if "commencing operation" in f.read():
                        return
            time.sleep(0.1)
        raise PackageError(f"krb5kdc did not start:\n{self.logs()}")

    def _wait_log(self, proc, path, offset, what, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    f.seek(offset)
                    if what in f.read():
                        return
            time.sleep(0.1)
        raise PackageError(f"{what!r} not in {path}:\n{self.logs()}")

    def start_kadmind(self, timeout=30):
        """Debian's kadmind of the root (krb5-admin-server) as root on the
        KDC host, with /etc/kmpc's kdc.conf (its dealer, if enabled, and
        iprop: a full resync dumps with kdb5_util and runs kprop with
        /etc/krb5.keytab's host key)."""
        log = self.root.p("/var/log/kmpc-kdc/kadmind.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        argv = ["chroot", self.root.path, "/usr/sbin/kadmind", "-nofork", "-r", self.realm,
                "-p", "/usr/sbin/kdb5_util", "-K", "/usr/sbin/kprop",
                "-F", "/var/lib/kmpc-kdc/iprop-dump"]
        with open(os.path.join(self.dir, self.tag + "kadmind.out"), "ab") as out:
            self.kadmind = subprocess.Popen(
                [*self.lan.prefix(self.host), *argv], stdout=out, stderr=subprocess.STDOUT,
                env={"PATH": PATH, "LANG": "C.UTF-8", **self.env})
        self._wait_log(self.kadmind, log, offset, "starting", timeout)

    def start_kpropd(self, timeout=30):
        """kmpc-kpropd.service on the KDC host (a replica's), with -d: its
        progress in kpropd.log."""
        log = os.path.join(self.dir, self.tag + "kpropd.log")
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        self.kpropd = self._spawn(self.host, "kmpc-kpropd.service", env_vars=self._kdc_env(),
                                  log="kpropd.log", extra=["-d"])
        self._wait_log(self.kpropd, log, offset, "ready", timeout)

    def stop(self, which=("kdc", "kadmind", "kpropd", "servers")):
        procs = [getattr(self, w) for w in which if w != "servers"]
        if "servers" in which:
            procs += list(self.servers.values())
            self.servers = {}
        procs = [p for p in procs if p and p.poll() is None]
        kmpc_cluster.stop_pids([p.pid for p in procs], timeout=15)
        for p in procs:
            p.wait(timeout=5)
        if "kpropd" in which:
            self._stop_kpropd_children()
        for w in which:
            if w != "servers":
                setattr(self, w, None)

    def _stop_kpropd_children(self):
        """kpropd in iprop mode forks a listener for full dumps, which
        outlives it: every kpropd left in the host's namespace."""
        out = sh(["ip", "netns", "pids", self.lan.ns(self.host)], check=False).stdout
        for pid in out.split():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "kpropd":
                        kmpc_cluster.stop_pid(int(pid), timeout=5)
            except OSError:
                pass

    def logs(self):
        text = []
        for name in ["krb5kdc.out", "kadmind.out", "kpropd.log",
                     *(f"party-{i}.log" for i in range(3))]:
            path = os.path.join(self.dir, self.tag + name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    text.append(f"--- {name}\n" + f.read()[-3000:])
        for name in ("krb5kdc.log", "kadmind.log"):
            log = self.root.p(f"/var/log/kmpc-kdc/{name}")
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    text.append(f"--- {self.tag}{name}\n" + f.read()[-3000:])
        return "\n".join(text)


class StockClient:
    """Debian's own, unmodified client programs (not from the kmpc
    packages) on the client host: the machine's krb5-user, or, with root
    (a clean root of the release under test, its Debian krb5-user and
    heimdal-clients), that root's, chrooted into."""

    def __init__(self, lan, workdir, realm, root=None):
        self.lan, self.root, self.realm = lan, root, realm
        # inside: the directory as the programs see it; self.dir: on the host.
        self.inside = "/tmp/kmpc-client" if root else workdir
        self.dir = root.p(self.inside) if root else workdir
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "client-krb5.conf"), "w") as f:
            f.write(f"[libdefaults]\n    default_realm = {realm}\n    dns_lookup_kdc = false\n"
                    f"    dns_lookup_realm = false\n    rdns = false\n"
                    f"[realms]\n    {realm} = {{\n        kdc = {HOSTS['kdc']}\n    }}\n")

    def write_conf(self, name, kdcs, admin_server=None, pkinit_anchors=None):
        """Another krb5.conf for run(conf=name): the KDCs of kdcs (hosts'
        addresses, tried in order), kadmind's address for kpasswd, the
        realm's PKINIT anchors (a file given to put())."""
        admin = (f"        admin_server = {admin_server}\n"
                 f"        kpasswd_server = {admin_server}\n" if admin_server else "")
        if pkinit_anchors:
            admin += f"        pkinit_anchors = FILE:{self.path(pkinit_anchors)}\n"
        lines = "".join(f"        kdc = {k}\n" for k in kdcs)
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(f"[libdefaults]\n    default_realm = {self.realm}\n"
                    f"    dns_lookup_kdc = false\n    dns_lookup_realm = false\n"
                    f"    rdns = false\n[realms]\n    {self.realm} = {{\n{lines}{admin}    }}\n")

    def path(self, name):
        """A file of the client's directory as its programs see it."""
        return os.path.join(self.inside, name)

    def put(self, src, name, mode=0o644):
        """Copy src (a host path) into the client's directory as name."""
        shutil.copy(src, os.path.join(self.dir, name))
        os.chmod(os.path.join(self.dir, name), mode)
        return self.path(name)

    def run(self, prog, *args, ccache="cc", input=None, check=True, conf="client-krb5.conf",
            trace=False):
        """prog: a program in /usr/bin ("kinit", "klist", or Heimdal's
        "kinit.heimdal" and the like). trace: MIT's KRB5_TRACE on stderr."""
        env = {"PATH": PATH, "KRB5_CONFIG": os.path.join(self.inside, conf),
               "KRB5CCNAME": "FILE:" + os.path.join(self.inside, ccache)}
        if trace:
            env["KRB5_TRACE"] = "/dev/stderr"
        chroot = ["chroot", self.root.path] if self.root else []
        return sh([*self.lan.prefix("cl"), *chroot, f"/usr/bin/{prog}", *args], env=env,
                  input=input, check=check, timeout=60)
