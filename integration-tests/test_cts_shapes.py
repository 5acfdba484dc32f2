"""Shapes that survive a real realm (issue 48, items 5 and 4).

- Users whose names vary as a directory's do (2 to 40 characters, dotted,
  some with an instance) log in with Debian's unmodified kinit: the
  PA-REQ-ENC-PA-REP splice's program follows the AS-REQ's SHA-1 block
  count, not its length (the KDC module deals the request already padded,
  contract.h SpliceDealtBytes), so the servers compile a few programs for
  the whole realm, not one per name length; a second round of logins
  compiles nothing and runs each login in one Run. The figures (distinct
  request lengths, their block counts, programs compiled) are printed.
- Bounded depth: an AS-REQ whose reply would be longer than any real
  client's (kinit with many client addresses, which the KDC copies into
  the reply) is refused by the KDC module with KDC_ERR_SVC_UNAVAILABLE
  and a logged reason before any Run: the servers never see it, so it
  never shares a batch with other logins. (A request over the splice's
  cap alone is answered without PA-REQ-ENC-PA-REP: test_cts_as.py.) One within
  the caps but deep (40 addresses) goes in a batch of deep work only
  (kdc-plugin batcher.h deep_rounds): another user's logins beside a loop
  of them succeed, and their times are printed.

Real processes: krb5kdc with the real kdcmpc module, three
kmpc-mpc-server (malicious security).
"""
import re
import statistics
import string
import threading
import time

import pytest

from kmpc_harness import cluster as kmpc_cluster
from test_cts_as import Stock, kdc_counts
from test_cts_handles import COLD_PROGRAMS, CTS256, ENCTYPES
from test_metrics import parse, scrape, value

kmpc_cluster.require_built("mpc-server/kmpc-admin", "mpc-server/kmpc-mpc-server")

LENGTHS = range(2, 41, 2)
# contract.h kMaxCtsSpliceBytes: the longest AS-REQ dealt is 1015 bytes.
MAX_REQUEST = 1024 - 9


def principal_name(length, i):
    """A name of `length` characters: letters, a dot from 5 on, an
    instance ("/xxxx") for every other one from 10 on."""
    s = "".join(string.ascii_lowercase[(i + k) % 26] for k in range(length))
    if length >= 5:
        s = s[:length // 3] + "." + s[length // 3 + 1:]
    if length >= 10 and i % 2:
        s = s[:length - 5] + "/" + s[length - 4:]
    assert len(s) == length
    return s


def dealt(m):
    """contract::SpliceDealtBytes: the request and its HMAC inner padding."""
    return (64 + m + 9 + 63) // 64 * 64 - 64


def server_counts(kr, name, **labels):
    return [value(parse(scrape(kr.cluster.metrics_url(i))), name, missing=0, **labels)
            for i in range(3)]


def misses(kr):
    return server_counts(kr, "kmpc_cts_program_cache_total", result="miss")


def settle(kr, before, exchanges):
    """(exchanges, Runs) since `before` once `exchanges` more are counted."""
    deadline = time.time() + 10
    while True:
        d = tuple(a - b for a, b in zip(kdc_counts(kr), before))
        if d[0] >= exchanges or time.time() > deadline:
            return d
        time.sleep(0.05)


def request_sizes(out):
    """The AS-REQ sizes kinit's trace reports, in order."""
    return [int(n) for n in re.findall(r"Sending request \((\d+) bytes\)", out)]


def test_varied_names_compile_few_programs(kmpc_factory):
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    users = [principal_name(n, i) for i, n in enumerate(LENGTHS)]
    for u in users:
        kr.addprinc(u, f"Pw-{u}-77", enctypes=[CTS256])
        kr.admin("share", "--from-existing", f"--enctype={CTS256}", u)
    kr.start()
    c = Stock(kr)
    c.env["KRB5_TRACE"] = "/dev/stderr"

    m0, k0 = misses(kr), kdc_counts(kr)
    sizes = []
    for u in users:
        rc, out = c.kinit(u, f"Pw-{u}-77")
        assert rc == 0, out + kr.kdc_log_text()[-3000:]
        sent = request_sizes(out)
        assert len(sent) == 2, out  # without, then with PA-ENC-TIMESTAMP
        sizes.append(sent[-1])
    ex, runs = settle(kr, k0, len(users))
    first = [a - b for a, b in zip(misses(kr), m0)]
    blocks = sorted({dealt(m) // 64 for m in sizes})
    print(f"\n{len(users)} users, names of {min(LENGTHS)}-{max(LENGTHS)} characters; "
          f"AS-REQs of {len(set(sizes))} lengths ({min(sizes)}-{max(sizes)} bytes), "
          f"{len(blocks)} SHA-1 block counts {blocks}; programs compiled per server: "
          f"{first}; {ex} logins in {runs} Runs")
    assert len(set(sizes)) >= 10, sizes  # the names did vary the request
    # The timestamp's DECRYPT, one spliced reply per block count, and a
    # reply length or two (a nonce of another DER length).
    assert max(first) <= len(blocks) + 3, (first, blocks, sizes)
    assert ex == len(users) and runs <= ex + len(blocks) + 2, (ex, runs)

    # A second round: every shape compiled and proven, one Run per login.
    m1, k1 = misses(kr), kdc_counts(kr)
    for u in users:
        rc, out = c.kinit(u, f"Pw-{u}-77")
        assert rc == 0, out
    ex, runs = settle(kr, k1, len(users))
    again = [a - b for a, b in zip(misses(kr), m1)]
    print(f"second round: programs compiled per server {again}; {ex} logins in {runs} Runs")
    assert max(again) <= 1, again  # (a nonce of a rare DER length)
    assert ex == len(users) and runs <= ex + 1, (ex, runs)


def test_an_oversized_request_is_refused_before_any_run(kmpc_factory):
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options=COLD_PROGRAMS)
    kr.setup_krbtgt()
    kr.addprinc("ada", "Ada-pw-5150", enctypes=[CTS256])
    kr.admin("share", "--from-existing", f"--enctype={CTS256}", "ada")
    kr.start()

    def client(name, addresses):
        c = Stock(kr, name)
        extra = ",".join(f"10.{i // 250}.{i % 250}.1" for i in range(addresses))
        with open(c.conf) as f:
            conf = f.read()
        conf = conf.replace("[libdefaults]\n",
                            f"[libdefaults]\n    noaddresses = false\n"
                            f"    extra_addresses = {extra}\n")
        with open(c.conf, "w") as f:
            f.write(conf)
        c.env["KRB5_TRACE"] = "/dev/stderr"
        return c

    # The control: 20 addresses, a request well under the cap, logs in.
    rc, out = client("few", 20).kinit("ada", "Ada-pw-5150")
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    assert request_sizes(out)[-1] <= MAX_REQUEST, out

    evals0, k0 = server_counts(kr, "kmpc_cts_evaluations_total"), kdc_counts(kr)
    # 160 addresses: the request is over the splice's cap (so the KDC asks
    # for no checksum) and the reply, which copies them, over the cts cap
    # (contract.h kMaxCtsBytes).
    rc, out = client("many", 160).kinit("ada", "Ada-pw-5150")
    assert rc != 0, out
    assert request_sizes(out)[-1] > MAX_REQUEST, out
    assert "A service is not available" in out, out
    time.sleep(0.5)
    # Nothing of it reached the servers: no Run, no evaluation.
    assert server_counts(kr, "kmpc_cts_evaluations_total") == evals0
    assert kdc_counts(kr) == k0
    assert "over the aes*-cts length cap" in kr.kdc_log_text(), kr.kdc_log_text()[-3000:]
    assert kr.kdc_alive()


def address_client(kr, name, addresses):
    """Debian's kinit sending `addresses` client addresses (krb5.conf
    noaddresses = false, extra_addresses)."""
    c = Stock(kr, name)
    extra = ",".join(f"10.{i // 250}.{i % 250}.1" for i in range(addresses))
    with open(c.conf) as f:
        conf = f.read()
    conf = conf.replace("[libdefaults]\n",
                        f"[libdefaults]\n    noaddresses = false\n"
                        f"    extra_addresses = {extra}\n")
    with open(c.conf, "w") as f:
        f.write(conf)
    return c


@pytest.mark.parametrize("deep_rounds", [12000, 0])
def test_a_deep_request_goes_in_a_batch_of_its_own(kmpc_factory, deep_rounds):
    """deep_rounds = 0 is the control: the deep lane off (today's batching
    before it), every job in the shared batches."""
    kr = kmpc_factory(module="real", enctypes=ENCTYPES, metrics=True,
                      module_options={"deep_rounds": str(deep_rounds), **COLD_PROGRAMS})
    kr.setup_krbtgt()
    for u, pw in (("ada", "Ada-pw-5150"), ("bob", "Bob-pw-5151")):
        kr.addprinc(u, pw, enctypes=[CTS256])
        kr.admin("share", "--from-existing", f"--enctype={CTS256}", u)
    kr.start()
    deep = address_client(kr, "deep", 40)
    plain = Stock(kr, "plain")

    def timed(n):
        out = []
        for _ in range(n):
            t0 = time.time()
            rc, text = plain.kinit("bob", "Bob-pw-5151")
            assert rc == 0, text + kr.kdc_log_text()[-3000:]
            out.append(time.time() - t0)
        return out

    rc, out = deep.kinit("ada", "Ada-pw-5150")  # compiles its programs
    assert rc == 0, out + kr.kdc_log_text()[-3000:]
    timed(2)  # and bob's
    alone = timed(6)
    stop, deep_rcs = threading.Event(), []

    def loop():
        while not stop.is_set():
            deep_rcs.append(deep.kinit("ada", "Ada-pw-5150")[0])

    loops = [threading.Thread(target=loop) for _ in range(3)]
    for t in loops:
        t.start()
    try:
        time.sleep(1)
        beside = timed(6)
    finally:
        stop.set()
        for t in loops:
            t.join()
    batches = value(parse(scrape(kr.kdc_metrics_url)), "kmpc_kdc_deep_batches_total", missing=0)
    print(f"\ndeep_rounds {deep_rounds}: bob's kinit p50 alone {statistics.median(alone) * 1000:.0f} ms, beside three "
          f"loops of 40-address kinit {statistics.median(beside) * 1000:.0f} ms "
          f"(max {max(beside) * 1000:.0f} ms); deep logins {len(deep_rcs)} "
          f"({deep_rcs.count(0)} ok), deep batches {batches:.0f}")
    assert batches >= 1 if deep_rounds else batches == 0
    assert deep_rcs and deep_rcs.count(0) >= 1, deep_rcs
