"""The servers' failure budget (issue 62, finding 5;
mpc-server/src/engine/gate_budget.h) on three real kmpc-mpc-server
processes, with the KDC's client certificate and raw jobs (kmpc-mpc-client
jobs): PA-ENC-TIMESTAMPs made under guessed passwords, decrypted under a
user's aes*-cts key, get at most --gate_decrypts_per_run verdicts a Run
and --gate_failures_per_window failures a window; past it the gate DECRYPT
is refused uncomputed (JOB_RATE_LIMITED), the right password's too, until
the window passes. The count survives a restart of every server
(STORE_DIR/gate-failures). RefreshKeys copies share it:
GateBudget's and RefreshTest's C++ tests.
"""
import datetime
import time

import pytest

from test_cts_jobs import _wait_ring, krb5_tool, lines_of, put_cts_key  # noqa: F401
from test_mpc_cluster import Cluster, certs  # noqa: F401

PER_RUN = 4
PER_WINDOW = 6
WINDOW_S = 30


def _timestamp():
    return (bytes.fromhex("301aa011180f")
            + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d%H%M%SZ").encode()
            + bytes.fromhex("a10502030c3500"))


@pytest.fixture
def cluster(tmp_path, certs):  # noqa: F811
    flags = [f"--gate_decrypts_per_run={PER_RUN}",
             f"--gate_failures_per_window={PER_WINDOW}",
             f"--gate_failure_window_s={WINDOW_S}", "--security=semi-honest"]
    c = Cluster(str(tmp_path / "gate-cluster"), certs, flags=[flags] * 3).start()
    _wait_ring(c)
    yield c
    c.stop()


def _guesses(krb5_tool, kid, n):  # noqa: F811
    """The jobs of n gate DECRYPTs of timestamps under guessed passwords."""
    lines = []
    for g in range(n):
        key = krb5_tool("s2k", "18", f"guess{g}", "KMPC.TESTvictim").stdout.strip()
        ct = krb5_tool("enc", "18", key, "1", _timestamp().hex()).stdout.strip()
        lines.append(f"cts_decrypt {kid} 1 {ct}")
    return lines


def test_password_guesses_get_the_budgets_verdicts_only(cluster, krb5_tool):  # noqa: F811
    """The attack: a compromised KDC host sends 64 guesses a Run under one
    user's key. Each server answers at most PER_RUN a Run and PER_WINDOW a
    window; the rest, and then the right password, are refused until the
    window ends, across a restart of every server."""
    c = cluster
    key = krb5_tool("s2k", "18", "password", "KMPC.TESTvictim").stdout.strip()
    kid = put_cts_key(c, key)
    runs = [_guesses(krb5_tool, kid, 64) for _ in range(2)]
    # The servers' window opens at their first failure, so the clock starts
    # at the first Run, after the guesses' own string-to-key work (slow on
    # a busy machine).
    start = time.monotonic()
    verdicts = 0
    for lines in runs:
        out = lines_of(c.jobs(lines))
        assert len(out) == 64, out
        verdicts += out.count("integrity_failed")
        assert out.count("integrity_failed") + out.count("status JOB_RATE_LIMITED") == 64, out
    assert verdicts == PER_WINDOW
    c.stop()
    c.start()
    _wait_ring(c)
    right = krb5_tool("enc", "18", key, "1", _timestamp().hex()).stdout.strip()
    assert lines_of(c.jobs([f"cts_decrypt {kid} 1 {right}"])) == ["status JOB_RATE_LIMITED"]
    for i in range(3):
        with open(f"{c.store_dir(i)}/gate-failures") as f:
            assert f.read().split()[-1] == str(PER_WINDOW)
    assert time.monotonic() - start < WINDOW_S, "too slow to test the window"
    time.sleep(WINDOW_S - (time.monotonic() - start) + 1)
    right = krb5_tool("enc", "18", key, "1", _timestamp().hex()).stdout.strip()
    out = lines_of(c.jobs([f"cts_decrypt {kid} 1 {right}"]))
    assert out[0].startswith("ok "), out


def _server_failures(kr):
    """Each server's count of failed gate DECRYPTs (STORE_DIR/gate-failures,
    the last line of the one dealing that failed; 0 without the file)."""
    counts = []
    for i in range(3):
        try:
            with open(f"{kr.cluster.store_dir(i)}/gate-failures") as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            counts.append(0)
            continue
        lines = [ln for ln in lines if ln.strip()]
        counts.append(int(lines[-1].split()[2]) if lines else 0)
    return counts


def test_wrong_passwords_through_the_kdc_never_reach_the_servers_bound(kmpc_factory):
    """Issue 62's acceptance: an outsider's wrong passwords through the KDC,
    as fast as it answers, never exhaust a user's budget on the servers.
    The module stops the key after kdc.conf's gate_failures (10) failures
    in its window (kdc-plugin/src/gate_failures.h: KDC_ERR_SVC_UNAVAILABLE
    before any Run), below the servers' bound (here 11), so the user is
    not locked out of the cluster: another KDC process (a restart here)
    logs them in with the right password. Without the module's bound
    (gate_failures = 0) all 12 reach the servers, past their 11. (Each
    kinit past the module's bound waits out the client's KDC retries on
    KDC_ERR_SVC_UNAVAILABLE: two of them are enough.)"""
    from test_cts_as import Stock
    from test_cts_service import USER, USER_PW, make_realm
    kr = make_realm(kmpc_factory, also_service=False,
                    server_flags="--gate_failures_per_window=11")
    c = Stock(kr)
    for _ in range(12):
        rc, out = c.kinit(USER, "not the password")
        assert rc != 0, out
    counts = _server_failures(kr)
    assert counts == [10, 10, 10], counts
    kr.stop_kdc()
    kr.start_kdc()
    rc, out = c.kinit(USER, USER_PW)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert _server_failures(kr) == [10, 10, 10]


def test_a_burst_of_wrong_passwords_stops_at_the_modules_bound(kmpc_factory):
    """The same, with the wrong passwords sent all at once (40 stock kinits
    together, no credentials): the module holds a slot for each gate in
    flight (gate_failures.h), so no more than its bound (10) of them reach
    the servers. A non-author review found that, counting only verdicts
    already back, the module let a whole burst through: the servers
    counted 30 of 30 (or 12 of 12, their bound) and the right password was
    refused by the cluster for the servers' window, across KDC restarts."""
    import concurrent.futures
    from test_cts_as import Stock
    from test_cts_service import USER, USER_PW, make_realm
    kr = make_realm(kmpc_factory, also_service=False,
                    server_flags="--gate_failures_per_window=30 --gate_decrypts_per_run=0")
    clients = [Stock(kr, name=f"s{i}") for i in range(40)]
    with concurrent.futures.ThreadPoolExecutor(40) as ex:
        outs = list(ex.map(lambda c: c.kinit(USER, "not the password"), clients))
    assert all(rc != 0 for rc, _ in outs), outs
    counts = _server_failures(kr)
    assert max(counts) <= 10, counts
    kr.stop_kdc()
    kr.start_kdc()
    rc, out = clients[0].kinit(USER, USER_PW)
    assert rc == 0, out + kr.kdc_log_text()[-3000:]


def _failures_by_deal(kr, i):
    """Server i's failed gate DECRYPTs per deal (STORE_DIR/gate-failures:
    the last line of a deal wins)."""
    by_deal = {}
    with open(f"{kr.cluster.store_dir(i)}/gate-failures") as f:
        for line in f.read().split("\n"):
            if line.strip():
                deal, _, n = line.split()
                by_deal[deal] = int(n)
    return by_deal


def test_one_passwords_keys_share_one_budget(kmpc_factory, krb5_tool):  # noqa: F811
    """A password is one door whatever enctypes hold it: the aes256-cts and
    aes128-cts keys the dealer deals for `addprinc -pw` (carol), and the
    two kmpc-admin share --from-existing moves (dave), count their failed
    gates under one deal on the servers. The attack: a compromised KDC
    host (its client certificate, raw jobs) sends 3 guesses under each
    key; before, each key was a deal of its own with a budget of its own
    (two deals of 3 failures: twice the guesses per password)."""
    import subprocess
    from kmpc_harness.cluster import find_built
    CTS256, CTS128 = "aes256-cts-hmac-sha1-96", "aes128-cts-hmac-sha1-96"
    kr = kmpc_factory(module="real", dealer=True, protect=["carol"], user_ctr_mpc=False,
                      supported_enctypes=(CTS256, CTS128))
    kr.kadmin_local("addprinc -pw Carol-pw-31 carol")
    # dave's keys made in the KDB (the dealer protects carol only), then
    # moved into the cluster.
    kr.addprinc("dave", "Dave-pw-42", enctypes=[CTS256, CTS128])
    assert {k[2] for k in kr.kdb_keys("dave")} == {"key"}
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "dave")
    etype = {CTS256: ("18", "aes256-cts"), CTS128: ("17", "aes128-cts")}
    for user in ("carol", "dave"):
        handles = {k[1]: k[3] for k in kr.kdb_keys(user) if k[2] == "handle"}
        assert sorted(handles) == [CTS128, CTS256], kr.kdb_keys(user)
        before = [_failures_by_deal_or_empty(kr, i) for i in range(3)]
        lines = []
        for enctype, kid in handles.items():
            et, cipher = etype[enctype]
            for g in range(3):
                key = krb5_tool("s2k", et, f"guess{g}", f"{kr.realm}{user}").stdout.strip()
                ct = krb5_tool("enc", et, key, "1", _timestamp().hex()).stdout.strip()
                lines.append(f"cts_decrypt:{cipher} {kid} 1 {ct}")
        p = subprocess.run([find_built("mpc-server/kmpc-mpc-client"),
                            f"--servers={kr.cluster.servers}", f"--certs={kr.cluster.certs}",
                            "jobs"], input="\n".join(lines) + "\n", capture_output=True,
                           text=True, timeout=120)
        out = p.stdout.strip().split("\n")
        assert out.count("integrity_failed") == 6, (p.stdout, p.stderr)
        for i in range(3):
            after = _failures_by_deal(kr, i)
            new = {d: n - before[i].get(d, 0) for d, n in after.items()
                   if before[i].get(d) != n}
            assert list(new.values()) == [6], (user, i, new)


def _failures_by_deal_or_empty(kr, i):
    try:
        return _failures_by_deal(kr, i)
    except FileNotFoundError:
        return {}
