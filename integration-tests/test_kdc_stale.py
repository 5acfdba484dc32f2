"""krb5's stale UDP request patch: [kdcdefaults] kdc_udp_max_wait_ms drops, unanswered, UDP
requests which waited in the KDC's socket longer than that (kernel receive
timestamps), so an overloaded KDC does not work for clients which gave up.

The KDC is frozen with SIGSTOP while AS-REQs queue in its socket; after
SIGCONT it reads them 1.5 s old.  With the option at 500 ms they get no
reply and one summary line is logged; without it they are all answered.
"""
import os
import re
import secrets
import select
import signal
import socket
import struct
import time

import pytest

import krb_der

STALE_PROBES = 5
FROZEN_S = 1.5


def send_probes(realm, n):
    """n AS-REQs for principal "probe", each from its own UDP socket (distinct
    nonces, so the KDC's lookaside cache answers none for another)."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.sendto(krb_der.as_req(realm.realm, "probe", secrets.randbelow(2**31)),
                 ("127.0.0.1", realm.kdc_port))
        socks.append(s)
    return socks


def replies(socks, wait_s):
    """{index: reply} of the sockets answered within wait_s."""
    got = {}
    deadline = time.monotonic() + wait_s
    while len(got) < len(socks):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([s for i, s in enumerate(socks) if i not in got],
                                    [], [], left)
        for s in ready:
            got[socks.index(s)] = s.recv(4096)
    return got


def is_preauth_required(reply):
    return krb_der.krb_error_code(reply) == 25  # KDC_ERR_PREAUTH_REQUIRED


def read_log(realm):
    with open(realm.kdc_log, errors="replace") as f:
        return f.read()


SO_TIMESTAMPNS = 35     # Linux, asm-generic/socket.h; also the cmsg type


def wait_kernel_stamps_live(timeout=10):
    """Wait until the kernel timestamps arriving datagrams.

    Linux turns receive timestamps on for all sockets when the first one asks
    (net_enable_timestamp), through a deferred work item; a datagram that
    arrives before it ran carries no stamp, and recvmsg() then stamps it with
    the time it is read, so a request queued in a just-started KDC's socket
    would read as fresh.  A datagram to ourselves, read 100 ms later, shows
    the stamps are taken on arrival."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind(("127.0.0.1", 0))
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        deadline = time.monotonic() + timeout
        while True:
            s.sendto(b"t", s.getsockname())
            time.sleep(0.1)
            _, anc, _, _ = s.recvmsg(16, socket.CMSG_SPACE(16))
            now = time.time()
            stamps = [struct.unpack("qq", d[:16]) for lvl, typ, d in anc
                      if lvl == socket.SOL_SOCKET and typ == SO_TIMESTAMPNS]
            if stamps and now - (stamps[0][0] + stamps[0][1] / 1e9) >= 0.08:
                return
            assert time.monotonic() < deadline, "the kernel does not stamp datagrams"
    finally:
        s.close()


def frozen_kdc_probes(realm, reply_wait=1.5):
    """Send STALE_PROBES AS-REQs while the KDC is stopped, resume it after
    FROZEN_S and return (the replies that came within reply_wait after
    that, the monotonic time of the SIGCONT)."""
    wait_kernel_stamps_live()
    pid = realm.kdc_proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        socks = send_probes(realm, STALE_PROBES)
        time.sleep(FROZEN_S)
    finally:
        resumed = time.monotonic()
        os.kill(pid, signal.SIGCONT)
    try:
        return replies(socks, reply_wait), resumed
    finally:
        for s in socks:
            s.close()


def wait_drop_lines(realm, n, timeout):
    """Wait until the KDC log has n drop summary lines; return them and the
    monotonic time they were seen."""
    deadline = time.monotonic() + timeout
    while True:
        lines = DROP_RE.findall(read_log(realm))
        if len(lines) >= n or time.monotonic() > deadline:
            return [tuple(map(int, m)) for m in lines], time.monotonic()
        time.sleep(0.02)


def make_realm(realm_factory, max_wait_ms):
    extra = f"    kdc_udp_max_wait_ms = {max_wait_ms}\n" if max_wait_ms else ""
    r = realm_factory(kdc_conf_extra=extra)
    r.addprinc("probe")
    r.start_kdc()
    return r


def check_fresh(realm):
    socks = send_probes(realm, 1)
    try:
        got = replies(socks, 5)
    finally:
        socks[0].close()
    assert 0 in got, "a fresh AS-REQ got no reply"
    assert is_preauth_required(got[0]), got[0][:64].hex()
    # And a whole login (kinit: TCP first with this krb5.conf).
    pw = "pw-" + secrets.token_hex(8)
    name = "u" + secrets.token_hex(4)
    realm.addprinc(name, pw)
    realm.kinit(name, pw)


DROP_RE = re.compile(r"UDP: dropped (\d+) requests which waited more than (\d+) ms "
                     r"in the socket \(longest (\d+) ms\); (\d+) since start")


def test_stale_udp_requests_are_dropped(realm_factory):
    realm = make_realm(realm_factory, 500)
    log = read_log(realm)
    assert re.search(r"UDP socket on 127\.0\.0\.1\.\d+: requests which waited more "
                     r"than 500 ms are dropped", log), log
    check_fresh(realm)    # fresh requests are served

    got, _ = frozen_kdc_probes(realm)
    assert got == {}, f"{len(got)} of {STALE_PROBES} stale requests were answered"

    # One summary line for the whole stale backlog, nothing per request.
    lines, _ = wait_drop_lines(realm, 1, 5)
    log = read_log(realm)
    assert len(lines) == 1, log
    n, limit, longest, total = lines[0]
    assert (n, limit, total) == (STALE_PROBES, 500, STALE_PROBES), lines
    assert FROZEN_S * 1000 * 0.9 <= longest < 30000, lines
    # The KDC did not process them: no AS_REQ log entry for "probe" beyond the
    # one fresh probe of check_fresh().
    assert len(re.findall(r"AS_REQ .*probe@", log)) == 1, log

    check_fresh(realm)    # the KDC serves fresh requests again
    assert len(DROP_RE.findall(read_log(realm))) == 1


def test_without_the_option_old_requests_are_answered(realm_factory):
    realm = make_realm(realm_factory, 0)
    got, _ = frozen_kdc_probes(realm)
    assert sorted(got) == list(range(STALE_PROBES)), \
        f"only {len(got)} of {STALE_PROBES} requests answered"
    assert all(is_preauth_required(r) for r in got.values())
    log = read_log(realm)
    assert "dropped" not in log and "are dropped" not in log, log
    assert len(re.findall(r"AS_REQ .*probe@", log)) == STALE_PROBES, log
    check_fresh(realm)


def test_drops_are_logged_at_most_every_few_seconds(realm_factory):
    """Two stale backlogs 1.5 s apart: the first is logged at once, the
    second summed into a line written 5 s after the first, not one line
    each."""
    realm = make_realm(realm_factory, 300)
    got, resumed1 = frozen_kdc_probes(realm, reply_wait=0.3)
    assert got == {}
    lines, _ = wait_drop_lines(realm, 1, 5)
    assert len(lines) == 1, lines
    got, _ = frozen_kdc_probes(realm, reply_wait=0.3)
    assert got == {}
    # Still one line right after the second backlog was dropped ...
    assert len(DROP_RE.findall(read_log(realm))) == 1, read_log(realm)
    # ... and a second one once the 5 s since the first are over.
    lines, seen = wait_drop_lines(realm, 2, 10)
    assert [(n, total) for n, _, _, total in lines] == \
        [(STALE_PROBES, STALE_PROBES), (STALE_PROBES, 2 * STALE_PROBES)], lines
    assert 4.9 <= seen - resumed1 < 9, seen - resumed1
