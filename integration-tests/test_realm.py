"""A realm with aes*-ctr-mpc keys held in the KDB (no MPC yet): real
kdb5_util, kadmin.local, krb5kdc, kinit, klist and kvno from the patched
private prefix."""
import os
import re
import secrets
import subprocess

import pytest

from kmpc_harness import realm as kmpc_realm
from kmpc_harness.realm import RealmError, binpath


def _password():
    return "pw-" + secrets.token_hex(8)


@pytest.fixture
def realm(realm_factory):
    r = realm_factory()
    r.start_kdc()
    return r


def _klist_etypes(realm):
    out = realm.run(["klist", "-e"])
    return re.findall(r"Etype \(skey, tkt\): (\S+), (\S+)", out), out


@pytest.mark.parametrize("enctype", ["aes256-ctr-mpc", "aes128-ctr-mpc"])
def test_kinit_with_ctr_mpc_key(realm, enctype):
    pw = _password()
    realm.addprinc("alice", pw, enctypes=[enctype])
    out = realm.kadmin_local("getprinc alice")
    assert "REQUIRES_PRE_AUTH" in out
    keys = re.findall(r"Key: vno \d+, (\S+)", out)
    assert keys == [enctype], out

    trace = realm.run(["kinit", "alice"], input=pw + "\n",
                      env={**realm.env, "KRB5_TRACE": "/dev/stdout"})
    # The client chose the new enctype for pre-auth and decrypted the reply
    # with its password-derived key of that enctype.
    assert re.search(rf"AS key obtained for encrypted timestamp: {enctype}/", trace), trace
    assert re.search(rf"Decrypted AS reply; session key is: \S+", trace), trace
    etypes, out = _klist_etypes(realm)
    assert len(etypes) == 1, out
    skey, tkt = etypes[0]
    # The TGT is encrypted in the krbtgt key (aes256-ctr-mpc first in the
    # realm's supported_enctypes).
    assert tkt == "aes256-ctr-mpc", out
    # Session keys are never of an MPC enctype (krb5's key-operation layer patch): the KDC
    # picks the ordinary enctype the client also offers.
    assert skey == "aes256-cts-hmac-sha1-96", out
    assert "krbtgt/KMPC.TEST@KMPC.TEST" in out


def test_wrong_password_is_preauth_failed(realm):
    realm.addprinc("bob", _password(), enctypes=["aes256-ctr-mpc"])
    # The KDC answers KDC_ERR_PREAUTH_FAILED ("Preauthentication failed");
    # kinit then reports it to the user as an incorrect password.
    trace = realm.run(["kinit", "bob"], input="not-the-password\n", expected_code=1,
                      expected_msg="Password incorrect",
                      env={**realm.env, "KRB5_TRACE": "/dev/stdout"})
    assert re.search(r"Received error from KDC: -?\d+/Preauthentication failed", trace), trace
    with open(realm.kdc_log) as f:
        assert "PREAUTH_FAILED" in f.read()


def test_unknown_principal(realm):
    realm.kinit("nobody", "x", expected_code=1,
                expected_msg="not found in Kerberos database")


def test_kvno_service_ticket(realm):
    pw = _password()
    realm.addprinc("carol", pw, enctypes=["aes256-ctr-mpc"])
    realm.addprinc("host/svc.kmpc.test", None, enctypes=["aes128-ctr-mpc"], flags="")
    realm.kinit("carol", pw)
    out = realm.run(["kvno", "host/svc.kmpc.test"])
    assert re.search(r"host/svc.kmpc.test@KMPC.TEST: kvno = \d+", out), out
    etypes, out = _klist_etypes(realm)
    assert ("aes128-ctr-mpc" in [t for _, t in etypes]), out


def _keytab_keys(realm, keytab):
    out = realm.run(["klist", "-k", "-K", "-e", keytab])
    keys = {}
    for m in re.finditer(r"\s\d+ (\S+) \((\S+)\)\s+\(0x([0-9a-f]+)\)", out):
        keys[m.group(2)] = bytes.fromhex(m.group(3))
    return keys, out


@pytest.mark.parametrize("mpc,cts", [("aes256-ctr-mpc", "aes256-cts-hmac-sha1-96"),
                                     ("aes128-ctr-mpc", "aes128-cts-hmac-sha1-96")])
def test_migration_property_same_key_bytes(realm, tmp_path, mpc, cts):
    """The MPC enctype's key is byte-identical to the aes-cts key from the same
    password and salt, so an existing realm's keys move without a reset."""
    realm.addprinc("dave", _password(), enctypes=[mpc, cts])
    kt = realm.extract_keytab("dave", str(tmp_path / "dave.keytab"))
    keys, out = _keytab_keys(realm, kt)
    assert set(keys) == {mpc, cts}, out
    assert len(keys[mpc]) == (32 if "256" in mpc else 16)
    assert keys[mpc] == keys[cts]


def test_only_private_prefix_libraries(realm):
    """Patched and stock krb5 must never meet in one process."""
    out = subprocess.run(["ldd", binpath("krb5kdc")], capture_output=True, text=True).stdout
    for lib in ("libkrb5.so", "libk5crypto.so", "libkdb5.so"):
        line = next(l for l in out.splitlines() if lib in l)
        libdir = os.path.realpath(os.path.join(kmpc_realm.PREFIX, "lib"))
        path = line.split("=>")[1].split("(")[0].strip()
        assert os.path.dirname(os.path.realpath(path)) == libdir, line
