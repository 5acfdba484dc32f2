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
import subprocess

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import find_built

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


CTS128 = "aes128-cts-hmac-sha1-96"
COPY_LINE = "holds an aes*-ctr-mpc copy of a user's key"


def _forbid_user_ctr_mpc(kr):
    """The admin turns user_ctr_mpc off in kmpc-admin's config, which the
    key dealer reads too, after users were made with it on (a realm set up
    before the rule)."""
    with open(kr.admin_conf) as f:
        text = f.read()
    assert "user_ctr_mpc = true" in text, text
    with open(kr.admin_conf, "w") as f:
        f.write(text.replace("user_ctr_mpc = true", "user_ctr_mpc = false"))


def test_a_new_password_of_a_ctr_mpc_holder_is_dealt_under_aes_cts(kmpc_factory):
    """A user holding only an aes*-ctr-mpc copy changes password with a
    list of aes*-cts enctypes. libkdb5 (krb5 patch 0020) deals a password
    under aes*-cts whatever the principal held. Before, it turned the list
    into the aes*-ctr-mpc counterparts for a principal holding such keys,
    so the copy was dealt again (with user_ctr_mpc on) or the dealer
    refused the change (with it off): no way out for the user."""
    kr = kmpc_factory(module="real", dealer=True, enctypes=OLD_GUIDE, user_ctr_mpc=True)
    kr.kadmin_local("addprinc -e aes256-ctr-mpc:normal -pw Dave-pw-1 dave")
    assert [(k[1], k[2]) for k in kr.kdb_keys("dave")] == [("aes256-ctr-mpc", "handle")]
    _forbid_user_ctr_mpc(kr)
    out = kr.kadmin_local(f"cpw -e {CTS256}:normal,{CTS128}:normal -pw Dave-pw-2 dave",
                          expected_code=None)
    keys = kr.kdb_keys("dave")
    assert sorted((k[1], k[2]) for k in keys) == [(CTS128, "handle"), (CTS256, "handle")], \
        (out, keys)


def test_drop_user_ctr_removes_the_copies_existing_users_hold(kmpc_factory):
    """Users made while the admin guide listed aes*-ctr-mpc for users hold
    aes*-ctr-mpc copies of their passwords beside the aes256-cts handle
    (erin), or a copy alone (finn, made with -e aes256-ctr-mpc). status
    --kdb names both; drop-user-ctr removes erin's copies from her entry and
    from the servers (her aes*-cts handle and Debian's kinit keep working)
    and leaves finn's, naming the new password he needs; after it, his
    copy goes too. Before, no tool named or removed them."""
    from test_cts_as import Stock
    kr = kmpc_factory(module="real", dealer=True, enctypes=OLD_GUIDE, user_ctr_mpc=True,
                      module_options={"deadline_ms": "30000"})
    kr.setup_krbtgt()
    kr.kadmin_local("addprinc -pw Erin-pw-1 erin")
    kr.kadmin_local("addprinc -e aes256-ctr-mpc:normal -pw Finn-pw-1 finn")
    # gail's aes256-cts handle names shares no server holds any more, so
    # her copies are all she logs in with (a non-author review found
    # drop-user-ctr dropping them).
    kr.kadmin_local("addprinc -pw Gail-pw-1 gail")
    gail = kr.kdb_keys("gail")
    lost = [k[3] for k in gail if k[1] == CTS256][0]
    for i in range(3):
        p = subprocess.run([find_built("mpc-server/kmpc-mpc-client"),
                            f"--servers={kr.cluster.servers}", f"--certs={kr.cluster.certs}",
                            "delete-key", f"--key_id_hex={lost}",
                            f"--only_party={i}"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
    erin = kr.kdb_keys("erin")
    assert sorted(k[1] for k in erin) == sorted(OLD_GUIDE), erin
    erin_copies = {k[3] for k in erin if k[1] in CTR}
    finn = kr.kdb_keys("finn")
    kr.start()
    _forbid_user_ctr_mpc(kr)

    _, out, _ = kr.admin("status", "--kdb", expected_code=1)
    named = sorted(ln.split()[1] for ln in out.splitlines() if COPY_LINE in ln)
    assert named == [f"erin@{kr.realm}", f"finn@{kr.realm}", f"gail@{kr.realm}"], out

    _, out, _ = kr.admin("drop-user-ctr", "--all", "--dry-run", expected_code=1)
    assert f"erin@{kr.realm}: would drop 2 aes*-ctr-mpc copies" in out, out
    assert f"finn@{kr.realm}: LEFT, has no aes*-cts handle" in out, out
    assert kr.kdb_keys("erin") == erin and kr.kdb_keys("finn") == finn

    _, out, _ = kr.admin("drop-user-ctr", "--all", "--grace-ms=0", expected_code=1)
    assert f"erin@{kr.realm}: dropped 2 aes*-ctr-mpc copies" in out, out
    assert f"gail@{kr.realm}: LEFT, has no aes*-cts handle of a user's key" in out, out
    assert "1 principals dropped their copies, 2 left with copies, 0 failures" in out, out
    assert [(k[1], k[2]) for k in kr.kdb_keys("erin")] == [(CTS256, "handle")]
    assert kr.kdb_keys("finn") == finn
    assert kr.kdb_keys("gail") == gail
    _, out, _ = kr.admin("status", "--kdb", expected_code=1)
    assert [ln for ln in out.splitlines() if COPY_LINE in ln and "erin@" in ln] == [], out
    for kid in erin_copies:
        assert kid not in out, f"erin's copy {kid} is still on the servers:\n{out}"
    rc, log = Stock(kr).kinit("erin", "Erin-pw-1")
    assert rc == 0, log + kr.kdc_log_text()[-3000:]

    for u in ("finn", "gail"):
        kr.kadmin_local(f"cpw -e {CTS256}:normal -pw {u.title()}-pw-2 {u}")
        assert [(k[1], k[2]) for k in kr.kdb_keys(u)] == [(CTS256, "handle")]
    _, out, _ = kr.admin("drop-user-ctr", "--all", expected_code=0)
    assert "0 principals dropped their copies, 0 left with copies, 0 failures" in out, out
    _, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert COPY_LINE not in out and "no KDB handle refers to it" not in out, out


def test_a_ticket_granting_key_is_never_a_password(kmpc_factory):
    """A password set on krbtgt/REALM would be dealt as a service's key,
    whose AS reply the servers release ungated (an offline verifier): the
    dealer refuses it, and kmpc-admin share --password-stdin too. A
    three-component krbtgt/A/B is no ticket-granting principal (libkdb5's
    rule): a user's key. Found by a non-author review."""
    kr = kmpc_factory(module="real", dealer=True, enctypes=OLD_GUIDE, user_ctr_mpc=False,
                      supported_enctypes=(CTS256,))
    kr.setup_krbtgt()
    before = kr.kdb_keys(kr.tgs)
    out = kr.kadmin_local(f"cpw -pw Tgs-pw-1 {kr.tgs}", expected_code=None)
    assert "never a password" in out, out
    assert kr.kdb_keys(kr.tgs) == before
    rc, out, err = kr.admin("share", "--password-stdin", "--keepold", kr.tgs,
                            input="Tgs-pw-1\n", expected_code=None)
    assert rc == 1 and "never a password" in err, out + err
    assert kr.kdb_keys(kr.tgs) == before
    # Refused above as ticket-granting, krbtgt/A/B's password would be too.
    out = kr.kadmin_local("addprinc -pw Odd-pw-1 krbtgt/A/B")
    assert "created" in out, out
    assert [(k[1], k[2]) for k in kr.kdb_keys("krbtgt/A/B")] == [(CTS256, "handle")]
