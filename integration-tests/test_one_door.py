"""One door per password: a user's password-derived key is dealt under the
standard aes*-cts enctypes only.

The servers compute an aes*-cts login on shares of its timestamp and reply
and gate it (docs/security-model.md, "The servers enforce the gate"). An
aes*-ctr-mpc copy of the same password is the same RFC 3962 key under a
second handle whose login timestamp and reply reach every server whole: an
offline password verifier per login for every server operator. Before this
rule, `addprinc -pw` in a realm configured as the admin guide said
(supported_enctypes aes256-ctr-mpc, aes128-ctr-mpc, aes256-cts) dealt two
aes*-ctr-mpc handles beside the aes256-cts one, and `kmpc-admin share
--password-stdin` dealt an aes256-ctr-mpc one by default.

Real processes: three kmpc-mpc-server, kadmin.local with kmpc's key dealer,
kmpc-admin; the KDB read with the master key (kmpc-kdb-handle keys).
"""
from kmpc_harness import cluster as kmpc_cluster

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server",
                           "mpc-server/libkmpc_dealer.so")

# The admin guide's supported_enctypes before: every new key of a user
# under both MPC enctypes and aes256-cts.
OLD_GUIDE = ("aes256-ctr-mpc", "aes128-ctr-mpc", "aes256-cts-hmac-sha1-96")
CTS256 = "aes256-cts-hmac-sha1-96"
CTR = ("aes256-ctr-mpc", "aes128-ctr-mpc")
REFUSAL = "aes256/aes128-cts-hmac-sha1-96 only"


def test_addprinc_deals_no_ctr_mpc_copy_of_a_password(kmpc_factory):
    kr = kmpc_factory(module="real", dealer=True, enctypes=OLD_GUIDE, protect=["*"],
                      user_ctr_mpc=False)
    out = kr.kadmin_local("addprinc -pw Alice-pw-9 alice", expected_code=None)
    assert REFUSAL in out, out
    assert "Principal does not exist" in kr.kadmin_local("getprinc alice",
                                                         expected_code=None)
    # The same password under the standard enctype: dealt, handles only.
    out = kr.kadmin_local(f"addprinc -e {CTS256}:normal -pw Alice-pw-9 alice")
    assert "created" in out, out
    keys = kr.kdb_keys("alice")
    assert keys and all(kind == "handle" for _, _, kind, _ in keys), keys
    assert not [k for k in keys if k[1] in CTR], keys
    # A random key (ktadd of a load-test user) stays allowed under ctr-mpc:
    # no password to guess.
    kr.kadmin_local("addprinc -nokey bot")
    out = kr.kadmin_local(f"ktadd -e aes256-ctr-mpc:normal -k {kr.dir}/bot.keytab bot")
    assert "added to keytab" in out, out
    assert [k[1] for k in kr.kdb_keys("bot")] == ["aes256-ctr-mpc"]


def test_kmpc_admin_shares_a_password_under_aes_cts_only(kmpc_factory):
    kr = kmpc_factory(module="real", enctypes=OLD_GUIDE, user_ctr_mpc=False)
    kr.kadmin_local(f"addprinc -e {CTS256}:normal -randkey bob")
    before = kr.kdb_keys("bob")
    rc, out, err = kr.admin("share", "--password-stdin", "bob", input="Bob-pw-77\n",
                            expected_code=None)
    assert rc == 1 and REFUSAL in err and "Nothing was changed" in err, out + err
    assert kr.kdb_keys("bob") == before
    rc, out, err = kr.admin("share", "--from-existing", "bob", expected_code=None)
    assert rc == 1 and REFUSAL in err, out + err
    assert kr.kdb_keys("bob") == before
    # Under aes256-cts the password goes in; a random (service) key may be
    # aes*-ctr-mpc.
    kr.admin("share", "--password-stdin", f"--enctype={CTS256}", "bob",
             input="Bob-pw-77\n")
    assert [(k[1], k[2]) for k in kr.kdb_keys("bob")] == [(CTS256, "handle")]
    kr.kadmin_local("addprinc -randkey -e aes256-ctr-mpc:normal svc/one")
    kr.admin("share", "--randkey", "svc/one")
    assert [k[1] for k in kr.kdb_keys("svc/one")] == ["aes256-ctr-mpc"]


def test_user_ctr_mpc_allows_the_copy_on_request(kmpc_factory):
    kr = kmpc_factory(module="real", dealer=True, enctypes=OLD_GUIDE, user_ctr_mpc=True)
    out = kr.kadmin_local("addprinc -pw Carol-pw-3 carol")
    assert "created" in out, out
    assert {k[1] for k in kr.kdb_keys("carol")} >= set(CTR)
