"""A flooded ring listener in real processes (review rev10, F2).

The servers run as a deployment runs them: the harness passes
`--ring_next=127.0.0.1` (the address party i+1 dials from), so the
neighbour's connections have handshake slots of their own
(mpc-server/src/net/tls_ring.cc, ListenLoop). A flood of plain TCP
connections that never send a byte comes from eight other loopback
addresses (127.0.0.2 to 127.0.0.9, six each: more than the listener's 16
shared slots at its 4 per address), each re-opened as soon as the listener
closes it. While it runs, party 1 (which dials party 0) is restarted: the
ring must form again through the flooded listener and logins must be
served. (Without --ring_next party 1 has to win a race against the flood
for a freed shared slot: on this test's flood it took 1 to 5 s instead of
0.1 s, and indefinitely on a faster flood, tls_ring_test's
PeerRejoinsDespiteFloodFromManyAddresses.) Each server's start-up line
shows that its listener reserves the slots.

Each rejected connection is counted (kmpc_ring_rejected_connections_total
by reason on /metrics) while party 0's log gets at most one line per reason
per 10 s.
"""
import re
import select
import socket
import threading
import time

from test_metrics import parse, scrape

SOURCES = [f"127.0.0.{k}" for k in range(2, 10)]
PER_SOURCE = 6
LOG_INTERVAL_S = 10  # TlsRingOptions::reject_log_interval
REASONS = 6          # kRingRejectReasons


class RingFlood:
    """Plain TCP connections to 127.0.0.1:port from each of `sources`
    (`per_source` each) that never send a byte; one the listener closes is
    re-opened at once. `reconnects`: how many the listener closed."""

    def __init__(self, port, sources, per_source):
        self.port = port
        self.targets = [s for s in sources for _ in range(per_source)]
        self.reconnects = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _dial(self, src):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.bind((src, 0))
        try:
            s.connect(("127.0.0.1", self.port))
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass  # refused: readable at once, re-dialed below
        return s

    def _run(self):
        socks = [self._dial(src) for src in self.targets]
        while not self._stop.is_set():
            ready, _, _ = select.select(socks, [], [], 0.05)
            for s in ready:
                try:
                    if s.recv(64):
                        continue
                except OSError:
                    pass
                i = socks.index(s)
                s.close()
                socks[i] = self._dial(self.targets[i])
                self.reconnects += 1
                if len(ready) > 1:
                    time.sleep(0)  # let the listener run
        for s in socks:
            s.close()

    def stop(self):
        self._stop.set()
        self._thread.join(10)


def _rejected(url):
    """kmpc_ring_rejected_connections_total at url: {reason: connections}."""
    return {dict(lab)["reason"]: v for (name, lab), v in parse(scrape(url)).items()
            if name == "kmpc_ring_rejected_connections_total"}


def _reject_lines(log_path, offset):
    with open(log_path, errors="replace") as f:
        f.seek(offset)
        return [l for l in f.read().splitlines() if "ring: rejected connection" in l]


def test_ring_rejoins_and_serves_logins_during_a_flood(kmpc_factory):
    m = kmpc_factory(metrics=True)
    m.setup(users=("alice",))
    m.start()
    m.login("alice")
    c = m.cluster
    # The harness starts the servers with --ring_next (what this test is
    # about: without it the reserved slots would not be exercised).
    assert "--ring_next=127.0.0.1" in c.server_argv(0)
    for i in range(3):
        with open(c.log_path(i), errors="replace") as f:
            assert re.search(r"ring: connections from 127\.0\.0\.1 \(--ring_next, party "
                             rf"{(i + 1) % 3}\) have \d+ handshake slots of their own",
                             f.read()), i
    log0 = c.log_path(0)
    offset = len(open(log0, "rb").read())
    start = time.time()
    flood = RingFlood(c.base + 10, SOURCES, PER_SOURCE)  # party 0's ring port
    try:
        time.sleep(1.5)  # the flood holds every shared slot
        assert flood.reconnects > 0
        # Party 1 dials party 0: restarted, it must get through the flood.
        c.stop_party(1)
        c.start_party(1)
        c.wait_ring(timeout=20)
        for _ in range(3):
            m.login("alice", timeout=30)
        reconnects = flood.reconnects
    finally:
        flood.stop()
    elapsed = time.time() - start
    # Every connection the listener closed is counted; the flood's last
    # connections are still being rejected when it stops.
    deadline = time.time() + 5
    while True:
        counts = _rejected(c.metrics_url(0))
        if sum(counts.values()) >= reconnects or time.time() > deadline:
            break
        time.sleep(0.2)
    assert sum(counts.values()) >= reconnects, (counts, reconnects)
    assert counts.get("no_slot", 0) + counts.get("silent", 0) > 0, counts
    assert reconnects >= 50, reconnects
    # ... but the log has at most one line per reason per interval.
    lines = _reject_lines(log0, offset)
    bound = REASONS * (2 + int(elapsed // LOG_INTERVAL_S))
    assert 1 <= len(lines) <= bound, (len(lines), bound, lines[:20])
    assert len(lines) < reconnects
    assert all(re.search(r"from 127\.0\.0\.\d+: .*\(reason \w+; \d+ more", l)
               for l in lines), lines[:5]
