"""deep_attempts.py: its DER edits on a request built here, then the whole
measurement in a real realm (krb5kdc with the kdcmpc module, three
malicious servers, aes256-cts users in the cluster): every honest login
beside the attacks succeeds, the 400-address logins and the 8 KiB padata
get no ticket, and a captured timestamp replayed with fresh nonces (and
with the padata) gets no AS-REP."""
import os

import pytest

import krb_der as kd
from bench import cts_bench
from bench import deep_attempts as da
from kmpc_harness import cluster as kmpc_cluster


def pa(pa_type, value):
    return kd.seq(kd.ctx(1, kd.der_int(pa_type)), kd.ctx(2, kd.der(0x04, value)))


def request(padata, nonce=7, pad=0):
    body = kd.seq(kd.ctx(0, kd.der(0x03, b"\x00\x00\x00\x00\x00")),
                  kd.ctx(2, kd.der(0x1B, b"KMPC.TEST" + b"X" * pad)),
                  kd.ctx(7, kd.der_int(nonce)))
    return da._as_req([(0xA1, kd.der_int(5)), (0xA2, kd.der_int(10)),
                       (0xA3, kd.seq(*padata)), (0xA4, body)])


def nonce_of(req):
    body = dict(da._as_req_fields(req))[0xA4]
    return int.from_bytes(kd.content(dict(da._fields(kd.content(body)))[0xA7]), "big",
                          signed=True)


@pytest.mark.parametrize("pad", [0, 200, 70000])
def test_der_edits(pad):
    req = request([pa(2, b"C||T" * 13)], pad=pad)
    assert da.has_enc_timestamp(req)
    assert not da.has_enc_timestamp(request([pa(149, b"x")], pad=pad))
    assert nonce_of(req) == 7
    for n in (0, 127, 128, 2**31 - 1, 2**32 - 1):
        out = da.with_nonce(req, n)
        assert nonce_of(out) == n
        assert da.with_nonce(out, 7) == req
    big = da.with_padata(req, da.UNKNOWN_PADATA, b"\xAA" * da.PADATA_BYTES)
    assert len(big) > len(req) + da.PADATA_BYTES
    pas = da._fields(kd.content(dict(da._as_req_fields(big))[0xA3]))
    assert len(pas) == 2 and pas[0] == (0x30, kd.content(pa(2, b"C||T" * 13)))
    assert da.has_enc_timestamp(big)
    assert da.padata_types(big) == [2, da.UNKNOWN_PADATA]
    with pytest.raises(ValueError):
        da._as_req_fields(b"\x6b" + req[1:])
    with pytest.raises(ValueError):
        da._as_req_fields(req[:len(req) // 2])


def test_addresses_conf(tmp_path):
    src = tmp_path / "krb5.conf"
    src.write_text("[libdefaults]\n    default_realm = KMPC.TEST\n[realms]\n"
                   "    KMPC.TEST = {\n        kdc = 127.0.0.1:88\n    }\n")
    text = open(da.addresses_conf(str(src), str(tmp_path / "a.conf"))).read()
    assert text.count("extra_addresses") == da.ADDRESSES // 20
    assert text.count(",") == da.ADDRESSES - da.ADDRESSES // 20 and "noaddresses = false" in text
    relay = open(da.relayed_conf(str(src), str(tmp_path / "r.conf"), 4242)).read()
    assert "kdc = 127.0.0.1:4242" in relay and ":88" not in relay


kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")
CTS256 = "aes256-cts-hmac-sha1-96"
# What deep_attempts counts when the KDC module refuses a job over a cap.
REFUSED = "svc-unavailable"
USERS = ("mallory", "victim", "ann", "bartholomew.wojciechowski", "li/admin",
         "isabella.castellanos")


def test_deep_attempts_in_a_realm(kmpc_factory):
    from test_cts_as import Stock
    kr = kmpc_factory(module="real", enctypes=[CTS256, "aes256-ctr-mpc"], metrics=True)
    kr.setup_krbtgt()
    keytab = os.path.join(kr.dir, "users.keytab")
    cmds = [f"addprinc +requires_preauth -e {CTS256}:normal -randkey {u}" for u in USERS]
    cmds.append(f"ktadd -norandkey -k {keytab} " + " ".join(USERS))
    kr.run(["kadmin.local", "-r", kr.realm], input="\n".join(cmds) + "\n")
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", *USERS)
    kr.start()
    stock = Stock(kr, "deep")
    at = lambda u: f"{u}@{kr.realm}"  # noqa: E731
    # The honest users' reply programs compiled (and over masked wires)
    # before the attacks: the measurement is of warm logins beside deep
    # attempts. A cold one compiles its reply class in its Run (a second
    # or two here, docs/limitations.md), which beside the attacks and a
    # parallel suite came past the module's 3 s deadline.
    for u in USERS[2:]:
        rc, text = stock.run("kinit", "-k", "-t", keytab, at(u))
        assert rc == 0, text
    cts_bench.wait_masked(kr, lambda _: None, "warm-up")
    out = da.run(kr.kdc_port, stock.conf, stock.env,
                 {"attacker": keytab, "victim": keytab, "honest": keytab},
                 {"attacker": at("mallory"), "victim": at("victim"),
                  "honest": [at(u) for u in USERS[2:]]},
                 8, os.path.join(kr.dir, "deep"))
    assert out["honest_logins"] >= 4 and out["failed"] == 0, out
    att = out["attacks"]
    for k in range(da.ADDRESS_LOOPS):
        assert set(att[f"addresses-{k}"]) == {REFUSED}, att
    # The captured request asked for PA-REQ-ENC-PA-REP: with 8 KiB more the
    # KDC would answer without it (over KDC_MPC_MAX_CTS_SPLICE_BYTES), so
    # nothing deep is computed for it; and its timestamp is a replay.
    assert da.PA_REQ_ENC_PA_REP in out["captured"]["padata"], out["captured"]
    # A captured timestamp is good once (the module's replay cache,
    # kdc-plugin/src/freshness.h): every replay is refused, with a fresh
    # nonce or more padata alike.
    assert set(att["replay"]) == {"krb-error"} and att["replay"]["krb-error"] > 0, att
    assert set(att["padata"]) == {"krb-error"}, att
    assert kr.kdc_alive()
