"""Share refresh and the replacement of a lost server for users whose
standard aes*-cts keys live in the cluster (docs/admin-guide.md, "Users
with aes*-cts-hmac-sha1-96 handles" and "Replacing a lost server").

Real processes as in test_cts_handles.py: three kmpc-mpc-servers, kmpc-admin,
krb5kdc with the real kdcmpc module, and Debian's own /usr/bin/kinit with a
krb5.conf that names only the standard AES enctypes. A user's aes256-cts and
aes128-cts keys are moved into the cluster with `kmpc-admin share
--from-existing` (the KDB then holds only handles: nothing to fall back on).
The user then logs in, with the right password only,
  - after `kmpc-admin refresh --all`, which moves every key (these two and
    the ctr-mpc krbtgt) to a new id;
  - after one server is lost (stopped, its store deleted), started again on
    an empty store and rebuilt with `kmpc-admin rebuild-party`, which gives
    it its shares of every key, the aes*-cts keys' dealt usage material
    included, from the two survivors.
Every login is one MPC Run on all three servers under the user's dealt
usage material (usages 1 and 3), so a login after the rebuild also shows
that the rebuilt server holds that material; the unit tests
(mpc-server/test/core/refresh_test.cc) check every entry's value.
"""
import os
import re
import shutil

from kmpc_harness import cluster as kmpc_cluster
from test_cts_handles import (CTS128, CTS256, assert_kdc_serves, assert_keys_nowhere,
                              assert_only_handles, keys_of, realm)  # noqa: F401 (fixture)

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

LOST = 2


def handle_ids(rows):
    """{enctype: key id} of a principal's handles."""
    return {r[1]: r[3] for r in rows}


def report(out, what):
    m = re.search(rf"(\d+) {what}, (\d+) failed, (\d+) finished from an earlier run", out)
    assert m, out
    return tuple(int(x) for x in m.groups())


def status_clean(kr):
    rc, out, err = kr.admin("status", "--kdb", expected_code=None)
    st = out + err
    for s in (" 0 exposed", " 0 handles without shares", " 0 unreferenced keys",
              "0 incomplete"):
        assert s in st, st
    assert "NOT on all three" not in st, st


def test_migrated_cts_user_logs_in_after_refresh_and_rebuild(realm):
    kr, pw = realm, "Vera-pw-6061"
    kr.addprinc("vera", pw, enctypes=[CTS256, CTS128])
    keys = keys_of(kr, "vera", pw)
    _, out, _ = kr.admin("share", "--from-existing", f"--enctype={CTS256}", "vera")
    assert f"as {CTS256} kvno 1" in out and f"as {CTS128} kvno 1" in out, out
    ids0 = handle_ids(assert_only_handles(kr, "vera", keys))
    assert set(ids0) == {CTS256, CTS128}, ids0
    tgs0 = set(handle_ids(kr.kdb_keys(kr.tgs)).values())
    assert_kdc_serves(kr, "vera", pw, keys, stock=True)

    # A refresh moves the aes*-cts keys (and the ctr-mpc krbtgt beside them)
    # to new ids; the KDB still holds only handles, now of the new ids.
    rc, out, err = kr.admin("refresh", "--all", timeout=300)
    refreshed, failed, _ = report(out, "refreshed")
    assert failed == 0 and refreshed >= 3, out + err
    ids1 = handle_ids(assert_only_handles(kr, "vera", keys))
    assert set(ids1) == set(ids0) and not set(ids1.values()) & set(ids0.values()), (ids0, ids1)
    assert not set(handle_ids(kr.kdb_keys(kr.tgs)).values()) & tgs0
    status_clean(kr)
    assert_kdc_serves(kr, "vera", pw, keys, stock=True)

    # Server LOST is lost: process and store gone; a new one on an empty
    # store, then the survivors rebuild it.
    kr.cluster.stop_party(LOST)
    shutil.rmtree(kr.cluster.store_dir(LOST))
    os.makedirs(kr.cluster.store_dir(LOST))
    kr.cluster.start_party(LOST)
    kr.cluster.wait_ring()
    rc, out, err = kr.admin("rebuild-party", str(LOST), timeout=300)
    rebuilt, failed, _ = report(out, "rebuilt")
    assert failed == 0 and rebuilt == refreshed, out + err
    ids2 = handle_ids(assert_only_handles(kr, "vera", keys))
    assert set(ids2) == set(ids0) and not set(ids2.values()) & set(ids1.values()), (ids1, ids2)
    status_clean(kr)
    # Debian's kinit, the right password only, through the rebuilt server.
    assert_kdc_serves(kr, "vera", pw, keys, stock=True)
    assert_keys_nowhere(kr, keys)
    # A second rebuild finds nothing to do.
    rc, out, err = kr.admin("rebuild-party", str(LOST), timeout=300)
    assert report(out, "rebuilt") == (0, 0, 0), out + err
