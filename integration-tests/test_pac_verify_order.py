"""A forged PAC gets no signature out of the KDC.

A TGS-REQ's checks of the presented TGT's PAC signatures (VERIFY jobs: the
ring-free verify items of the real module) and the signing of the new
ticket's PAC are submitted in one round (krb5 patch 0015, kdc_mpc_tgs.c
kdc_mpc_tgs_finish), so the new ticket may be signed while the checks are
still out. What must hold is that nothing so made leaves the KDC unless
every check passed: tgs_fin_complete looks at the checks' outcome before it
builds a reply, and on a failure answers KRB5KRB_AP_ERR_MODIFIED without a
ticket; the servers only ever return additive shares of a tag, which the
KDC module alone combines (kmpc.proto SignRequest). Here one byte of the
TGT's PAC is changed where no check but the signatures' looks (padding the
server signature covers) and the TGT encrypted again under the krbtgt key,
as only a holder of that key could: a forged PAC that passes every check
but the signatures'. The TGS-REQ must be refused, the client must hold no
ticket for the service afterwards, and the KDC's log must name the failed
check; the unaltered control gets its ticket.
"""
import re
import struct
import time

import pac_ref
from test_metrics import parse, scrape, value
from test_tgs_one_run import SERVICE, _login, _realm, _reencrypt_tgt


def _forge(pac):
    """The PAC with one byte changed that the server signature covers (it
    is computed over the whole PAC, the signature values zeroed) and that
    no other check reads: a byte of the alignment padding between two
    buffers (MS-PAC 2.3, 8-byte aligned). The ticket keeps its length, so
    it can be encrypted again in place; what the KDC sees is a PAC whose
    contents differ from what was signed."""
    bufs = sorted(pac_ref.pac_buffers(pac).values())
    count, = struct.unpack_from("<I", pac, 0)
    ends = [(8 + 16 * count, bufs[0][0])] + [
        (off + n, nxt) for (off, n), (nxt, _) in zip(bufs, bufs[1:])]
    gaps = [a for a, b in ends if b > a]
    assert gaps, f"no padding in this PAC: {bufs}"
    b = bytearray(pac)
    b[gaps[0]] ^= 0x5a
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
