"""Verification pads against one actively malicious MPC server, real
processes (issue 25, "Signing stays secure").

The cluster and cheat harness of test_malicious.py: party 1 runs
kmpc-mpc-server-cheat, which XORs an error into one of its ring messages.
The batch here draws one verification pad (a JOB_PAD at a checksum's
counter, kmpc.proto): the servers compute E_K(c) and multiply a fresh
shared r into it and into the powers of H, one GF(2^128) product each, in
one ring message after the AES layers (tags.cc CheckTags,
FillVerifyPads). The cheater adds an error to the share of the product
r*H^2 it sends in that message (bytes 16..31: r*H^1 comes first), found
as the last message of the semi-honest map of the same batch (the two
modes' maps agree up to there). H^2 multiplies a block of the 48-byte
message (H^1 the public lengths block, which only first shares meet).

Malicious: the batch fails at the client with the integrity error, an
honest server logs it, no pad is kept, and the next pad verifies the right
tag and refuses a wrong one. Semi-honest control: the batch completes and
its pad refuses the right tag (the deviation is real, and in semi-honest
mode undetected: docs/security/deviating-servers.md, "Signed and verified
contents, in the semi-honest mode").
"""
import re
import time

from test_malicious import CHEATER, INTEGRITY, clusters, message_map, read_log, rearm  # noqa: F401
from test_mpc_cluster import certs  # noqa: F401

KEY = bytes(range(0x60, 0x70))  # AES-128
USAGE = 17
MSG = bytes(range(0x20, 0x50))  # 48 bytes: three GHASH blocks


def _checksum(c, kid):
    r = c.jobs([f"checksum {kid} {USAGE} {MSG.hex()}"])
    return bytes.fromhex(r.stdout.split()[1])


def _vpad(c, kid, ctr0):
    return c.jobs([f"vpad {kid} {USAGE} 64 {ctr0.hex()}"], expect_ok=False, timeout=60)


def _verify(c, pad, tag):
    return c.client("sign", f"--run_batch_id_hex={pad[2]}", f"--job_id={pad[3]}",
                    f"--usage={USAGE}", f"--data_hex={MSG.hex()}",
                    f"--verify_tag_hex={tag.hex()}").stdout.strip()


def _pad(r):
    fields = r.stdout.split()
    assert r.returncode == 0 and fields and fields[0] == "ok", r.stdout + r.stderr
    return fields


def _product_step(clusters):
    """The step of the verification pads' product message: the last of an
    honest semi-honest vpad batch."""
    c = clusters("semi-honest")
    kid = c.put_key(KEY.hex())
    ck = _checksum(c, kid)
    _pad(_vpad(c, kid, ck[:16]))
    sizes = message_map(c)
    c.stop()
    c.expected_dead = {0, 1, 2}
    return len(sizes) - 1, sizes


def test_verification_pad_products_are_checked(clusters):
    t0 = time.monotonic()
    step, semi = _product_step(clusters)
    assert semi[step] >= 16 * 7, semi  # r*H^1..H^6 and r*E_K(c), 16 bytes each
    c = clusters("malicious")
    kid = c.put_key(KEY.hex())
    ck = _checksum(c, kid)
    ctr0, tag = ck[:16], ck[16:]
    wrong = bytes([tag[0] ^ 1]) + tag[1:]
    rearm(c, f"{step}:16:1:0:0:1")  # r*H^2's first byte, first batch only
    before = [len(read_log(c, i)) for i in range(3)]
    r = _vpad(c, kid, ctr0)
    assert "corrupting ring message" in read_log(c, CHEATER)[before[CHEATER]:]
    assert r.returncode != 0 and not re.search(r"^ok ", r.stdout, re.M), r.stdout
    assert re.search(rf"^rpc_error \d 15 .*{INTEGRITY}", r.stdout, re.M), r.stdout
    assert any(INTEGRITY in read_log(c, i)[before[i]:] for i in (0, 2))
    # The servers keep serving: a fresh pad verifies right.
    pad = _pad(_vpad(c, kid, ctr0))
    assert _verify(c, pad, tag) == "verified"
    pad = _pad(_vpad(c, kid, ctr0))
    assert _verify(c, pad, wrong) == "not_verified"
    c.check_alive()
    print(f"malicious verification pad injection: {time.monotonic() - t0:.1f} s")


def test_semi_honest_control_breaks_the_verify(clusters):
    step, _ = _product_step(clusters)
    c = clusters("semi-honest")
    kid = c.put_key(KEY.hex())
    ck = _checksum(c, kid)
    rearm(c, f"{step}:16:1:0:0:1")
    pad = _pad(_vpad(c, kid, ck[:16]))
    assert "corrupting ring message" in read_log(c, CHEATER)
    assert _verify(c, pad, ck[16:]) == "not_verified"
    for i in range(3):
        assert INTEGRITY not in read_log(c, i)
    pad = _pad(_vpad(c, kid, ck[:16]))  # only the first batch was cheated
    assert _verify(c, pad, ck[16:]) == "verified"
