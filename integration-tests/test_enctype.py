"""The aes128/aes256-ctr-mpc enctypes of krb5's ctr-mpc enctypes patch, checked three ways:

* the C library (through krb5-patches/tests/t_ctr_mpc) against the shared
  vectors, bit flips, counter ranges and key sizes;
* the independent Python reference (ctr_mpc_ref.py) against the vectors,
  against GCM from python3-cryptography and against RFC 3961/3962;
* the two against each other on random keys and plaintexts, in both
  directions.
"""
import hashlib
import json
import os
import re
import secrets
import subprocess

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import ctr_mpc_ref as ref
import kmpc_paths

# com_err codes of the krb5 error table (ERROR_TABLE_BASE_krb5 = -1765328384).
KRB5KRB_AP_ERR_BAD_INTEGRITY = -1765328384 + 31
KRB5_BAD_KEYSIZE = -1765328384 + 189

ENCTYPES = ["aes128-ctr-mpc", "aes256-ctr-mpc"]
LENGTHS = [0, 1, 15, 16, 17, 100, 1000]


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    path = kmpc_paths.t_ctr_mpc()
    if not os.access(path, os.X_OK):
        pytest.fail(f"t_ctr_mpc not built at {path} (make build, or set KMPC_T_CTR_MPC)")
    # An empty profile: the system krb5.conf must not influence the library.
    conf = tmp_path_factory.mktemp("krb5conf") / "krb5.conf"
    conf.write_text("")
    env = {**os.environ, "KRB5_CONFIG": str(conf), "KRB5_TRACE": "/dev/null"}

    def run(*args, expect_rc=0):
        p = subprocess.run([path, *map(str, args)], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == expect_rc, (
            f"t_ctr_mpc {' '.join(map(str, args))[:200]}: rc {p.returncode}\n"
            f"{p.stdout[-4000:]}\n{p.stderr[-2000:]}")
        return p.stdout

    return run


def error_code(out):
    """The code from t_ctr_mpc's 'error <code> ...' line."""
    first = out.strip().splitlines()[0].split()
    assert first[0] == "error", out
    return int(first[1])


@pytest.fixture(scope="module")
def vectors():
    with open(kmpc_paths.VECTORS) as f:
        return json.load(f)


def keylen(enctype):
    return ref.ENCTYPES[enctype]["keylen"]


# --- the C library alone -----------------------------------------------------

# SHA-256 of ../shared/vectors/enctype-vectors.json, the project's vectors,
# as the repo copy took them: the copy is checked against it on every
# machine (CI has no ../shared), and the shared original against both
# where it is present.
SHARED_VECTORS_SHA256 = "866db72c19bd9ee48d441728e893174ba6d46ab6f449a6d0cc330d625c6d74c0"


def _sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_vectors_copy_matches_shared():
    # Both at the pinned hash: the copy is the shared original, byte for byte.
    assert _sha256_of(kmpc_paths.VECTORS) == SHARED_VECTORS_SHA256, \
        "the repo copy of the vectors differs from the shared original's pinned hash"
    if os.path.exists(kmpc_paths.SHARED_VECTORS):
        assert _sha256_of(kmpc_paths.SHARED_VECTORS) == SHARED_VECTORS_SHA256, \
            "../shared/vectors changed: copy it into the repo and pin its new hash"


def test_c_reproduces_vectors(tool, vectors):
    out = tool("vectors", kmpc_paths.VECTORS)
    n = (len(vectors["string_to_key"]), len(vectors["encrypt"]), len(vectors["checksum"]))
    assert f"vectors: {n[0]} string-to-key, {n[1]} encryption, {n[2]} checksum" in out
    assert "vectors: all checks passed" in out
    assert "FAIL" not in out


@pytest.mark.parametrize("section,field", [
    ("string_to_key", "key"), ("encrypt", "ciphertext"), ("encrypt", "plaintext"),
    ("checksum", "checksum"), ("checksum", "data")])
def test_c_vector_check_detects_a_wrong_vector(tool, vectors, tmp_path, section, field):
    """The vector check can fail: one corrupted byte makes it exit 1."""
    bad = json.loads(json.dumps(vectors))
    v = bad[section][1]
    raw = bytearray(bytes.fromhex(v[field]))
    raw[-1] ^= 0x01
    v[field] = raw.hex()
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    out = tool("vectors", path, expect_rc=1)
    assert "FAIL" in out


def test_c_tamper(tool):
    out = tool("tamper")
    assert "tamper: all checks passed" in out
    for e in (-29001, -29002):
        for n in (0, 1, 16, 17, 40):
            assert f"ok: enctype {e}, {n}-byte plaintext: all" in out
        assert f"ok: enctype {e}: 40-byte handles and wrong-size AES keys refused" in out


def test_c_api(tool):
    out = tool("api")
    assert "api: all checks passed" in out


@pytest.mark.parametrize("enctype", ENCTYPES)
def test_c_key_handle_is_bad_keysize(tool, enctype):
    handle = b"kmpc-key" + secrets.token_bytes(32)
    for op, arg in [("encrypt", "00" * 5), ("encrypt-iov", "00" * 5),
                    ("decrypt", secrets.token_hex(40)), ("checksum", "00")]:
        out = tool(op, enctype, handle.hex(), 1, arg, expect_rc=2)
        assert error_code(out) == KRB5_BAD_KEYSIZE, (op, out)
        assert handle.hex() not in out
    out = tool("verify", enctype, handle.hex(), 1, "00", secrets.token_hex(32), expect_rc=2)
    assert error_code(out) == KRB5_BAD_KEYSIZE, out


# --- the reference alone -------------------------------------------------------

def test_reference_reproduces_vectors(vectors):
    assert ref.check_vectors(vectors) == []


def test_reference_detects_a_wrong_vector(vectors):
    bad = json.loads(json.dumps(vectors))
    ct = bytearray(bytes.fromhex(bad["encrypt"][0]["ciphertext"]))
    ct[20] ^= 0x80
    bad["encrypt"][0]["ciphertext"] = ct.hex()
    assert ref.check_vectors(bad) != []


@pytest.mark.parametrize("enctype", ENCTYPES)
@pytest.mark.parametrize("length", LENGTHS)
def test_reference_is_gcm_for_a_96_bit_iv(enctype, length):
    """With ctr0 = IV || 0^31 || 1 the construction is exactly GCM (SP 800-38D)
    with AAD = usage: an independent check of the reference's CTR and GHASH."""
    key = secrets.token_bytes(keylen(enctype))
    iv = secrets.token_bytes(12)
    usage = secrets.randbelow(2**32)
    pt = secrets.token_bytes(length)
    ours = ref.encrypt(key, usage, pt, iv + b"\0\0\0\1")
    gcm = AESGCM(key).encrypt(iv, pt, usage.to_bytes(4, "big"))
    assert ours == iv + b"\0\0\0\1" + gcm


def test_reference_nfold_rfc3961():
    # RFC 3961 appendix A.1.
    cases = [(8, b"012345", "be072631276b1955"),
             (7, b"password", "78a07b6caf85fa"),
             (8, b"Rough Consensus, and Running Code", "bb6ed30870b7f0e0"),
             (21, b"password", "59e4a8ca7c0385c3c37b3f6d2000247cb6e6bd5b3e"),
             (24, b"MASSACHVSETTS INSTITVTE OF TECHNOLOGY",
              "db3b0d8f0b061e603282b308a50841229ad798fab9540c1b"),
             (21, b"Q", "518a54a215a8452a518a54a215a8452a518a54a215"),
             (21, b"ba", "fb25d531ae8974499f52fd92ea9857c4ba24cf297e"),
             (16, b"kerberos", "6b65726265726f737b9b5b2b93132b93"),
             (32, b"kerberos",
              "6b65726265726f737b9b5b2b93132b935c9bdcdad95c9899c4cae4dee6d6cae4")]
    for n, data, want in cases:
        assert ref.nfold(data, n).hex() == want, (n, data)


def test_reference_string_to_key_rfc3962():
    # RFC 3962 appendix B (the aes-cts vectors: same keys by the spec).
    salt = b"ATHENA.MIT.EDUraeburn"
    assert ref.string_to_key("aes128-ctr-mpc", b"password", salt, 1).hex() == \
        "42263c6e89f4fc28b8df68ee09799f15"
    assert ref.string_to_key("aes256-ctr-mpc", b"password", salt, 1).hex() == \
        "fe697b52bc0d3ce14432ba036a92e65bbb52280990a2fa27883998d72af30161"
    assert ref.string_to_key("aes128-ctr-mpc", b"password", salt, 1200).hex() == \
        "4c01cd46d632d01e6dbe230a01ed642a"
    assert ref.string_to_key("aes256-ctr-mpc", b"password", salt, 1200).hex() == \
        "55a6ac740ad17b4846941051e1e8b0a7548d93b0ab30a8bc3ff16280382b8c2a"


# --- C against the reference -------------------------------------------------------

@pytest.mark.parametrize("op", ["encrypt", "encrypt-iov"])
@pytest.mark.parametrize("enctype", ENCTYPES)
@pytest.mark.parametrize("length", LENGTHS)
def test_c_encryption_checked_by_reference(tool, op, enctype, length):
    for _ in range(3):
        key = secrets.token_bytes(keylen(enctype))
        usage = secrets.randbelow(2**32)
        pt = secrets.token_bytes(length)
        out = bytes.fromhex(tool(op, enctype, key.hex(), usage, pt.hex()).strip())
        assert len(out) == length + 32
        ctr0 = out[:16]
        # Recompute ciphertext and tag from the spec with the library's ctr0.
        assert ref.encrypt(key, usage, pt, ctr0) == out
        assert ref.decrypt(key, usage, out) == pt


@pytest.mark.parametrize("enctype", ENCTYPES)
def test_c_ctr0_is_fresh(tool, enctype):
    key = secrets.token_bytes(keylen(enctype))
    seen = {tool("encrypt", enctype, key.hex(), 1, "").strip()[:32] for _ in range(20)}
    assert len(seen) == 20


def _edge_ctr0s(nblocks):
    top = (1 << 128) - 1
    return [
        1,                                  # smallest legal counter
        (1 << 64) - 2,                      # c0 + i carries into the high half
        ((1 << 64) - 1) << 64 | ((1 << 64) - 1 - nblocks),  # high half all ones
        top - nblocks,                      # last block is exactly 2^128 - 1
    ]


@pytest.mark.parametrize("enctype", ENCTYPES)
@pytest.mark.parametrize("length", LENGTHS)
def test_reference_encryption_decrypted_by_c(tool, enctype, length):
    nblocks = -(-length // 16)
    ctr0s = [int.from_bytes(secrets.token_bytes(16), "big") or 1] + _edge_ctr0s(nblocks)
    for c0 in ctr0s:
        if c0 == 0 or c0 + nblocks > (1 << 128) - 1:
            continue
        key = secrets.token_bytes(keylen(enctype))
        usage = secrets.randbelow(2**32)
        pt = secrets.token_bytes(length)
        msg = ref.encrypt(key, usage, pt, c0.to_bytes(16, "big"))
        assert tool("decrypt", enctype, key.hex(), usage, msg.hex()).strip() == pt.hex(), hex(c0)
        # Another usage, or one flipped bit of the tag, is an integrity failure.
        out = tool("decrypt", enctype, key.hex(), (usage + 1) % 2**32, msg.hex(), expect_rc=2)
        assert error_code(out) == KRB5KRB_AP_ERR_BAD_INTEGRITY
        forged = msg[:-1] + bytes([msg[-1] ^ 1])
        out = tool("decrypt", enctype, key.hex(), usage, forged.hex(), expect_rc=2)
        assert error_code(out) == KRB5KRB_AP_ERR_BAD_INTEGRITY


def _forge(key, usage, pt, c0):
    """ctr0 || C || T computed without the counter-range check, with the
    counter wrapping mod 2^128: what a message whose keystream touches the
    all-zero block (AES_K(0) = H) would look like with a correct tag."""
    n = -(-len(pt) // 16)
    ks = b"".join(ref.aes_block(key, ((c0 + i) % (1 << 128)).to_bytes(16, "big"))
                  for i in range(1, n + 1))
    c = ref.xor(pt, ks)
    return c0.to_bytes(16, "big") + c + ref.tag(key, c0, ref.enc_aad(usage), c)


@pytest.mark.parametrize("enctype", ENCTYPES)
def test_c_refuses_counter_ranges_touching_zero_even_with_valid_tag(tool, enctype):
    key = secrets.token_bytes(keylen(enctype))
    top = (1 << 128) - 1
    # The forging helper is right: on a legal range it gives a message the
    # library accepts.
    good = _forge(key, 7, b"x" * 32, top - 2)
    assert tool("decrypt", enctype, key.hex(), 7, good.hex()).strip() == (b"x" * 32).hex()
    for c0, length in [(0, 0), (0, 5), (top, 1), (top - 1, 17), (top - 2, 33)]:
        msg = _forge(key, 7, b"y" * length, c0)
        out = tool("decrypt", enctype, key.hex(), 7, msg.hex(), expect_rc=2)
        assert error_code(out) == KRB5KRB_AP_ERR_BAD_INTEGRITY, (hex(c0), length)


@pytest.mark.parametrize("enctype", ENCTYPES)
@pytest.mark.parametrize("length", [0, 1, 16, 35, 200])
def test_checksums_both_directions(tool, enctype, length):
    key = secrets.token_bytes(keylen(enctype))
    usage = secrets.randbelow(2**32)
    data = secrets.token_bytes(length)
    # C makes, the reference recomputes from its ctr0.
    ck = bytes.fromhex(tool("checksum", enctype, key.hex(), usage, data.hex()).strip())
    assert len(ck) == 32
    assert ref.checksum(key, usage, data, ck[:16]) == ck
    # The checksum AAD (usage || 0x99) is not the encryption AAD.
    assert ref.tag(key, int.from_bytes(ck[:16], "big"), ref.enc_aad(usage), data) != ck[16:]
    # The reference makes with a chosen ctr0, C verifies.
    mine = ref.checksum(key, usage, data, secrets.token_bytes(16))
    assert tool("verify", enctype, key.hex(), usage, data.hex(), mine.hex()).strip() == "valid"
    bad = mine[:-1] + bytes([mine[-1] ^ 0x40])
    assert tool("verify", enctype, key.hex(), usage, data.hex(), bad.hex()).strip() == "invalid"
    assert tool("verify", enctype, key.hex(), usage ^ 1, data.hex(), mine.hex()).strip() == "invalid"


# --- configuration and the KDC database ------------------------------------------

def _permitted(tool_path, tmp_path, relations):
    conf = tmp_path / "krb5.conf"
    conf.write_text("[libdefaults]\n" + "".join(f"    {r}\n" for r in relations))
    p = subprocess.run([tool_path, "permitted"], capture_output=True, text=True,
                       env={**os.environ, "KRB5_CONFIG": str(conf)}, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    return [int(x) for x in p.stdout.split()]


def test_enctype_lists_in_krb5_conf(tool, tmp_path):
    path = kmpc_paths.t_ctr_mpc()
    # Never part of DEFAULT or of a family name, even with weak crypto allowed.
    got = _permitted(path, tmp_path, ["allow_weak_crypto = true",
                                      "permitted_enctypes = DEFAULT aes camellia des3 rc4"])
    assert 17 in got and 18 in got
    assert -29001 not in got and -29002 not in got
    # By name they are usable, in the configured order, and removable.
    got = _permitted(path, tmp_path, [
        "permitted_enctypes = aes256-ctr-mpc aes128-ctr-mpc aes256-cts-hmac-sha1-96"])
    assert got == [-29002, -29001, 18]
    got = _permitted(path, tmp_path, [
        "permitted_enctypes = DEFAULT +aes128-ctr-mpc -aes128-cts-hmac-sha1-96"])
    assert got[-1] == -29001 and 17 not in got and -29002 not in got


def _keytab_keys(realm, keytab):
    out = realm.run(["klist", "-k", "-K", "-e", keytab])
    keys = {}
    for m in re.finditer(r"\S+@\S+ \((\S+)\)\s+\(0x([0-9a-f]+)\)", out):
        keys[m.group(1)] = m.group(2)
    return keys, out


def test_kadmin_creates_ctr_mpc_keys_equal_to_aes_cts(realm_factory, tmp_path):
    """kadmin keeps a ctr-mpc key beside the aes-cts key of the same size
    (the enctypes are not 'similar'), and both come out of string-to-key
    with the same bytes, so existing AES keys can move into the cluster."""
    enctypes = ["aes256-cts-hmac-sha1-96", "aes256-ctr-mpc",
                "aes128-cts-hmac-sha1-96", "aes128-ctr-mpc"]
    realm = realm_factory(enctypes=enctypes)
    pw = "pw-" + secrets.token_hex(8)
    realm.addprinc("carol", pw, enctypes=enctypes)
    out = realm.kadmin_local("getprinc carol")
    for e in enctypes:
        assert f", {e}" in out, out
    kt = str(tmp_path / "carol.keytab")
    realm.extract_keytab("carol", kt)
    keys, out = _keytab_keys(realm, kt)
    assert set(keys) == set(enctypes), out
    assert keys["aes256-ctr-mpc"] == keys["aes256-cts-hmac-sha1-96"]
    assert keys["aes128-ctr-mpc"] == keys["aes128-cts-hmac-sha1-96"]
    # And they are the reference's RFC 3962 keys for the default salt.
    salt = (realm.realm + "carol").encode()
    assert keys["aes256-ctr-mpc"] == ref.string_to_key("aes256-ctr-mpc", pw.encode(), salt).hex()
    assert keys["aes128-ctr-mpc"] == ref.string_to_key("aes128-ctr-mpc", pw.encode(), salt).hex()
    # A random key of each enctype too ("-e aes256-ctr-mpc:normal -randkey").
    realm.addprinc("svc/host", None, enctypes=["aes256-ctr-mpc", "aes128-ctr-mpc"])
    out = realm.kadmin_local("getprinc svc/host")
    assert ", aes256-ctr-mpc" in out and ", aes128-ctr-mpc" in out, out
