"""Debian's unmodified Heimdal clients (heimdal-clients 7.8) against kmpc,
krbtgt in the cluster: the KDB holds a handle for the krbtgt key, alice
and the service keep ordinary aes256-cts-hmac-sha1-96 keys.

The clients are Debian's binaries and libraries, fetched and unpacked
under build/heimdal by kmpc_harness.heimdal (never installed: installing
them would switch /usr/bin/kinit to Heimdal for every other test), run with
LD_LIBRARY_PATH at those libraries, their own krb5.conf (the KDC's
loopback address only) and their own ccache.  If the packages cannot be
had, the test fails.

Heimdal has no name for the MPC enctype of the TGT and prints its number,
-29002 (aes256-ctr-mpc).  That number alone would not tell a krbtgt key
in the KDB (the realm's default enctype) from one in the cluster: the KDB
must hold a handle, and each MPC server's kmpc_jobs_total must grow while
Heimdal logs in, fetches a service ticket and renews.  The KDC log shows
that the AS and TGS requests for alice reached this realm's KDC.
"""
import os
import re
import subprocess

import pytest

from kmpc_harness import heimdal as kmpc_heimdal
from kmpc_harness import realm as kmpc_realm
from test_metrics import delta, parse, scrape
from test_unmodified_clients import Clients, MPC_ETYPE, REALM, SERVICE, _principals

TGT = f"krbtgt/{REALM}@{REALM}"


@pytest.fixture(scope="module")
def heimdal():
    """{program: path} of the unpacked clients (fetched once per build)."""
    try:
        progs = kmpc_heimdal.prepare()
    except kmpc_heimdal.HeimdalError as e:
        pytest.fail(f"Debian's Heimdal clients could not be prepared: {e}")
    pkgs = kmpc_heimdal.packages()
    # Heimdal's libraries are unpacked whatever the host has installed
    assert pkgs[0] == "heimdal-clients" and "libkrb5-26-heimdal" in pkgs, pkgs
    return progs


class HeimdalClients:
    """Heimdal's programs with the MIT Clients' krb5.conf and ccache (both
    read through KRB5_CONFIG and KRB5CCNAME, which Heimdal honours)."""

    def __init__(self, progs, c):
        self.progs = progs
        self.c = c

    def run(self, name, *args, input=None, code=0):
        env = kmpc_heimdal.env(self.c.env())
        p = subprocess.run([self.progs[name], *args], input=input,
                           capture_output=True, text=True, env=env, timeout=60)
        out = p.stdout + p.stderr
        print(f"$ {name} {' '.join(args)} -> {p.returncode}\n{out}")
        assert p.returncode == code, f"{name} {' '.join(args)}: {out}"
        return out

    def ticket_etype(self, server):
        """The ticket etype klist -v shows for server's ticket."""
        out = self.run("klist", "-v")
        m = re.search(rf"Server: {re.escape(server)}\n.*?Ticket etype: ([^\n]*)",
                      out, re.S)
        assert m, out
        return m.group(1), out


def test_binaries_are_debians(heimdal):
    """Each program is the unpacked Debian one and loads Heimdal's libkrb5
    from the unpacked tree, neither the host's MIT one nor this build's,
    and no library of a Heimdal package the host may have installed."""
    libdirs = kmpc_heimdal.lib_dirs()
    for name, path in heimdal.items():
        real = os.path.realpath(path)
        assert real.startswith(kmpc_heimdal.ROOT + "/usr/bin/"), real
        libs = subprocess.run(["ldd", real], capture_output=True, text=True,
                              env=kmpc_heimdal.env(os.environ)).stdout
        m = re.search(r"libkrb5\.so\.26 => (\S+)", libs)
        assert m and any(m.group(1).startswith(d + "/") for d in libdirs), libs
        assert "libkrb5.so.3" not in libs and kmpc_realm.PREFIX not in libs, libs
        assert kmpc_heimdal.host_heimdal_libraries(libs) == [], libs


def test_resolution_ignores_the_hosts_heimdal(heimdal):
    """The packages resolved for a host that has installed every package
    the fixture unpacked (Heimdal's libraries, heimdal-clients itself) are
    all those of them built from Heimdal's source: what is unpacked from
    Heimdal does not depend on what the host has.  Only the installed set
    is made up; apt answers for the rest."""
    pkgs = kmpc_heimdal.packages()
    src = kmpc_heimdal.sources(pkgs)
    own = [p for p in pkgs if src[p][0] == kmpc_heimdal.SOURCE]
    assert "libkrb5-26-heimdal" in own, src
    installed = set(kmpc_heimdal.host_packages()) | set(pkgs)
    got = kmpc_heimdal.resolve(installed=installed)
    assert got[0] == "heimdal-clients" and sorted(got) == sorted(own), (got, own)


def test_heimdal_login_service_renew(heimdal, kmpc_factory, tmp_path):
    r = kmpc_factory(module="real", metrics=True)
    r.setup_krbtgt()
    r.setup_warmup()
    pws = _principals(r)
    r.start()
    assert {row[2] for row in r.kdb_keys(r.tgs)} == {"handle"}, r.kdb_keys(r.tgs)
    c = Clients(r, str(tmp_path))
    h = HeimdalClients(heimdal, c)
    log_start = os.path.getsize(r.kdc_log)
    parties = [r.cluster.metrics_url(i) for i in range(3)]
    before = [parse(scrape(u)) for u in parties]

    h.run("kinit", "--password-file=STDIN", "-r", "1d", "-f", "alice",
          input=pws["alice"] + "\n")
    etype, out = h.ticket_etype(TGT)
    assert MPC_ETYPE in etype, out
    assert re.search(r"Client: alice@" + REALM, out), out

    h.run("kgetcred", SERVICE)
    etype, out = h.ticket_etype(f"{SERVICE}@{REALM}")
    assert "aes256-cts-hmac-sha1-96" in etype, out

    h.run("kinit", "--renew")
    etype, out = h.ticket_etype(TGT)
    assert MPC_ETYPE in etype, out
    assert "refusing ticket renewal" not in r.kdc_log_text()

    # The TGT was made and read in the cluster: at least the AS-REP's TGT
    # (encrypt), kgetcred's TGT (decrypt), the renewal's old TGT (decrypt)
    # and new TGT (encrypt) are jobs of every party.
    after = [parse(scrape(u)) for u in parties]
    jobs = [delta(b, a, "kmpc_jobs_total") for b, a in zip(before, after)]
    print("kmpc_jobs_total grew by", jobs)
    assert all(j >= 4 for j in jobs), jobs

    # Heimdal really talked to this KDC: its log has alice's AS exchange
    # and TGS exchanges (the service ticket, the renewal) after the start.
    with open(r.kdc_log) as f:
        f.seek(log_start)
        log = f.read()
    assert re.search(rf"AS_REQ .*: ISSUE: .*alice@{REALM} for {TGT}", log), log
    assert re.search(rf"TGS_REQ .*: ISSUE: .*alice@{REALM} for {SERVICE}@{REALM}", log), log
    assert re.search(rf"TGS_REQ .*: ISSUE: .*alice@{REALM} for {TGT}", log), log

    # The service ticket is the service's: MIT's stock kvno decrypts a
    # fresh one with the service keytab.
    c.run("kvno", "-k", r.keytab, SERVICE)

    h.run("kdestroy")
    h.run("klist", code=1)
    out = h.run("kinit", "--password-file=STDIN", "alice",
                input="not-" + pws["alice"] + "\n", code=1)
    assert "Password incorrect" in out, out
    assert r.alive()
