"""Prometheus /metrics over plain HTTP, read the way a scraper reads it
(urllib to 127.0.0.1): each MPC server (--metrics_addr) and the kdcmpc
module inside krb5kdc ([kdcmpc] metrics_addr). Logins must move the
counters and histograms on every process, the three servers must agree on
the work they did, the two renderings of a server (HTTP and the
Admin.Metrics RPC) come from one registry, and no password or key appears
in any of it. The module binds its port once: with krb5kdc -w only one
worker serves it, and a port already taken costs the metrics, not the KDC.
"""
import re
import socket
import subprocess
import time
import urllib.request

import pytest

from kmpc_harness import realm as kmpc_realm

PASSWORD = "metrics-Pw-7c1e"
LOGINS = 4

# name{labels} value  (labels optional), the text exposition format 0.0.4.
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers.get("Content-Type", "").startswith("text/plain")
        return resp.read().decode()


def parse(text):
    """{(name, frozenset(labels)): value}; every line must be a comment or
    a well-formed sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"malformed metrics line: {line!r}"
        name, labels, value = m.groups()
        lab = frozenset(LABEL.findall(labels or ""))
        out[(name, lab)] = float(value)
    return out


def value(samples, name, missing=None, **labels):
    """The sum over the series of `name` whose labels include `labels`;
    `missing` if there is none (an error when None)."""
    want = set(labels.items())
    found = [v for (n, lab), v in samples.items() if n == name and want <= lab]
    if not found and missing is not None:
        return missing
    assert found, f"no {name}{labels} in metrics"
    return sum(found)


def delta(before, after, name, missing=None, **labels):
    """How much a series grew; a labelled series appears at its first
    event, so it may be missing before (and after too, with `missing`)."""
    return (value(after, name, missing=missing, **labels)
            - value(before, name, missing=0, **labels))


def keytab_keys(realm, keytab):
    """Hex of every key in a keytab (klist -kK), to look for in the output."""
    out = realm.run(["klist", "-k", "-K", "-e", keytab])
    return [k.lower() for k in re.findall(r"\(0x([0-9a-fA-F]{32,})\)", out)]


def metrics_realm(kmpc_factory, **kw):
    r = kmpc_factory(module="real", metrics=True, **kw)
    r.setup_krbtgt()
    r.setup_warmup()
    r.add_users({"alice": PASSWORD})
    return r


def urls(r):
    return {"kdc": r.kdc_metrics_url,
            **{f"party{i}": r.cluster.metrics_url(i) for i in range(3)}}


def test_metrics_move_with_logins_and_hold_no_secret(kmpc_factory):
    r = metrics_realm(kmpc_factory)
    r.start()
    assert "kdcmpc: metrics on http://" in kdc_log_text(r)
    before = {k: parse(scrape(u)) for k, u in urls(r).items()}

    for _ in range(LOGINS):
        r.kinit("alice", PASSWORD)
    # A wrong password: the timestamp's tag does not verify in the MPC.
    r.run(["kinit", "alice"], input="not-the-password\n", expected_code=1)

    texts = {k: scrape(u) for k, u in urls(r).items()}
    after = {k: parse(t) for k, t in texts.items()}

    # Servers: each computed the same batches (every batch runs on all
    # three), at least three jobs per login (the timestamp DECRYPT, the
    # ticket's and the reply's ENCRYPT), one integrity failure.
    jobs = [delta(before[f"party{i}"], after[f"party{i}"], "kmpc_jobs_total")
            for i in range(3)]
    assert jobs[0] == jobs[1] == jobs[2], jobs
    assert jobs[0] >= 3 * LOGINS + 1, jobs
    for i in range(3):
        b, a = before[f"party{i}"], after[f"party{i}"]
        assert value(a, "kmpc_jobs_total", party=str(i)) > 0
        assert delta(b, a, "kmpc_batches_total", kind="run", result="ok") >= LOGINS
        assert delta(b, a, "kmpc_batch_latency_seconds_count", kind="run") >= LOGINS
        assert delta(b, a, "kmpc_batch_latency_seconds_sum", kind="run") > 0
        # Cumulative buckets: +Inf holds every observation.
        assert (value(a, "kmpc_batch_latency_seconds_bucket", kind="run", le="+Inf")
                == value(a, "kmpc_batch_latency_seconds_count", kind="run"))
        assert delta(b, a, "kmpc_integrity_failures_total") == 1
        assert delta(b, a, "kmpc_job_failures_total",
                     status="JOB_INTEGRITY_FAILED") == 1
        assert delta(b, a, "kmpc_aes_blocks_total") >= 25 * LOGINS
        assert value(a, "process_resident_memory_bytes") > 1 << 20
        assert value(a, "kmpc_malloc_in_use_bytes") > 0

    # The KDC module: six jobs back per login (its plan's: the timestamp
    # DECRYPT, the PA-REQ-ENC-PA-REP checksum given with it, the PAC's
    # server and KDC signatures under the krbtgt, the ticket's and the
    # reply's ENCRYPT); the wrong password's DECRYPT failed as an integrity
    # failure, and its checksum, gated on it, was withheld (nothing
    # revealed; counted apart, so that "integrity" still counts wrong
    # passwords). Batches observed.
    k0, k1 = before["kdc"], after["kdc"]
    assert delta(k0, k1, "kmpc_kdc_jobs_completed_total", result="ok") == 6 * LOGINS
    assert delta(k0, k1, "kmpc_kdc_jobs_completed_total", result="error") == 2
    assert delta(k0, k1, "kmpc_kdc_job_failures_total", cause="integrity") == 1
    assert delta(k0, k1, "kmpc_kdc_job_failures_total", cause="withheld") == 1
    assert delta(k0, k1, "kmpc_kdc_batch_latency_seconds_count") >= LOGINS
    assert delta(k0, k1, "kmpc_kdc_batch_latency_seconds_sum") > 0
    assert delta(k0, k1, "kmpc_kdc_batch_jobs_sum") >= 3 * LOGINS
    assert delta(k0, k1, "kmpc_kdc_batches_total") >= LOGINS
    assert delta(k0, k1, "kmpc_kdc_jobs_sent_total") >= 3 * LOGINS + 1
    # Prepared keystreams (the plan's ticket and reply): every login's
    # timestamp batch brings both, and they are used; the wrong password's
    # two were wasted (never released: their gate failed).
    spec = delta(k0, k1, "kmpc_kdc_speculative_encrypts_total")
    used = delta(k0, k1, "kmpc_kdc_speculative_used_total")
    assert used == 2 * LOGINS and spec == 2 * (LOGINS + 1), (used, spec)
    assert delta(k0, k1, "kmpc_kdc_speculative_wasted_total") == 2
    assert value(k1, "kmpc_kdc_queue_jobs") == 0
    assert value(k1, "process_resident_memory_bytes") > 1 << 20

    # The same registry behind Admin.Metrics (gRPC) and /metrics (HTTP):
    # the counters of an idle server read the same both ways.
    rpc = r.cluster.client("metrics")
    rpc_samples = parse("\n".join(l for l in rpc.splitlines()
                                  if l.startswith(("#", "kmpc_", "process_"))))
    http0 = parse(scrape(r.cluster.metrics_url(0)))
    for name in ("kmpc_jobs_total", "kmpc_aes_blocks_total",
                 "kmpc_ring_bytes_sent_total"):
        assert value(rpc_samples, name, party="0") == value(http0, name, party="0")

    # No secret: not the password, not any key of a keytab the test holds.
    keys = keytab_keys(r, f"{r.dir}/warmup.keytab")
    assert keys, "klist -kK showed no key"
    for name, t in texts.items():
        low = t.lower()
        assert PASSWORD.lower() not in low, name
        for k in keys:
            assert k not in low and k[:16] not in low, name


def test_a_deviation_moves_the_deviation_counter_a_wrong_password_does_not(
        kmpc_factory):
    """kmpc_deviations_total (servers) and kmpc_kdc_deviations_total (the
    module) count batches failed because a server deviated from the
    protocol (BATCH_INTEGRITY_CHECK_FAILED); kmpc_integrity_failures_total
    keeps counting tags that did not verify (wrong passwords). The
    deviation: party 1 restarted on the test-only kmpc-mpc-server-cheat,
    flipping a bit of the agreement header it forwards (test_breaker.py)."""
    r = metrics_realm(kmpc_factory)
    r.start()
    r.kinit("alice", PASSWORD)
    before = {k: parse(scrape(u)) for k, u in urls(r).items()}
    r.run(["kinit", "alice"], input="not-the-password\n", expected_code=1)
    after = {k: parse(scrape(u)) for k, u in urls(r).items()}
    for i in range(3):
        b, a = before[f"party{i}"], after[f"party{i}"]
        assert delta(b, a, "kmpc_integrity_failures_total") == 1
        assert delta(b, a, "kmpc_deviations_total") == 0
        assert value(a, "kmpc_breaker_open") == 0
    k0, k1 = before["kdc"], after["kdc"]
    assert delta(k0, k1, "kmpc_kdc_job_failures_total", cause="integrity") == 1
    assert delta(k0, k1, "kmpc_kdc_deviations_total") == 0

    r.cluster.restart_party_as(1, "kmpc-mpc-server-cheat", {"KMPC_CHEAT": "1:3:1"})
    for _ in range(8):  # the module's connection to party 1 comes back first
        before = {k: parse(scrape(u)) for k, u in urls(r).items() if k != "party1"}
        r.kinit("alice", PASSWORD, expected_code=1)
        after = {k: parse(scrape(u)) for k, u in urls(r).items() if k != "party1"}
        if delta(before["kdc"], after["kdc"], "kmpc_kdc_deviations_total"):
            break
        time.sleep(0.5)
    k0, k1 = before["kdc"], after["kdc"]
    assert delta(k0, k1, "kmpc_kdc_deviations_total") == 1
    assert delta(k0, k1, "kmpc_kdc_job_failures_total", cause="deviation") >= 1
    assert delta(k0, k1, "kmpc_kdc_job_failures_total", cause="integrity", missing=0) == 0
    # The honest servers: the leader (party 0) always sees it, though it may
    # count the failed batch after the KDC already has its answer; no tag
    # failed (the batch failed as a whole), the breaker stays closed (3).
    deadline = time.monotonic() + 10
    while (delta(before["party0"], after["party0"], "kmpc_deviations_total") == 0
           and time.monotonic() < deadline):
        time.sleep(0.2)
        after.update({p: parse(scrape(urls(r)[p])) for p in ("party0", "party2")})
    assert delta(before["party0"], after["party0"], "kmpc_deviations_total") == 1
    assert delta(before["party2"], after["party2"], "kmpc_deviations_total") <= 1
    for p in ("party0", "party2"):
        assert delta(before[p], after[p], "kmpc_integrity_failures_total") == 0
        assert value(after[p], "kmpc_breaker_open") == 0
    r.cluster.restart_party_as(1)
    r.login_until_ok("alice")


def test_kdc_workers_bind_the_metrics_port_once(kmpc_factory):
    r = metrics_realm(kmpc_factory, kdc_workers=2)
    r.start()
    # Both workers load the module; the first to bind serves /metrics.
    log = wait_log(r, "no metrics from this process")
    assert log.count("kdcmpc: metrics on http://") == 1, log
    assert log.count("no metrics from this process") == 1, log
    r.kinit("alice", PASSWORD)
    assert value(parse(scrape(r.kdc_metrics_url)), "kmpc_kdc_batches_total") >= 0


def test_metrics_port_taken_costs_only_the_metrics(kmpc_factory):
    r = metrics_realm(kmpc_factory)
    port = int(r.kdc_metrics_url.rsplit(":", 1)[1].split("/")[0])
    squat = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squat.bind(("127.0.0.1", port))
        squat.listen(1)
        r.start()
        log = wait_log(r, "no metrics from this process")
        assert "kdcmpc: metrics on" not in log
        for _ in range(2):
            r.kinit("alice", PASSWORD)
        assert r.kdc_alive()
    finally:
        squat.close()


def test_server_refuses_a_metrics_port_it_cannot_bind(tmp_path):
    """A server told to serve metrics on a port it cannot have stops with a
    clear error (a scraper would otherwise see nothing, silently)."""
    from kmpc_harness import cluster as kmpc_cluster
    squat = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squat.bind(("127.0.0.1", 0))
    squat.listen(1)
    port = squat.getsockname()[1]
    try:
        c = kmpc_cluster.MpcCluster(str(tmp_path / "mpc"))
        c.gen_certs()
        c.base = kmpc_cluster.free_base()
        argv = c.server_argv(0) + [f"--metrics_addr=127.0.0.1:{port}"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert f"--metrics_addr 127.0.0.1:{port}" in p.stderr, p.stderr
        assert re.search(r"^E\d{4} ", p.stderr, re.M), p.stderr  # a level
    finally:
        squat.close()


def kdc_log_text(r):
    with open(r.kdc_log, errors="replace") as f:
        return f.read()


def wait_log(r, text, timeout=10):
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        log = kdc_log_text(r)
        if text in log:
            return log
        time.sleep(0.2)
    pytest.fail(f"{text!r} not in the KDC log:\n{kdc_log_text(r)[-3000:]}")
