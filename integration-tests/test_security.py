"""Certificate revocation and pinning on the MPC servers' gRPC services, and
the share store leaving no deleted or replaced shares in its file.

Three real kmpc-mpc-server processes on loopback started with
--crl=DIR/crl.pem and an Admin allow-list with certificate pins; driven by
kmpc-mpc-client (tools/mpc_client/); certificates revoked with
`deploy/gen-certs.sh DIR --revoke`, as an administrator would.
"""
import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from kmpc_harness import cluster as kmpc_cluster  # noqa: E402

GEN_CERTS = os.path.join(ROOT, "deploy", "gen-certs.sh")
SERVER, CLIENT, BENCH = kmpc_cluster.require_built("mpc-server/kmpc-mpc-server",
                                                   "mpc-server/kmpc-mpc-client",
                                                   "mpc-server/kmpc-mpc-bench")

UNAUTHENTICATED, PERMISSION_DENIED, FAILED_PRECONDITION = 16, 7, 9


def gen_certs(*args):
    return subprocess.run(["bash", GEN_CERTS, *args], check=True, capture_output=True,
                          text=True, timeout=120).stdout


def fingerprint(pem):
    out = subprocess.run(["openssl", "x509", "-noout", "-fingerprint", "-sha256", "-in", pem],
                         check=True, capture_output=True, text=True).stdout
    return out.strip().split("=", 1)[1]  # AB:12:... as openssl prints it


class Servers:
    def __init__(self, top, certs, extra):
        self.top, self.certs, self.extra = top, certs, extra
        self.base = kmpc_cluster.free_base()
        self.procs = []

    @property
    def servers(self):
        return ",".join(f"127.0.0.1:{self.base + i}" for i in range(3))

    def args(self, i):
        c = self.certs
        return [SERVER, f"--party={i}", f"--listen=127.0.0.1:{self.base + i}",
                f"--ring_listen=127.0.0.1:{self.base + 10 + i}",
                f"--ring_prev=127.0.0.1:{self.base + 10 + (i + 2) % 3}",
                "--ring_next=127.0.0.1",
                f"--cert={c}/party-{i}.pem", f"--key={c}/party-{i}.key",
                f"--ca={c}/ca.pem", f"--store_dir={self.store_dir(i)}",
                "--ring_timeout_ms=2000", *self.extra]

    def store_dir(self, i):
        return os.path.join(self.top, f"store-{i}")

    def log(self, i):
        with open(os.path.join(self.top, f"party-{i}.log"), errors="replace") as f:
            return f.read()

    def start(self):
        for i in range(3):
            with open(os.path.join(self.top, f"party-{i}.log"), "ab") as log:
                self.procs.append(subprocess.Popen(self.args(i), stdout=log,
                                                   stderr=subprocess.STDOUT))
        deadline = time.time() + 30
        while not all("listening on" in self.log(i) for i in range(3)):
            for i, p in enumerate(self.procs):
                assert p.poll() is None, f"party {i} exited:\n{self.log(i)}"
            assert time.time() < deadline, "servers did not start"
            time.sleep(0.05)
        # Ring up: health as an admin reports it.
        while self.client("health", client="admin-b").stdout.count("ring_up 1") < 3:
            assert time.time() < deadline, "ring did not come up"
            time.sleep(0.1)
        return self

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def check_alive(self):
        for i, p in enumerate(self.procs):
            assert p.poll() is None, f"party {i} died (rc={p.returncode}):\n{self.log(i)}"

    def client(self, *args, client=None, stdin=None):
        cmd = [CLIENT, f"--servers={self.servers}", f"--certs={self.certs}",
               "--timeout_ms=10000"]
        if client:
            cmd.append(f"--client={client}")
        return subprocess.run(cmd + list(args), input=stdin, capture_output=True,
                              text=True, timeout=60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    top = str(tmp_path_factory.mktemp("security"))
    certs = os.path.join(top, "certs")
    gen_certs(certs)
    # Admin certificates: admin-a and admin-b pinned, admin-c (same CN) not;
    # kdc-a, kdc-b for KeyOps (no pins there).
    for name, cn in [("admin-a", "kmpc-admin"), ("admin-b", "kmpc-admin"),
                     ("admin-c", "kmpc-admin"), ("kdc-a", "kmpc-kdc"),
                     ("kdc-b", "kmpc-kdc")]:
        gen_certs(certs, "--client", name, cn)
    pins = ",".join("sha256:" + fingerprint(f"{certs}/{n}.pem") for n in ("admin-a", "admin-b"))
    s = Servers(top, certs, [f"--crl={certs}/crl.pem",
                             f"--admin_clients=kmpc-admin,{pins}"]).start()
    yield s
    s.stop()


def codes(r):
    """Status codes of the rpc_error lines of a client run (it calls the
    three servers and prints the first failure)."""
    return [int(m) for m in re.findall(r"^rpc_error \d (\d+) ", r.stdout, re.M)]


def test_revoked_certificates_refused_fresh_ones_work(cluster):
    kid = cluster.client("put-key", f"--key_hex={secrets.token_hex(16)}",
                         "--key_kind=service", client="admin-b").stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", kid), kid
    job = f"keystream {kid} 1 16\n"
    assert cluster.client("list-keys", client="admin-a").returncode == 0
    assert cluster.client("jobs", stdin=job, client="kdc-a").stdout.startswith("ok ")

    out = gen_certs(cluster.certs, "--revoke", f"{cluster.certs}/admin-a.pem",
                    f"{cluster.certs}/kdc-a.pem")
    assert out.count("revoked ") == 2, out
    # The servers see the new CRL file by themselves (checked once a second).
    time.sleep(1.2)
    r = cluster.client("list-keys", client="admin-a")
    assert r.returncode != 0 and codes(r) == [UNAUTHENTICATED], r.stdout + r.stderr
    assert "the client certificate has been revoked" in r.stdout
    r = cluster.client("jobs", stdin=job, client="kdc-a")
    assert r.returncode != 0 and UNAUTHENTICATED in codes(r), r.stdout + r.stderr
    # Fresh certificates with the same CNs keep working.
    assert cluster.client("list-keys", client="admin-b").returncode == 0
    assert cluster.client("jobs", stdin=job, client="kdc-b").stdout.startswith("ok ")
    serial = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in",
                             f"{cluster.certs}/admin-a.pem"], capture_output=True,
                            text=True).stdout.strip().split("=")[1]
    for i in range(3):
        log = cluster.log(i)
        assert re.search(r"Admin: denied .*CN 'kmpc-admin', serial " + serial +
                         r".*certificate revoked", log), log[-3000:]
        assert "revoked certificate(s)" in log
    cluster.check_alive()


@contextlib.contextmanager
def own_servers(tmp_path, *flags):
    """Three servers with a CA of their own (whose certificates a test may
    revoke), stopped afterwards, also when start-up fails. A flag may name
    {certs}, the certificate directory."""
    certs = str(tmp_path / "certs")
    gen_certs(certs)
    gen_certs(certs, "--client", "admin-b", "kmpc-admin")  # Servers.start's health
    s = Servers(str(tmp_path), certs, [f.format(certs=certs) for f in flags])
    try:
        yield s.start()
    finally:
        s.stop()


def test_revoked_party_leaves_the_live_ring(tmp_path):
    """A party certificate revoked while the ring is up: its neighbours drop
    their live connections to it before the next batch (not only at their
    next reconnect) and refuse it in the handshake when it dials again, so
    batches fail instead of running with the revoked party."""
    with own_servers(tmp_path, "--crl={certs}/crl.pem") as s:
        certs = s.certs
        kid = s.client("put-key", f"--key_hex={secrets.token_hex(16)}",
                       "--key_kind=service").stdout.strip()
        assert re.fullmatch(r"[0-9a-f]{64}", kid), kid
        job = f"keystream {kid} 1 16\n"
        assert s.client("jobs", stdin=job).stdout.startswith("ok ")  # ring in use
        out = gen_certs(certs, "--revoke", f"{certs}/party-1.pem")
        assert out.count("revoked ") == 1, out
        time.sleep(1.2)  # the servers re-read the changed CRL file
        r = s.client("jobs", stdin=job)
        assert not r.stdout.startswith("ok "), r.stdout + r.stderr
        serial = subprocess.run(["openssl", "x509", "-noout", "-serial", "-in",
                                 f"{certs}/party-1.pem"], capture_output=True,
                                text=True).stdout.strip().split("=")[1]
        # Both neighbours refuse it: party 0 (party 1 dials it) and party 2
        # (it dials party 1).
        for i in (0, 2):
            deadline = time.time() + 10
            while not re.search(r"serial " + serial + r".*revoked", s.log(i)):
                assert time.time() < deadline, s.log(i)[-3000:]
                time.sleep(0.05)
        s.check_alive()


def test_sigterm_ends_a_batch_in_flight_at_once(tmp_path):
    """SIGTERM while a large batch runs: the server's ring waits return at
    once ("this server is shutting down") and it exits, instead of waiting
    for the ring timeout (here 10 s); the other two stay up."""
    with own_servers(tmp_path, "--ring_timeout_ms=10000") as s:
        bench = subprocess.Popen(
            [BENCH, f"--servers={s.servers}", f"--certs={s.certs}", "--timeout_ms=60000",
             "keystream", "--cipher=aes256", "--blocks=400000", "--threads=1", "--iters=3"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p = s.procs[1]

        def cpu_s():
            with open(f"/proc/{p.pid}/stat") as f:
                v = f.read().rsplit(")", 1)[1].split()
            return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")

        # A batch is computing on party 1 once it has used 0.3 s of CPU (one
        # batch of 400k AES-256 blocks takes several; the key's put, ~0).
        c0, deadline = cpu_s(), time.time() + 30
        while cpu_s() - c0 < 0.3:
            assert time.time() < deadline and bench.poll() is None, s.log(1)[-3000:]
            time.sleep(0.02)
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        took = time.time() - t0
        bench.kill()
        bench.wait()
        log = s.log(1)
        assert "signal 15: shutting down" in log, log[-3000:]
        assert "ring: this server is shutting down" in log, log[-3000:]
        assert took < 5, f"exit took {took:.1f} s"  # the ring timeout is 10 s
        for i in (0, 2):
            assert s.procs[i].poll() is None, s.log(i)[-3000:]


def sighup_and_wait_for_reload(cluster):
    """SIGHUP every server and wait until each logged one more CRL reload."""
    before = [cluster.log(i).count("reloaded CRL") for i in range(3)]
    for p in cluster.procs:
        p.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while any(cluster.log(i).count("reloaded CRL") <= before[i] for i in range(3)):
        assert time.time() < deadline, "no reload logged after SIGHUP"
        time.sleep(0.05)


def test_sighup_reloads_the_crl_and_keeps_serving(cluster):
    sighup_and_wait_for_reload(cluster)
    cluster.check_alive()
    assert cluster.client("health", client="admin-b").stdout.count("ring_up 1") == 3


def test_pinned_fingerprint_mismatch_refused(cluster):
    r = cluster.client("list-keys", client="admin-c")  # CN kmpc-admin, not pinned
    assert r.returncode != 0 and codes(r) == [PERMISSION_DENIED], r.stdout + r.stderr
    assert "not one of the pinned ones" in r.stdout
    for i in range(3):
        assert "certificate fingerprint not pinned" in cluster.log(i)
    assert cluster.client("list-keys", client="admin-b").returncode == 0
    # A KDC certificate on Admin: still refused by CN.
    r = cluster.client("list-keys", client="kdc-b")
    assert codes(r) == [PERMISSION_DENIED], r.stdout


def _record_shares(data, label):
    """The shares bytes of the record with this label in an LMDB file
    (share_store.cc layout: "KMS2" cipher kind kvno u32 label_len u16 label
    shares_len u32 shares)."""
    lab = label.encode()
    pos = data.find(lab)
    assert pos >= 12 and data[pos - 12:pos - 8] == b"KMS2", "record not found"
    assert int.from_bytes(data[pos - 2:pos], "little") == len(lab)
    off = pos + len(lab)
    n = int.from_bytes(data[off:off + 4], "little")
    shares = data[off + 4:off + 4 + n]
    assert len(shares) == n and n >= 64
    return shares


def _pieces_left(path, shares):
    with open(path, "rb") as f:
        data = f.read()
    return sum(1 for o in range(0, len(shares) - 63, 64) if shares[o:o + 64] in data)


def test_deleted_shares_leave_the_store_file_and_ids_are_not_reused(cluster):
    """The servers' default (no --allow_key_replace): replacing stored shares
    and storing a deleted id again are refused; a deletion leaves none of the
    shares' bytes in any server's data.mdb. (Replacement scrubbing, allowed
    with --allow_key_replace, is tested in share_store_test.)"""
    kid = secrets.token_hex(32)
    label = "scrub-" + secrets.token_hex(8)

    def put(*extra):
        return cluster.client("put-key", f"--key_hex={secrets.token_hex(32)}",
                              f"--key_id_hex={kid}", f"--label={label}", *extra,
                              client="admin-b")

    r = put()
    assert r.returncode == 0, r.stdout + r.stderr
    files = [os.path.join(cluster.store_dir(i), "data.mdb") for i in range(3)]
    old = []
    for f in files:
        with open(f, "rb") as fh:
            old.append(_record_shares(fh.read(), label))
        assert _pieces_left(f, old[-1]) == len(old[-1]) // 64
    r = put("--replace")
    assert codes(r) == [FAILED_PRECONDITION], r.stdout + r.stderr
    assert "not reused" in r.stdout
    for f, o in zip(files, old):
        assert _pieces_left(f, o) == len(o) // 64  # untouched
    r = cluster.client("delete-key", f"--key_id_hex={kid}", client="admin-b")
    assert r.returncode == 0, r.stdout + r.stderr
    for f, o in zip(files, old):
        assert _pieces_left(f, o) == 0
        assert os.stat(f).st_mode & 0o777 == 0o600
    for extra in ((), ("--replace",)):
        r = put(*extra)
        assert codes(r) == [FAILED_PRECONDITION] and "was deleted" in r.stdout, r.stdout
    cluster.check_alive()


def _start_fails(tmp_path, cluster, *flags):
    args = Servers(str(tmp_path), cluster.certs, list(flags)).args(0)
    p = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    return p.stdout + p.stderr


def test_bad_crl_or_pin_stops_start_up(tmp_path, cluster):
    bad = tmp_path / "bad-crl.pem"
    bad.write_text("not a CRL\n")
    out = _start_fails(tmp_path, cluster, f"--crl={bad}")
    assert "--crl: CRL file" in out and "no PEM" in out, out
    # A CRL of another CA.
    other = str(tmp_path / "other")
    gen_certs(other)
    out = _start_fails(tmp_path, cluster, f"--crl={other}/crl.pem")
    assert "not signed by a CA of --ca" in out, out
    out = _start_fails(tmp_path, cluster, f"--crl={tmp_path}/missing.pem")
    assert "cannot read" in out, out
    out = _start_fails(tmp_path, cluster, "--admin_clients=kmpc-admin,sha256:12ab")
    assert "--admin_clients: certificate pin 'sha256:12ab'" in out, out


def test_bad_engine_flags_stop_start_up(tmp_path, cluster):
    # Checked at start-up, so that a bad pair stops the server instead of
    # failing every batch ("wave_lanes must be >= chunk_lanes") on every
    # party.
    out = _start_fails(tmp_path, cluster, "--chunk_lanes=16384")  # wave 8192
    assert "--chunk_lanes / --wave_lanes: wave_lanes must be >= chunk_lanes" in out, out
    out = _start_fails(tmp_path, cluster, "--chunk_lanes=100")
    assert "positive multiple of 64" in out, out


def test_second_server_on_a_store_refused(tmp_path, cluster):
    # A second process on a running party's --store_dir: compaction renames
    # data.mdb under other openers, so the store is locked (DIR/kmpc.lock).
    out = _start_fails(tmp_path, cluster, f"--store_dir={cluster.store_dir(0)}")
    assert "is in use by another process" in out, out
    cluster.check_alive()


def test_older_crl_refused_after_restart(tmp_path, cluster):
    # The highest CRL Number each server accepted is kept in its store
    # (STORE_DIR/crl-numbers): an older, validly signed CRL is refused at the
    # next start too, not only while the server runs.
    old = tmp_path / "old-crl.pem"
    shutil.copy(f"{cluster.certs}/crl.pem", old)
    gen_certs(cluster.certs, "--crl")  # a new CRL Number, same revocations
    sighup_and_wait_for_reload(cluster)
    state = os.path.join(cluster.store_dir(0), "crl-numbers")
    assert os.stat(state).st_mode & 0o777 == 0o600
    # Party 0's store is locked by the running server: a restart is shown
    # with a store directory holding a copy of its CRL state.
    restarted = tmp_path / "restarted-store"
    restarted.mkdir()
    shutil.copy(state, restarted / "crl-numbers")
    out = _start_fails(tmp_path, cluster, f"--crl={old}", f"--store_dir={restarted}")
    assert ("--crl: CRL file" in out and "lower than" in out
            and str(restarted / "crl-numbers") in out), out
    # A second server on a running party's store stops at the store lock,
    # before it reads or writes anything there.
    out = _start_fails(tmp_path, cluster, f"--crl={old}",
                       f"--store_dir={cluster.store_dir(0)}")
    assert "in use by another process" in out and "--crl" not in out, out
    # The running servers refuse it as well and keep the newer one.
    shutil.copy(f"{cluster.certs}/crl.pem", tmp_path / "new-crl.pem")
    shutil.copy(old, f"{cluster.certs}/crl.pem.tmp")
    os.rename(f"{cluster.certs}/crl.pem.tmp", f"{cluster.certs}/crl.pem")
    try:
        time.sleep(1.2)  # the next call re-reads the changed file
        assert cluster.client("list-keys", client="admin-b").returncode == 0
        deadline = time.time() + 10
        while "lower than" not in cluster.log(1):
            assert time.time() < deadline, cluster.log(1)[-3000:]
            time.sleep(0.05)
    finally:
        shutil.copy(tmp_path / "new-crl.pem", f"{cluster.certs}/crl.pem.tmp")
        os.rename(f"{cluster.certs}/crl.pem.tmp", f"{cluster.certs}/crl.pem")
    cluster.check_alive()
