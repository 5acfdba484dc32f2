"""No plaintext reaches an MPC server, and how many Run batches an exchange
costs (enctype.md, security invariants 5 and 6; issue "private, one-batch
ticket signing").

Three real kmpc-mpc-server processes record every KeyOps request exactly as
they receive it, before doing anything with it (--debug_record_requests,
one file per party). A real krb5kdc with the kmpc module issues a TGT with
a PAC (its server and KDC signatures under the MPC-held krbtgt), a service
ticket (its ticket signature covers the DER EncTicketPart: the session key,
the client's name, the PAC) and a renewed TGT. The test then reads the
session keys the client got (its ccache) and looks for them, and for the
client's name in ASCII and in UTF-16LE (as the PAC holds it), in all that
the servers received. A control checks that the recording does hold what
the servers may see: the TGT's ciphertext, sent with the TGS-REQ's
DECRYPT job.

The per-exchange counts come from the servers' own Prometheus metrics
(kmpc_batches_total{kind="run"}), scraped before and after one exchange
of a single client on an otherwise idle realm.
"""
import os
import time

from kmpc_harness import tickets
from kmpc_harness.kmpc_realm import ready
from test_metrics import parse, scrape, value

PASSWORD = "privacy-Pw-51d2"
# Distinctive, so that no id, label or random byte string matches it.
CLIENT = "privacyprobe"
SERVICE = "host/svc.kmpc.test"


def _realm(kmpc_factory, tmp_path, record=True):
    flags = f"--debug_record_requests={tmp_path}/keyops-{{party}}.bin" if record else ""
    return ready(kmpc_factory(module="real", metrics=True, server_flags=flags),
                 {CLIENT: PASSWORD}, service=SERVICE)


def _recordings(tmp_path):
    out = []
    for i in range(3):
        with open(os.path.join(tmp_path, f"keyops-{i}.bin"), "rb") as f:
            out.append(f.read())
    return out


def _login(r, *opts):
    r.run(["kinit", *opts, CLIENT], input=PASSWORD + "\n")


def test_no_plaintext_of_a_checksum_reaches_any_server(kmpc_factory, tmp_path,
                                                       monkeypatch):
    # The servers refuse the recorder without it (test-only, holds shares).
    monkeypatch.setenv("KMPC_TEST_ONLY_RECORD_REQUESTS", "1")
    r = _realm(kmpc_factory, tmp_path)
    _login(r, "-f", "-r", "1d")
    r.run(["kvno", SERVICE])
    creds = tickets.ccache_credentials(r.ccache)
    r.run(["kinit", "-R"])
    creds += tickets.ccache_credentials(r.ccache)
    r.run(["kvno", SERVICE])
    creds += tickets.ccache_credentials(r.ccache)

    keys = {c["key"] for c in creds if len(c["key"]) >= 16}
    # At least the TGT's, the service ticket's and the renewed TGT's.
    assert len(keys) >= 3, creds
    secrets = {f"session key of {k.hex()[:8]}...": k for k in keys}
    secrets["client name"] = CLIENT.encode()
    secrets["client name in UTF-16LE (PAC_CLIENT_INFO)"] = CLIENT.encode("utf-16-le")

    with open(r.ccache, "rb") as f:
        cc = f.read()
    tgts = [c for c in tickets.ccache_credentials(r.ccache)
            if c["server"][0] == "krbtgt"]
    start, length = tgts[0]["ticket"]
    # The DER Ticket ends with its EncryptedData's cipher octets: ctr0 || C
    # || T, which the TGS-REQ's DECRYPT job carries.
    tgt_cipher_tail = cc[start + length - 48:start + length]

    recs = _recordings(tmp_path)
    for i, rec in enumerate(recs):
        assert len(rec) > 1000, f"party {i} recorded {len(rec)} bytes"
        assert tgt_cipher_tail in rec, \
            f"control: party {i}'s recording lacks the TGT ciphertext"
        for what, secret in secrets.items():
            assert secret not in rec, f"party {i} received the {what}"
    assert "debug_record_requests" in r.cluster.logs()


def _runs(r):
    """Run batches each server has completed (the three must agree)."""
    counts = [value(parse(scrape(r.cluster.metrics_url(i))), "kmpc_batches_total",
                    missing=0, kind="run")
              for i in range(3)]
    assert counts[0] == counts[1] == counts[2], counts
    return counts[0]


def _kdc(r, name):
    """A counter of the KDC module's /metrics (summed over its labels)."""
    return value(parse(scrape(r.kdc_metrics_url)), name, missing=0)


def _planned(r):
    """TGS-type exchanges the KDC stated a plan for (each with the TGT's
    verification pad), less plan misses (a verification without its pad
    would be one)."""
    m = parse(scrape(r.kdc_metrics_url))
    return (sum(value(m, "kmpc_kdc_exchanges_total", missing=0, exchange=k)
                for k in ("tgs", "renew", "forward"))
            - value(m, "kmpc_kdc_plan_misses_total", missing=0))


def test_run_batches_per_exchange(kmpc_factory, tmp_path):
    """A login (AS with PAC) is one Run batch: the timestamp, the reply
    checksum, the ticket's and reply's keystreams and the pads of the two
    PAC signatures; the signatures are ring-free Sign requests and the
    tags ring-free Finalize requests. A TGS request and a renewal are one
    Run too: the TGT's DECRYPT draws a verification pad at the counter its
    PAC's server signature was made at (the ticket's ctr0 + 2^17, a pad
    linked to the ticket's keystream), and MIT's check of that signature
    is a ring-free verify item. No warm-up: every exchange states its
    plan (docs/design/exchange-plan.md section 1.5), so the first login of
    the realm is already one Run."""
    t0 = time.time()
    r = _realm(kmpc_factory, tmp_path, record=False)
    counts, signs, sign_batches, verifies, chained = {}, {}, {}, {}, {}
    for name, argv in (("AS", None), ("TGS", ["kvno", SERVICE]),
                       ("renewal", ["kinit", "-R"]),
                       # kinit -R left the renewed TGT alone in the ccache: a new
                       # TGS-REQ, with the renewed TGT.
                       ("TGS after renewal", ["kvno", SERVICE])):
        if argv is not None:
            # A second after the login: the service ticket and the renewed
            # TGT carry a starttime (MIT omits it when it equals the
            # authtime), as they nearly always do in a realm.
            time.sleep(max(0.0, login_at + 1.1 - time.time()))
        before, s0 = _runs(r), _kdc(r, "kmpc_kdc_sign_requests_total")
        b0 = _kdc(r, "kmpc_kdc_sign_batches_total")
        v0 = _planned(r)
        c0 = _kdc(r, "kmpc_kdc_chained_signatures_total")
        if argv is None:
            _login(r, "-f", "-r", "1d")
            login_at = time.time()
        else:
            r.run(argv)
        counts[name] = _runs(r) - before
        signs[name] = _kdc(r, "kmpc_kdc_sign_requests_total") - s0
        sign_batches[name] = _kdc(r, "kmpc_kdc_sign_batches_total") - b0
        verifies[name] = _planned(r) - v0
        chained[name] = _kdc(r, "kmpc_kdc_chained_signatures_total") - c0
    print("Run batches per exchange:", counts, "Sign items:", signs,
          "Sign requests:", sign_batches, "ring-free verifies:", verifies,
          "chained KDC signatures:", chained,
          f"({time.time() - t0:.1f} s)")
    # The KDC module sent as many Runs as the servers ran.
    assert _kdc(r, "kmpc_kdc_run_requests_total") == _runs(r), "module counter"
    # Every PAC signature under the MPC-held krbtgt went out as a Sign of a
    # pad drawn in the exchange's first Run: the TGT's server signature
    # with its KDC signature chained in the same item (AS, renewal:
    # planner.h, a SIG_SERVER and a SIG_KDC of one key), the service ticket's ticket,
    # KDC and full-PAC signatures (TGS: MIT 1.21 adds the full-PAC checksum
    # to tickets for services other than a TGS; its server signature is
    # under the service's own key, so its KDC signature cannot chain); and the presented TGT's
    # server signature was verified under a verification pad (TGS,
    # renewal: one Sign item more).
    assert verifies == {"AS": 0, "TGS": 1, "renewal": 1,
                        "TGS after renewal": 1}, verifies
    assert chained == {"AS": 1, "TGS": 0, "renewal": 1,
                       "TGS after renewal": 0}, chained
    assert signs == {"AS": 1, "TGS": 4, "renewal": 2,
                     "TGS after renewal": 4}, signs
    # A signature's message waits for the one before (the KDC signature
    # covers the server signature): the chained KDC signature needs no
    # request of its own, one Sign request fewer than unchained (AS 2,
    # renewal 2: its TGT check goes with the server signature).
    assert {n: sign_batches[n] for n in ("AS", "renewal")} == \
        {"AS": 1, "renewal": 1}, sign_batches
    assert all(1 <= sign_batches[n] <= signs[n] for n in signs), sign_batches
    assert _kdc(r, "kmpc_kdc_sign_rerun_total") == 0
    # One Run each: the renewed TGT's PAC was signed under a pad linked to
    # its own keystream, so the TGS after the renewal needs no VERIFY Run.
    assert counts == {"AS": 1, "TGS": 1, "renewal": 1,
                      "TGS after renewal": 1}, counts
