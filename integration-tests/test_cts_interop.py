"""Unmodified clients and services with the SERVICES' keys in the cluster
(issue 50, acceptance: "unmodified clients and services work"): each
service's aes256-cts-hmac-sha1-96 key moved into the cluster with
`kmpc-admin share --from-existing --service` (enctype, kvno and salt kept),
the service itself still using the keytab it had before the move.

One realm for the module (LDAP KDB, for S4U2Proxy's delegation policy:
test_ldap.py), krbtgt in the cluster, users' keys in the KDB; in the
cluster: host/svc.kmpc.test (gss-server's, the S4U2Proxy proxy's),
HTTP/web.kmpc.test (the S4U2Proxy target) and HTTP/www.kmpc.test
(Apache's). Real processes, none of them kmpc's or patched on the client
or service side:
- Debian's gss-client -d / gss-server (krb5-gss-samples): delegation;
- Debian's curl --negotiate to Debian's Apache with mod_auth_gssapi on
  loopback (kmpc_harness.apache: its own config dir, never the system
  service, run as `nobody` when the tests run as root, as Apache refuses
  to serve as root; missing packages fail the test);
- Debian's Heimdal kinit and kgetcred (kmpc_harness.heimdal, unpacked);
- Debian's kvno -U (S4U2Self) and kvno -U -P (S4U2Proxy) with the proxy's
  and the target's keys in the cluster;
- Debian's kinit -s (a postdated, invalid ticket to the service) and
  kinit -v (its validation, a TGS-REQ presenting it back).
Every ticket is checked by the service's OLD keytab (Debian's kvno -k, or
the service itself), and the servers' Runs are counted: a TGS to a
service in the cluster takes two (the TGT's, the ticket's); a validation
and an S4U2Proxy three. The fixture first gets each kind of ticket once,
so that the counts are those of programs already compiled.
"""
import os
import re
import subprocess
import time

import pytest

import conftest
from kmpc_harness import apache as kmpc_apache
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.kmpc_realm import KmpcRealm
from kmpc_harness.realm import RealmError
from test_cts_back import server_runs
from test_cts_handles import COLD_PROGRAMS, CTS256, ENCTYPES, assert_only_handles
from test_cts_jobs import krb5_tool  # noqa: F401
from test_cts_service import check_ticket, tgs_counts, tgs_delta, user_ticket
from test_heimdal_clients import HeimdalClients, heimdal  # noqa: F401
import test_ldap
from test_metrics import keytab_keys
import test_unmodified_clients as tu

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

SERVICE = tu.SERVICE                      # host/svc.kmpc.test: gss, S4U proxy
TARGET = test_ldap.TARGET                 # HTTP/web.kmpc.test: S4U2Proxy target
WWW_HOST = "www.kmpc.test"
WWW = f"HTTP/{WWW_HOST}"                  # Apache's
MOVED = (SERVICE, TARGET, WWW)
CURL = "/usr/bin/curl"


def _interop_realm(make):
    """test_ldap's delegation principals and Apache's; each service's
    keytab written, then its key moved into the cluster."""
    tu._check_stock_binaries()
    r = make(module="real", ldap=True, enctypes=ENCTYPES, metrics=True,
             module_options=COLD_PROGRAMS)
    r.setup_krbtgt()
    pws = test_ldap._delegation_principals(r)
    r.addprinc(WWW, enctypes=[CTS256], flags="")
    keytabs = {name: r.extract_keytab(name, os.path.join(r.dir, f"{name.split('/')[1]}.keytab"))
               for name in (SERVICE, WWW)}
    keytabs[TARGET] = os.path.join(r.dir, "targets.keytab")
    for name in MOVED:
        r.admin("share", "--from-existing", f"--enctype={CTS256}", "--service", name)
        assert [(row[1], row[2]) for row in assert_only_handles(r, name)] == \
            [(CTS256, "handle")], name
    r.start()
    _warm_up(r, pws, keytabs)
    return r, pws, keytabs


def _until_it_works(c, *steps, timeout=180):
    """Run Debian's client steps (argv lists; a last item '<...' is the
    standard input; "sleep" waits) again until all succeed: the servers compile a program
    per new ticket length and shape (docs/limitations.md), which on a
    loaded machine outlasts a client's retries; what the tests count then
    is the steady state."""
    deadline = time.time() + timeout
    while True:
        try:
            for name, *args in steps:
                if name == "sleep":
                    time.sleep(float(args[0]))
                    continue
                pw = args.pop() if args and args[-1].startswith("<") else None
                c.run(name, *args, input=pw and pw[1:] + "\n")
            return
        except RealmError as e:
            print("warm-up: retrying:", str(e)[:300])
            if time.time() > deadline:
                raise
            time.sleep(1)


def _warm_up(r, pws, keytabs):
    """Each kind of ticket the tests get, once: to a service for alice
    (TGS), S4U2Self and S4U2Proxy, and an AS ticket to the service,
    postdated, then validated."""
    d = os.path.join(r.dir, "warm-up")
    os.makedirs(d, exist_ok=True)
    c = tu.Clients(r, d)
    t0 = time.monotonic()
    _until_it_works(c, ["kinit", "-f", "alice", "<" + pws["alice"]], ["kvno", SERVICE])
    _until_it_works(c, ["kinit", "-f", "-k", "-t", keytabs[SERVICE], SERVICE],
                    ["kvno", "-U", "alice", SERVICE],
                    ["kvno", "-U", "alice", "-P", TARGET])
    _until_it_works(c, ["kinit", "-s", "1s", "-S", SERVICE, "alice", "<" + pws["alice"]],
                    ["sleep", "1.5"], ["kinit", "-v", "-S", SERVICE])
    print(f"warm-up: {time.monotonic() - t0:.1f} s")


@pytest.fixture(scope="module")
def _shared_realm(request, tmp_path_factory):
    gen = conftest._realms(tmp_path_factory.mktemp("cts-interop"), request,
                           KmpcRealm, "kmpc")
    yield _interop_realm(next(gen))
    next(gen, None)  # stopped; a daemon that died fails the module's last test


@pytest.fixture
def realm(_shared_realm, request, tmp_path):
    """(realm, user passwords, {service: its old keytab}, Debian's clients
    with a ccache of this test's own); the realm's logs printed when a
    test using it fails."""
    r, pws, keytabs = _shared_realm
    yield r, pws, keytabs, tu.Clients(r, str(tmp_path))
    conftest._dump_on_failure(request, r)


def key_of(r, keytab):
    """The one key of a keytab (the service's, as it was before the move)."""
    [key] = keytab_keys(r, keytab)
    return bytes.fromhex(key)


def assert_issued(r, service, n=1):
    """The KDC's last n TGS lines for service say ISSUE, and nothing was
    refused by the module or the servers."""
    lines = [l for l in r.kdc_log_text().splitlines()
             if "TGS_REQ" in l and f"for {service}@" in l]
    assert len(lines) >= n and all(": ISSUE: " in l for l in lines[-n:]), lines
    log = r.kdc_log_text()
    assert "refusing a job" not in log and "did not verify" not in log, log[-3000:]


def test_gss_delegation_to_a_service_in_the_cluster(realm, krb5_tool, tmp_path):  # noqa: F811
    """gss-client -d: the ticket to host/svc made in the cluster (two
    Runs), gss-server accepts it with its old keytab and gets alice's
    forwarded TGT; the ticket's PAC server signature checks under the old
    key."""
    r, pws, keytabs, c = realm
    c.kinit("alice", pws["alice"], "-f")
    before = tgs_counts(r)
    tu.gss_delegation(c, keytabs[SERVICE], str(tmp_path))
    _, runs = tgs_delta(r, before)
    # The ticket to the service (two Runs) and the forwarded TGT (one: the
    # presented TGT's Run makes the new TGT too).
    assert runs == 3, runs
    assert_issued(r, SERVICE)
    check_ticket(r, krb5_tool, user_ticket(c.ccache, SERVICE.split("/")),
                 key_of(r, keytabs[SERVICE]))
    assert r.alive()


def curl(c, url, resolve, ccache=None):
    """Debian's curl --negotiate (SPNEGO with the client's ccache): (HTTP
    status, body)."""
    p = subprocess.run([CURL, "-s", "--negotiate", "-u", ":", "--resolve", resolve,
                        "-w", "\n%{http_code}", url], capture_output=True, text=True,
                       timeout=60, env=c.env(ccache))
    body, _, code = p.stdout.rpartition("\n")
    return int(code or 0), body


def test_curl_negotiate_to_apache_mod_auth_gssapi(realm, tmp_path):
    """Apache with mod_auth_gssapi and HTTP/www.kmpc.test's old keytab
    accepts alice's SPNEGO token (REMOTE_USER alice@REALM in its access
    log); the ticket took two Runs. Without a ticket: 401."""
    r, pws, keytabs, c = realm
    for path, pkg in ((CURL, "curl"), (kmpc_apache.APACHE, "apache2-bin"),
                      (kmpc_apache.GSSAPI, "libapache2-mod-auth-gssapi")):
        owner = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        assert owner.stdout.startswith(pkg + ":"), \
            f"{path}: {owner.stdout}{owner.stderr} (deploy/install-deps.sh installs {pkg})"
    try:
        web = kmpc_apache.Apache(str(tmp_path), WWW_HOST, keytabs[WWW], c.conf)
    except kmpc_apache.ApacheError as e:
        pytest.fail(str(e))
    resolve = f"{WWW_HOST}:{web.port}:127.0.0.1"
    try:
        web.start()
        code, _ = curl(c, web.url, resolve, ccache=str(tmp_path / "none.cc"))
        assert code == 401, web.logs()
        c.kinit("alice", pws["alice"])
        before = tgs_counts(r)
        code, body = curl(c, web.url, resolve)
        assert code == 200 and "hello from kmpc's Apache" in body, (code, body, web.logs())
        assert tgs_delta(r, before) == (1, 2)
        assert f'alice@{r.realm} "GET /index.html HTTP/1.1" 200' in web.log("access.log"), web.logs()
        # Again, with the cached ticket: no exchange with the KDC.
        before = tgs_counts(r)
        assert curl(c, web.url, resolve)[0] == 200, web.logs()
        assert tgs_counts(r) == before
    finally:
        web.stop()
    assert_issued(r, WWW)
    assert r.alive()


def test_heimdal_kinit_and_kgetcred(realm, heimdal, krb5_tool):  # noqa: F811
    """Heimdal's kinit and kgetcred: the ticket to host/svc (two Runs)
    decrypts under its old key, whose PAC server signature it carries;
    Debian's kvno -k takes the cached ticket with the old keytab."""
    r, pws, keytabs, c = realm
    h = HeimdalClients(heimdal, c)
    h.run("kinit", "--password-file=STDIN", "alice", input=pws["alice"] + "\n")
    before = tgs_counts(r)
    h.run("kgetcred", SERVICE)
    assert tgs_delta(r, before) == (1, 2)
    etype, out = h.ticket_etype(f"{SERVICE}@{r.realm}")
    assert "aes256-cts-hmac-sha1-96" in etype, out
    check_ticket(r, krb5_tool, user_ticket(c.ccache, SERVICE.split("/")),
                 key_of(r, keytabs[SERVICE]))
    before = tgs_counts(r)
    out = c.run("kvno", "-k", keytabs[SERVICE], SERVICE)
    assert "keytab entry valid" in out, out
    assert tgs_counts(r) == before       # Heimdal's ticket, from the ccache
    assert_issued(r, SERVICE)
    assert r.alive()


def test_s4u2self_and_s4u2proxy_with_both_keys_in_the_cluster(realm):
    """The proxy (host/svc) logs in from its old keytab; S4U2Self for alice
    (a ticket to itself, made in the cluster: two Runs) decrypts with that
    keytab; S4U2Proxy to HTTP/web (the evidence ticket decrypted in the
    cluster, the delegated ticket encrypted there under the target's key)
    is issued by the LDAP policy and decrypts with the target's old
    keytab."""
    r, pws, keytabs, c = realm
    runs = server_runs(r)
    c.run("kinit", "-f", "-k", "-t", keytabs[SERVICE], SERVICE)
    # The AS reply under the proxy's key, the TGT: one Run.
    assert server_runs(r) - runs == 1
    tu._tgt_is_mpc_keyed(c)
    runs = server_runs(r)
    out = c.run("kvno", "-U", "alice", "-k", keytabs[SERVICE], SERVICE)
    assert re.search(rf"{SERVICE}@{r.realm}: kvno = 1, keytab entry valid", out), out
    assert server_runs(r) - runs == 2
    assert f"PROTOCOL-TRANSITION s4u-client=alice@{r.realm}" in r.kdc_log_text()
    # test_ldap's S4U2Proxy with Debian's kvno -U -P, a fresh S4U2Self
    # first; the delegated ticket checked with targets.keytab.
    runs = server_runs(r)
    code, out, out_cc = test_ldap._proxy(c, SERVICE, TARGET, patched=False)
    assert code == 0, out + r.kdc_log_text()[-3000:]
    word, delegated = test_ldap._last_s4u2proxy_status(r, TARGET)
    assert word == "ISSUE" and delegated, word
    test_ldap._delegated_ticket_ok(c, out_cc, TARGET)
    # The login (1), S4U2Self (2) and S4U2Proxy: 3 measured, as many as a
    # renewal's (the evidence ticket presented back, its PAC checked, the
    # delegated ticket made under the target's key with its signatures).
    assert server_runs(r) - runs == 1 + 2 + 3
    assert_issued(r, TARGET)
    assert r.alive()


def test_validation_of_a_postdated_ticket_to_a_service(realm):
    """kinit -s: a postdated ticket straight to host/svc (AS, made in the
    cluster), invalid until validated; kinit -v -S presents it back (the
    servers decrypt it under the service's key) and gets it validated;
    Debian's kvno -k with the old keytab takes the validated ticket."""
    r, pws, keytabs, c = realm
    c.run("kinit", "-s", "3s", "-S", SERVICE, "alice", input=pws["alice"] + "\n")
    tickets, out = c.tickets()
    flags = tickets[f"{SERVICE}@{r.realm}"][0]
    assert "d" in flags and "i" in flags, out   # postdated, invalid
    time.sleep(3.5)
    runs = server_runs(r)
    c.run("kinit", "-v", "-S", SERVICE)
    # As a renewal (test_cts_back): the header ticket's Run (its DECRYPT),
    # the presented PAC's signatures checked, the new ticket's ENCRYPT with
    # its signatures made and spliced in.
    assert server_runs(r) - runs == 3
    tickets, out = c.tickets()
    flags = tickets[f"{SERVICE}@{r.realm}"][0]
    assert "i" not in flags and "d" in flags, out
    out = c.run("kvno", "-k", keytabs[SERVICE], SERVICE)
    assert "keytab entry valid" in out, out
    assert_issued(r, SERVICE)
    assert r.alive()
