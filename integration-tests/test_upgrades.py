"""Upgrades from the 1.20.1-based kmpc packages (docs/admin-guide.md and
deploy/THREE-HOSTS.md, "Upgrades"), on Debian 12, with the machinery of
test_packages.py (kmpc_harness/packages.py: clean Debian roots, the hosts
as network namespaces, the daemons from the installed units):

- in place: a realm made with the old packages (krbtgt, a user and a
  service in the cluster, a TGT kept), then `apt-get install` of make deb's
  1.21.3-based packages over them, everything restarted in one window: the
  KDB, /etc/kmpc and the share stores untouched by the packages, the same
  handles and key ids, the old TGT still good, new logins and kpasswd;
- rolling, through iprop: an old primary feeding a replica, the replica
  upgraded beside new-version servers (second port, stores copied during a
  short key-change pause, the primary's dealer dealing to both sets
  meanwhile), logins at the replica, a password change at the primary that
  reaches the replica; then the primary upgraded, and every user logs in at
  both.

The old packages are make deb's of the last 1.20.1-based main, built from
git history (make upgrade-old-debs) into KMPC_UPG_OLD_DEBS; the new ones are
make deb's in build/deb. `make test-upgrades` builds both and runs this
module; run without them, it fails (it is never skipped). Root and network
namespaces needed.
"""

import glob
import os
import re
import shutil
import subprocess
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from kmpc_harness import packages as ph  # noqa: E402
from kmpc_harness.deploy_tool import kmpc_deploy  # noqa: E402

BUILD = os.environ.get("KMPC_BUILD", os.path.join(REPO, "build"))
NEW_DEBS = os.path.join(BUILD, "deb")
OLD_DEBS = os.environ.get("KMPC_UPG_OLD_DEBS", "")
KMPC_PKGS = ("kmpc-mpc-server", "kmpc-kdc", "kmpc-admin")
REALM = "UPG.KMPC.TEST"
SERVICE = "host/svc.upg.kmpc.test"
LATER_SERVICE = "host/later.upg.kmpc.test"  # first asked for after the upgrade
PRIMARY, REPLICA = "kdc.upg.kmpc.test", "kdc2.upg.kmpc.test"
NEXT = "-next"  # the new-version server instances: kmpc-mpc-server@<i>-next
NEXT_STORES = "/var/lib/kmpc/next"  # their stores
ARCH = ph.ARCH


def _say(capsys, msg):
    with capsys.disabled():
        print(f"\n[test_upgrades] {msg}", flush=True)


@pytest.fixture(scope="module")
def debs():
    """The old (1.20.1-based) and the new packages, and a root tarball
    holding what both need."""
    if ph.HOST_SUITE != "bookworm":
        pytest.fail("the upgrade tests are for Debian 12 (the 1.20.1-based packages)")
    if not OLD_DEBS or not glob.glob(os.path.join(OLD_DEBS, "kmpc-kdc_*.deb")):
        pytest.fail("no 1.20.1-based packages in KMPC_UPG_OLD_DEBS="
                    f"{OLD_DEBS!r}: `make test-upgrades` builds them from git history")
    if not glob.glob(os.path.join(NEW_DEBS, "kmpc-kdc_*.deb")):
        pytest.fail(f"no packages in {NEW_DEBS}: `make deb` (make test-upgrades runs it)")
    v = {"old_krb5": ph.deb_version(OLD_DEBS, "krb5-kdc", "1.20.1-*"),
         "new_krb5": ph.deb_version(NEW_DEBS, "krb5-kdc", "1.21.3-*"),
         "old_kmpc": ph.deb_version(OLD_DEBS, "kmpc-kdc"), "new_kmpc": ph.deb_version(NEW_DEBS, "kmpc-kdc")}
    # apt-get install of a kmpc package upgrades only to a higher version.
    assert subprocess.run(["dpkg", "--compare-versions", v["new_kmpc"], "gt",
                           v["old_kmpc"]]).returncode == 0, v
    kmpc = [os.path.join(d, f"{p}_{v[k]}_{ARCH}.deb") for p in KMPC_PKGS
            for d, k in ((OLD_DEBS, "old_kmpc"), (NEW_DEBS, "new_kmpc"))]
    v["tarball"] = ph.root_tarball(os.path.join(NEW_DEBS, "cache"), ph.include_for(kmpc))
    return v


def _debs(root, d, krb5_version, kmpc_version, extra=()):
    """The kmpc krb5 packages of krb5_version in d for every krb5 package
    the root has (Debian's or an older kmpc build's) plus extra, and kmpc's
    three of kmpc_version."""
    want = root.installed() | set(extra)
    out = [path for path in glob.glob(os.path.join(d, f"*_{krb5_version}_{ARCH}.deb"))
           if os.path.basename(path).split("_")[0] in want]
    assert any("/krb5-kdc_" in x for x in out), out
    return out + [os.path.join(d, f"{p}_{kmpc_version}_{ARCH}.deb") for p in KMPC_PKGS]


def _login(client, user, pw, ccache, service=SERVICE, conf="client-krb5.conf"):
    client.run("kinit", user, input=pw + "\n", ccache=ccache, conf=conf)
    out = client.run("kvno", service, ccache=ccache, conf=conf).stdout
    assert re.search(rf"{re.escape(service)}@{REALM}: kvno = \d+", out), out


def _kpasswd(client, user, old, new, conf):
    out = client.run("kpasswd", user, input=f"{old}\n{new}\n{new}\n", ccache="cc-kpasswd",
                     conf=conf)
    assert "Password changed" in out.stdout + out.stderr, out


def _status_ok(realm):
    """kmpc-admin status --kdb: every handle's key id on every server of
    each configured cluster (what it names otherwise: real keys the test
    realm keeps on purpose, e.g. kadmind's and kprop's)."""
    code, out = realm.status()
    assert " 0 handles without shares" in out and out.count(", ring up,") >= 3, out
    assert "NOT on all three" not in out, out
    return out


def _server_keys(out):
    counts = re.findall(r"party (\d), ring up, .*?(\d+) keys", out)
    assert len(counts) == 3, out
    return sorted(counts)


def _handles(realm, princs):
    rows = {p: [r for r in realm.handles(p) if r.strip()] for p in princs}
    for p, r in rows.items():
        assert r and all(" handle " in x for x in r), (p, r)
    return rows


def _kdc_conf(root, edit):
    path = root.p("/etc/kmpc/kdc.conf")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(edit(text))


def _set_servers(root, port, conf="kdc.conf"):
    """The [kdcmpc] servers (kdc.conf) or admin.conf's servers at port."""
    servers = ",".join(f"{ph.HOSTS[f'p{i}']}:{port}" for i in range(3))
    path = root.p(f"/etc/kmpc/{conf}")
    with open(path) as f:
        text = f.read()
    text, n = re.subn(r"^(\s*servers = ).*$", rf"\g<1>{servers}", text, flags=re.M)
    assert n == 1, text
    with open(path, "w") as f:
        f.write(text)


# ---- in place -----------------------------------------------------------------

@pytest.fixture
def one_root(debs, tmp_path, request):
    root = ph.DebianRoot(str(tmp_path), debs["tarball"])
    lan = realm = None
    try:
        lan = ph.Lan().up()
        realm = ph.PackagedDeployment(root, lan, str(tmp_path), REALM)
        yield root, lan, realm
    finally:
        rep = getattr(request.node, "rep_call", None)
        if realm and rep is not None and rep.failed:
            print(f"\n===== daemon logs =====\n{realm.logs()}")
        if realm:
            realm.stop()
        if lan:
            lan.down()
        root.close()


def _old_realm(root, realm, users):
    """The realm on the old packages: the krbtgt, the users' and SERVICE's
    keys in the cluster (the users' and service's moved from the KDB as an
    existing realm's are), LATER_SERVICE's in the KDB."""
    realm.configure(REPO)
    realm.start_servers()
    realm.create(users, [SERVICE, LATER_SERVICE], kadmind_keys=False)
    cts = "--enctype=aes256-cts-hmac-sha1-96"  # Debian's clients' enctype, kept
    realm.kdc_run([*realm.admin, "share", "--from-existing", cts, *users])
    realm.kdc_run([*realm.admin, "share", "--from-existing", cts, "--service", SERVICE])
    realm.root.run(["chown", "-R", "kmpc-kdc:kmpc-kdc", "/var/lib/kmpc-kdc"])
    realm.start_kdc()


def _enable_kadmind(realm, protect):
    """kadmind's configuration: the key dealer (protecting the krbtgt and
    the users), its ACL and log."""
    realm.enable_dealer()
    lines = "".join(f"        protect = {p}\n" for p in protect)

    def edit(text):
        text = text.replace("        protect = krbtgt/*\n", "        protect = krbtgt/*\n" + lines)
        text = text.replace("        disable_pac = true\n", "        disable_pac = true\n"
                            "        acl_file = /etc/kmpc/kadm5.acl\n", 1)
        return text.replace("[logging]\n", "[logging]\n"
                            "    admin_server = FILE:/var/log/kmpc-kdc/kadmind.log\n", 1)
    _kdc_conf(realm.root, edit)
    with open(realm.root.p("/etc/kmpc/kadm5.acl"), "a") as f:
        f.write("")


def test_in_place(debs, one_root, tmp_path, capsys):
    root, lan, realm = one_root
    t = time.time()
    root.install(_debs(root, OLD_DEBS, debs["old_krb5"], debs["old_kmpc"]))
    pw = os.urandom(12).hex()
    _old_realm(root, realm, {"alice": pw})
    client = ph.StockClient(lan, str(tmp_path), REALM)
    client.write_conf("client-krb5.conf", [ph.HOSTS["kdc"]], ph.HOSTS["kdc"])
    _login(client, "alice", pw, "cc-before")
    princs = [realm.tgs, "alice", SERVICE]
    handles = _handles(realm, princs)
    stored = _server_keys(_status_ok(realm))
    _say(capsys, f"{debs['old_krb5']} / kmpc {debs['old_kmpc']}: realm made, Debian's "
                 f"kinit/kvno logged in ({time.time() - t:.0f} s)")

    t = time.time()
    realm.stop()
    keep = ("/etc/kmpc", "/var/lib/kmpc", "/var/lib/kmpc-kdc")
    before = {k: v for k, v in root.sha256s(*keep).items() if not k.endswith(".example")}
    root.apt_install(_debs(root, NEW_DEBS, debs["new_krb5"], debs["new_kmpc"]))
    for p in ("krb5-kdc", "libkrb5-3", "libkdb5-10"):
        assert root.version(p) == debs["new_krb5"], p
    for p in KMPC_PKGS:
        assert root.version(p) == debs["new_kmpc"], p
    after = {k: v for k, v in root.sha256s(*keep).items() if not k.endswith(".example")}
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    realm.start_servers()
    realm.start_kdc()
    out = client.run("kvno", LATER_SERVICE, ccache="cc-before").stdout
    assert re.search(rf"{re.escape(LATER_SERVICE)}@{REALM}: kvno = \d+", out), out
    assert _handles(realm, princs) == handles
    assert _server_keys(_status_ok(realm)) == stored
    _login(client, "alice", pw, "cc-after")
    _say(capsys, f"apt-get install {debs['new_krb5']} / kmpc {debs['new_kmpc']} in place, "
                 f"one restart: same files, handles and key ids, old TGT good "
                 f"({time.time() - t:.0f} s)")

    t = time.time()
    _enable_kadmind(realm, ["alice"])
    realm.start_kadmind()
    new_pw = os.urandom(12).hex()
    _kpasswd(client, "alice", pw, new_pw, "client-krb5.conf")
    assert _handles(realm, ["alice"])["alice"] != handles["alice"]
    _login(client, "alice", new_pw, "cc-new")
    _status_ok(realm)
    _say(capsys, f"kpasswd through the new kadmind, dealt, logged in ({time.time() - t:.0f} s)")


# ---- rolling, through iprop -----------------------------------------------------

@pytest.fixture
def two_roots(debs, tmp_path, request):
    """The primary's host (and the old server instances: one root, as in
    test_packages) and the replica's (its KDC, kpropd, and the new server
    instances of the window: the root where the new packages are installed
    first, standing in for the server hosts' new binary)."""
    roots, realms, lan = [], [], None
    try:
        for tag in ("p", "r"):
            roots.append(ph.DebianRoot(str(tmp_path), debs["tarball"], tag=tag))
            # netbase's service names (kprop, kpropd and kadm5 look up
            # krb5_prop and kerberos-adm), as on any installed host.
            shutil.copy("/etc/services", roots[-1].p("/etc/services"))
            with open(roots[-1].p("/etc/hosts"), "a") as f:
                f.write(f"{ph.REPLICA_HOSTS['kdc']} {PRIMARY}\n"
                        f"{ph.REPLICA_HOSTS['kdc2']} {REPLICA}\n")
        lan = ph.Lan(ph.REPLICA_HOSTS, {"kdc": PRIMARY, "kdc2": REPLICA}).up()
        realms = [ph.PackagedDeployment(roots[0], lan, str(tmp_path), REALM, tag="p-"),
                  ph.PackagedDeployment(roots[1], lan, str(tmp_path), REALM, host="kdc2",
                                        tag="r-")]
        yield roots, lan, realms
    finally:
        rep = getattr(request.node, "rep_call", None)
        for realm in realms:
            if rep is not None and rep.failed:
                print(f"\n===== daemon logs ({realm.tag}) =====\n{realm.logs()}")
            realm.stop()
        if lan:
            lan.down()
        for root in roots:
            root.close()


def _iprop_conf(realm, replica):
    """kdc.conf's iprop settings (deploy/THREE-HOSTS.md, 12) and krb5.conf's
    admin server; the replica's tools find the primary's KDC first."""
    poll = "        iprop_replica_poll = 2s\n" if replica else ""
    _kdc_conf(realm.root, lambda t: t.replace(
        "        disable_pac = true\n",
        "        disable_pac = true\n        iprop_enable = true\n        iprop_port = 2121\n"
        + poll, 1))
    path = realm.root.p("/etc/kmpc/krb5.conf")
    with open(path) as f:
        text = f.read()
    kdc = f"        kdc = {ph.REPLICA_HOSTS['kdc']}\n"
    more = f"        kdc = {ph.REPLICA_HOSTS['kdc2']}\n" if replica else ""
    assert kdc in text, text
    text = text.replace(kdc, kdc + more + f"        admin_server = {PRIMARY}\n")
    text = text.replace("[libdefaults]\n", "[libdefaults]\n    dns_canonicalize_hostname = false\n"
                        "    rdns = false\n", 1)
    with open(path, "w") as f:
        f.write(text)


def _old_primary_and_replica(debs, roots, realms, users):
    """Both KDC hosts on the old packages: the primary's realm with its
    dealer and kadmind (iprop), the propagation principals and keytabs, the
    replica loaded by its kpropd's first (full) resync and serving."""
    p, r = realms
    for root in roots:
        root.install(_debs(root, OLD_DEBS, debs["old_krb5"], debs["old_kmpc"],
                           extra=("krb5-kpropd",)))
    _old_realm(roots[0], p, users)
    r.configure(REPO, certs_from=roots[0].p("/etc/kmpc/certs"))
    _iprop_conf(p, False)
    _iprop_conf(r, True)
    # kiprop/<primary>: the service kpropd asks kadmind's iprop for.
    for svc in (f"host/{PRIMARY}", f"host/{REPLICA}", f"kiprop/{PRIMARY}", f"kiprop/{REPLICA}"):
        p.kdc_run(["kadmin.local", "-r", REALM, "-q",
                   f"addprinc -randkey -e aes256-cts-hmac-sha1-96:normal {svc}"])
    p.kdc_run(["kadmin.local", "-r", REALM, "-q", f"ktadd -k /etc/krb5.keytab host/{PRIMARY}"])
    p.kdc_run(["kadmin.local", "-r", REALM, "-q",
               f"ktadd -k /tmp/kdc2.keytab host/{REPLICA} kiprop/{REPLICA}"])
    shutil.move(roots[0].p("/tmp/kdc2.keytab"), roots[1].p("/etc/kmpc/kpropd.keytab"))
    stash = f"/var/lib/kmpc-kdc/.k5.{REALM}"
    shutil.copy(roots[0].p(stash), roots[1].p(stash))
    with open(roots[1].p("/etc/kmpc/kpropd.acl"), "w") as f:
        f.write(f"host/{PRIMARY}@{REALM}\n")
    roots[1].run(["chown", "kmpc-kdc:kmpc-kdc", "/etc/kmpc/kpropd.keytab", stash])
    roots[1].run(["chmod", "0600", "/etc/kmpc/kpropd.keytab", stash])
    _enable_kadmind(p, sorted(users))
    with open(roots[0].p("/etc/kmpc/kadm5.acl"), "w") as f:
        f.write(f"kiprop/{REPLICA}@{REALM} p\n")
    p.start_kadmind()
    _replica_up(r)


def _replica_up(r):
    """kpropd (a full resync when the replica has no KDB or no ulog yet),
    then the replica's KDC once its KDB is there."""
    r.root.run(["chown", "-R", "kmpc-kdc:kmpc-kdc", "/var/lib/kmpc-kdc"])
    log = os.path.join(r.dir, r.tag + "kpropd.log")
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    r.start_kpropd()
    deadline = time.time() + 90
    while not os.path.exists(r.root.p("/var/lib/kmpc-kdc/principal")):
        assert time.time() < deadline and r.kpropd.poll() is None, r.logs()
        time.sleep(0.5)
    while True:
        with open(log, errors="replace") as f:
            f.seek(offset)
            text = f.read()
        if re.search(r"KDC is synchronized|Incremental updates:", text):
            break
        assert time.time() < deadline and r.kpropd.poll() is None, r.logs()
        time.sleep(0.5)
    r.start_kdc()


def _login_retry(client, user, pw, ccache, conf, timeout=60):
    """A login that becomes possible once iprop has brought the change."""
    deadline = time.time() + timeout
    while True:
        try:
            return _login(client, user, pw, ccache, conf=conf)
        except ph.PackageError:
            if time.time() > deadline:
                raise
            time.sleep(1)


def _next_servers(roots, realms):
    """The window's new-version servers on each server host: flag files
    for instance <i>-next (ports 7001/7101, /var/lib/kmpc/next), each store
    copied while the primary's kadmind is stopped (no key change can fall
    between the copy and the dealer's second cluster), then started; the
    primary's dealer deals to both sets from then on (admin.conf's
    servers2), and kadmind is back."""
    p, r = realms
    hosts = [ph.HOSTS[f"p{i}"] for i in range(3)]
    crl = os.path.exists(roots[1].p("/etc/kmpc/certs/crl.pem"))
    for i in range(3):
        flags = kmpc_deploy.server_flags(i, hosts, port=7001, ring_port=7101, crl=crl,
                                         store=NEXT_STORES)
        r._write(f"/etc/kmpc/party{i}{NEXT}.flags", flags, 0o640, "kmpc")
    p.stop(("kadmind",))
    for i in range(3):
        src, dst = f"/var/lib/kmpc/store-{i}", f"{NEXT_STORES}/store-{i}"
        os.makedirs(roots[1].p(dst), mode=0o700)
        shutil.copy(roots[0].p(f"{src}/data.mdb"), roots[1].p(f"{dst}/data.mdb"))
    roots[1].run(["chown", "-R", "kmpc:kmpc", NEXT_STORES])
    roots[1].run(["chmod", "0700", NEXT_STORES])
    _set_servers(roots[1], 7001, "admin.conf")
    r.start_servers(suffix=NEXT)
    servers2 = ",".join(f"{h}:7001" for h in hosts)
    with open(roots[0].p("/etc/kmpc/admin.conf"), "a") as f:
        f.write(f"servers2 = {servers2}\nca2 = /etc/kmpc/certs/ca.pem\n"
                f"cert2 = /etc/kmpc/certs/admin.pem\nkey2 = /etc/kmpc/certs/admin.key\n")
    p.start_kadmind()


AT_P, AT_R = "at-primary.conf", "at-replica.conf"


def _upgrade_primary(debs, roots, realms, client, users):
    """The primary's turn: its KDC and kadmind stop (the replica serves:
    a login there meanwhile), the new packages, its module and dealer to
    the new servers, KDC and kadmind back; then the old instances stop."""
    p, r = realms
    p.stop(("kdc", "kadmind"))
    _login(client, "bob", users["bob"], "cc-r-down", conf=AT_R)
    roots[0].apt_install(_debs(roots[0], NEW_DEBS, debs["new_krb5"], debs["new_kmpc"]))
    for pkg in KMPC_PKGS:
        assert roots[0].version(pkg) == debs["new_kmpc"], pkg
    _set_servers(roots[0], 7001)
    _set_servers(roots[0], 7001, "admin.conf")
    path = roots[0].p("/etc/kmpc/admin.conf")
    with open(path) as f:
        text = re.sub(r"^(servers|ca|cert|key)2 = .*\n", "", f.read(), flags=re.M)
    with open(path, "w") as f:
        f.write(text)
    p.start_kdc()
    p.start_kadmind()
    p.stop(("servers",))


def test_rolling_through_iprop(debs, two_roots, tmp_path, capsys):
    roots, lan, (p, r) = two_roots
    t = time.time()
    users = {u: os.urandom(12).hex() for u in ("alice", "bob")}
    _old_primary_and_replica(debs, roots, (p, r), users)
    client = ph.StockClient(lan, str(tmp_path), REALM)
    client.write_conf(AT_P, [ph.REPLICA_HOSTS["kdc"]], ph.REPLICA_HOSTS["kdc"])
    client.write_conf(AT_R, [ph.REPLICA_HOSTS["kdc2"]], ph.REPLICA_HOSTS["kdc"])
    _login(client, "alice", users["alice"], "cc-p-old", conf=AT_P)
    _login(client, "bob", users["bob"], "cc-r-old", conf=AT_R)
    handles = _handles(p, [p.tgs, *users])
    _say(capsys, f"old primary and replica (kmpc {debs['old_kmpc']}), iprop, logins at both "
                 f"({time.time() - t:.0f} s)")

    t = time.time()
    r.stop(("kdc", "kpropd"))
    roots[1].apt_install(_debs(roots[1], NEW_DEBS, debs["new_krb5"], debs["new_kmpc"]))
    _next_servers(roots, (p, r))
    _status_ok(p)
    _set_servers(roots[1], 7001)
    _replica_up(r)
    assert _handles(r, [p.tgs, *users]) == handles
    _status_ok(r)
    for u, pw in users.items():
        _login(client, u, pw, f"cc-r-{u}", conf=AT_R)
    # A TGT of the old primary is good at the new replica: one krbtgt key.
    out = client.run("kvno", LATER_SERVICE, ccache="cc-p-old", conf=AT_R).stdout
    assert re.search(rf"{re.escape(LATER_SERVICE)}@{REALM}: kvno = \d+", out), out
    new = os.urandom(12).hex()
    _kpasswd(client, "alice", users["alice"], new, AT_P)
    users["alice"] = new
    _login(client, "alice", new, "cc-p-new", conf=AT_P)
    _login_retry(client, "alice", new, "cc-r-new", conf=AT_R)
    _say(capsys, f"window: replica on {debs['new_krb5']} with the new servers, the old "
                 f"primary dealing to both; logins at the replica, kpasswd at the primary "
                 f"reached it by iprop ({time.time() - t:.0f} s)")

    t = time.time()
    _upgrade_primary(debs, roots, (p, r), client, users)
    _status_ok(p)
    new = os.urandom(12).hex()
    _kpasswd(client, "bob", users["bob"], new, AT_P)
    users["bob"] = new
    for u, pw in users.items():
        _login(client, u, pw, f"cc-p-end-{u}", conf=AT_P)
        _login_retry(client, u, pw, f"cc-r-end-{u}", conf=AT_R)
    _say(capsys, f"primary upgraded, old servers stopped: every user logs in at both, "
                 f"kpasswd reaches the replica ({time.time() - t:.0f} s)")
