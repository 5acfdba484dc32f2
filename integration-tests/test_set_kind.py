"""kmpc-admin set-kind: re-marking the kind of a key already on the servers
(Admin.SetKeyKind), without dealing it again.

Real processes: three kmpc-mpc-server, kmpc-admin, krb5kdc with the real
kdcmpc module, Debian's own kinit and kvno (test_cts_service.py's realm: a
user whose aes256-cts key lives only in the cluster, dealt with its ticket
and PAC material). A key stored before key kinds (a "KMS1" record) is the
case the command is for; it holds that material in the same way and is
tested at the servers' own level (services_test.cc
SetKeyKindUserTakesAnOldKeysTicketMaterial), since no client of today can
write such a record.
"""
import re

from kmpc_harness.realm import RealmError
from test_cts_as import Stock
from test_cts_service import CLIENT, CLIENT_PW, USER, USER_PW, make_realm

PERMISSION_DENIED = 7


def ticket_to_user(kr, c):
    """Stock kinit as CLIENT, stock kvno USER: (returncode, output)."""
    c.run("kdestroy")
    rc, out = c.kinit(CLIENT, CLIENT_PW)
    assert rc == 0, out
    return c.run("kvno", USER)


def test_set_kind_user_takes_the_ticket_material(kmpc_factory):
    """A ticket to the user is an offline verifier of its password for
    whoever asks; set-kind --kind=user takes the ticket and PAC material
    from the key on every server, so no ticket is issued any more, and the
    user still logs in. Run again, it changes nothing; giving the key a
    service's kind (no gate on its AS reply) needs --force."""
    kr = make_realm(kmpc_factory)
    c = Stock(kr)
    rc, out = ticket_to_user(kr, c)
    assert rc == 0, out
    _, out, _ = kr.admin("set-kind", "--kind=user", USER)
    changed = re.findall(r"user\+service -> user, 2 ticket/PAC materials removed", out)
    assert len(changed) == 3, out
    assert "set-kind: 1 keys are user on every server" in out, out
    rc, out = ticket_to_user(kr, c)
    assert rc != 0, out
    c.run("kdestroy")
    rc, out = c.kinit(USER, USER_PW)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    _, out, _ = kr.admin("set-kind", "--kind=user", USER)
    assert out.count("already user") == 3, out
    rc, out, _ = kr.admin("set-kind", "--kind=service", USER, expected_code=1)
    assert out.count("NOT changed: ") == 3 and "(--force)" in out, out
    assert "--force, and each server's operator" in out and "JOB_KEY_INCONSISTENT" not in out, out
    _, out, _ = kr.admin("status")
    assert "kind unrecorded" not in out, out
    assert kr.kdc_alive()


def test_ungating_a_user_key_needs_every_servers_operator(kmpc_factory):
    """The Admin certificate is on the KDC host, so --force alone (the
    request's allow_ungate) must not drop a user's gate: each server
    refuses until its operator lists the key with its dealing in
    --allow_ungate_keys (KEYID:DEALID; the refusal names the dealing held)
    (test_cts_jobs.py::test_admin_certificate_alone_cannot_ungate_a_user_key
    is the attack). Listed on two servers, those two re-mark it and the
    third refuses (until all agree its jobs fail as inconsistent:
    ServiceTest.SetKeyKindOnSomeServersFailsTheKeysJobsUntilAll), and
    set-kind --kind=user takes the two back; listed on all three, the
    change goes through."""
    kr = make_realm(kmpc_factory, also_service=False)
    kid = kr.key_id(USER)
    rc, out, _ = kr.admin("set-kind", "--kind=service", "--force", USER, expected_code=1)
    assert out.count("NOT changed: ") == 3 and out.count("--allow_ungate_keys") >= 3, out
    assert "(--force)" not in out, out
    deal = re.search(kid + r":([0-9a-f]{32})", out)
    assert deal, out
    # What each operator lists: the key id and the dealing its shares hold.
    entry = f"{kid}:{deal.group(1)}"
    c = Stock(kr)
    for listed in ((0, 1), (0, 1, 2)):
        kr.cluster.server_flags = " ".join(
            f for f in kr.cluster.server_flags.split() if "allow_ungate_keys" not in f)
        for i in listed:
            kr.cluster.stop_party(i)
        # Only the listed parties restart with the flag; the others keep
        # their running process (and no list).
        kr.cluster.server_flags += f" --allow_ungate_keys={entry}"
        for i in listed:
            kr.cluster.start_party(i)
        kr.cluster.wait_ring()
        rc, out, _ = kr.admin("set-kind", "--kind=service", "--force", USER,
                              expected_code=None)
        if len(listed) == 2:
            assert rc == 1 and out.count("user -> service") == 2, out
            assert out.count("NOT changed: ") == 1 and "--allow_ungate_keys" in out, out
            kr.admin("set-kind", "--kind=user", USER)  # back, on the two
        else:
            assert rc == 0 and out.count("user -> service") == 3, out
    c.run("kdestroy")
    rc, out = c.kinit(USER, USER_PW)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert kr.kdc_alive()


def test_set_kind_needs_the_admin_certificate(kmpc_factory):
    """The KDC's certificate (or any but the admin's) cannot re-mark a key:
    PERMISSION_DENIED from every server, and the key keeps its material."""
    kr = make_realm(kmpc_factory)
    kid = kr.key_id(USER)
    try:
        kr.cluster.client("--client=kdc", "set-kind", f"--key_id_hex={kid}",
                          "--key_kind=user")
        raise AssertionError("set-kind with the KDC's certificate succeeded")
    except RealmError as e:
        assert re.search(rf"^rpc_error \d {PERMISSION_DENIED} ", str(e), re.M), str(e)
    rc, out = ticket_to_user(kr, Stock(kr))
    assert rc == 0, out


def test_set_kind_on_some_servers_fails_the_key_until_run_again(kmpc_factory):
    """A re-marking that reached one server only (the others down or
    unreachable): the servers compare the kind and the material held, so
    the user's logins fail on all three alike rather than one server
    computing what the others refuse; set-kind run again repairs it and
    reports which servers had it already."""
    kr = make_realm(kmpc_factory)
    kid = kr.key_id(USER)
    out = kr.cluster.client("set-kind", f"--key_id_hex={kid}", "--key_kind=user",
                            "--only_party=1")
    assert "party 1 previous KEY_KIND_USER_SERVICE" in out and "dropped 2" in out, out
    c = Stock(kr)
    rc, out = c.kinit(USER, USER_PW)
    assert rc != 0, out
    _, out, _ = kr.admin("set-kind", "--key-ids", "--kind=user", kid)
    assert out.count("already user") == 1 and out.count("materials removed") == 2, out
    rc, out = c.kinit(USER, USER_PW)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert kr.kdc_alive()
