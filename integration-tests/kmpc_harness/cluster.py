#!/usr/bin/env python3
"""Three MPC servers on 127.0.0.1 (MpcCluster), the helpers of the kmpc realm
built on them (kmpc_realm.py: KmpcRealm, a KDC whose database holds only
key handles, kmpc-admin sharing the keys), and its command line.

Used by the integration tests, `make demo` and the benchmarks. KmpcRealm
extends realm.Realm (the plain patched-KDC realm) with:
  - certificates (deploy/gen-certs.sh) and three kmpc-mpc-server processes
    (kmpc_harness/mpc-local.sh) under DIR/mpc, ports checked free,
  - kdc.conf [plugins] kdcmpc: the real module (kdc-plugin's libkmpc_kdc.so)
    when it is built, else krb5's test module (krb5's test kdcmpc module patch), which holds the
    keys in a file in DIR and is test scaffolding only,
  - the krbtgt key and the users' keys moved into the cluster with
    `kmpc-admin share` (--from-existing for the krbtgt and random-key users,
    --password-stdin for users with a password), the KDB left with handles,
  - a KDC started afterwards and everything stopped by PID.

Nothing secret is printed. Passwords exist only in memory (and on the
kmpc-admin stdin); random-key users' keys sit in DIR/users.keytab (0600) for
kinit -k and the login storm; with the test module, DIR/mpc-test-keys (0600)
holds keys because that module needs them.

CLI (integration-tests/ on PYTHONPATH, or run the file itself):
      python3 -m kmpc_harness.cluster start DIR [--users N] [--module auto|real|test]
      python3 -m kmpc_harness.cluster status DIR
      python3 -m kmpc_harness.cluster stop DIR
"""

import argparse
import glob
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

if __name__ == "__main__" and not __package__:
    # Run as a script: the package's parent on the path (same as python3 -m).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kmpc_harness import realm as kmpc_realm  # noqa: E402
from kmpc_harness.realm import RealmError  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = kmpc_realm.ROOT
# The administrator's certificate tool (deploy/) and the harness's script
# that runs three servers on loopback (beside this file).
GEN_CERTS = os.path.join(ROOT, "deploy", "gen-certs.sh")
MPC_LOCAL = os.path.join(HERE, "mpc-local.sh")
BUILD = kmpc_realm.BUILD
REALM = kmpc_realm.REALM
TGS = f"krbtgt/{REALM}@{REALM}"
# Every principal the cluster serves has an MPC key; the service principal
# and session keys use an ordinary enctype (session keys are never MPC).
ENCTYPES = ("aes256-ctr-mpc", "aes128-ctr-mpc", "aes256-cts-hmac-sha1-96")
SESSION_ENCTYPES = "aes256-cts-hmac-sha1-96"
SERVICE = "host/svc.kmpc.test"
STATE = "kmpc-realm.json"


def password():
    """A random password for a test principal (never printed)."""
    return "pw-" + secrets.token_hex(8)


def default_salt(princ):
    """The default salt of princ (RFC 4120 3.1.3): realm, then components."""
    name, _, realm = princ.partition("@")
    return (realm or REALM) + "".join(name.split("/"))

# kdc.conf [kdcmpc] -> kmpc options of the real module (kdc-plugin/).
REAL_MODULE_NAME = "kmpc"


def cmake_build_dirs():
    """CMake build trees that may hold binaries: build/cmake (`make build`)
    and the other build/cmake* trees."""
    dirs = [os.path.join(BUILD, "cmake")]
    dirs += [d for d in sorted(glob.glob(os.path.join(BUILD, "cmake*")))
             if d not in dirs and os.path.isdir(d)]
    return dirs


def find_built(rel, required=True):
    """A built file, e.g. find_built('mpc-server/kmpc-admin'): its own
    environment variable, else from $KMPC_CMAKE_BUILD, else the most
    recently built copy among the build trees (as integration-tests/kmpc_harness/mpc-local.sh)."""
    env = {"mpc-server/kmpc-admin": "KMPC_ADMIN",
           "kdc-plugin/kmpc-kdb-handle": "KMPC_KDB_HANDLE",
           "kdc-plugin/libkmpc_kdc.so": "KMPC_KDC_MODULE"}.get(rel)
    if env and os.environ.get(env):
        return os.environ[env]
    if os.environ.get("KMPC_CMAKE_BUILD"):
        p = os.path.join(os.environ["KMPC_CMAKE_BUILD"], rel)
        if os.path.exists(p):
            return p
    found = [p for p in (os.path.join(d, rel) for d in cmake_build_dirs())
             if os.path.exists(p)]
    if found:
        return max(found, key=os.path.getmtime)
    if required:
        raise RealmError(f"{rel} is not built (make build)")
    return None


def require_built(*rels):
    """find_built for each of rels, required: a test module calls it at
    import so that a missing binary fails the run (RealmError naming it)
    instead of skipping its tests."""
    return [find_built(rel) for rel in rels]


def kdcmpc_conf(name, so, options):
    """kdc.conf text loading the kdcmpc module `name` from `so`, with the
    relations of options ({relation: value}) in its [kdcmpc] section."""
    body = "".join(f"        {k} = {v}\n" for k, v in options.items())
    return (f"[plugins]\n    kdcmpc = {{\n        module = {name}:{so}\n    }}\n"
            f"[kdcmpc]\n    {name} = {{\n{body}    }}\n")


def dealer_conf(so, admin_conf, protect=(), kinds=()):
    """kdc.conf text loading kmpc's key dealer (mpcdealer and kadm5_hook
    interfaces, one .so) with kmpc-admin's config file admin_conf; kinds:
    (relation, pattern) pairs, relation "service" or "user_service"."""
    prot = "".join(f"        protect = {p}\n" for p in protect)
    prot += "".join(f"        {rel} = {p}\n" for rel, p in kinds)
    return (f"[plugins]\n    mpcdealer = {{\n        module = kmpc:{so}\n    }}\n"
            f"    kadm5_hook = {{\n        module = kmpc:{so}\n    }}\n"
            f"[mpcdealer]\n    kmpc = {{\n        config = {admin_conf}\n{prot}    }}\n")


def test_module_path():
    return os.path.join(kmpc_realm.PREFIX, "lib", "krb5", "plugins", "kdcmpc", "test.so")


# gRPC listens on base+0..2, the ring on base+10..12 (kmpc_harness/mpc-local.sh).
PORT_OFFSETS = (0, 1, 2, 10, 11, 12)


def free_base():
    """A base port with base+0..2 (gRPC) and base+10..12 (ring) free, all
    outside the ephemeral range (kmpc_realm.listen_port_range)."""
    try:
        return kmpc_realm.free_port_block(PORT_OFFSETS, udp=False)
    except RealmError:
        raise RealmError("no free ports for the MPC servers") from None


def pid_alive(pid):
    """pid is a running process. A zombie whose threads have all exited is
    not: a daemon started by a script that exited (mpc-local.sh's servers)
    is reparented to init, which may reap it only a second or more later;
    its ports, locks and memory are released by then. (The main thread of
    a process shows as a zombie while its other threads still exit.)"""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            # The state follows the command name, which is in parentheses.
            if f.read().rpartition(")")[2].split()[0] != "Z":
                return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (OSError, IndexError):
        return False


class CertPool:
    """Certificate directories of deploy/gen-certs.sh (no extra client CNs),
    generated ahead by a background thread while the tests run. Every
    cluster still gets a CA and keys of its own, generated for it alone and
    handed out once; only the wait for openssl leaves the set-up. Entries
    live under root (the caller removes it)."""

    def __init__(self, root, ahead=2):
        import queue
        import threading
        self.root = root
        self.ready = queue.Queue()
        self.slots = threading.Semaphore(ahead)
        self.n = 0
        os.makedirs(root, exist_ok=True)
        threading.Thread(target=self._fill, name="cert-pool", daemon=True).start()

    def _env_ok(self):
        # The variables gen-certs.sh reads: with either set, generate inline.
        return not (os.environ.get("KMPC_CERT_EXTRA_SAN") or os.environ.get("KMPC_CRL_DAYS"))

    def _fill(self):
        while True:
            self.slots.acquire()
            self.n += 1
            d = os.path.join(self.root, f"certs-{self.n}")
            try:
                subprocess.run(["bash", GEN_CERTS, d], check=True, capture_output=True,
                               timeout=120)
            except Exception:  # the cluster then generates its own inline
                shutil.rmtree(d, ignore_errors=True)
                d = None
            self.ready.put(d)

    def take(self, dest):
        """Move a generated directory to dest (which must not exist); False
        (nothing moved) when none could be made."""
        import queue
        if not self._env_ok() or os.path.exists(dest):
            return False
        try:
            d = self.ready.get(timeout=120)
        except queue.Empty:
            return False
        self.slots.release()
        if d is None:
            return False
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.move(d, dest)
        # ca.cnf names the CA's files by absolute path (gen-certs.sh
        # rewrites it on each --revoke/--crl; kept right in between).
        cnf = os.path.join(dest, "ca-private", "ca.cnf")
        with open(cnf) as f:
            text = f.read()
        with open(cnf, "w") as f:
            f.write(text.replace(d + "/", dest + "/"))
        return True


_cert_pool = None


def use_cert_pool(root):
    """From now on, clusters without extra client CNs take their
    certificates from a CertPool under root (the test session's)."""
    global _cert_pool
    _cert_pool = CertPool(root)


def stop_pids(pids, timeout=5.0):
    """SIGTERM every live pid at once, wait (reaping our children) up to
    timeout for all of them, then SIGKILL what is left.  Stopping the MPC
    servers together takes as long as the slowest one, not the sum (each
    one's workers notice the stop, or a peer gone, within about a second)."""
    pids = [p for p in pids if p and pid_alive(p)]
    for p in pids:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.time() + timeout
    while pids and time.time() < deadline:
        left = []
        for p in pids:
            try:
                # Reap it if it is our child, so it does not linger as a zombie.
                if os.waitpid(p, os.WNOHANG)[0] == p:
                    continue
            except ChildProcessError:
                pass
            if pid_alive(p):
                left.append(p)
        pids = left
        if pids:
            time.sleep(0.05)
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_pid(pid, timeout=5.0):
    stop_pids([pid], timeout)


class MpcCluster:
    """Three kmpc-mpc-server processes on loopback, started by
    integration-tests/kmpc_harness/mpc-local.sh (its layout: DIR/party-i.{pid,log}, DIR/store-i,
    DIR/certs, DIR/servers)."""

    def __init__(self, workdir, workers=2, extra_client_cns=(), server_flags="",
                 metrics=False):
        """metrics: each server also serves Prometheus /metrics over HTTP on
        127.0.0.1 (free ports, metrics_url(i))."""
        self.dir = os.path.abspath(workdir)
        self.metrics = metrics
        self.metrics_base = None
        self.certs = os.path.join(self.dir, "certs")
        self.workers = workers
        self.extra_client_cns = list(extra_client_cns)
        # KMPC_SERVER_FLAGS: flags every cluster a test or tool starts gets
        # (e.g. --security=malicious to run a suite against malicious-mode
        # servers), before its own.
        self.server_flags = " ".join(
            f for f in (os.environ.get("KMPC_SERVER_FLAGS", ""), server_flags) if f)
        self.base = None
        self.servers = None
        self._restarted = {}
        # start_party(i) runs binaries[i] (a name beside kmpc-mpc-server,
        # e.g. the test-only kmpc-mpc-server-cheat) with envs[i] added to
        # its environment, when set (a party restarted as a cheater).
        self.binaries = {}
        self.envs = {}
        # Parties stopped on purpose (stop_party, stop): not a death.
        self._stopped = set()

    def addr(self, i):
        return f"127.0.0.1:{self.base + i}"

    def metrics_url(self, i):
        """Party i's /metrics URL (metrics=True), else None."""
        if self.metrics_base is None:
            return None
        return f"http://127.0.0.1:{self.metrics_base + i}/metrics"

    def log_path(self, i):
        return os.path.join(self.dir, f"party-{i}.log")

    def store_dir(self, i):
        return os.path.join(self.dir, f"store-{i}")

    def pid(self, i):
        try:
            with open(os.path.join(self.dir, f"party-{i}.pid")) as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return 0

    def gen_certs(self):
        if not self.extra_client_cns and _cert_pool is not None and _cert_pool.take(self.certs):
            return
        subprocess.run(["bash", GEN_CERTS, self.certs,
                        *self.extra_client_cns], check=True, capture_output=True,
                       timeout=120)

    def start(self, wait=True):
        """Start the three servers; wait=False returns once each is
        listening, before their ring is up (call wait_ring() then)."""
        os.makedirs(self.dir, exist_ok=True)
        if not os.path.exists(os.path.join(self.certs, "ca.pem")):
            self.gen_certs()
        server = find_built("mpc-server/kmpc-mpc-server")
        env = dict(os.environ, KMPC_MPC_BIN_DIR=os.path.dirname(server),
                   KMPC_MPC_FLAGS=self.server_flags)
        for attempt in range(3):
            self.base = free_base()
            if self.metrics:
                self.metrics_base = kmpc_realm.free_port_block((0, 1, 2), udp=False)
                env["KMPC_MPC_METRICS_BASE"] = str(self.metrics_base)
            p = subprocess.run(["bash", MPC_LOCAL, "start",
                                self.dir, str(self.base), str(self.workers)],
                               capture_output=True, text=True, env=env, timeout=120)
            if p.returncode == 0:
                self.servers = p.stdout.strip().splitlines()[-1]
                if wait:
                    self.wait_ring()
                return self
            # A port taken between free_base()/free_port_block() and the
            # bind (civetweb, under --metrics_addr, says "Possible problem
            # binding to port"): new ports, up to three tries.
            if attempt == 2 or not re.search(
                    r"Address already in use|cannot bind|problem binding to port",
                    p.stderr + self.logs()):
                raise RealmError(f"mpc-local.sh start failed:\n{p.stderr}\n{self.logs()}")
        return self

    def server_argv(self, i):
        """Party i's command line, as integration-tests/kmpc_harness/mpc-local.sh starts it."""
        c = self.certs
        return [find_built("mpc-server/" + self.binaries.get(i, "kmpc-mpc-server")),
                f"--party={i}",
                f"--listen=127.0.0.1:{self.base + i}",
                f"--ring_listen=127.0.0.1:{self.base + 10 + i}",
                f"--ring_prev=127.0.0.1:{self.base + 10 + (i + 2) % 3}",
                "--ring_next=127.0.0.1",
                f"--cert={c}/party-{i}.pem", f"--key={c}/party-{i}.key",
                f"--ca={c}/ca.pem", f"--store_dir={self.store_dir(i)}",
                f"--workers={self.workers}",
                # Storms log one user in far more often than a person
                # does, many times in one Run: no release bound and no
                # per-Run cap of gate DECRYPTs unless a test's
                # server_flags set one (they come last, and the last value
                # wins).
                "--cts_releases_per_minute=0", "--gate_decrypts_per_run=0",
                # An A/B against a build older than the bounds ignores them.
                "--undefok=cts_releases_per_minute,gate_decrypts_per_run",
                *([f"--crl={c}/crl.pem"] if os.path.exists(f"{c}/crl.pem") else []),
                *([f"--metrics_addr=127.0.0.1:{self.metrics_base + i}"]
                  if self.metrics_base is not None else []),
                *(f.replace("{party}", str(i)) for f in self.server_flags.split())]

    def start_party(self, i, timeout=30):
        """Restart party i alone (after stop_party) on its ports and store;
        wait for its "listening" line."""
        log = self.log_path(i)
        offset = os.path.getsize(log) if os.path.exists(log) else 0
        self._stopped.discard(i)
        with open(log, "ab") as out:
            proc = subprocess.Popen(self.server_argv(i), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, **self.envs.get(i, {})})
        self._restarted[i] = proc  # reaped by stop_pid
        with open(os.path.join(self.dir, f"party-{i}.pid"), "w") as f:
            f.write(str(proc.pid))
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(log, errors="replace") as f:
                f.seek(offset)
                if "listening on" in f.read():
                    return
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        raise RealmError(f"party {i} did not restart:\n{self.logs()}")

    def restart_party_as(self, i, binary=None, env=None):
        """Stop party i and start it again on its ports and store, running
        `binary` (a name beside kmpc-mpc-server, e.g. the test-only
        kmpc-mpc-server-cheat; None: kmpc-mpc-server) with `env` added to
        its environment (e.g. KMPC_CHEAT); waits for the ring."""
        self.stop_party(i)
        if binary:
            self.binaries[i] = binary
        else:
            self.binaries.pop(i, None)
        self.envs[i] = dict(env or {})
        self.start_party(i)
        self.wait_ring()

    def client(self, *args, timeout=60):
        """Run kmpc-mpc-client against the three servers (its default
        certificate for the command); its stdout, or RealmError if it failed."""
        p = subprocess.run([find_built("mpc-server/kmpc-mpc-client"),
                            f"--servers={self.servers}", f"--certs={self.certs}", *args],
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RealmError(f"kmpc-mpc-client {args[0] if args else ''} exited "
                             f"{p.returncode}:\n{p.stdout}{p.stderr}")
        return p.stdout

    def admin_flags(self, client="admin"):
        c = self.certs
        return [f"--servers={self.servers}", f"--ca={c}/ca.pem",
                f"--cert={c}/{client}.pem", f"--key={c}/{client}.key"]

    def wait_ring(self, timeout=30):
        """The servers connect their ring in the background; wait until all
        three report it up (kmpc-admin status), so that the first login does
        not race it."""
        admin = find_built("mpc-server/kmpc-admin")
        deadline = time.time() + timeout
        out = ""
        while time.time() < deadline:
            p = subprocess.run([admin, *self.admin_flags(), "--timeout-ms=2000", "status"],
                               capture_output=True, text=True, timeout=60,
                               env={k: v for k, v in os.environ.items()
                                    if k != "KMPC_ADMIN_CONFIG"})
            out = p.stdout + p.stderr
            if out.count(", ring up,") == 3:
                return
            if not self.alive():
                raise RealmError("an MPC server died while starting:\n" + self.logs())
            time.sleep(0.1)
        raise RealmError(f"the MPC ring did not come up within {timeout}s:\n{out}\n"
                         + self.logs())

    def alive(self, parties=(0, 1, 2)):
        return all(pid_alive(self.pid(i)) for i in parties)

    def stop_party(self, i):
        self._stopped.add(i)
        stop_pid(self.pid(i))

    def dead_parties(self):
        """The parties whose server died although nothing stopped it through
        this object (stop_party, stop): a crash, or a kill the test did not
        follow with start_party. [] before start()."""
        if self.servers is None:
            return []
        dead = []
        for i in range(3):
            if i in self._stopped:
                continue
            proc = self._restarted.get(i)  # our child: a zombie until reaped
            if (proc.poll() is not None) if proc is not None else not pid_alive(self.pid(i)):
                dead.append(i)
        return dead

    def stop(self):
        self._stopped.update(range(3))
        stop_pids([self.pid(i) for i in range(3)])
        subprocess.run(["bash", MPC_LOCAL, "stop", self.dir],
                       capture_output=True, timeout=60)

    def logs(self):
        parts = []
        for i in range(3):
            p = self.log_path(i)
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    parts.append(f"----- mpc party-{i}.log -----\n{f.read()[-20000:]}")
        return "\n".join(parts)


# ---- CLI -------------------------------------------------------------------

def stop_dir(workdir):
    kmpc_realm.stop_dir(workdir)
    mpc = os.path.join(workdir, "mpc")
    pids = []
    for i in range(3):
        pf = os.path.join(mpc, f"party-{i}.pid")
        if os.path.exists(pf):
            with open(pf) as f:
                pids.append(int(f.read().strip() or 0))
    stop_pids(pids)
    if os.path.isdir(mpc):
        subprocess.run(["bash", MPC_LOCAL, "stop", mpc],
                       capture_output=True, timeout=60)


def status_dir(workdir):
    try:
        with open(os.path.join(workdir, STATE)) as f:
            st = json.load(f)
    except FileNotFoundError:
        print(f"no kmpc realm in {workdir}")
        return 1
    ok = True
    pidf = os.path.join(workdir, "krb5kdc.pid")
    pid = int(open(pidf).read().strip() or 0) if os.path.exists(pidf) else 0
    kdc = pid and pid_alive(pid)
    ok = ok and bool(kdc)
    print(f"krb5kdc: {'running (pid %d)' % pid if kdc else 'stopped'}, realm "
          f"{st['realm']}, 127.0.0.1:{st['kdc_port']}, kdcmpc module: {st['module']}")
    mpc = os.path.join(workdir, "mpc")
    for i in range(3):
        pf = os.path.join(mpc, f"party-{i}.pid")
        ppid = int(open(pf).read().strip() or 0) if os.path.exists(pf) else 0
        alive = ppid and pid_alive(ppid)
        ok = ok and bool(alive)
        print(f"mpc party {i}: {'running (pid %d)' % ppid if alive else 'stopped'}, "
              f"log {mpc}/party-{i}.log")
    env = kmpc_realm.Realm(workdir).make_env()
    env.update(st.get("env", {}))
    p = subprocess.run([find_built("mpc-server/kmpc-admin"), "status", "--kdb"],
                       capture_output=True, text=True, env=env, timeout=60)
    sys.stdout.write(p.stdout + p.stderr)
    return 0 if ok and p.returncode == 0 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("start")
    s.add_argument("dir")
    s.add_argument("--users", type=int, default=0,
                   help="random-key users user0.. (keys in DIR/users.keytab)")
    s.add_argument("--module", default="auto", choices=("auto", "real", "test"))
    s.add_argument("--mpc-workers", type=int, default=2)
    s.add_argument("--metrics", action="store_true",
                   help="Prometheus /metrics over HTTP on 127.0.0.1 from each "
                        "server and the KDC module")
    for name in ("stop", "status"):
        sub.add_parser(name).add_argument("dir")
    args = ap.parse_args()
    d = os.path.abspath(args.dir)
    if args.cmd == "stop":
        stop_dir(d)
        return 0
    if args.cmd == "status":
        return status_dir(d)
    if os.path.exists(d):
        stop_dir(d)
        shutil.rmtree(d)
    from kmpc_harness.kmpc_realm import bring_up  # it imports this module
    r = bring_up(d, n_random=args.users, module=args.module, mpc_workers=args.mpc_workers,
                 metrics=args.metrics)
    r.kdc_proc = None  # leave it running, detached from this process
    print(f"realm {r.realm}: KDC 127.0.0.1:{r.kdc_port} (module {r.module}), "
          f"MPC servers {r.cluster.servers}")
    if args.metrics:
        for u in [r.kdc_metrics_url] + [r.cluster.metrics_url(i) for i in range(3)]:
            if u:
                print(f"metrics: {u}")
    for k in ("KRB5_CONFIG", "KRB5_KDC_PROFILE", "KRB5CCNAME", "KMPC_ADMIN_CONFIG"):
        print(f"export {k}={r.env[k]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
