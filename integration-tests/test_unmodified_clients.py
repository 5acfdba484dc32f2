"""Debian's own, unpatched MIT clients against kmpc in the "krbtgt in the
cluster" mode: the krbtgt key is in three MPC servers (the KDB holds a
handle), users and services keep ordinary aes256-cts-hmac-sha1-96 keys.

The clients are /usr/bin/{kinit,kvno,klist,kdestroy} from krb5-user and
/usr/bin/gss-{client,server} from krb5-gss-samples (deploy/install-deps.sh
installs them; absent, every test fails), linked against the system's
libkrb5, with a krb5.conf that names no MPC enctype: what an existing client
fleet has.  Each test checks that the TGT the clients hold is encrypted
under the MPC-held key (etype -29002, aes256-ctr-mpc, which the stock
client has no name for), so none of them can pass against a stock realm.

S4U2Proxy is compared with a stock realm (the same krb5kdc without the
kdcmpc module, ordinary keys, the same principals and flags): both refuse
it the same way, as the db2 KDB has no delegation policy.
"""
import os
import re
import subprocess
import time

import pytest

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness import realm as kmpc_realm
from kmpc_harness.cluster import password
from kmpc_harness.realm import RealmError

REALM = kmpc_realm.REALM
SERVICE = kmpc_cluster.SERVICE                # host/svc.kmpc.test
GSS_SERVICE = "host@svc.kmpc.test"
PROXY_TARGET = "HTTP/web.kmpc.test"
STOCK = {name: f"/usr/bin/{name}" for name in
         ("kinit", "kvno", "klist", "kdestroy", "gss-client", "gss-server")}
# The MPC enctype of the krbtgt as the stock client prints it (it has no
# name for it): krb5's ctr-mpc enctypes patch's number for aes256-ctr-mpc.
MPC_ETYPE = "-29002"


def _check_stock_binaries():
    """Every client is Debian's (dpkg owns it) and loads the system's
    libkrb5, not this build's."""
    for name, path in STOCK.items():
        assert os.path.exists(path), \
            f"{path} missing: run deploy/install-deps.sh (krb5-user, krb5-gss-samples)"
        owner = subprocess.run(["dpkg", "-S", path], capture_output=True,
                               text=True).stdout
        assert owner.split(":")[0] in ("krb5-user", "krb5-gss-samples"), owner
        libs = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
        assert "libkrb5.so.3 => /lib" in libs or "libkrb5.so.3 => /usr/lib" in libs, libs
        assert kmpc_realm.PREFIX not in libs, libs


class Clients:
    """The stock binaries with their own krb5.conf for realm r: the KDC's
    address only, MIT's default enctypes, no DNS."""

    def __init__(self, r, workdir):
        self.r = r
        self.dir = workdir
        self.conf = os.path.join(workdir, "client-krb5.conf")
        with open(self.conf, "w") as f:
            f.write(f"""[libdefaults]
    default_realm = {r.realm}
    dns_lookup_kdc = false
    dns_lookup_realm = false
    rdns = false
    dns_canonicalize_hostname = false
[realms]
    {r.realm} = {{
        kdc = 127.0.0.1:{r.kdc_port}
    }}
""")
        self.ccache = os.path.join(workdir, "stock-ccache")

    def env(self, ccache=None, **extra):
        env = {k: v for k, v in self.r.env.items()
               if not k.startswith(("LD_", "KRB5", "KMPC"))}
        env.update(KRB5_CONFIG=self.conf, KRB5CCNAME="FILE:" + (ccache or self.ccache),
                   KRB5RCACHEDIR=self.dir, LC_ALL="C", **extra)
        return env

    def run(self, name, *args, input=None, expected_code=0, ccache=None, **extra):
        p = subprocess.run([STOCK[name], *args], input=input, capture_output=True,
                           text=True, env=self.env(ccache, **extra), timeout=60)
        out = p.stdout + p.stderr
        if p.returncode != expected_code:
            raise RealmError(f"{STOCK[name]} {' '.join(args)} exited {p.returncode}, "
                             f"expected {expected_code}:\n{out}")
        return out

    def kinit(self, princ, pw, *opts, ccache=None):
        return self.run("kinit", *opts, princ, input=pw + "\n", ccache=ccache)

    def tickets(self, ccache=None):
        """{server: (flags, ticket etype)} from klist -e -f."""
        out = self.run("klist", "-e", "-f", ccache=ccache)
        found = {}
        server = None
        for line in out.splitlines():
            m = re.match(r"\S+ \S+\s+\S+ \S+\s+(\S+@\S+)$", line)
            if m:
                server = m.group(1)
                continue
            m = re.search(r"Flags: (\S*)", line)
            if m and server:
                found.setdefault(server, [None, None])[0] = m.group(1)
            m = re.search(r"Etype \(skey, tkt\): (.+), (.+)$", line)
            if m and server:
                found.setdefault(server, [None, None])[1] = m.group(2).strip()
        return {k: tuple(v) for k, v in found.items()}, out


def _tgt_is_mpc_keyed(c, ccache=None):
    tickets, out = c.tickets(ccache)
    tgt = tickets.get(f"krbtgt/{REALM}@{REALM}")
    assert tgt is not None, out
    assert MPC_ETYPE in tgt[1], out
    return tgt


@pytest.fixture
def kmpc(kmpc_factory, tmp_path):
    """A kmpc realm, krbtgt in the cluster (made there: share --randkey),
    alice and bob with ordinary password keys, the service with its
    keytab; the stock clients with their conf."""
    _check_stock_binaries()
    kmpc_cluster.find_built("kdc-plugin/libkmpc_kdc.so")  # RealmError if absent
    r = kmpc_factory(module="real")
    r.setup_krbtgt()
    r.setup_warmup()
    pws = _principals(r)
    r.start()
    kinds = {row[2] for row in r.kdb_keys(r.tgs)}
    assert kinds == {"handle"}, r.kdb_keys(r.tgs)
    for u in ("alice", "bob"):
        assert {row[2] for row in r.kdb_keys(u)} == {"key"}, r.kdb_keys(u)
    return r, Clients(r, str(tmp_path)), pws


def _principals(r):
    """The same principals in any realm: users alice and bob (ordinary
    keys, pre-authentication), the service (keytab, allowed to use
    S4U2Self tickets for delegation) and a second service as an S4U2Proxy
    target."""
    pws = {"alice": password(), "bob": password()}
    for u, pw in pws.items():
        r.addprinc(u, pw, enctypes=["aes256-cts-hmac-sha1-96"])
    r.addprinc(SERVICE, enctypes=["aes256-cts-hmac-sha1-96"],
               flags="+ok_to_auth_as_delegate")
    r.addprinc(PROXY_TARGET, enctypes=["aes256-cts-hmac-sha1-96"], flags="")
    r.extract_keytab(SERVICE)
    return pws


def test_login_and_service_ticket(kmpc):
    r, c, pws = kmpc
    out = c.kinit("alice", pws["alice"])
    _tgt_is_mpc_keyed(c)
    out = c.run("kvno", SERVICE)
    assert re.search(rf"{SERVICE}@{REALM}: kvno = \d+", out), out
    tickets, out = c.tickets()
    assert "aes256-cts-hmac-sha1-96" in tickets[f"{SERVICE}@{REALM}"][1], out
    # The ticket is the service's: its keytab decrypts it.
    c.run("kvno", "-k", r.keytab, SERVICE)
    c.run("kdestroy")
    c.run("klist", expected_code=1)
    # A wrong password is refused as with any KDC.
    out = c.run("kinit", "alice", input="not-" + pws["alice"] + "\n",
                expected_code=1)
    assert "Password incorrect" in out, out
    assert r.alive()


def test_renewal(kmpc):
    """kinit -r then kinit -R: the renewed TGT is made in the cluster (MPC
    etype), later than the first, and gets service tickets."""
    r, c, pws = kmpc
    c.kinit("alice", pws["alice"], "-r", "1d")
    tgt, out = c.tickets()
    assert "R" in tgt[f"krbtgt/{REALM}@{REALM}"][0], out
    first = re.search(r"(\S+ \S+)\s+\S+ \S+\s+krbtgt/", out).group(1)
    time.sleep(1.1)
    c.run("kinit", "-R")
    _tgt_is_mpc_keyed(c)
    _, out2 = c.tickets()
    second = re.search(r"(\S+ \S+)\s+\S+ \S+\s+krbtgt/", out2).group(1)
    assert second != first, (out, out2)
    assert "refusing ticket renewal" not in open(r.kdc_log).read()
    out = c.run("kvno", SERVICE)
    assert "kvno = " in out, out


def test_forwarding_and_gss_delegation(kmpc, tmp_path):
    """kinit -f gives a forwardable TGT; gss-client -d delegates to
    gss-server on loopback, which makes the client ask the KDC for a
    forwarded TGT (a TGS-REQ for the krbtgt, encrypted in the cluster) and
    send it in the authenticator: the server reports the delegation."""
    r, c, pws = kmpc
    c.kinit("alice", pws["alice"], "-f")
    tgt = _tgt_is_mpc_keyed(c)
    assert "F" in tgt[0], tgt
    gss_delegation(c, r.keytab, str(tmp_path))
    kdc = open(r.kdc_log).read()
    assert re.search(rf"TGS_REQ .*ISSUE: .*tkt=aes256-ctr-mpc.*alice@{REALM} for "
                     rf"krbtgt/{REALM}@{REALM}", kdc), kdc[-3000:]


def gss_delegation(c, keytab, workdir):
    """gss-client -d to gss-server (-once, its keytab `keytab`) on
    loopback, with c's ccache (a forwardable TGT): the server reports the
    delegation and the message; the client's trace shows the forwarded TGT
    it got from the KDC. (server log, client trace)."""
    realm = c.r.realm
    port = kmpc_realm.free_ports(1)[0]
    log = os.path.join(workdir, "gss-server.log")
    srv = subprocess.Popen([STOCK["gss-server"], "-port", str(port), "-once",
                            "-verbose", "-logfile", log, "-keytab", keytab,
                            GSS_SERVICE],
                           env=c.env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 20
        trace = os.path.join(workdir, "gss-client.trace")
        outs = []
        while True:
            p = subprocess.run([STOCK["gss-client"], "-port", str(port), "-d",
                                "127.0.0.1", GSS_SERVICE, "delegated hello"],
                               capture_output=True, text=True, timeout=60,
                               env=c.env(KRB5_TRACE=trace))
            outs.append(p.stdout + p.stderr)
            if p.returncode == 0 or "Connection refused" not in outs[-1] \
                    or time.time() > deadline:
                break
            time.sleep(0.2)   # the server may not listen yet
        if p.returncode != 0:
            srv.kill()
            slog = srv.communicate()[0]
            if os.path.exists(log):
                with open(log) as f:
                    slog += f.read()
            pytest.fail("gss-client: " + "\n".join(outs) + "\ngss-server: " + slog)
        srv.wait(timeout=30)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    with open(log) as f:
        slog = f.read()
    assert "context flag: GSS_C_DELEG_FLAG" in slog, slog
    assert '"delegated hello"' in slog, slog
    with open(trace) as f:
        ctrace = f.read()
    # The client got a forwarded TGT from the KDC for the delegation.
    assert f"TGS reply is for alice@{realm} -> krbtgt/{realm}@{realm}" in ctrace, ctrace
    return slog, ctrace


def test_s4u2self(kmpc):
    """kvno -U: the service, logged in from its keytab, gets a ticket to
    itself for alice (S4U2Self); -k checks it decrypts with the keytab and
    kvno prints the client it names."""
    r, c, pws = kmpc
    c.run("kinit", "-k", "-t", r.keytab, SERVICE)
    _tgt_is_mpc_keyed(c)
    out = c.run("kvno", "-U", "alice", "-k", r.keytab, SERVICE)
    assert re.search(rf"{SERVICE}@{REALM}: kvno = \d+, keytab entry valid", out), out
    tickets, listing = c.tickets()
    assert f"{SERVICE}@{REALM}" in tickets, listing
    kdc = open(r.kdc_log).read()
    assert f"PROTOCOL-TRANSITION s4u-client=alice@{REALM}" in kdc, kdc[-3000:]
    assert "refusing S4U2Self" not in kdc


def test_user_to_user(kmpc, tmp_path):
    """kvno --u2u: bob gets a ticket to alice encrypted in the session key
    of alice's TGT (the KDC decrypts that second ticket in the cluster)."""
    r, c, pws = kmpc
    alice_cc = str(tmp_path / "alice-ccache")
    c.kinit("alice", pws["alice"], ccache=alice_cc)
    _tgt_is_mpc_keyed(c, alice_cc)
    c.kinit("bob", pws["bob"])
    out = c.run("kvno", "--u2u", alice_cc, "alice")
    assert re.search(rf"alice@{REALM}: kvno = \d+", out), out
    tickets, listing = c.tickets()
    assert f"alice@{REALM}" in tickets, listing
    assert "refusing user-to-user" not in open(r.kdc_log).read()


def _s4u2proxy(c, keytab):
    """The service's S4U2Self then S4U2Proxy to PROXY_TARGET with the stock
    kvno: (exit code, output).  Its TGT is forwardable, so the S4U2Self
    ticket is (ok_to_auth_as_delegate) and a KDC gets as far as its
    delegation policy."""
    c.run("kinit", "-f", "-k", "-t", keytab, SERVICE)
    p = subprocess.run([STOCK["kvno"], "-U", "alice", "-P", SERVICE, PROXY_TARGET],
                       capture_output=True, text=True, env=c.env(), timeout=60)
    return p.returncode, p.stdout + p.stderr


def test_s4u2proxy_as_a_stock_kdc(kmpc, realm_factory, tmp_path):
    """kvno -U -P: S4U2Proxy.  The db2 KDB has no delegation policy, so a
    stock KDC refuses it; kmpc, with the evidence ticket's PAC checked in
    the cluster, refuses it at the same policy step with the same error
    (S4U2Proxy itself with an MPC-held krbtgt is MIT's gssapi/t_s4u on the
    test KDB module, in make test-mit-kmpc)."""
    r, c, pws = kmpc
    code, out = _s4u2proxy(c, r.keytab)
    stock_dir = tmp_path / "stock-clients"
    stock_dir.mkdir()
    s = realm_factory(enctypes=["aes256-cts-hmac-sha1-96"])
    _principals(s)
    s.start_kdc()
    sc = Clients(s, str(stock_dir))
    scode, sout = _s4u2proxy(sc, s.keytab)
    assert code != 0 and scode != 0, (out, sout)
    # Same S4U2Self tickets, the same error for each S4U2Proxy request
    # (KDC_ERR_BADOPTION: the stock client shows the code's message).
    assert out == sout, (out, sout)
    assert "kvno: KDC can't fulfill requested option" in out, out
    for realm in (r, s):
        assert "UNSUPPORTED_S4U2PROXY_REQUEST" in open(realm.kdc_log).read()
    # And both refused at the proxy step, after the S4U2Self ticket.
    for realm in (r, s):
        assert f"PROTOCOL-TRANSITION s4u-client=alice@{REALM}" in open(realm.kdc_log).read()
    assert r.alive()
