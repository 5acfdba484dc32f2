"""No real key in any KDB file after a move (issue 62, finding 6).

libkdb5's db2 module rewrites a principal's record in place or moves it,
leaving the old record in the database file's free pages, and iprop's
update log (principal.ulog) keeps every change it logged, key data
included. A move with `kmpc-admin share --from-existing` therefore left the
users' old keys, encrypted in the master key, in the live KDB files: whoever
steals them with the stash decrypts those keys. kmpc-admin now ends every
move that replaced real keys by rewriting the KDB into fresh files
(mpc-server/admin/kdb_rewrite.h: kdb5_util dump and load, the update log's
unused blocks zeroed).

Real processes: three kmpc-mpc-server, kmpc-admin, kadmin.local,
kdb5_util, krb5kdc with the real kdcmpc module and this build's kinit. The
realm has iprop on, so kadmin.local and kmpc-admin log every change in
principal.ulog. The attack: 100 users get real aes256-cts keys from
passwords; each user's stored key data (2-byte length and the key's
encryption in the master key, exactly the bytes the db2 file and the
update log hold) is read from `kdb5_util dump` before the move; after the
move every file of the realm's directory (the principal database and its
policy and lock files, principal.ulog, everything beside them) is searched
as raw bytes for each blob: any 16-byte window of one (every file is read
at each offset that is a multiple of 16, so any piece of 31 bytes or more
of a 62-byte blob is found).

A rewrite that fails (kdb5_util load cannot make its temporary database)
loses nothing: share exits 1 saying so, the handles are written and the KDB
works; `kmpc-admin rewrite-kdb` finishes the job, as it does after the older
handle tool (kmpc-kdb-handle set), which says to run it. An LDAP KDB
is not rewritten: the move says what the admin must do instead.
"""
import os

import pytest

import kdb_dump_ref
from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.cluster import password
from kmpc_harness.realm import free_ports
from test_cts_handles import CTS256, COLD_PROGRAMS, ENCTYPES, stock_kinit

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

USERS = 100
WINDOW = 16
REWROTE = "rewrote the KDB into fresh files"


@pytest.fixture
def realm(kmpc_factory):
    port = free_ports(1)[0]  # kadmind's iprop service (not started here)
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      realm_extra=f"        iprop_enable = true\n"
                                  f"        iprop_port = {port}\n")
    kr.setup_krbtgt()
    kr.start()
    return kr


def add_cts_users(kr, n):
    """n users user0.. with a real aes256-cts key from a random password
    each (kadmin.local, one run); {name: password}."""
    pws = {f"user{i}": password() for i in range(n)}
    cmds = "".join(f"addprinc +requires_preauth -e {CTS256}:normal -pw {pw} {u}\n"
                   for u, pw in pws.items())
    out = kr.run(["kadmin.local", "-r", kr.realm], input=cmds, timeout=300)
    assert out.count("created.") == n, out[-3000:]
    return pws


def stored_keys(kr, users):
    """{user: stored key data} of each user's aes256-cts key: the bytes
    `kdb5_util dump` prints in hex, as the KDB files hold them."""
    dump = kdb_dump_ref.parse_dump(kr.run(["kdb5_util", "-r", kr.realm, "dump"]))
    out = {}
    for u in users:
        keys = [stored for _, et, stored in dump[f"{u}@{kr.realm}"] if et == 18]
        assert len(keys) == 1, f"{u}: {len(keys)} aes256-cts keys"
        out[u] = keys[0]
    return out


def kdb_files(kr):
    """{relative path: bytes} of every file in the realm's directory (the
    KDB's directory), its subdirectories included."""
    files = {}
    for top, _, names in os.walk(kr.dir):
        for name in names:
            path = os.path.join(top, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    files[os.path.relpath(path, kr.dir)] = f.read()
    return files


def blobs_found(kr, blobs):
    """{user: [files]} for each blob of which a 16-byte window is in a file
    at an offset that is a multiple of 16."""
    windows = {}
    for user, blob in blobs.items():
        for i in range(len(blob) - WINDOW + 1):
            windows.setdefault(blob[i:i + WINDOW], set()).add(user)
    found = {}
    for name, data in kdb_files(kr).items():
        for off in range(0, len(data) - WINDOW + 1, WINDOW):
            for user in windows.get(data[off:off + WINDOW], ()):
                if name not in found.setdefault(user, []):
                    found[user].append(name)
    return found


def summary(found):
    per_file = {}
    for files in found.values():
        for name in files:
            per_file[name] = per_file.get(name, 0) + 1
    return ", ".join(f"{name}: {n}" for name, n in sorted(per_file.items()))


def test_no_pre_move_key_in_any_kdb_file(realm):
    kr = realm
    pws = add_cts_users(kr, USERS)
    blobs = stored_keys(kr, pws)
    assert all(len(b) == 62 for b in blobs.values())  # 2 + 16 + 32 + 12 bytes
    # The search finds them where they live: in the database file.
    assert len(blobs_found(kr, blobs)) == USERS
    _, out, err = kr.admin("share", "--from-existing", f"--enctype={CTS256}", *pws)
    assert out.count(": shared from its ") == USERS, out + err
    found = blobs_found(kr, blobs)
    assert not found, (f"{len(found)} of {USERS} users' pre-move encrypted keys are in "
                       f"KDB files after the move ({summary(found)})")
    assert REWROTE in err and "principal.ulog" in err, out + err
    # The rewritten KDB is the KDB: handles only, and the password works.
    assert {r[2] for r in kr.kdb_keys("user7")} == {"handle"}
    rc, log = stock_kinit(kr, "user7", pws["user7"])
    assert rc == 0, log + kr.kdc_log_text()[-3000:]


def test_a_failed_rewrite_loses_nothing_and_rewrite_kdb_finishes_it(realm):
    """kdb5_util load cannot make its temporary database (a directory holds
    its name): share says the KDB was not rewritten and exits 1, the handle
    is written and the KDB works as it was; `kmpc-admin rewrite-kdb` then
    leaves none of the old key in any file."""
    kr = realm
    pws = add_cts_users(kr, 1)
    blobs = stored_keys(kr, pws)
    temp_db = os.path.join(kr.dir, "principal~")  # plugins/kdb/db2: the load's name
    os.mkdir(temp_db)
    rc, out, err = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "user0",
                            expected_code=1)
    assert "user0: shared from its " in out, out + err
    assert "the KDB was NOT rewritten into fresh files" in err, err
    assert "kmpc-admin rewrite-kdb" in err, err
    assert REWROTE not in err
    assert {r[2] for r in kr.kdb_keys("user0")} == {"handle"}
    rc, log = stock_kinit(kr, "user0", pws["user0"])
    assert rc == 0, log + kr.kdc_log_text()[-3000:]
    assert set(blobs_found(kr, blobs)) == {"user0"}  # still in the files
    os.rmdir(temp_db)
    _, out, err = kr.admin("rewrite-kdb")
    assert REWROTE in err, out + err
    assert not blobs_found(kr, blobs)
    rc, log = stock_kinit(kr, "user0", pws["user0"])
    assert rc == 0, log + kr.kdc_log_text()[-3000:]


def test_the_handle_tool_points_to_rewrite_kdb(realm):
    """kmpc-kdb-handle set (the older migration tool) leaves the replaced
    key in the KDB's files and says to run kmpc-admin rewrite-kdb, which
    removes it."""
    kr = realm
    pws = add_cts_users(kr, 1)
    blobs = stored_keys(kr, pws)
    _, err = kr.kdb_handle_run("set", "user0", CTS256, "ab" * 32)
    assert "kmpc-admin rewrite-kdb" in err, err
    assert set(blobs_found(kr, blobs)) == {"user0"}
    _, out, err = kr.admin("rewrite-kdb")
    assert REWROTE in err, out + err
    assert not blobs_found(kr, blobs)
    assert [(r[2], r[3]) for r in kr.kdb_keys("user0")] == [("handle", "ab" * 32)]


def test_an_ldap_kdb_is_not_rewritten_and_the_admin_is_told(kmpc_factory):
    """kmpc-admin rewrites db2 KDBs only: on MIT's kldap module a move
    says what the admin must do instead (docs/admin-guide.md, "Old keys
    after a move") and succeeds; no db2 file appears."""
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS,
                      ldap=True)
    add_cts_users(kr, 1)
    rc, out, err = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "user0")
    assert "user0: shared from its " in out, out + err
    assert "the KDB is not rewritten, its module is kldap" in err, err
    assert "copy the directory's database into a fresh file" in err, err
    assert REWROTE not in err
    assert not os.path.exists(os.path.join(kr.dir, "principal"))
    assert {r[2] for r in kr.kdb_keys("user0")} == {"handle"}


def test_without_iprop_a_left_update_log_is_named(kmpc_factory):
    """With iprop off only the database is rewritten (no update log is
    in use); an update log left from when iprop was on is named for
    deletion, since its entries keep the key data they logged."""
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, module_options=COLD_PROGRAMS)
    pws = add_cts_users(kr, 1)
    blobs = stored_keys(kr, pws)
    ulog = os.path.join(kr.dir, "principal.ulog")
    assert not os.path.exists(ulog)
    with open(ulog, "wb") as f:
        f.write(blobs["user0"])  # as an old log's entry would hold it
    _, out, err = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "user0")
    assert REWROTE in err and "principal.ulog reset" not in err, err
    assert f"WARNING: {ulog} is left from when iprop was on" in err, err
    assert blobs_found(kr, blobs) == {"user0": ["principal.ulog"]}


def test_the_fresh_files_keep_the_old_owner_and_mode(realm):
    """kdb5_util load, run by kmpc-admin as root, makes its files root's,
    mode 0600; the KDC and kadmind may run as another user
    (deploy/THREE-HOSTS.md: kmpc-kdc), so the fresh database and policy
    files get the replaced ones' owner and mode."""
    kr = realm
    add_cts_users(kr, 1)
    paths = [os.path.join(kr.dir, n) for n in ("principal", "principal.kadm5")]
    for p in paths:
        os.chown(p, 65534, 65534)
        os.chmod(p, 0o640)
    before = [os.stat(p) for p in paths]
    _, out, err = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "user0")
    assert REWROTE in err, out + err
    for p, old in zip(paths, before):
        new = os.stat(p)
        assert new.st_ino != old.st_ino, f"{p} was not replaced"
        assert (new.st_uid, new.st_gid, new.st_mode & 0o7777) == (65534, 65534, 0o640), p


def test_a_kadmin_change_that_replaced_real_keys_is_named_until_rewrite_kdb(kmpc_factory):
    """kadmind's key dealer replacing real keys by handles (here kadmin
    cpw of principals not yet in the cluster, naming an MPC enctype) cannot
    rewrite the KDB itself: a dump and load would lose a change kadmind
    makes meanwhile. It notes each principal beside the database
    (mpc-server/admin/rewrite_due.h); status --kdb names them while the db2
    file still holds their old key data, and rewrite-kdb removes both.
    Before, nothing told the admin the old keys were still in the files."""
    port = free_ports(1)[0]
    kr = kmpc_factory(module="real", dealer=True, enctypes=ENCTYPES,
                      module_options=COLD_PROGRAMS,
                      realm_extra=f"        iprop_enable = true\n"
                                  f"        iprop_port = {port}\n")
    pws = add_cts_users(kr, 3)
    blobs = stored_keys(kr, pws)
    for u in pws:
        kr.kadmin_local(f"cpw -randkey -e aes256-ctr-mpc:normal {u}")
        assert {k[2] for k in kr.kdb_keys(u)} == {"handle"}, kr.kdb_keys(u)
    assert sorted(blobs_found(kr, blobs)) == sorted(pws), "control: the old keys are in the files"
    _, out, _ = kr.admin("status", "--kdb", expected_code=1)
    line = [ln for ln in out.splitlines() if "kadmin replaced the real keys" in ln]
    assert len(line) == 1 and "of 3 principal(s)" in line[0], out
    assert all(f"{u}@{kr.realm}" in line[0] for u in pws), line
    kr.admin("rewrite-kdb")
    found = blobs_found(kr, blobs)
    assert not found, summary(found)
    _, out, _ = kr.admin("status", "--kdb", expected_code=None)
    assert "kadmin replaced the real keys" not in out, out
