"""A TGS-REQ is one Run batch with the real module, and MIT's check of the
TGT's PAC server signature (get_verified_pac) still refuses a wrong one.

The TGT's DECRYPT takes along a verification pad at the TGT's ctr0 + 2^17,
where the AS signed the PAC's server signature under a pad linked to the
ticket's keystream (its plan's SIG_SERVER item, slot 0:
kdc-plugin/src/planner.h); the check
is then a ring-free verify item (kmpc.proto SignItem.verify). Here the
krbtgt key is moved into the cluster from the KDB (share --from-existing)
after the test read it out, so that the test can decrypt the TGT, alter its
PAC and encrypt it again under the same counter, as only a holder of the
krbtgt key could: the altered server signature reaches the ring-free check
(its counter is still the TGT's + 2^17) and the TGS-REQ is refused; the
unaltered control passes the same way. Counts from the KDC module's and
the servers' metrics.
"""
import subprocess
import time

import ctr_mpc_ref
from kmpc_harness import tickets
from kmpc_harness import cluster as kmpc_cluster
import pac_ref
from krb_der import content, ctx, der, seq
from test_metrics import parse, scrape, value

PASSWORD = "one-Run-Pw-7c1"
CLIENT = "onerun"
SERVICE = "host/svc.kmpc.test"
USAGE_TICKET = 2


def _runs(r):
    counts = [value(parse(scrape(r.cluster.metrics_url(i))), "kmpc_batches_total",
                    missing=0, kind="run") for i in range(3)]
    assert counts[0] == counts[1] == counts[2], counts
    return counts[0]


def _verifies(r):
    """TGS exchanges the KDC stated (each with the TGT's verification pad
    in its plan), less the plan misses: a verification that missed its pad
    would count one."""
    m = parse(scrape(r.kdc_metrics_url))
    return (value(m, "kmpc_kdc_exchanges_total", missing=0, exchange="tgs")
            - value(m, "kmpc_kdc_plan_misses_total", missing=0))


def _tgs_reqs(r):
    """TGS-REQs the KDC logged."""
    with open(r.kdc_log) as f:
        return f.read().count("TGS_REQ (")


def _realm(kmpc_factory, server_flags=""):
    """The real module; a krbtgt key the test knows (read out of the KDB
    before it was shared into the cluster)."""
    r = kmpc_factory(module="real", metrics=True, server_flags=server_flags)
    r.kadmin_local(f"setstr {r.tgs} session_enctypes {kmpc_cluster.SESSION_ENCTYPES}")
    key = bytes.fromhex(r._export_for_test_module([r.tgs])[r.tgs])
    r.admin("share", "--from-existing", "--force", r.tgs)
    r.setup_warmup()
    r.add_users({CLIENT: PASSWORD})
    r.add_service(SERVICE)
    r.start()
    return r, key


def _login(r):
    r.run(["kinit", CLIENT], input=PASSWORD + "\n")
    # A second later: the service ticket carries a starttime, as it does in
    # a realm (the module's pads are sized for it).
    time.sleep(1.1)


def _reencrypt_tgt(r, key, alter):
    """The ccache's TGT decrypted, its PAC passed through alter, and
    encrypted again under the same ctr0 (so its server signature's counter
    is still the ticket's + 2^17)."""
    start, length = tickets.tgt_span(r.ccache)
    with open(r.ccache, "rb") as f:
        f.seek(start)
        der_tgt = f.read(length)
    tgt = pac_ref.Ticket(der_tgt, key)
    etp = pac_ref.EncTicketPart(tgt.plain)
    plain = etp.encode(alter(etp.pac))
    cipher = [content(b) for t, w, b in tgt.enc if t == 0xA2][0]
    new = ctr_mpc_ref.encrypt(key, USAGE_TICKET, plain, cipher[:16])
    enc = [ctx(2, der(0x04, new)) if t == 0xA2 else w for t, w, b in tgt.enc]
    out = der(0x61, seq(*(w for _, w, _ in tgt.fields[:-1]), ctx(3, seq(*enc))))
    assert len(out) == length
    with open(r.ccache, "r+b") as f:
        f.seek(start)
        f.write(out)


def test_tgs_is_one_run_and_a_wrong_server_signature_is_refused(kmpc_factory):
    t0 = time.time()
    r, key = _realm(kmpc_factory)
    for _ in range(2):  # the module learns the krbtgt key and the lengths
        _login(r)
        r.run(["kvno", SERVICE])
        r.run(["kinit", "-R"])
    # Control: the TGT re-encrypted unaltered under its own counter.
    _login(r)
    _reencrypt_tgt(r, key, lambda pac: pac)
    runs, verifies = _runs(r), _verifies(r)
    out = r.run(["kvno", SERVICE])
    assert "kvno = " in out, out
    assert (_runs(r) - runs, _verifies(r) - verifies) == (1, 1)
    # One bit of the server signature's tag flipped: refused by the
    # ring-free check, then by the Run that re-checks a refused signature
    # (batch_step.h, "Verify items"): two Runs, no security event.
    r.run(["kdestroy"])
    _login(r)
    _reencrypt_tgt(r, key,
                   lambda pac: pac_ref.flip(pac, pac_ref.PAC_SERVER_CHECKSUM, bit=5))
    runs, verifies, reqs = _runs(r), _verifies(r), _tgs_reqs(r)
    out = r.run(["kvno", SERVICE], expected_code=1)
    assert "Message stream modified" in out, out
    # MIT's client asks again without the referral after an error: each
    # TGS-REQ was the TGT's Run, one ring-free verification and its Run
    # re-check.
    n = _tgs_reqs(r) - reqs
    assert n in (1, 2), n
    assert (_runs(r) - runs, _verifies(r) - verifies) == (2 * n, n)
    assert value(parse(scrape(r.kdc_metrics_url)), "kmpc_kdc_verify_disagreed_total",
                 missing=0) == 0
    assert "a PAC signature or CAMMAC verifier of a presented ticket did not verify" \
        in open(r.kdc_log).read()
    assert r.kdc_alive()
    print(f"test_tgs_one_run: {time.time() - t0:.1f} s")


def test_forwarded_tgt_is_one_run(tmp_path):
    """A forwarded TGT (a TGS-REQ for the krbtgt with FORWARDED, as
    kmpc-storm --mix forward makes after each login) is one Run too: each
    operation, its login included, is two Runs on the servers. Its PAC's
    KDC signature, as the login's, is chained to the server signature by
    its plan: one Sign request per exchange (the forward's TGT check goes
    with its server signature)."""
    from bench import storm_bench  # the storm target and kmpc-storm
    t0 = time.time()
    target = storm_bench.KmpcTarget(str(tmp_path / "kmpc"), "headline", 4, metrics=True)
    try:
        def storm(n):
            p = subprocess.run(
                [storm_bench.find_storm(), "--keytab", target.keytab, "--principals",
                 target.principal_fmt, "--users", "4", "-c", "1", "-n", str(n),
                 "--engine", "sync", "--mix", "forward", "--tgs", target.service, "-q"],
                env=target.env, capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stdout + p.stderr + target.logs()[-3000:]
        storm(8)  # nothing to learn: a first storm as any other
        runs = _runs(target.realm)
        kdc = parse(scrape(target.realm.kdc_metrics_url))
        storm(10)
        assert _runs(target.realm) - runs == 2 * 10
        kdc2 = parse(scrape(target.realm.kdc_metrics_url))
        delta = {n: value(kdc2, n, missing=0) - value(kdc, n, missing=0)
                 for n in ("kmpc_kdc_sign_batches_total", "kmpc_kdc_sign_rerun_total",
                           "kmpc_kdc_plan_misses_total")}
        assert delta == {"kmpc_kdc_sign_batches_total": 2 * 10,
                         "kmpc_kdc_sign_rerun_total": 0,
                         "kmpc_kdc_plan_misses_total": 0}, delta
        # The forward states its plan (the KDC signature chained to the
        # server signature by the plan): one Run each.
        fwd = [value(m, n, missing=0, exchange="forward") for m in (kdc, kdc2)
               for n in ("kmpc_kdc_exchanges_total", "kmpc_kdc_exchange_runs_total")]
        assert (fwd[2] - fwd[0], fwd[3] - fwd[1]) == (10, 10), fwd
        assert target.alive(), target.logs()[-3000:]
    finally:
        target.stop()
    print(f"test_forwarded_tgt_is_one_run: {time.time() - t0:.1f} s")


def test_a_presented_pac_signature_reaches_no_server(kmpc_factory, tmp_path, monkeypatch):
    """The TGS-REQ's check of the TGT's PAC server signature (a ring-free
    verify item) sends the servers its ctr0 and shares of its tag: a PAC
    signature is bytes of the ticket's plaintext, so no 8-byte piece of the
    tag is in what any server received (--debug_record_requests, every
    KeyOps request as received), while the TGT's ciphertext is (control)."""
    t0 = time.time()
    # The servers refuse the recorder without this opt-in (test-only flag).
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    r, key = _realm(kmpc_factory,
                    server_flags=f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin")
    for _ in range(2):  # the module learns the krbtgt key and the lengths
        _login(r)
        r.run(["kvno", SERVICE])
    _login(r)
    verifies = _verifies(r)
    out = r.run(["kvno", SERVICE])
    assert "kvno = " in out, out
    assert _verifies(r) - verifies == 1  # a verify item carried the tag
    start, length = tickets.tgt_span(r.ccache)
    with open(r.ccache, "rb") as f:
        f.seek(start)
        der_tgt = f.read(length)
    pac = pac_ref.EncTicketPart(pac_ref.Ticket(der_tgt, key).plain).pac
    _, _, sig = pac_ref.signature(pac, pac_ref.PAC_SERVER_CHECKSUM)
    assert len(sig) == 32, sig.hex()  # ctr0 || tag
    tag = sig[16:]
    for i in range(3):
        with open(tmp_path / f"keyops-{i}.bin", "rb") as f:
            rec = f.read()
        assert der_tgt[-48:] in rec, f"control: party {i} lacks the TGT ciphertext"
        for k in range(0, 16 - 8 + 1):
            assert tag[k:k + 8] not in rec, f"party {i} received the PAC signature's tag"
    print(f"test_a_presented_pac_signature_reaches_no_server: {time.time() - t0:.1f} s")
