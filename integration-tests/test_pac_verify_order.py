"""A forged PAC gets no signature out of the KDC.

A TGS-REQ's checks of the presented TGT's PAC signatures (VERIFY jobs: the
ring-free verify items of the real module) and the signing of the new
ticket's PAC are submitted in one round (krb5 patch 0008, do_tgs_req.c
tgs_req_finish), so the new ticket may be signed while the checks are
still out. What must hold is that nothing so made leaves the KDC unless
every check passed: tgs_fin_complete looks at the checks' outcome before it
builds a reply, and on a failure answers KRB5KRB_AP_ERR_MODIFIED without a
ticket; the servers only ever return additive shares of a tag, which the
KDC module alone combines (kmpc.proto SignRequest). Here the TGT's PAC is
altered (one byte of a buffer its signatures cover) and the TGT encrypted
again under the krbtgt key, as only a holder of that key could: the worst
case of a forged PAC. The TGS-REQ must be refused, the client must hold no
ticket for the service afterwards, and the KDC's log must name the failed
check; the unaltered control gets its ticket.
"""
import re
import time

import pac_ref
from test_metrics import parse, scrape, value
from test_tgs_one_run import SERVICE, _login, _realm, _reencrypt_tgt


def _forge(pac):
    """The PAC with one byte flipped in the last byte of the first buffer
    that is not a signature (the server and KDC signatures cover it)."""
    bufs = pac_ref.pac_buffers(pac)
    sigs = (pac_ref.PAC_SERVER_CHECKSUM, pac_ref.PAC_PRIVSVR_CHECKSUM,
            pac_ref.PAC_TICKET_CHECKSUM)
    btype = min(t for t in bufs if t not in sigs)
    off, n = bufs[btype]
    b = bytearray(pac)
    b[off + n - 1] ^= 0x01
    return bytes(b)


def _has_service_ticket(r):
    return re.search(re.escape(SERVICE) + "@", r.run(["klist"])) is not None


def test_forged_pac_gets_no_signed_ticket(kmpc_factory):
    t0 = time.time()
    r, key = _realm(kmpc_factory)
    for _ in range(2):  # the module learns the krbtgt key and the lengths
        _login(r)
        r.run(["kvno", SERVICE])
    # Control: re-encrypted unaltered, the ticket is issued.
    r.run(["kdestroy"])
    _login(r)
    _reencrypt_tgt(r, key, lambda pac: pac)
    r.run(["kvno", SERVICE])
    assert _has_service_ticket(r)

    r.run(["kdestroy"])
    _login(r)
    _reencrypt_tgt(r, key, _forge)
    signs = value(parse(scrape(r.kdc_metrics_url)), "kmpc_kdc_sign_requests_total",
                  missing=0)
    out = r.run(["kvno", SERVICE], expected_code=1)
    assert "Message stream modified" in out, out
    assert not _has_service_ticket(r), r.run(["klist"])
    log = open(r.kdc_log).read()
    assert "a PAC signature or CAMMAC verifier of a presented ticket did not verify" \
        in log
    assert r.kdc_alive()
    signed = value(parse(scrape(r.kdc_metrics_url)), "kmpc_kdc_sign_requests_total",
                   missing=0) - signs
    print(f"test_forged_pac_gets_no_signed_ticket: {signed:g} ring-free requests "
          f"made while refusing; {time.time() - t0:.1f} s")
