"""Three real kmpc-mpc-server processes on loopback over mutual TLS.

Driven through the C++ client (tools/mpc_client/): no python gRPC here.
Results are checked against an independent implementation of the enctypes
(ctr_mpc_ref.py: python3-cryptography's AES, which is OpenSSL, plus its own
GHASH) and the shared vectors. Any server that dies fails the test; every
server log is printed on failure.
"""
import json
import re
import os
import random
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import threading
import time

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

import ctr_mpc_ref as ref
from kmpc_harness import cluster as kmpc_cluster
from aes_ref import expand_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The repository's copy of ../shared/vectors (test_enctype.py checks that
# it is identical to the shared one).
VECTORS = os.path.join(ROOT, "krb5-patches", "tests", "enctype-vectors.json")


def _bin_dir():
    """KMPC_MPC_BIN_DIR, else where kmpc_cluster.find_built finds the server
    ($KMPC_CMAKE_BUILD, else the most recently built tree)."""
    d = os.environ.get("KMPC_MPC_BIN_DIR")
    if not d:
        server = kmpc_cluster.find_built("mpc-server/kmpc-mpc-server", required=False)
        d = os.path.dirname(server) if server else ""
    if d and all(os.access(os.path.join(d, b), os.X_OK)
                 for b in ("kmpc-mpc-server", "kmpc-mpc-client", "kmpc-mpc-bench")):
        return d
    return None


BIN = _bin_dir()
if BIN is None:  # a missing binary fails the run, it does not skip it
    raise kmpc_cluster.RealmError("kmpc-mpc-server / -client / -bench not built (make build)")


# The server refuses --debug_record_requests unless this is "1" too.
RECORD_ENV = "KMPC_TEST_ONLY_RECORD_REQUESTS"


class Cluster:
    """flags[i]: extra command-line flags of party i; binaries[i]: its
    server binary (a name in BIN); envs[i]: variables added to its
    environment. Changed between stop and restart_party, they take effect
    on the restart."""

    def __init__(self, top, certs, workers=2, ring_timeout_ms=2000, flags=None,
                 binaries=None, envs=None):
        self.top = top
        self.certs = certs
        self.workers = workers
        self.ring_timeout_ms = ring_timeout_ms
        self.flags = [list(f) for f in (flags or ([], [], []))]
        self.binaries = list(binaries or ["kmpc-mpc-server"] * 3)
        self.envs = [dict(e) for e in (envs or ({}, {}, {}))]
        self.base = kmpc_cluster.free_base()
        self.procs = [None, None, None]
        self.logs_ = ["", "", ""]
        self.expected_dead = set()
        # Key id -> "aes128" / "aes256" for the keys put_key dealt: jobs()
        # names each job's cipher from it (kmpc.proto Job.cipher), as a KDC
        # knows its keys' enctypes from its database.
        self.ciphers = {}
        os.makedirs(top, exist_ok=True)

    def grpc_addr(self, i):
        return f"127.0.0.1:{self.base + i}"

    def ring_addr(self, i):
        return f"127.0.0.1:{self.base + 10 + i}"

    @property
    def servers(self):
        return ",".join(self.grpc_addr(i) for i in range(3))

    def log_path(self, i):
        return os.path.join(self.top, f"party-{i}.log")

    def store_dir(self, i):
        return os.path.join(self.top, f"store-{i}")

    def start_party(self, i):
        log = open(self.log_path(i), "ab")
        args = [os.path.join(BIN, self.binaries[i]), f"--party={i}",
                f"--listen={self.grpc_addr(i)}", f"--ring_listen={self.ring_addr(i)}",
                f"--ring_prev={self.ring_addr((i + 2) % 3)}",
                "--ring_next=127.0.0.1",
                f"--cert={self.certs}/party-{i}.pem", f"--key={self.certs}/party-{i}.key",
                f"--ca={self.certs}/ca.pem", f"--store_dir={self.store_dir(i)}",
                f"--workers={self.workers}", f"--ring_timeout_ms={self.ring_timeout_ms}",
                "--schedule_timeout_ms=5000", "--peer_batch_wait_ms=2000"] + self.flags[i]
        self.procs[i] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.envs[i]})
        self.expected_dead.discard(i)
        log.close()

    def wait_listening(self, i, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(self.log_path(i), "rb") as f:
                data = f.read().decode(errors="replace")
            # Count "listening" lines: a restarted server appends a new one.
            if data.count("listening on") >= self._starts.get(i, 1):
                return
            if self.procs[i].poll() is not None:
                raise AssertionError(f"party {i} exited: {data}")
            time.sleep(0.05)
        raise AssertionError(f"party {i} did not start listening")

    def start(self):
        self._starts = {}
        for i in range(3):
            self._starts[i] = 1
            self.start_party(i)
        for i in range(3):
            self.wait_listening(i)
        return self

    def restart_party(self, i):
        self._starts[i] = self._starts.get(i, 1) + 1
        self.start_party(i)
        self.wait_listening(i)

    def kill_party(self, i, sig=signal.SIGKILL):
        self.expected_dead.add(i)
        self.procs[i].send_signal(sig)
        self.procs[i].wait(timeout=10)

    def check_alive(self):
        for i, p in enumerate(self.procs):
            if i in self.expected_dead:
                continue
            assert p is not None and p.poll() is None, f"party {i} died (rc={p.returncode})"

    def stop(self):
        for i, p in enumerate(self.procs):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def logs(self):
        out = []
        for i in range(3):
            try:
                with open(self.log_path(i), "rb") as f:
                    out.append(f"--- party {i} ---\n" + f.read().decode(errors="replace")[-20000:])
            except OSError:
                pass
        return "\n".join(out)

    # ---- client
    def client(self, *args, stdin=None, client=None, timeout=120,
               binary="kmpc-mpc-client"):
        """Runs kmpc-mpc-client (or `binary`, e.g. kmpc-mpc-bench) against
        the three servers."""
        cmd = [os.path.join(BIN, binary), f"--servers={self.servers}",
               f"--certs={self.certs}"]
        if client:
            cmd.append(f"--client={client}")
        cmd += list(args)
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                              timeout=timeout)

    def put_key(self, key_hex, key_id_hex=None):
        """A service's key (kmpc.proto KeyKind): the tests run any job under
        it; under a user's the servers run an AS exchange only
        (mpc-server/src/engine/user_key_rule.h)."""
        args = ["put-key", f"--key_hex={key_hex}", "--key_kind=service"]
        if key_id_hex:
            args.append(f"--key_id_hex={key_id_hex}")
        r = self.client(*args)
        assert r.returncode == 0, r.stdout + r.stderr
        kid = r.stdout.strip()
        self.ciphers[kid] = "aes128" if len(key_hex) == 32 else "aes256"
        return kid

    def with_ciphers(self, lines):
        """Job lines with the cipher their key was dealt for (OP:CIPHER),
        unless a line names one already or its key id is not ours (then the
        client's --cipher, aes128, applies)."""
        out = []
        for line in lines:
            f = line.split(" ")
            if len(f) > 1 and ":" not in f[0] and f[1] in self.ciphers:
                f[0] += ":" + self.ciphers[f[1]]
            out.append(" ".join(f))
        return out

    def jobs(self, lines, extra=(), expect_ok=True, timeout=120):
        lines = self.with_ciphers(lines)
        r = self.client(*extra, "jobs", stdin="\n".join(lines) + "\n", timeout=timeout)
        if expect_ok:
            assert r.returncode == 0, r.stdout + r.stderr
        return r


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("mpc-certs"))
    subprocess.run(["bash", os.path.join(ROOT, "deploy", "gen-certs.sh"), d, "kmpc-rogue"],
                   check=True, capture_output=True)
    return d


def _dump(request, cluster):
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        sys.stderr.write(f"\n===== MPC server logs for {request.node.name} =====\n")
        sys.stderr.write(cluster.logs() + "\n")


# The shared cluster's tests are the semi-honest protocol's (its S-box
# rule above, the depth-3 circuit); test_malicious.py runs the known
# answers against malicious servers, the servers' default.
@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory, certs):
    c = Cluster(str(tmp_path_factory.mktemp("mpc-cluster")), certs,
                flags=[["--security=semi-honest"]] * 3).start()
    # The ring connects in the background after "listening" (start does not
    # wait for it): its tests, whichever runs first, find it up.
    deadline = time.monotonic() + 30
    while c.client("health").stdout.count("ring_up 1") < 3:
        assert time.monotonic() < deadline, "ring did not come up\n" + c.logs()
        time.sleep(0.1)
    yield c
    c.stop()


@pytest.fixture
def cluster(shared_cluster, request):
    shared_cluster.check_alive()
    yield shared_cluster
    try:
        shared_cluster.check_alive()
    finally:
        _dump(request, shared_cluster)


@pytest.fixture
def own_cluster(tmp_path, certs, request):
    made = []

    def make(**kw):
        c = Cluster(str(tmp_path / f"c{len(made)}"), certs, **kw).start()
        made.append(c)
        return c
    yield make
    for c in made:
        try:
            c.check_alive()
        finally:
            _dump(request, c)
            c.stop()


def aes_ecb(key, blocks):
    e = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return e.update(blocks) + e.finalize()


def expected_keystream(key, ctr0, nbytes):
    c0 = int.from_bytes(ctr0, "big")
    n = (nbytes + 15) // 16
    ctrs = b"".join((c0 + i).to_bytes(16, "big") for i in range(1, n + 1))
    return aes_ecb(key, ctrs)[:nbytes]


# ----------------------------------------------------------------- tests

def _depth3_max_blocks():
    """The semi-honest servers' default S-box rule (engine.h EngineOptions):
    batches of at most this many AES blocks use the depth-3 S-box, larger
    ones the depth-4 (or, from small_sbox_min_blocks, the depth-6) one."""
    with open(os.path.join(ROOT, "mpc-server", "src", "engine", "engine.h")) as f:
        m = re.search(r"kDepth3MaxBlocksSemiHonest = (\d+);", f.read())
    assert m, "engine.h: kDepth3MaxBlocksSemiHonest not found"
    return int(m.group(1))


DEPTH3_MAX_BLOCKS = _depth3_max_blocks()


def _blocks(n):
    """AES blocks of an n-byte keystream job: its bytes and c0's block."""
    return (n + 15) // 16 + 1


# Small batches (the depth-3 S-box) and large ones (depth 4).
@pytest.mark.parametrize("sizes,jobs", [([1, 15, 16, 17, 31, 33, 100], 12),
                                        ([1, 15, 16, 17, 31, 33, 100, 257, 4000], 40)],
                         ids=["depth3", "depth4"])
def test_random_keys_and_counters_match_openssl(cluster, sizes, jobs):
    rng = random.Random(1234)
    keys = []
    for klen in (16, 32, 16, 32, 16):
        k = bytes(rng.randrange(256) for _ in range(klen))
        keys.append((k, cluster.put_key(k.hex())))
    lines, want = [], []
    for j in range(jobs):
        k, kid = keys[j % len(keys)]
        n = rng.choice(sizes)
        lines.append(f"keystream {kid} {j} {n}")
        want.append((k, n))
    total = sum(_blocks(n) for _, n in want)
    assert (total <= DEPTH3_MAX_BLOCKS) == (jobs == 12), (total, DEPTH3_MAX_BLOCKS)
    out = cluster.jobs(lines).stdout.split("\n")
    ctr0s = set()
    for (k, n), line in zip(want, out):
        tag, ctr0_hex, ks_hex = line.split()
        assert tag == "ok"
        ctr0 = bytes.fromhex(ctr0_hex)
        assert ctr0 not in ctr0s, "ctr0 repeated"
        ctr0s.add(ctr0)
        assert bytes.fromhex(ks_hex) == expected_keystream(k, ctr0, n)
    # The same batch again: fresh counters for every job.
    out2 = cluster.jobs(lines).stdout.split("\n")
    for line in out2[:len(lines)]:
        assert bytes.fromhex(line.split()[1]) not in ctr0s


def _vectors():
    with open(VECTORS) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def vector_keys(shared_cluster):
    v = _vectors()
    ids = {}
    for vec in v["encrypt"] + v["checksum"]:
        if vec["key"] not in ids:
            ids[vec["key"]] = shared_cluster.put_key(vec["key"])
    return ids


@pytest.mark.parametrize("sbox", ["depth3", "depth4"])
def test_vectors_decrypt_and_verify(cluster, vector_keys, sbox):
    v = _vectors()
    lines = []
    for vec in v["encrypt"]:
        lines.append(f"decrypt {vector_keys[vec['key']]} {vec['usage']} {vec['ciphertext']}")
    for vec in v["checksum"]:
        lines.append(f"verify {vector_keys[vec['key']]} {vec['usage']} "
                     f"{vec['data'] or '-'} {vec['checksum']}")
    # At most one block per 16 bytes of hex, plus c0's, per job.
    assert sum(len(x) // 32 + 2 for x in lines) <= DEPTH3_MAX_BLOCKS
    if sbox == "depth4":
        # A keystream job after the vectors' jobs makes the batch large.
        kid = vector_keys[v["encrypt"][0]["key"]]
        lines.append(f"keystream {kid} 1 {16 * DEPTH3_MAX_BLOCKS}")
    out = cluster.jobs(lines).stdout.split("\n")
    for vec, line in zip(v["encrypt"], out):
        assert line == f"ok {vec['plaintext']}", vec
    for vec, line in zip(v["checksum"], out[len(v["encrypt"]):]):
        assert line == "ok", vec


def test_encrypt_finalize_and_checksum_accepted_by_reference(cluster, vector_keys):
    v = _vectors()
    # ENCRYPT of an empty plaintext: see test_encrypt_empty_plaintext.
    v["encrypt"] = [vec for vec in v["encrypt"] if vec["plaintext"]]
    lines = []
    for vec in v["encrypt"]:
        lines.append(f"encrypt {vector_keys[vec['key']]} {vec['usage']} {vec['plaintext']}")
    for vec in v["checksum"]:
        lines.append(f"checksum {vector_keys[vec['key']]} {vec['usage']} {vec['data'] or '-'}")
    out = cluster.jobs(lines).stdout.split("\n")
    back = []
    for vec, line in zip(v["encrypt"], out):
        tag, ct_hex = line.split()
        assert tag == "ok"
        ct = bytes.fromhex(ct_hex)
        key = bytes.fromhex(vec["key"])
        assert ct[:16] != bytes.fromhex(vec["ctr0"])  # the cluster picked ctr0
        assert ref.decrypt(key, vec["usage"], ct) == bytes.fromhex(vec["plaintext"])
        back.append(f"decrypt {vector_keys[vec['key']]} {vec['usage']} {ct_hex}")
    for vec, line in zip(v["checksum"], out[len(v["encrypt"]):]):
        tag, ck_hex = line.split()
        assert tag == "ok"
        key = bytes.fromhex(vec["key"])
        data = bytes.fromhex(vec["data"])
        assert ref.verify_checksum(key, vec["usage"], data, bytes.fromhex(ck_hex))
        back.append(f"verify {vector_keys[vec['key']]} {vec['usage']} {vec['data'] or '-'} {ck_hex}")
    out2 = cluster.jobs(back).stdout.split("\n")
    for vec, line in zip(v["encrypt"], out2):
        assert line == f"ok {vec['plaintext']}"
    for line in out2[len(v["encrypt"]):len(back)]:
        assert line == "ok"


def test_encrypt_empty_plaintext(cluster, vector_keys):
    vec = next(v for v in _vectors()["encrypt"] if not v["plaintext"])
    r = cluster.jobs([f"encrypt {vector_keys[vec['key']]} {vec['usage']} -"], expect_ok=False)
    assert r.returncode == 0, r.stdout + r.stderr
    ct = bytes.fromhex(r.stdout.split()[1])
    assert ref.decrypt(bytes.fromhex(vec["key"]), vec["usage"], ct) == b""


def test_finalize_at_most_once(cluster, vector_keys):
    vec = _vectors()["encrypt"][0]
    r = cluster.jobs([f"encrypt {vector_keys[vec['key']]} {vec['usage']} {vec['plaintext']}"],
                     extra=["--finalize_twice"])
    lines = r.stdout.split("\n")
    for i in range(3):
        assert f"second_finalize {i} 5" in lines, r.stdout  # NOT_FOUND
    ct = bytes.fromhex(lines[3].split()[1])
    assert ref.decrypt(bytes.fromhex(vec["key"]), vec["usage"], ct) == bytes.fromhex(vec["plaintext"])


def test_pad_and_sign_once(cluster, vector_keys):
    """JOB_PAD then the ring-free KeyOps.Sign (data dealt as shares): the
    checksum verifies under the reference, and every server refuses a
    second use of a pad (enctype.md, invariant 6), also after a first use
    that went to one server only."""
    for vec in _vectors()["checksum"]:
        key = bytes.fromhex(vec["key"])
        kid = vector_keys[vec["key"]]
        r = cluster.jobs([f"sign {kid} {vec['usage']} {vec['data'] or '-'}"],
                         extra=["--sign_twice"])
        lines = r.stdout.split("\n")
        for i in range(3):
            assert f"second_sign {i} JOB_PAD_UNAVAILABLE" in lines, r.stdout
        tag, ck_hex = lines[3].split()
        assert tag == "ok", r.stdout
        assert ref.verify_checksum(key, vec["usage"], bytes.fromhex(vec["data"]),
                                   bytes.fromhex(ck_hex))
    vec = _vectors()["checksum"][1]
    kid = vector_keys[vec["key"]]
    r = cluster.jobs([f"pad {kid} {vec['usage']} 64"])
    tag, ctr0, batch, job = r.stdout.split("\n")[0].split()
    assert tag == "ok"
    sign = ["sign", f"--run_batch_id_hex={batch}", f"--job_id={job}",
            f"--usage={vec['usage']}", f"--data_hex={vec['data']}"]
    r = cluster.client(*sign, "--only_party=1")
    assert r.stdout.strip() == "sent JOB_OK", r.stdout + r.stderr
    r = cluster.client(*sign)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split()[0] == "refused" and "JOB_PAD_UNAVAILABLE" in r.stdout, r.stdout
    r = cluster.client(*sign)
    assert r.stdout.strip() == "refused " + " ".join(["JOB_PAD_UNAVAILABLE"] * 3), r.stdout


def test_verification_pad_verifies_once(cluster, vector_keys):
    """A verification pad (JOB_PAD at a given counter: a TGT's ctr0 +
    2^17, kmpc.proto) at a checksum's ctr0: the ring-free verify item holds
    for the right tag and not for a wrong one or another message; every
    server refuses a second use, also after a first use that went to one
    server only; a verification pad never signs."""
    vec = _vectors()["checksum"][1]
    kid = vector_keys[vec["key"]]
    key = bytes.fromhex(vec["key"])
    data = bytes.fromhex(vec["data"])
    r = cluster.jobs([f"checksum {kid} {vec['usage']} {vec['data']}"])
    ck = bytes.fromhex(r.stdout.split()[1])
    assert ref.verify_checksum(key, vec["usage"], data, ck)
    ctr0, tag = ck[:16].hex(), ck[16:]
    wrong = bytes([tag[0] ^ 1]) + tag[1:]
    r = cluster.jobs([f"vpad {kid} {vec['usage']} 64 {ctr0}"] * 5)
    pads = [line.split() for line in r.stdout.strip().split("\n")]
    assert all(p[0] == "ok" and p[1] == ctr0 for p in pads), r.stdout

    def verify(p, t, msg=vec["data"], *extra):
        return cluster.client("sign", f"--run_batch_id_hex={p[2]}", f"--job_id={p[3]}",
                              f"--usage={vec['usage']}", f"--data_hex={msg}",
                              f"--verify_tag_hex={t.hex()}", *extra).stdout.strip()

    assert verify(pads[0], tag) == "verified"
    assert verify(pads[1], wrong) == "not_verified"
    assert verify(pads[2], tag, vec["data"] + "00") == "not_verified"
    # Used: refused by all three, whoever asks.
    assert verify(pads[0], tag) == "refused " + " ".join(["JOB_PAD_UNAVAILABLE"] * 3)
    assert verify(pads[3], tag, vec["data"], "--only_party=2") == "sent JOB_OK"
    out = verify(pads[3], tag)
    assert out.split()[0] == "refused" and "JOB_PAD_UNAVAILABLE" in out, out
    # Never signs (the pad is kept), then verifies.
    sign = ["sign", f"--run_batch_id_hex={pads[4][2]}", f"--job_id={pads[4][3]}",
            f"--usage={vec['usage']}", f"--data_hex={vec['data']}"]
    out = cluster.client(*sign).stdout.strip()
    assert out == "refused " + " ".join(["JOB_MALFORMED"] * 3), out
    assert verify(pads[4], tag) == "verified"


def test_servers_never_receive_a_checksum_message(own_cluster, tmp_path):
    """--debug_record_requests on real processes: a checksum, a verify, a
    sign and a ring-free verify item over a recognisable message reach no
    server in the clear (only shares, enctype.md invariant 5), nor does a
    presented tag, while the records hold the requests (their public parts
    are found); the server warns about the flag."""
    rec = [str(tmp_path / f"requests-{i}") for i in range(3)]
    c = own_cluster(flags=[[f"--debug_record_requests={rec[i]}"] for i in range(3)],
                    envs=[{RECORD_ENV: "1"}] * 3)
    for i in range(3):
        with open(c.log_path(i), "rb") as f:
            assert b"--debug_record_requests is set" in f.read()
    key = bytes(range(16))
    kid = c.put_key(key.hex())
    msg = b"EncTicketPart: session key 0123456789abcdef, PAC, authtime" * 3
    r = c.jobs([f"checksum {kid} 17 {msg.hex()}"])
    ck = r.stdout.split()[1]
    assert ref.verify_checksum(key, 17, msg, bytes.fromhex(ck))
    r = c.jobs([f"verify {kid} 17 {msg.hex()} {ck}", f"sign {kid} 17 {msg.hex()}"])
    lines = r.stdout.split("\n")
    assert lines[0] == "ok", r.stdout
    assert ref.verify_checksum(key, 17, msg, bytes.fromhex(lines[1].split()[1]))
    # The presented tag of a Run VERIFY and of a ring-free verify item (a
    # PAC signature: bytes of a ticket's plaintext) goes as shares too.
    ckb = bytes.fromhex(ck)
    r = c.jobs([f"vpad {kid} 17 {len(msg)} {ckb[:16].hex()}"])
    pad = r.stdout.split()
    assert pad[0] == "ok", r.stdout
    out = c.client("sign", f"--run_batch_id_hex={pad[2]}", f"--job_id={pad[3]}",
                   "--usage=17", f"--data_hex={msg.hex()}",
                   f"--verify_tag_hex={ckb[16:].hex()}").stdout.strip()
    assert out == "verified", out
    for i in range(3):
        with open(rec[i], "rb") as f:
            data = f.read()
        assert data.count(b"Run ") >= 3 and b"Sign " in data
        assert bytes.fromhex(kid) in data  # public metadata is there
        assert ckb[:16] in data  # the checksum's ctr0 is public
        for k in range(0, len(msg) - 8, 8):
            assert msg[k:k + 8] not in data, (i, msg[k:k + 8])
        for k in range(16, 32 - 6):
            assert ckb[k:k + 6] not in data, (i, k)
        assert os.stat(rec[i]).st_mode & 0o777 == 0o600, oct(os.stat(rec[i]).st_mode)


def test_request_recorder_is_refused_without_its_environment_variable(tmp_path):
    """--debug_record_requests alone (no KMPC_TEST_ONLY_RECORD_REQUESTS=1)
    stops the real server at once, naming the variable, before it creates
    the file or starts anything."""
    rec = tmp_path / "requests"
    env = {k: v for k, v in os.environ.items() if k != RECORD_ENV}
    for value in (None, "0"):
        if value is not None:
            env[RECORD_ENV] = value
        p = subprocess.run([os.path.join(BIN, "kmpc-mpc-server"), "--party=0",
                            f"--debug_record_requests={rec}"],
                           capture_output=True, text=True, env=env, timeout=30)
        assert p.returncode != 0, p.stdout + p.stderr
        assert RECORD_ENV + "=1" in p.stdout + p.stderr, p.stdout + p.stderr
        assert not rec.exists()


def test_tamper_any_bit_fails_integrity(cluster, vector_keys):
    v = _vectors()
    vec = v["encrypt"][0]
    ct = bytearray(bytes.fromhex(vec["ciphertext"]))
    kid = vector_keys[vec["key"]]
    lines = []
    for bit in range(len(ct) * 8):
        t = bytearray(ct)
        t[bit // 8] ^= 1 << (bit % 8)
        lines.append(f"decrypt {kid} {vec['usage']} {t.hex()}")
    lines.append(f"decrypt {kid} {vec['usage'] + 1} {ct.hex()}")  # wrong usage
    ck = v["checksum"][1]
    ckb = bytearray(bytes.fromhex(ck["checksum"]))
    for bit in range(0, len(ckb) * 8, 3):
        t = bytearray(ckb)
        t[bit // 8] ^= 1 << (bit % 8)
        lines.append(f"verify {vector_keys[ck['key']]} {ck['usage']} {ck['data'] or '-'} {t.hex()}")
    r = cluster.jobs(lines)
    out = r.stdout.split("\n")[:len(lines)]
    # Flipping ctr0 into the all-zero counter range is a request error, not
    # possible here; every other line must be an integrity failure and the
    # client saw no keystream share (it exits 5 on "keystream_leak").
    assert all(line == "integrity_failed" for line in out), r.stdout


def test_no_single_store_holds_key_material(cluster):
    rng = random.Random(99)
    secrets, ids = [], []
    for klen in (16, 32):
        key = bytes(rng.randrange(256) for _ in range(klen))
        ids.append(bytes.fromhex(cluster.put_key(key.hex())))
        h = aes_ecb(key, bytes(16))
        secrets.append(key)
        secrets.extend(expand_key(key))
        # H and its first powers (the store holds shares of H^1..H^64).
        hi, p = int.from_bytes(h, "big"), int.from_bytes(h, "big")
        for _ in range(8):
            secrets.append(p.to_bytes(16, "big"))
            p = ref.gf_mult(p, hi)
    for i in range(3):
        path = os.path.join(cluster.store_dir(i), "data.mdb")
        with open(path, "rb") as f:
            data = f.read()
        for kid in ids:  # positive control: we read the right, plain file
            assert kid in data
        for s in secrets:
            # Any 8-byte window of a secret (shares are XOR-masked, so even
            # half a round key must not appear).
            for off in range(0, len(s) - 7, 4):
                assert s[off:off + 8] not in data, f"party {i} store leaks key material"


def test_precise_errors(cluster, vector_keys):
    kid = next(iter(vector_keys.values()))
    unknown = "ab" * 32
    # An unknown key id fails only its job (NOT_FOUND, 5) on all three
    # servers; the rest of the batch is computed.
    r = cluster.jobs([f"keystream {unknown} 1 16", f"keystream {kid} 1 16"])
    lines = r.stdout.split("\n")
    assert lines[0].startswith("error 5 ") and "unknown key id" in lines[0], r.stdout
    assert lines[1].startswith("ok "), r.stdout
    # A job that breaks the contract (proto/contract.h) fails alone, the
    # same on the three servers: MALFORMED (INVALID_ARGUMENT, 3) with what is
    # wrong, or, for input that cannot verify under any key, an integrity
    # failure; the good job beside it in the same batch is computed.
    cases = [
        (f"decrypt {kid} 1 {'00' * 10}", "integrity_failed"),
        (f"keystream {'ab' * 31} 1 16", "error 3 key id must be 32 bytes"),
        (f"keystream {kid} 1 {70000 * 16}", "error 3 ENCRYPT plaintext of"),
        (f"verify {kid} 1 00 {'00' * 31}", "integrity_failed"),
        (f"decrypt {kid} 1 {'00' * 48}", "integrity_failed"),
    ]
    for bad, want in cases:
        r = cluster.jobs([bad, f"keystream {kid} 2 16"], timeout=30)
        lines = r.stdout.split("\n")
        assert lines[0].startswith(want), (bad, r.stdout)
        assert lines[1].startswith("ok "), (bad, r.stdout)
    # Oversized batch: more AES blocks than the engine's batch limit.
    lines = [f"keystream {kid} {j} {65536 * 16}" for j in range(17)]
    r = cluster.jobs(lines, expect_ok=False, timeout=60)
    assert r.returncode == 3 and " 8 " in r.stdout, r.stdout  # RESOURCE_EXHAUSTED


def test_job_names_its_cipher_and_other_cipher_is_refused(cluster):
    """kmpc.proto Job.cipher over real gRPC: a key id dealt for AES-128 used
    as AES-256, and the reverse, fail alone (JOB_WRONG_CIPHER, shown as
    error 7 = PERMISSION_DENIED) with nothing revealed; no cipher is a
    malformed job (error 3); the jobs beside them in the same batch are
    computed under the right cipher. The servers count the refusals."""
    k128, k256 = os.urandom(16), os.urandom(32)
    id128, id256 = cluster.put_key(k128.hex()), cluster.put_key(k256.hex())
    lines = [
        f"keystream:aes256 {id128} 1 16",   # dealt AES-128
        f"keystream:aes128 {id128} 1 20",
        f"checksum:aes128 {id256} 7 0102",  # dealt AES-256
        f"keystream:aes256 {id256} 1 20",
        f"keystream:0 {id128} 1 16",        # CIPHER_UNSPECIFIED
        f"decrypt:aes128 {id256} 3 {'01' * 48}",
    ]
    r = cluster.jobs(lines)
    out = r.stdout.split("\n")
    assert out[0].startswith("error 7 ") and "dealt for AES128" in out[0], r.stdout
    assert out[2].startswith("error 7 ") and "dealt for AES256" in out[2], r.stdout
    assert out[5].startswith("error 7 ") and "dealt for AES256" in out[5], r.stdout
    assert out[4].startswith("error 3 ") and "cipher" in out[4], r.stdout
    for line, key in ((out[1], k128), (out[3], k256)):
        tag, ctr0_hex, ks_hex = line.split()
        assert tag == "ok", r.stdout
        assert bytes.fromhex(ks_hex) == expected_keystream(key, bytes.fromhex(ctr0_hex), 20)
    # Without a cipher in the line the client's --cipher (aes128) applies:
    # an AES-256 key is refused, not run under AES-128's key schedule.
    r = cluster.client("jobs", stdin=f"keystream {id256} 1 16\n")
    assert r.returncode == 0 and r.stdout.startswith("error 7 "), r.stdout + r.stderr
    m = cluster.client("metrics", client="admin")
    assert m.returncode == 0, m.stdout + m.stderr
    counts = [int(float(v)) for v in re.findall(
        r'kmpc_job_failures_total\{[^}]*status="JOB_WRONG_CIPHER"[^}]*\} (\S+)', m.stdout)]
    assert len(counts) == 3 and all(n >= 4 for n in counts), m.stdout
    cluster.check_alive()


def test_key_deleted_on_one_server_fails_only_its_jobs(cluster, vector_keys):
    kid = next(iter(vector_keys.values()))
    doomed = cluster.put_key("11" * 16)
    r = cluster.jobs([f"keystream {doomed} 1 16"])
    assert r.stdout.startswith("ok "), r.stdout
    r = cluster.client("delete-key", f"--key_id_hex={doomed}", "--only_party=2")
    assert r.returncode == 0, r.stdout + r.stderr
    t0 = time.monotonic()
    r = cluster.jobs([f"keystream {kid} 1 16", f"keystream {doomed} 1 16",
                      f"checksum {kid} 7 0102"])
    took = time.monotonic() - t0
    lines = r.stdout.split("\n")
    assert lines[0].startswith("ok "), r.stdout
    assert lines[1].startswith("error 5 ") and "party 2" in lines[1], r.stdout
    assert lines[2].startswith("ok "), r.stdout
    assert took < 2, f"{took:.1f} s"
    cluster.check_alive()


def test_access_control(cluster):
    # KDC certificate on Admin, admin certificate on KeyOps, an unknown
    # certificate from the same CA on both: PERMISSION_DENIED (7).
    r = cluster.client("health", client="kdc")
    assert r.returncode == 3 and " 7 " in r.stdout, r.stdout
    r = cluster.client("jobs", stdin=f"keystream {'ab' * 32} 1 16\n", client="admin")
    assert r.returncode == 3 and " 7 " in r.stdout, r.stdout
    r = cluster.client("list-keys", client="kmpc-rogue")
    assert r.returncode == 3 and " 7 " in r.stdout, r.stdout
    r = cluster.client("health")
    assert r.returncode == 0 and r.stdout.count("ring_up 1") == 3, r.stdout
    assert r.stdout.count(" security semi-honest\n") == 3, r.stdout


def test_grpc_fuzz_no_crash_no_hang(cluster, vector_keys):
    r = cluster.client("fuzz", "--count=60", "--seed=7", timeout=600)
    assert r.returncode == 0 and "fuzz ok" in r.stdout, r.stdout + r.stderr
    cluster.check_alive()
    vec = _vectors()["encrypt"][1]
    out = cluster.jobs([f"decrypt {vector_keys[vec['key']]} {vec['usage']} {vec['ciphertext']}"])
    assert out.stdout.split("\n")[0] == f"ok {vec['plaintext']}"


def _tls_to_ring(cluster, target, as_party):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_verify_locations(f"{cluster.certs}/ca.pem")
    ctx.load_cert_chain(f"{cluster.certs}/party-{as_party}.pem",
                        f"{cluster.certs}/party-{as_party}.key")
    ctx.check_hostname = False
    raw = socket.create_connection(("127.0.0.1", cluster.base + 10 + target), timeout=5)
    return ctx.wrap_socket(raw)


def test_ring_fuzz_malformed_frames(cluster, vector_keys):
    rng = random.Random(5)
    vec = _vectors()["encrypt"][2]
    good = f"decrypt {vector_keys[vec['key']]} {vec['usage']} {vec['ciphertext']}"
    for target in range(3):
        nxt = (target + 1) % 3
        for trial in range(6):
            try:
                s = _tls_to_ring(cluster, target, nxt)
                if trial % 2 == 0:
                    s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
                else:
                    # A valid hello for worker 0, then malformed frames.
                    s.sendall(b"KRH1" + bytes([nxt, 0, 0, 0]))
                    hdr = struct.pack("<HBBIII", 0x4B52, rng.choice([1, 2, 9]), 0,
                                      rng.randrange(2**32), rng.randrange(4), rng.randrange(2**32))
                    s.sendall(hdr + bytes(rng.randrange(256) for _ in range(64)))
                time.sleep(0.05)
                s.close()
            except (OSError, ssl.SSLError):
                pass
        # A peer certificate of the wrong party is refused.
        try:
            s = _tls_to_ring(cluster, target, (target + 2) % 3)
            s.sendall(b"KRH1" + bytes([(target + 2) % 3, 0, 0, 0]))
            s.close()
        except (OSError, ssl.SSLError):
            pass
    cluster.check_alive()
    # The ring recovers: a batch succeeds within a few attempts, each bounded.
    ok = False
    for attempt in range(4):
        t0 = time.time()
        r = cluster.jobs([good], expect_ok=False, timeout=60)
        assert time.time() - t0 < 30
        if r.returncode == 0 and r.stdout.split("\n")[0] == f"ok {vec['plaintext']}":
            ok = True
            break
        time.sleep(1)
    assert ok, r.stdout + r.stderr
    cluster.check_alive()


def _cpu_seconds(pid):
    """utime + stime of a process (proc(5), /proc/PID/stat fields 14, 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_kill_one_server_mid_batch_then_recover(own_cluster, victim):
    c = own_cluster(ring_timeout_ms=2000)
    key = bytes(range(16))
    kid = c.put_key(key.hex())
    # Sanity, and the warm cluster's pace: 100 jobs of 1,024 blocks.
    t0 = time.time()
    c.jobs([f"keystream {kid} {j} {1024 * 16}" for j in range(100)], timeout=120)
    took = time.time() - t0
    # A batch of about 3 s at that pace (at most 1,000 jobs, 32 MiB of
    # shares per response), so that it is still running when the kill
    # comes: a fixed 100 jobs took under 0.3 s on a fast run and ended
    # before the kill.
    n = max(100, min(1000, int(100 * 3.0 / max(took, 0.01))))
    big = [f"keystream {kid} {j} {1024 * 16}" for j in range(n)]
    res = {}
    th = threading.Thread(
        target=lambda: res.update(r=c.jobs(big, expect_ok=False, timeout=60)))
    cpu0 = _cpu_seconds(c.procs[victim].pid)
    t0 = time.time()
    th.start()
    # Kill once the victim computes this batch (50 ms of CPU beyond its
    # idle), not after a fixed sleep that a loaded machine may stretch.
    while (th.is_alive() and time.time() - t0 < 30
           and _cpu_seconds(c.procs[victim].pid) - cpu0 < 0.05):
        time.sleep(0.005)
    c.kill_party(victim)
    th.join(70)
    elapsed = time.time() - t0
    r = res["r"]
    assert r.returncode == 3, r.stdout + r.stderr
    assert " 14 " in r.stdout, r.stdout  # UNAVAILABLE
    assert elapsed < 15, elapsed
    c.check_alive()  # the other two are still up
    c.restart_party(victim)
    t0 = time.time()
    r = c.jobs([f"keystream {kid} 1 64"])
    line = r.stdout.split("\n")[0].split()
    assert bytes.fromhex(line[2]) == expected_keystream(key, bytes.fromhex(line[1]), 64)
    assert time.time() - t0 < 10
    c.check_alive()


def test_batches_sent_to_party0_only_do_not_stall_the_ring(own_cluster):
    """A client that sends its batches to party 0 only (a buggy KDC, a lossy
    path to the other servers) holds no worker: party 0 proposes each again
    after a short backoff until --peer_batch_wait_ms has passed, and a
    normal batch sent meanwhile runs at once, with twice as many such
    batches as workers. They then fail with the clear error. (Before, each
    held a worker on all three servers for the whole wait: the normal batch
    waited behind them.) "At once" is an order, not a wall-clock bound: the
    normal batches end before the first of the stalled ones, which a normal
    batch queued behind them could not (the ring has two workers for four
    stalled batches); the wait (4 s) is long against a client's run on a
    loaded machine."""
    peer_wait = 4.0
    c = own_cluster(workers=2, flags=[[f"--peer_batch_wait_ms={int(peer_wait * 1000)}"]] * 3)
    key = bytes(range(16))
    kid = c.put_key(key.hex())

    def normal():
        t0 = time.time()
        r = c.jobs([f"keystream {kid} 1 64"])
        took = time.time() - t0
        line = r.stdout.split("\n")[0].split()
        assert bytes.fromhex(line[2]) == expected_keystream(key, bytes.fromhex(line[1]), 64)
        return took

    # The client's own cost (process start, three TLS handshakes): the
    # slowest of a few normal batches on the idle cluster.
    slowest = max(normal() for _ in range(3))
    stalled = []

    def one_party():
        t0 = time.time()
        r = c.client("--only_party=0", "jobs", stdin=f"keystream {kid} 1 16\n", timeout=60)
        stalled.append((r, time.time() - t0, time.time()))

    t_start = time.time()
    threads = [threading.Thread(target=one_party) for _ in range(4)]
    for th in threads:
        th.start()
    time.sleep(0.5)  # all four reached party 0 and were proposed
    normal_ends = []
    for _ in range(2):
        slowest = max(slowest, normal())
        normal_ends.append(time.time())
    for th in threads:
        th.join(60)
    assert len(stalled) == 4
    first_stalled_end = min(end for _, _, end in stalled)
    assert max(normal_ends) < first_stalled_end, (
        "a normal batch waited behind batches only party 0 received",
        [e - t_start for e in normal_ends], first_stalled_end - t_start)
    for r, elapsed, _ in stalled:
        assert r.returncode == 3, r.stdout + r.stderr
        assert r.stdout.startswith(
            "rpc_error 0 14 party 2 did not receive this batch from the client in time"), r.stdout
        # Proposed again for the whole wait, not failed at once; and not
        # held past it longer than a client run (the slowest seen) takes.
        assert elapsed >= peer_wait - 0.1, elapsed
        assert elapsed < peer_wait + 2 * slowest + 1, (elapsed, slowest)
    c.check_alive()
