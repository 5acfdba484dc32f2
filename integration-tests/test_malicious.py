"""One actively malicious MPC server, real processes (issue 16).

Three kmpc-mpc-server processes on loopback over mutual TLS (the Cluster of
test_mpc_cluster.py), party 1 running the test-only kmpc-mpc-server-cheat:
KMPC_CHEAT="step:offset:mask:from_batch:late:count" XORs `mask` into byte
`offset` of the step-th ring message it sends in `count` batches from its
worker's from_batch-th on (mpc-server/src/service/scheduler.cc), and logs
the sizes of the messages it sent in each batch ("cheat harness: batch S
sent N ring messages, sizes a,b,..."): the steps are picked from that map.

Message map of one batch (0-based steps; one worker, so one session):
  0, 1        the agreement (batch_agreement.cc AgreeOnBatch): headers with their
              forwarding tags (AgreementHeader::kSize = 68 + kForwardTagSize
              = 16 bytes), then the headers and tags seen, forwarded, with
              the first ctr0 draw's shares riding along (an opening: bytes
              from 84 on);
  2 .. A-1    AES: one message per AND layer (rep3.h, kernel_impl.inc), the
              same sequence in both modes;
  A .. end    malicious only (protocol/verify.cc Verifier::Verify, the
              distributed zero-knowledge check; an ENCRYPT batch logs AND
              gates only, whose proof is over GF(2^64)). Every coin is two
              messages: a 32-byte acknowledgement (a hash of the values
              opened so far), then the 16-byte opening. Coin c1, the first
              compression's reshare (2G - 1 elements of 8 bytes: 248 for
              G = 16), coin c2, per halving a 16-byte reshare and a coin
              (once at most 2049 elements are left, per step by 4 a
              48-byte reshare and a coin instead),
              the last compression's reshare (2T - 2 = 256 elements of the
              T = 129 of dzkp::kTailWords: 2048) and its
              coin, the 24-byte opening of the last f, g and claim, and the
              32-byte "compare view" hash (the last message).
A is found as the first step where the two modes' maps differ. Seen for
this test's batch (one 4-block keystream job, AES-128), with the depth-3
S-box (aes.h kDepth3; --depth3_max_blocks=1000, as small semi-honest
batches get it by default): 84, 100, ten rounds of (1152, 3072, 2304), then
the check as below: A = 32; with the depth-4 S-box (--depth3_max_blocks=0,
malicious servers' default): 84, 100, ten rounds of (1152, 384, 512, 2304),
then 32, 16, 248, 32, 16, two (48, 32, 16), 2048, 32, 16, 24, 32 after
A = 42 messages. The tests run with both circuits where the injected step
depends on it.

Semi-honest control: the same AND-layer corruption completes the batch with
a keystream that does not match OpenSSL's (the attack surface exists and
the test can fail). Malicious: each injection fails the batch at the client
(no keystream), an honest server logs "MPC integrity check failed", no log
holds the key or a keystream, and the next batches are right.
"""
import os
import re
import subprocess
import time

import pytest

import ctr_mpc_ref as ref
import test_mpc_cluster as tmc
from test_mpc_cluster import BIN, Cluster, certs, expected_keystream  # noqa: F401

CHEAT_BIN = "kmpc-mpc-server-cheat"


CHEATER = 1
KEY = bytes(range(0x40, 0x50))  # AES-128
NBYTES = 4 * 16                 # a 4-block keystream (5 AES blocks with c0's)
INTEGRITY = "MPC integrity check failed"
# A plan that never fires (from batch 10^9 on): the cheat binary behaving
# honestly, for the message map.
NEVER = "0:0:0:1000000000"
# engine/agreement.h AgreementHeader::kSize + kForwardTagSize: a header and
# its forwarding tag.
AGREEMENT_HEADER = 68 + 16
# Server flags that pick the S-box circuit of this test's 5-block batches
# in either mode (engine.h depth3_max_blocks), and the AND layers per AES
# round of each.
SBOX_FLAGS = {"depth3": ["--depth3_max_blocks=1000"], "depth4": ["--depth3_max_blocks=0"]}
SBOX_LAYERS = {"depth3": 3, "depth4": 4}


@pytest.fixture
def clusters(tmp_path, certs, request):
    """make(name, cheat=KMPC_CHEAT, flags=per-party flags) -> a started
    Cluster of one worker per server (one session, so batches count from
    the first), party 1 on the cheat binary, the three with
    --security=name unless flags say otherwise; all stopped afterwards,
    their logs dumped if the test failed, a server that died fails it."""
    made = []

    def make(security, cheat=NEVER, flags=None, cheater=CHEATER, sbox="depth3"):
        binaries = ["kmpc-mpc-server"] * 3
        binaries[cheater] = CHEAT_BIN
        envs = [{}, {}, {}]
        envs[cheater] = {"KMPC_CHEAT": cheat}
        # --breaker_deviations=0: these tests inject many deviations into
        # one cluster and check each is caught; the breaker that would
        # stop the cluster after three is test_breaker.py's.
        c = Cluster(str(tmp_path / f"{security}-{len(made)}"), certs, workers=1,
                    flags=flags or [[f"--security={security}", *SBOX_FLAGS[sbox],
                                     "--breaker_deviations=0"]] * 3,
                    binaries=binaries, envs=envs)
        made.append(c)
        return c.start()
    yield make
    for c in made:
        try:
            c.check_alive()
        finally:
            tmc._dump(request, c)
            c.stop()


def rearm(c, cheat, cheater=CHEATER):
    """The cheating party (1 unless said) restarted with another
    KMPC_CHEAT (its batch count starts again at 0)."""
    c.kill_party(cheater)
    c.envs[cheater]["KMPC_CHEAT"] = cheat
    c.restart_party(cheater)


def read_log(c, i):
    with open(c.log_path(i), "rb") as f:
        return f.read().decode(errors="replace")


def message_map(c):
    """The sizes of the messages party 1 sent in its last batch."""
    found = re.findall(r"cheat harness: batch \d+ sent (\d+) ring messages, sizes ([\d,]*)",
                       read_log(c, CHEATER))
    assert found, read_log(c, CHEATER)
    n, sizes = found[-1]
    sizes = [int(x) for x in sizes.split(",") if x]
    assert len(sizes) == int(n)
    return sizes


def keystream_batch(c, kid):
    return c.jobs([f"keystream {kid} 1 {NBYTES}"], expect_ok=False, timeout=60)


def assert_right(c, r):
    """The batch ran and its keystream is OpenSSL's AES-CTR under KEY."""
    assert r.returncode == 0, r.stdout + r.stderr
    tag, ctr0, ks = r.stdout.split("\n")[0].split()
    assert tag == "ok", r.stdout
    assert bytes.fromhex(ks) == expected_keystream(KEY, bytes.fromhex(ctr0), NBYTES), r.stdout
    return ks


DEALING_CHECK = [32, 1, 1]


def maps(clusters, batch=None, right=None, sbox="depth3"):
    """(semi-honest map, malicious map, A = first step of the malicious
    verification) from one honest batch in each mode (batch(c, kid) and
    right(c, r): the keystream batch unless said) with the S-box `sbox`."""
    batch, right = batch or keystream_batch, right or assert_right
    out = {}
    for sec in ("semi-honest", "malicious"):
        c = clusters(sec, sbox=sbox)
        kid = c.put_key(KEY.hex())
        right(c, batch(c, kid))
        out[sec] = message_map(c)
        c.stop()
        c.expected_dead = {0, 1, 2}
    semi, mal = out["semi-honest"], out["malicious"]
    # Semi-honest only, when the batch has dealt shares: the dealing check
    # after the agreement (batch_agreement.cc CheckDealing: a 32-byte digest to the
    # predecessor, then two 1-byte verdicts); the malicious check covers
    # what it checks. Left out, the maps agree up to the malicious check.
    maps.dealing = semi[2:5] == DEALING_CHECK and mal[2:5] != DEALING_CHECK
    if maps.dealing:
        semi = semi[:2] + semi[5:]
    a = next(k for k in range(len(mal)) if k >= len(semi) or semi[k] != mal[k])
    return semi, mal, a


@pytest.mark.parametrize("sbox", sorted(SBOX_FLAGS))
def test_message_map(clusters, sbox):
    semi, mal, a = maps(clusters, sbox=sbox)
    assert not maps.dealing, semi  # a keystream batch deals nothing
    # Agreement, the S-box's AND layers per AES round over 10 rounds, and in
    # malicious mode the check's rounds after them: coin, first
    # compression, coin, (reshare, coin) per halving, the last compression
    # of TAIL_WORDS elements (h at e_1 .. e_256 reshared, coin), opening,
    # compare;
    # each coin an acknowledgement (32 bytes) and its opening (16). An
    # ENCRYPT batch logs AND gates only: the check's elements are of
    # GF(2^64), 8 bytes (verify.h).
    assert a == len(semi) and a == 2 + 10 * SBOX_LAYERS[sbox], (semi, mal)
    # One message per AND layer, 1 bit per AND per lane: one tile of 64
    # lanes, 16 S-boxes, 16 bytes per AND wire.
    ands = {"depth3": [9, 24, 18], "depth4": [9, 3, 4, 18]}[sbox]
    assert semi[2:] == [128 * n for n in ands] * 10, semi
    assert mal[a:a + 2] == [32, 16] and mal[a + 3:a + 5] == [32, 16], mal
    assert mal[a + 2] % 8 == 0 and mal[a + 2] >= 3 * 8, mal  # h values + mask
    # (reshare, acknowledgement, opening) per step: halvings (16-byte
    # reshares) first, then steps by 4 (48: 2 * 4 - 2 values), at least one.
    steps = mal[a + 5:-5]
    assert len(steps) >= 3 and len(steps) % 3 == 0, mal
    kinds = steps[0::3]
    assert steps[1::3] == [32] * len(kinds) and steps[2::3] == [16] * len(kinds), mal
    assert set(kinds) <= {16, 48} and 48 in kinds and kinds == sorted(kinds), mal
    assert mal[-5:-2] == [8 * TAIL_POINTS, 32, 16], mal
    assert mal[-2:] == [24, 32], mal
    assert all(s > 0 for s in semi[2:]), semi
    assert mal[:2] == [AGREEMENT_HEADER, AGREEMENT_HEADER + 16], mal  # one ctr0 share
    assert (a - 2) % 10 == 0, semi  # AES-128: the same layers in each round
    step = CASES["and_layer"](semi, mal, a)[0]
    assert 2 <= step < a and mal[step] == mal[a - 1], (step, mal)


CASES = {
    # (a) the last AND layer of AES round 9 (AES-128: 10 rounds of
    # (a - 2) / 10 layers). Its products reach the S-box outputs linearly
    # (Boyar-Peralta's bottom linear layer), so corrupting byte 0 of its
    # first word (wire 0, S-box 0, lanes 0-7: all 5 blocks of the batch)
    # changes round 10's S-box inputs and so the keystream, whatever the
    # key. Round 10's own last layer would not do for the semi-honest
    # control: its error reaches the output shares unmixed, and the
    # client's check that the two copies of each share agree catches that.
    "and_layer": lambda semi, mal, a: (a - 1 - (a - 2) // 10, 0, 0xFF, False),
    # (b) the check itself, each of its messages: the last-but-one message,
    # the opening of the last f, g and claim; the first compression's
    # reshare (an error on one value of h); a halving's reshare (the
    # first halving's h(x)); the compare hash.
    "verification": lambda semi, mal, a: (len(mal) - 2, 5, 0x10, False),
    "first_compression": lambda semi, mal, a: (a + 2, 7 * 8 + 3, 0x04, False),
    "halving": lambda semi, mal, a: (a + 5, 8 + 5, 0x20, False),
    # the last compression's reshare (an error on h(e_40)).
    "last_compression": lambda semi, mal, a: (len(mal) - 5, 39 * 8 + 2, 0x08, False),
    # a coin's acknowledgement (c2's): the opened values then differ.
    "coin_acknowledgement": lambda semi, mal, a: (a + 3, 9, 0x40, False),
    "compare": lambda semi, mal, a: (len(mal) - 1, 20, 0x01, False),
    # (c) a late opening: party 1 waits for its successor's shares of the
    # first ctr0 draw (agreement, step 1, after the 68-byte header) before
    # sending its own, biased.
    "late_ctr0_opening": lambda semi, mal, a: (1, AGREEMENT_HEADER + 3, 0x01, True),
    # (c'') the forwarded header (agreement, step 1: party 2's header, which
    # party 1 forwards to party 0): a byte of its inputs digest, and of its
    # forwarding tag. Party 0 finds the tag wrong, runs the batch in step
    # with party 2 and fails it; party 2's compare view differs from party
    # 0's (agreement.h ForwardTag).
    "forwarded_header": lambda semi, mal, a: (1, 3, 0x01, False),
    "forwarded_tag": lambda semi, mal, a: (1, AGREEMENT_HEADER - 1, 0x80, False),
    # (c') late coin openings in the check (16-byte messages): c1, and the
    # last compression's.
    "late_coin_opening": lambda semi, mal, a: (a + 1, 0, 0x80, True),
    "late_last_coin_opening": lambda semi, mal, a: (len(mal) - 3, 3, 0x02, True),
}


def test_cheats_are_caught_and_servers_keep_serving(clusters):
    semi, mal, a = maps(clusters)
    c = clusters("malicious")
    kid = c.put_key(KEY.hex())
    seen_ks = []
    for name, plan in CASES.items():
        step, off, mask, late = plan(semi, mal, a)
        assert 0 <= step < len(mal) and 0 <= off < mal[step], (name, step, off, mal)
        # Only the first batch of party 1's worker is cheated (count 1).
        rearm(c, f"{step}:{off}:{mask}:0:{int(late)}:1")
        before = [len(read_log(c, i)) for i in range(3)]
        r = keystream_batch(c, kid)
        where = f"{name} (step {step} of {len(mal)}, {mal[step]} bytes)"
        assert "corrupting ring message" in read_log(c, CHEATER)[before[CHEATER]:], where
        # The client gets an error and no keystream.
        assert r.returncode != 0, (where, r.stdout, r.stderr)
        assert not re.search(r"^ok ", r.stdout, re.M), (where, r.stdout)
        # DATA_LOSS (15), BATCH_INTEGRITY_CHECK_FAILED: not a ring fault.
        assert re.search(rf"^rpc_error \d 15 .*{INTEGRITY}", r.stdout, re.M), (where, r.stdout)
        new = {i: read_log(c, i)[before[i]:] for i in range(3)}
        assert any(INTEGRITY in new[i] for i in (0, 2)), (where, new)
        # The servers keep serving: the next batches are honest and right.
        for _ in range(2):
            seen_ks.append(assert_right(c, keystream_batch(c, kid)))
        c.check_alive()
    # No secret in any log: neither the key nor a keystream it made.
    logs = [read_log(c, i) for i in range(3)]
    for secret in [KEY.hex()] + seen_ks:
        for i, text in enumerate(logs):
            assert secret.lower() not in text.lower(), f"party {i} logs a secret"


@pytest.mark.parametrize("sbox", sorted(SBOX_FLAGS))
def test_and_layer_cheat_is_caught_with_each_sbox(clusters, sbox):
    """Every AND layer of a round of either S-box, corrupted in malicious
    mode, fails the batch with the integrity error, and the next batch is
    right."""
    semi, mal, a = maps(clusters, sbox=sbox)
    c = clusters("malicious", sbox=sbox)
    kid = c.put_key(KEY.hex())
    layers = SBOX_LAYERS[sbox]
    # Round 5's layers: steps 2 + 5 * layers .. (one per message of both
    # circuits' S-box layers), a different word and bit in each: byte 0 of
    # a word holds lanes 0-7, of which 0-4 carry the batch's blocks (the
    # check skips the others: MulLog::AppendAnd).
    for k in range(layers):
        step = 2 + 5 * layers + k
        off, mask = 8 * ((37 * k + 5) % (mal[step] // 8)), 1 << (k % 5)
        rearm(c, f"{step}:{off}:{mask}:0:0:1")
        before = [len(read_log(c, i)) for i in range(3)]
        r = keystream_batch(c, kid)
        where = f"{sbox} layer {k} (step {step}, {mal[step]} bytes)"
        assert "corrupting ring message" in read_log(c, CHEATER)[before[CHEATER]:], where
        assert r.returncode != 0 and not re.search(r"^ok ", r.stdout, re.M), (where, r.stdout)
        assert re.search(rf"^rpc_error \d 15 .*{INTEGRITY}", r.stdout, re.M), (where, r.stdout)
        assert_right(c, keystream_batch(c, kid))
        c.check_alive()


@pytest.mark.parametrize("sbox", sorted(SBOX_FLAGS))
def test_semi_honest_control_gives_a_wrong_keystream(clusters, sbox):
    """The same AND-layer corruption without verification: the batch
    completes and its keystream is wrong. The malicious test above is not
    passing for want of an attack."""
    semi, mal, a = maps(clusters, sbox=sbox)
    step, off, mask, late = CASES["and_layer"](semi, mal, a)
    c = clusters("semi-honest", cheat=f"{step}:{off}:{mask}:0:{int(late)}:1", sbox=sbox)
    kid = c.put_key(KEY.hex())
    r = keystream_batch(c, kid)
    assert "corrupting ring message" in read_log(c, CHEATER)
    assert r.returncode == 0, r.stdout + r.stderr
    tag, ctr0, ks = r.stdout.split("\n")[0].split()
    assert tag == "ok"
    assert bytes.fromhex(ks) != expected_keystream(KEY, bytes.fromhex(ctr0), NBYTES)
    for i in range(3):
        assert INTEGRITY not in read_log(c, i)
    assert_right(c, keystream_batch(c, kid))  # only the first batch was cheated


def test_mixed_security_refuses_every_batch(clusters):
    c = clusters("mixed", flags=[["--security=malicious"], ["--security=semi-honest"],
                                 ["--security=malicious"]])
    kid = c.put_key(KEY.hex())
    for _ in range(2):
        r = keystream_batch(c, kid)
        assert r.returncode != 0, r.stdout + r.stderr
        assert not re.search(r"^ok ", r.stdout, re.M), r.stdout
        # ABORTED (10) from the agreement, naming the flag to fix.
        assert re.search(r"^rpc_error \d 10 .*--security", r.stdout, re.M), r.stdout
    # kmpc-admin status names each server's mode and the mismatch.
    p = subprocess.run([os.path.join(tmc.BIN, "kmpc-admin"), f"--servers={c.servers}",
                        f"--ca={c.certs}/ca.pem", f"--cert={c.certs}/admin.pem",
                        f"--key={c.certs}/admin.key", "status"],
                       capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in os.environ.items() if k != "KMPC_ADMIN_CONFIG"})
    assert p.returncode == 1, p.stdout + p.stderr
    for i, mode in enumerate(["malicious", "semi-honest", "malicious"]):
        assert re.search(rf"^server {i} .*, security {mode}$", p.stdout, re.M), p.stdout
    assert ("security: MISMATCH, the servers run malicious and semi-honest"
            in p.stdout), p.stdout
    assert p.stdout.rstrip().endswith("status: PROBLEMS (see above)"), p.stdout


# ---- The GF(2^128) proof (proof B of protocol/verify.h) in real processes.
#
# A CHECKSUM job logs GF(2^128) products (each block of its shared
# message times its power of H: tags.cc AddSharedProducts; the powers
# come with the key's shares), so its batch's check runs both proofs in the
# same messages: B's part follows A's in each reshare and in the opening.
# Message map after A (verify.cc), GF_BLOCKS = 300 shared blocks (B's
# vector, their products and those of the powers of H, 539 elements, halves
# three times to 68 <= TAIL_WORDS; A's vector steps by 4 once, in the first
# of those rounds):
#   a, a+1      coin c1 (acknowledgement 32, opening 16)
#   a+2         first compression: A's 2G - 1 values (8 bytes each), then
#               B's mask product (16, the last 16 bytes)
#   a+3, a+4    coin c2
#   a+5 ..      per step a reshare (A's h(1), h(x): 16 bytes, or its
#               h(e_1) .. h(e_6) once it steps by 4: 48; B's h(1), h(x): 32
#               more while B halves) and a coin (32, 16)
#   len-5       last compression: A's 256 values (2048 bytes), B's 256
#               (4096)
#   len-4, -3   its coin
#   len-2       the opening: A's f, g, claim (24), B's (48)
#   len-1       compare
# The products' own messages come before a: the shared blocks' products
# are the last product layer (a - 1, 16 bytes per block).
GF_BLOCKS = 300
GF_USAGE = 23
GF_DATA = bytes((7 * i + 1) & 0xFF for i in range(16 * GF_BLOCKS))
TAIL_WORDS = 129  # dzkp::kTailWords
TAIL_POINTS = 2 * TAIL_WORDS - 2  # dzkp::kTailHPoints - 1 values of each proof


def checksum_batch(c, kid):
    return c.jobs([f"checksum {kid} {GF_USAGE} {GF_DATA.hex()}"], expect_ok=False, timeout=60)


def assert_checksum_right(c, r):
    """The batch ran and its checksum is the reference's (ctr_mpc_ref.py)."""
    assert r.returncode == 0, r.stdout + r.stderr
    tag, out = r.stdout.split("\n")[0].split()
    assert tag == "ok", r.stdout
    ck = bytes.fromhex(out)
    assert ck == ref.checksum(KEY, GF_USAGE, GF_DATA, ck[:16]), r.stdout
    return out


GF_CASES = {
    # (a) a shared block's product (block 5): an error on one GF(2^128)
    # product, which only proof B sees.
    "gf_product": lambda semi, mal, a: (a - 1, 16 * 5 + 3, 0x10),
    # (b) each of B's parts of the check's messages: its mask product in
    # the first compression, its h(x) in the first halving, its h(e_9) in
    # the last compression, its g in the opening.
    "gf_first_compression": lambda semi, mal, a: (a + 2, mal[a + 2] - 16 + 9, 0x02),
    "gf_halving": lambda semi, mal, a: (a + 5, mal[a + 5] - 16 + 7, 0x01),
    "gf_last_compression": lambda semi, mal, a: (len(mal) - 5, 8 * TAIL_POINTS + 16 * 8 + 1,
                                                 0x80),
    "gf_opening": lambda semi, mal, a: (len(mal) - 2, 24 + 16 + 4, 0x08),
}


def gf_maps(clusters):
    return maps(clusters, checksum_batch, assert_checksum_right)


def test_gf_message_map(clusters):
    semi, mal, a = gf_maps(clusters)
    assert maps.dealing  # the checksummed message is dealt as shares
    assert a == len(semi), (semi, mal)
    assert semi[-1] == 16 * GF_BLOCKS, semi  # the shared blocks' products
    assert mal[a:a + 2] == [32, 16] and mal[a + 3:a + 5] == [32, 16], mal
    assert (mal[a + 2] - 16) % 8 == 0 and mal[a + 2] >= 16 + 3 * 8, mal
    assert mal[a + 5:a + 8] == [48 + 32, 32, 16], mal    # A steps by 4, B halves
    assert mal[a + 8:a + 14] == [32, 32, 16] * 2, mal    # then B halves alone
    assert mal[-5:] == [(8 + 16) * TAIL_POINTS, 32, 16, 24 + 48, 32], mal
    for name, plan in GF_CASES.items():
        step, off, mask = plan(semi, mal, a)
        assert 0 <= step < len(mal) and 0 <= off < mal[step], (name, step, off, mal)


def test_gf_proof_cheats_are_caught_from_each_party(clusters):
    """Every GF(2^128) case from each party: the batch fails with the
    integrity error at the client, an honest server logs it, and the next
    batch is served right."""
    t0 = time.monotonic()
    semi, mal, a = gf_maps(clusters)
    for cheater in range(3):
        c = clusters("malicious", cheater=cheater)
        kid = c.put_key(KEY.hex())
        honest = [i for i in range(3) if i != cheater]
        for name, plan in GF_CASES.items():
            step, off, mask = plan(semi, mal, a)
            rearm(c, f"{step}:{off}:{mask}:0:0:1", cheater)
            before = [len(read_log(c, i)) for i in range(3)]
            r = checksum_batch(c, kid)
            where = f"party {cheater} {name} (step {step} of {len(mal)}, {mal[step]} bytes)"
            assert "corrupting ring message" in read_log(c, cheater)[before[cheater]:], where
            assert r.returncode != 0, (where, r.stdout, r.stderr)
            assert not re.search(r"^ok ", r.stdout, re.M), (where, r.stdout)
            assert re.search(rf"^rpc_error \d 15 .*{INTEGRITY}", r.stdout, re.M), (where, r.stdout)
            assert any(INTEGRITY in read_log(c, i)[before[i]:] for i in honest), where
            assert_checksum_right(c, checksum_batch(c, kid))
            c.check_alive()
        c.stop()
        c.expected_dead = {0, 1, 2}
    print(f"GF(2^128) proof injections, 3 parties x {len(GF_CASES)}: "
          f"{time.monotonic() - t0:.1f} s")


def received_zeros(c):
    """(messages party 1 received from party 2 in its last batch, the
    indices of those that were all zeros)."""
    found = re.findall(r"cheat harness: batch \d+ received (\d+) ring messages, all-zero ([\d,]*)",
                       read_log(c, CHEATER))
    assert found, read_log(c, CHEATER)
    n, zeros = found[-1]
    return int(n), {int(x) for x in zeros.split(",") if x}


# A shifted opening (protocol/verify.h, "Openings"): party 1 sends party 0 a
# shifted share of a value the three open, so that party 0 alone opens
# another value and computes its next messages (to party 2) from it. Party
# 2, which opened the true value, must send party 1 nothing computed from
# those messages: it finds party 0's acknowledgement at the next coin
# differing from its own hash and goes silent (zeros) for the rest of the
# check, so its opening of the last f, g and claim (the message before the
# compare hash) reaches party 1 as zeros, and the batch fails.
SHIFTED = {
    # coin c2's opening (the first compression's challenge and weights)
    "coin_c2": lambda semi, mal, a: (a + 4, 0, 0x01),
    # the first halving's or step's coin
    "step_coin": lambda semi, mal, a: (a + 7, 2, 0x10),
    # the agreement's ctr0 opening (step 1, after the forwarded header and
    # tag): party 0 holds the public counter in its component 0 and runs
    # the AES on another counter
    "ctr0": lambda semi, mal, a: (1, AGREEMENT_HEADER + 3, 0x01),
}


def test_shifted_openings_silence_the_honest_successor(clusters):
    semi, mal, a = maps(clusters)
    c = clusters("malicious")
    kid = c.put_key(KEY.hex())
    assert_right(c, keystream_batch(c, kid))
    n, zeros = received_zeros(c)
    assert n == len(mal) and not zeros, (n, zeros)  # honest: nothing silent
    for name, plan in SHIFTED.items():
        step, off, mask = plan(semi, mal, a)
        assert mal[step] == (16 if name != "ctr0" else AGREEMENT_HEADER + 16), (name, mal)
        rearm(c, f"{step}:{off}:{mask}:0:0:1")
        before = [len(read_log(c, i)) for i in range(3)]
        r = keystream_batch(c, kid)
        assert r.returncode != 0 and not re.search(r"^ok ", r.stdout, re.M), (name, r.stdout)
        assert INTEGRITY in read_log(c, 2)[before[2]:], name
        n, zeros = received_zeros(c)
        # The opening of the last f, g and claim (and everything after the
        # next acknowledgement) arrived as zeros.
        assert n == len(mal) and n - 2 in zeros, (name, n, sorted(zeros))
        assert_right(c, keystream_batch(c, kid))
