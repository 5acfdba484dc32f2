"""kmpc-admin refresh against three real MPC servers, a real KDB and a real
krb5kdc with the kdcmpc module, while a login storm runs.

The test shares user keys from passwords (so it knows every key, derived
here independently: ctr_mpc_ref's string-to-key, aes_ref's key expansion),
reads each server's LMDB store file before and after `refresh --all`, and
checks that
  - no login of a storm of a few hundred logins/s (AS exchange and a TGS
    exchange under the refreshed krbtgt key) failed during the refresh, and
    logins work after it;
  - each store before and each store after still recombines (all three
    together) to the key: the parsing is right;
  - no server's store from before combined with another server's store from
    after gives the key, its round keys or H, by any XOR of their shares;
  - every key moved to a new id, the old ids are gone from every store, the
    KDB's handles name the new ids, `status --kdb` is clean;
  - a refresh of given key ids, and a re-run after a crash mid-way (a
    leftover new id, a leftover old id) finishes the job.

Run as a script (`python3 integration-tests/test_refresh.py --bench 10000`)
it measures a refresh of that many keys under a storm (not part of make
test: minutes of set-up).
"""
import argparse
import itertools
import json
import os
import re
import secrets
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


import ctr_mpc_ref as ref  # noqa: E402
from aes_ref import expand_key  # noqa: E402
from kmpc_harness import cluster as kmpc_cluster  # noqa: E402
from kmpc_harness.kmpc_realm import KmpcRealm, storm_realm  # noqa: E402
from bench import storm_bench  # noqa: E402
import pytest  # noqa: E402

# A load-bearing timing test (a storm, latencies or a window): make test
# runs it alone, after the parallel part (conftest.py, "serial").
pytestmark = pytest.mark.serial

kmpc_cluster.require_built("mpc-server/kmpc-admin", "kdc-plugin/libkmpc_kdc.so")

REALM = kmpc_cluster.REALM
ENCTYPE = "aes256-ctr-mpc"
HPOWERS = 64


# ---- the store files -------------------------------------------------------

def read_stores(realm):
    out = []
    for i in range(3):
        with open(os.path.join(realm.cluster.store_dir(i), "data.mdb"), "rb") as f:
            out.append(f.read())
    return out


# share_store.cc record header before the label: "KMS2" cipher u8 kind u8
# kvno u32 label_len u16 (12 bytes); "KMS1" has no kind byte (11 bytes).
_STORE_HEADERS = ((b"KMS2", 12), (b"KMS1", 11))
# store/cipher.h Cipher: the number of AES round keys of each.
_ROUND_KEYS = {1: 11, 2: 15, 17: 11, 18: 15}
# KeyShares versions (key_shares.cc): 1 plain, 2 with the aes*-cts material;
# 3 and 4 are 1 and 2 with the origin deal id (16) after deal_id, written
# only when the origin differs from deal_id (a refresh's or rebuild's copy).
_CTS_VERSIONS, _ORIGIN_VERSIONS = (2, 4), (3, 4)


def parse_shares(ks):
    """A KeyShares encoding (engine.h, key_shares.cc KeyShares::Serialize):
    "KMPCKS" version party cipher hpowers u16be deal_id[16] [origin[16]]
    rk0 rk1 hp0 hp1 [material], as a dict; "origin" is deal_id in a version
    without one. Strict like KeyShares::Parse: an unknown version or a size
    that does not add up fails here, so a new format is never silently
    skipped."""
    assert ks[:6] == b"KMPCKS", "share record magic"
    version, party, cipher = ks[6], ks[7], ks[8]
    assert version in (1, 2, 3, 4), f"KeyShares version {version} unknown to this reader"
    assert party <= 2 and cipher in _ROUND_KEYS, (party, cipher)
    assert (cipher >= 17) == (version in _CTS_VERSIONS), (version, cipher)
    rk = _ROUND_KEYS[cipher] * 16
    hp = int.from_bytes(ks[9:11], "big") * 16
    deal, at = ks[11:27], 27
    origin = deal
    if version in _ORIGIN_VERSIONS:
        origin, at = ks[27:43], 43
        assert origin != deal, "origin equal to deal_id in version 3/4"
    body = ks[at:at + 2 * rk + 2 * hp]
    assert len(body) == 2 * rk + 2 * hp, "share record size"
    rest = ks[at + len(body):]
    cts = []
    if version in _CTS_VERSIONS:  # key_shares.cc SerializeCts
        assert rest, "no material count"
        pos = 1
        for _ in range(rest[0]):
            kind, usage = rest[pos], int.from_bytes(rest[pos + 1:pos + 5], "big")
            n = int.from_bytes(rest[pos + 5:pos + 7], "big")
            pos += 7
            assert n and len(rest) - pos >= 2 * n, "truncated material"
            cts.append({"kind": kind, "usage": usage,
                        "share": (rest[pos:pos + n], rest[pos + n:pos + 2 * n])})
            pos += 2 * n
        rest = rest[pos:]
    assert rest == b"", "bytes after the share record"
    return {"version": version, "party": party, "cipher": cipher, "deal": deal,
            "origin": origin, "rk": (body[:rk], body[rk:2 * rk]),
            "hp": (body[2 * rk:2 * rk + hp], body[2 * rk + hp:]), "cts": cts}


def records(data, label):
    """Every share record labelled `label` in an LMDB file (share_store.cc:
    header (_STORE_HEADERS) label shares_len u32 shares) as parse_shares
    dicts. A record whose shares do not parse fails the test."""
    lab = label.encode()
    found = []
    pos = data.find(lab)
    while pos >= 0:
        for magic, hlen in _STORE_HEADERS:
            hdr = pos - hlen
            if (hdr >= 0 and data[hdr:hdr + 4] == magic
                    and int.from_bytes(data[pos - 2:pos], "little") == len(lab)):
                off = pos + len(lab)
                n = int.from_bytes(data[off:off + 4], "little")
                ks = data[off + 4:off + 4 + n]
                assert len(ks) == n, f"share record of {label} truncated"
                found.append(parse_shares(ks))
                break
        pos = data.find(lab, pos + 1)
    return found


def one_record(data, label):
    recs = records(data, label)
    assert len(recs) == 1, f"{len(recs)} records labelled {label}"
    return recs[0]


def xor(*bs):
    out = bytearray(len(bs[0]))
    for b in bs:
        for k, x in enumerate(b):
            out[k] ^= x
    return bytes(out)


def truth(key):
    """(expanded round keys, H^1) of the key, computed independently."""
    return b"".join(expand_key(key)), ref.aes_block(key, bytes(16))


def check_combines(views, key):
    """All three parties' views (component 0 of each) give the key."""
    rk, h = truth(key)
    for i in range(3):  # each share's two copies agree
        assert views[i]["rk"][1] == views[(i + 1) % 3]["rk"][0]
        assert views[i]["party"] == i
        # One dealing: the three views name the same deal and origin.
        assert (views[i]["deal"], views[i]["origin"]) == (views[0]["deal"], views[0]["origin"])
    assert xor(*(v["rk"][0] for v in views)) == rk
    assert xor(*(v["hp"][0] for v in views))[:16] == h


def check_never_combine(old, new, key):
    """Old view of party j with new view of party k != j: no XOR of any of
    their four components gives the round keys, the key or H."""
    rk, h = truth(key)
    for j, k in itertools.permutations(range(3), 2):
        for part, want in (("rk", rk), ("hp", None)):
            comps = [old[j][part][0], old[j][part][1], new[k][part][0], new[k][part][1]]
            for r in range(1, 5):
                for sub in itertools.combinations(comps, r):
                    x = xor(*sub)
                    if want is not None:
                        assert x != want, f"old {j} + new {k} give the round keys"
                        assert x[:len(key)] != key, f"old {j} + new {k} give the key"
                    else:
                        assert x[:16] != h, f"old {j} + new {k} give H"


def check_redealt(after, old, keys):
    """The stores after a refresh (or a rebuild) against the views `old`
    from before: every key recombines, under a new dealing that keeps the
    old one's origin (the servers' per-deal bounds follow the key:
    gate_budget.h, refresh.h), and no old view of one party with a new view
    of another (either way round) gives it. Returns the new views."""
    new = {p: [one_record(after[i], p) for i in range(3)] for p in keys}
    for p, k in keys.items():
        check_combines(new[p], k)
        assert new[p][0]["deal"] != old[p][0]["deal"]
        assert new[p][0]["origin"] == old[p][0]["origin"], f"{p}: the copy lost its origin"
        check_never_combine(old[p], new[p], k)
        check_never_combine(new[p], old[p], k)
    return new


# ---- the realm -----------------------------------------------------------

def server_ids(realm, label):
    """{key id hex: {parties}} of the records labelled `label` (ListKeys)."""
    ids = {}
    for m in re.finditer(r"^party (\d) ([0-9a-f]{64}) \S+ kvno \d+ (\S+)$",
                         realm.cluster.client("list-keys"), re.M):
        if m.group(3) == label:
            ids.setdefault(m.group(2), set()).add(int(m.group(1)))
    return ids


def only_id(realm, label):
    ids = server_ids(realm, label)
    assert len(ids) == 1 and list(ids.values())[0] == {0, 1, 2}, ids
    return next(iter(ids))


def lineage(old_hex):
    """The second half of a key id refreshed from old_hex (admin/refresh.h)."""
    import hashlib
    return hashlib.sha256(b"kmpc-refresh-lineage-v1" + bytes.fromhex(old_hex)).digest()[:16].hex()


def status_ok(realm):
    """`status --kdb` holds nothing a refresh could break: every handle has
    its shares, no key on the servers is unreferenced, no key is exposed.
    (Its exit code also reflects keys migrated from the KDB, such as the
    warm-up principal's, which a refresh does not change.)"""
    rc, out, err = realm.admin("status", "--kdb", expected_code=None)
    st = out + err
    ok = all(s in st for s in (" 0 exposed", " 0 handles without shares",
                               " 0 unreferenced keys", "0 incomplete"))
    return (0 if ok else 1), st


def make_realm(kmpc_factory, users, tmp_path):
    """storm_realm, and the users' keys (what the refresh must keep)."""
    r, pws, kt = storm_realm(kmpc_factory, users, tmp_path)
    keys = {f"{u}@{REALM}": ref.string_to_key(ENCTYPE, pw.encode(),
                                             (REALM + u).encode())
            for u, pw in pws.items()}
    return r, pws, keys, kt


class Storm:
    """kmpc-storm in the background: open loop at `rate` logins/s (each an
    AS exchange and a TGS exchange) for `duration` s."""

    def __init__(self, realm, keytab, users, rate, duration, tmp):
        self.json = os.path.join(tmp, f"storm-{secrets.token_hex(4)}.json")
        argv = [storm_bench.find_storm(), "--keytab", keytab, "--principals",
                "user%d@" + realm.realm, "--users", str(users), "-r", str(rate),
                "-d", str(duration), "-w", "1", "--tgs",
                f"{kmpc_cluster.SERVICE}@{realm.realm}", "--timeout", "10",
                "--json", self.json, "--no-progress", "-q",
                "--watch-pid", str(realm.kdc_proc.pid)]
        self.start = time.time()
        self.proc = subprocess.Popen(argv, env=realm.env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def result(self, timeout):
        out, err = self.proc.communicate(timeout=timeout)
        self.end = time.time()
        assert os.path.exists(self.json), f"kmpc-storm wrote no summary: {err}"
        with open(self.json) as f:
            res = json.load(f)
        res["_exit"], res["_stderr"] = self.proc.returncode, err
        return res


def refresh_lines(out):
    m = re.search(r"(\d+) refreshed, (\d+) failed, (\d+) finished from an earlier run",
                  out)
    assert m, out
    return tuple(int(x) for x in m.groups())


# ---- tests ---------------------------------------------------------------

def test_refresh_all_under_a_login_storm(kmpc_factory, tmp_path):
    users = 24
    r, pws, keys, kt = make_realm(kmpc_factory, users, tmp_path)
    rc, st = status_ok(r)
    assert rc == 0, st
    before = read_stores(r)
    old = {p: [one_record(before[i], p) for i in range(3)] for p in keys}
    for p, k in keys.items():
        check_combines(old[p], k)
    ids_before = {p: only_id(r, p) for p in keys}

    # A storm of ~250 logins/s (each AS + TGS) with the refresh in its middle.
    storm = Storm(r, kt, users, rate=250, duration=40, tmp=str(tmp_path))
    time.sleep(4)
    t0 = time.time()
    rc, out, err = r.admin("refresh", "--all", timeout=300)
    t1 = time.time()
    res = storm.result(timeout=120)
    assert rc == 0, out + err
    # users + krbtgt + the warm-up principal; nothing left from a former run.
    assert refresh_lines(out) == (users + 2, 0, 0), out
    # The whole refresh ran inside the storm's measured window.
    assert storm.start + 1 < t0 and t1 < storm.end, (storm.start, t0, t1, storm.end)
    assert res["failed_all_phases"] == 0 and res["errors"] == [], res
    assert res["dropped"] == 0 and res["_exit"] == 0, res
    assert res["ok"] >= 0.9 * 250 * 40, res  # the rate was really offered

    after = read_stores(r)
    new = check_redealt(after, old, keys)
    # Every key under a new id that names its origin; the old records are
    # gone from every file (not just unlisted).
    for p in keys:
        nid = only_id(r, p)
        assert nid != ids_before[p] and nid[32:] == lineage(ids_before[p])
        for i in range(3):
            assert old[p][i]["rk"][0] not in after[i]
    rc, st = status_ok(r)
    assert rc == 0, st

    # Logins work after the refresh: kinit with a password and a short storm.
    r.kinit("user3", pws["user3"])
    r.run(["kvno", kmpc_cluster.SERVICE])
    res = Storm(r, kt, users, rate=100, duration=2, tmp=str(tmp_path)).result(timeout=60)
    assert res["failed_all_phases"] == 0 and res["ok"] >= 150, res
    assert r.alive()


def test_refresh_given_ids_and_resume_after_a_crash(kmpc_factory, tmp_path):
    r, pws, keys, kt = make_realm(kmpc_factory, 3, tmp_path)
    label = {u: f"{u}@{REALM}" for u in ("user0", "user1", "user2")}
    a0 = only_id(r, label["user0"])
    # Usage errors and an unknown id: nothing happens.
    r.admin("refresh", expected_code=2)
    r.admin("refresh", "--all", a0, expected_code=2)
    r.admin("refresh", "abcd", expected_code=2)
    _, out, err = r.admin("refresh", "ab" * 32, expected_code=1)
    assert "not on all three servers" in err, err
    assert only_id(r, label["user0"]) == a0

    # One given key: only it moves.
    b0, c0 = only_id(r, label["user1"]), only_id(r, label["user2"])
    _, out, err = r.admin("refresh", a0)
    assert refresh_lines(out) == (1, 0, 0), out + err
    a1 = only_id(r, label["user0"])
    assert a1 != a0 and a1[32:] == lineage(a0)
    assert only_id(r, label["user1"]) == b0 and only_id(r, label["user2"]) == c0
    r.kinit("user0", pws["user0"])

    def put_copy(user, kid):
        """A whole copy of the user's key under kid on all three servers:
        what a refresh leaves when it stops right after RefreshKeys."""
        r.cluster.client("put-key", f"--key_hex={keys[label[user]].hex()}",
                         f"--key_id_hex={kid}", "--kvno=2", f"--label={label[user]}")

    # Crash point 1: the new id is stored, the KDB still names the old one.
    n1 = secrets.token_hex(16) + lineage(b0)
    put_copy("user1", n1)
    assert set(server_ids(r, label["user1"])) == {b0, n1}
    # Crash point 2: the KDB already names the new id, the old one is left.
    n2 = secrets.token_hex(16) + lineage(c0)
    put_copy("user2", n2)
    r.run([kmpc_cluster.find_built("kdc-plugin/kmpc-kdb-handle"), "-r", REALM, "set",
           label["user2"], ENCTYPE, n2])
    r.kinit("user1", pws["user1"])
    r.kinit("user2", pws["user2"])

    # The re-run finishes both and refreshes what is left (user0, user1).
    _, out, err = r.admin("refresh", "--all")
    refreshed, failed, recovered = refresh_lines(out)
    assert (failed, recovered) == (0, 2), out + err
    assert refreshed == 2 + 2  # user0, user1, krbtgt, the warm-up principal
    # user1: the leftover copy deleted, the old id refreshed; user2: the old
    # id deleted, the new one kept (it is the refresh of the old).
    b1 = only_id(r, label["user1"])
    assert b1 not in (b0, n1) and b1[32:] == lineage(b0)
    assert only_id(r, label["user2"]) == n2
    rc, st = status_ok(r)
    assert rc == 0, st
    for u in ("user0", "user1", "user2"):
        r.kinit(u, pws[u])
    after = read_stores(r)
    for p_, k in keys.items():
        check_combines([one_record(after[i], p_) for i in range(3)], k)
    assert r.alive()


# ---- the 10,000-key figure (not part of make test) -----------------------

def bench(n_keys, rate, workdir):
    """Shares n_keys random-key users (--from-existing), runs storms of 15 s
    at `rate` logins/s (AS + TGS) back to back from before the refresh until
    after it, and times `refresh --all`."""
    import threading
    r = KmpcRealm(workdir, module="real")
    try:
        r.create()
        r.setup_krbtgt()
        r.setup_warmup()
        r.add_service()
        t = time.time()
        r.add_users(n_random=n_keys)
        print(f"set-up: {n_keys} users shared in {time.time() - t:.0f} s", flush=True)
        r.start()
        storm_users = min(n_keys, 1000)
        done = threading.Event()
        results = []

        def storms():
            while not done.is_set():
                results.append(Storm(r, r.users_keytab, storm_users, rate=rate, duration=15,
                                     tmp=workdir).result(timeout=120))

        th = threading.Thread(target=storms)
        th.start()
        time.sleep(5)
        t0 = time.time()
        rc, out, err = r.admin("refresh", "--all", "-q", expected_code=None, timeout=7200)
        t1 = time.time()
        done.set()
        th.join()
        print(out + err)
        ok = sum(x.get("ok_all_phases", 0) for x in results)
        failed = sum(x.get("failed_all_phases", 0) for x in results)
        print(json.dumps({"keys": n_keys + 2, "refresh_s": round(t1 - t0, 1),
                          "keys_per_s": round((n_keys + 2) / (t1 - t0), 1),
                          "exit": rc, "storm_rate": rate, "storms": len(results),
                          "storm_logins_ok": ok, "storm_logins_failed": failed,
                          "storm_p99_ms_max": max((x.get("latency_us") or {}).get("p99", 0)
                                                  for x in results) / 1000},
                         indent=1), flush=True)
    finally:
        r.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", type=int, default=10000)
    ap.add_argument("--rate", type=int, default=250)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    bench(a.bench, a.rate, a.dir or tempfile.mkdtemp(prefix="kmpc-refresh-bench-"))
