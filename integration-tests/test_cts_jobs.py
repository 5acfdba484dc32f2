"""The aes*-cts jobs (kmpc.proto JobType with CIPHER_AES*_CTS) on three real
kmpc-mpc-server processes, against MIT krb5's own libk5crypto (the patched
prefix): keys from krb5_c_string_to_key, dealt with their per-usage
material (kmpc-mpc-client put-key --cipher=aes*-cts); a PA-ENC-TIMESTAMP
encrypted by krb5_c_encrypt (usage 1) decrypted by the cluster; a flipped
bit fails with nothing released and the gated reply withheld; the
cluster's reply (usage 3) accepted by krb5_c_decrypt; the usage-56
checksum equal to krb5_c_make_checksum's; in both security modes. And no
server's recorded requests hold a plaintext byte of these jobs.
"""
import datetime
import json
import os
import subprocess
import time

import pytest

import kmpc_harness.realm as realm_mod
import test_mpc_cluster as tmc
from test_mpc_cluster import Cluster, RECORD_ENV, certs, own_cluster  # noqa: F401

HELPER = os.path.join(tmc.ROOT, "mpc-server", "test", "cts", "cts_krb5_tool.c")


def _timestamp_now():
    """A PA-ENC-TS-ENC (RFC 4120 5.2.7.2) of now, DER: a user key's gate
    releases its reply only within the servers' clock skew
    (docs/security-model.md, "Freshness of the gate")."""
    return (bytes.fromhex("301aa011180f")
            + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ").encode()
            + bytes.fromhex("a10502030c3500"))


# Set afresh before each test (_fresh_timestamp): one made when the module
# is collected is older than the skew by the time a slow run reaches it.
TIMESTAMP = _timestamp_now()
REPLY = (b"EncASRepPart: session key 00112233445566778899aabbccddeeff, "
         b"nonce, flags, authtime, srealm KMPC.TEST, sname krbtgt") * 2


@pytest.fixture(autouse=True)
def _fresh_timestamp():
    global TIMESTAMP
    TIMESTAMP = _timestamp_now()


@pytest.fixture(scope="module")
def krb5_tool(tmp_path_factory):
    """The helper built against the patched prefix's libk5crypto."""
    out = realm_mod.build_c(HELPER, tmp_path_factory.mktemp("cts-tool") / "cts_krb5_tool",
                            cflags=("-O1",))

    def run(*args, ok=True):
        r = subprocess.run([out] + [a if a else "-" for a in args],
                           capture_output=True, text=True)
        if ok:
            assert r.returncode == 0, r.stderr
        return r
    return run


@pytest.fixture(scope="module", params=["semi-honest", "malicious"])
def cts_cluster(request, tmp_path_factory, certs):  # noqa: F811
    c = Cluster(str(tmp_path_factory.mktemp("cts-cluster")), certs,
                flags=[[f"--security={request.param}"]] * 3).start()
    _wait_ring(c)
    yield c
    c.stop()


@pytest.fixture
def cluster(cts_cluster, request):
    """The module's cluster, alive before and after the test; its logs on a
    failure."""
    cts_cluster.check_alive()
    yield cts_cluster
    try:
        cts_cluster.check_alive()
    finally:
        tmc._dump(request, cts_cluster)


def _wait_ring(c):
    deadline = time.monotonic() + 30
    while c.client("health").stdout.count("ring_up 1") < 3:
        assert time.monotonic() < deadline, "ring did not come up\n" + c.logs()
        time.sleep(0.1)


def put_cts_key(c, key_hex, kind=None):
    """kind: kmpc.proto KeyKind ("user", the default: no ticket or PAC
    material, the AS reply gated; "service"; "user+service")."""
    cipher = "aes128-cts" if len(key_hex) == 32 else "aes256-cts"
    extra = [f"--key_kind={kind}"] if kind else []
    r = c.client("put-key", f"--key_hex={key_hex}", f"--cipher={cipher}", *extra)
    assert r.returncode == 0, r.stdout + r.stderr
    kid = r.stdout.strip()
    c.ciphers[kid] = cipher
    return kid


def lines_of(r):
    return r.stdout.strip().split("\n")


@pytest.fixture
def keys(cluster, krb5_tool):
    out = {}
    for et in (18, 17):
        key = krb5_tool("s2k", str(et), "password", "KMPC.TESTuser").stdout.strip()
        out[et] = (key, put_cts_key(cluster, key, "user+service"))
    return out


def test_compromised_kdc_gets_no_ungated_user_reply(cluster, krb5_tool):
    """Issue 48, finding 4: a compromised KDC host (the KDC's certificate,
    KeyOps straight to the servers) asks for a user's AS reply ENCRYPT
    (usage 3) with no gate, or gated on another user's timestamp: it
    would get C || T of a plaintext it chose under the user's
    password-derived key, an offline password verifier for every user,
    whether they log in or not. The servers refuse both (JOB_MALFORMED,
    which kmpc-mpc-client prints as "error 3 ...");
    on the timestamp of that very user, in the same Run, it is computed.
    The user key has no ticket (2) or PAC (17) material either."""
    c = cluster
    key = krb5_tool("s2k", "18", "password", "KMPC.TESTvictim").stdout.strip()
    other = krb5_tool("s2k", "18", "password", "KMPC.TESTmallory").stdout.strip()
    kid, oid = put_cts_key(c, key), put_cts_key(c, other)
    ts = krb5_tool("enc", "18", other, "1", TIMESTAMP.hex()).stdout.strip()
    out = lines_of(c.jobs([f"cts_encrypt {kid} 3 {REPLY.hex()}",
                           f"cts_decrypt {oid} 1 {ts}",
                           f"cts_encrypt@2 {kid} 3 {REPLY.hex()}",
                           f"cts_encrypt {kid} 2 {REPLY.hex()}",
                           f"cts_checksum {kid} 17 {REPLY.hex()}"]))
    refused = "error 3 a user key's AS reply"  # JOB_MALFORMED, INVALID_ARGUMENT
    assert out[0].startswith(refused), out
    assert out[1].startswith("ok "), out
    assert out[2].startswith(refused), out
    assert out[3] == "status JOB_UNKNOWN_USAGE", out
    assert out[4] == "status JOB_UNKNOWN_USAGE", out
    mine = krb5_tool("enc", "18", key, "1", TIMESTAMP.hex()).stdout.strip()
    out = lines_of(c.jobs([f"cts_decrypt {kid} 1 {mine}", f"cts_encrypt@1 {kid} 3 {REPLY.hex()}"]))
    assert out[1].startswith("ok "), out
    reply_ct = out[1].split()[1]
    assert bytes.fromhex(krb5_tool("dec", "18", key, "3", reply_ct).stdout.strip()) == REPLY
    # A service's random key: no gate asked.
    svc = put_cts_key(c, os.urandom(32).hex(), "service")
    assert lines_of(c.jobs([f"cts_encrypt {svc} 3 {REPLY.hex()}"]))[0].startswith("ok ")


def test_admin_certificate_alone_cannot_ungate_a_user_key(cluster, krb5_tool):
    """The Admin certificate is on the KDC host (kmpc-admin and kadmind's
    dealer run there), so a compromised KDC host holds it beside the KDC's.
    With it, it would ask each server to make a user's password-derived
    key a service's (Admin.SetKeyKind with allow_ungate, as kmpc-admin
    set-kind --force does), then get the user's AS reply with no gate: an
    offline verifier of a password the user never typed while the host was
    compromised. Each server refuses (FAILED_PRECONDITION, 9) unless its
    own operator listed the key in --allow_ungate_keys, so the key stays a
    user's and the ungated reply is still refused."""
    c = cluster
    key = krb5_tool("s2k", "18", "password", "KMPC.TESTdormant").stdout.strip()
    kid = put_cts_key(c, key)
    for i in range(3):
        r = c.client("set-kind", f"--key_id_hex={kid}", "--key_kind=service",
                     "--allow_ungate", f"--only_party={i}")
        assert r.returncode != 0, r.stdout + r.stderr
        assert f"rpc_error {i} 9 " in r.stdout + r.stderr, r.stdout + r.stderr
        assert "--allow_ungate_keys" in r.stdout + r.stderr, r.stdout + r.stderr
    out = lines_of(c.jobs([f"cts_encrypt {kid} 3 {REPLY.hex()}"]))
    assert out[0].startswith("error 3 a user key's AS reply"), out


def test_timestamp_decrypts_reply_encrypts_checksum_matches(cluster, keys, krb5_tool):
    c = cluster
    for et, (key, kid) in keys.items():
        ct = krb5_tool("enc", str(et), key, "1", TIMESTAMP.hex()).stdout.strip()
        req = os.urandom(200)
        r = c.jobs([f"cts_decrypt {kid} 1 {ct}", f"cts_encrypt@1 {kid} 3 {REPLY.hex()}",
                    f"cts_checksum@1 {kid} 17 {req.hex()}"])
        out = lines_of(r)
        assert out[0].startswith("ok "), r.stdout
        assert bytes.fromhex(out[0].split()[1])[16:] == TIMESTAMP
        assert out[1].startswith("ok "), r.stdout
        reply_ct = out[1].split()[1]
        assert len(reply_ct) == 2 * (16 + len(REPLY) + 12)
        back = krb5_tool("dec", str(et), key, "3", reply_ct).stdout.strip()
        assert bytes.fromhex(back) == REPLY
        want = krb5_tool("cksum", str(et), key, "17", req.hex()).stdout.strip()
        assert out[2] == f"ok {want}", (out[2], want)
        # The reply is not accepted under another usage.
        assert krb5_tool("dec", str(et), key, "2", reply_ct, ok=False).returncode == 2


def test_service_ticket_encrypts_and_pac_checksum_matches(cluster, keys, krb5_tool):
    """A ticket to the key's principal (a user used as a service): the
    ENCRYPT under usage 2 decrypts with krb5_c_decrypt under usage 2 (not
    under 3), the CHECKSUM under usage 17 (the PAC server signature) is
    krb5_c_make_checksum's; neither needs a gate."""
    c = cluster
    ticket = b"EncTicketPart: flags, session key, crealm, cname, times, PAC " * 3
    for et, (key, kid) in keys.items():
        pac = os.urandom(300)
        r = c.jobs([f"cts_encrypt {kid} 2 {ticket.hex()}", f"cts_checksum {kid} 17 {pac.hex()}"])
        out = lines_of(r)
        assert out[0].startswith("ok ") and out[1].startswith("ok "), r.stdout
        ct = out[0].split()[1]
        assert bytes.fromhex(krb5_tool("dec", str(et), key, "2", ct).stdout.strip()) == ticket
        assert krb5_tool("dec", str(et), key, "3", ct, ok=False).returncode == 2
        want = krb5_tool("cksum", str(et), key, "17", pac.hex()).stdout.strip()
        assert out[1] == f"ok {want}", (out[1], want)


def test_flipped_bit_fails_and_releases_nothing(cluster, keys, krb5_tool):
    c = cluster
    key, kid = keys[18]
    ct = bytearray(bytes.fromhex(
        krb5_tool("enc", "18", key, "1", TIMESTAMP.hex()).stdout.strip()))
    for bit in (5, 8 * 20 + 1, 8 * len(ct) - 1):
        bad = bytearray(ct)
        bad[bit // 8] ^= 1 << (bit % 8)
        r = c.jobs([f"cts_decrypt {kid} 1 {bad.hex()}", f"cts_encrypt@1 {kid} 3 {REPLY.hex()}"])
        out = lines_of(r)
        assert out == ["integrity_failed", "status JOB_WITHHELD"], r.stdout
    # krb5 agrees the flipped ciphertext is bad.
    bad = bytearray(ct)
    bad[0] ^= 1
    assert krb5_tool("dec", "18", key, "1", bad.hex(), ok=False).returncode == 2


def test_usage_without_material_fails_alone(cluster, keys, krb5_tool):
    c = cluster
    key, kid = keys[17]
    ct = krb5_tool("enc", "17", key, "1", TIMESTAMP.hex()).stdout.strip()
    out = lines_of(c.jobs([f"cts_checksum {kid} 57 {os.urandom(40).hex()}",
                           f"cts_encrypt {kid} 4 {TIMESTAMP.hex()}",
                           f"cts_decrypt {kid} 1 {ct}"]))
    assert out[0] == "status JOB_UNKNOWN_USAGE", out
    assert out[1] == "status JOB_UNKNOWN_USAGE", out
    assert out[2].startswith("ok ") and bytes.fromhex(out[2].split()[1])[16:] == TIMESTAMP


def test_usage_only_in_the_kdcs_direction(cluster, keys, krb5_tool):
    """Review: a compromised KDC host must not decrypt AS replies it
    recorded earlier (DECRYPT under usage 3: past session keys), mint a
    user's timestamp (ENCRYPT under usage 1) nor decrypt tickets to the
    user it recorded (DECRYPT under usage 2, dealt for the ENCRYPT of such
    tickets); the servers refuse all three."""
    c = cluster
    key, kid = keys[18]
    reply_ct = krb5_tool("enc", "18", key, "3", REPLY.hex()).stdout.strip()
    ticket_ct = krb5_tool("enc", "18", key, "2", REPLY.hex()).stdout.strip()
    ct = krb5_tool("enc", "18", key, "1", TIMESTAMP.hex()).stdout.strip()
    out = lines_of(c.jobs([f"cts_decrypt {kid} 3 {reply_ct}",
                           f"cts_encrypt {kid} 1 {TIMESTAMP.hex()}",
                           f"cts_decrypt {kid} 2 {ticket_ct}",
                           f"cts_decrypt {kid} 1 {ct}"]))
    assert out[0] == "status JOB_UNKNOWN_USAGE", out
    assert out[1] == "status JOB_UNKNOWN_USAGE", out
    assert out[2] == "status JOB_UNKNOWN_USAGE", out
    assert out[3].startswith("ok ") and bytes.fromhex(out[3].split()[1])[16:] == TIMESTAMP


def test_servers_never_receive_a_cts_plaintext(own_cluster, tmp_path, krb5_tool):  # noqa: F811
    """--debug_record_requests: the reply an ENCRYPT encrypts, a
    CHECKSUM's message and a DECRYPT's C || T reach the servers as shares
    only, and a DECRYPT's plaintext not at all, while the records hold the
    requests' public parts."""
    rec = [str(tmp_path / f"requests-{i}") for i in range(3)]
    c = own_cluster(flags=[[f"--debug_record_requests={rec[i]}"] for i in range(3)],
                    envs=[{RECORD_ENV: "1"}] * 3)
    _wait_ring(c)
    key = krb5_tool("s2k", "18", "password", "KMPC.TESTuser").stdout.strip()
    kid = put_cts_key(c, key, "user+service")
    ct = krb5_tool("enc", "18", key, "1", TIMESTAMP.hex()).stdout.strip()
    msg = b"KDC-REQ-BODY: cname user, realm KMPC.TEST, till, nonce" * 3
    out = lines_of(c.jobs([f"cts_decrypt {kid} 1 {ct}", f"cts_encrypt@1 {kid} 3 {REPLY.hex()}",
                           f"cts_checksum {kid} 17 {msg.hex()}"]))
    assert all(o.startswith("ok ") for o in out), out
    for i in range(3):
        with open(rec[i], "rb") as f:
            data = f.read()
        assert b"Run " in data
        assert bytes.fromhex(kid) in data
        # C || T too (an offline password verifier whole: dealt as shares).
        for secret in (REPLY, msg, TIMESTAMP, bytes.fromhex(ct)):
            for k in range(0, len(secret) - 8, 4):
                assert secret[k:k + 8] not in data, (i, secret[k:k + 8])


def test_cts_bench_reports_a_login(cluster):
    """kmpc-mpc-bench cts: logins through KeyOps.Run, with the circuits'
    ANDs and rounds per login (cts-circuits.md's figures)."""
    r = cluster.client("cts", "--iters=2", "--cipher=aes256-cts", "--reply_bytes=284",
                       binary="kmpc-mpc-bench")
    assert r.returncode == 0, r.stdout + r.stderr
    line = [x for x in r.stdout.split("\n") if x.startswith("RESULT ")]
    assert line, r.stdout
    res = json.loads(line[0][len("RESULT "):])
    print(line[0])
    # A 300-byte conf || reply and a 44-byte timestamp (AES-256).
    assert res["ands_per_login"] == 64935 + 263764, res
    assert res["rounds_per_login"] == 2914, res
    assert 0 < res["latency_p50_ms"] <= res["latency_p99_ms"], res


def test_request_checksum_is_never_released(cluster, keys, krb5_tool):
    """Review: the PA-REQ-ENC-PA-REP checksum (usage 56) of a request is an
    offline verifier of the user's password; it leaves the cluster only
    spliced into the encrypted reply. A CHECKSUM job under usage 56 is
    refused (it used to return exactly MIT's usage-56 checksum of any
    message the KDC sent)."""
    c = cluster
    for et, (key, kid) in keys.items():
        req = os.urandom(120)
        out = lines_of(c.jobs([f"cts_checksum {kid} 56 {req.hex()}"]))
        want = krb5_tool("cksum", str(et), key, "56", req.hex()).stdout.strip()
        assert out[0] != f"ok {want}", "the servers released the usage-56 checksum"
        assert out[0] == "status JOB_UNKNOWN_USAGE", out
