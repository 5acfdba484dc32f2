"""Late replies past kmpc's peak must not fail other logins in kmpc-storm.

An overloaded kmpc KDC answers tens of seconds late.  If kmpc-storm closed
the UDP socket of a request that was retransmitted (or timed out), the
kernel would hand its port to the next login's socket, the late answer to
the old request would reach the new login, and its libkrb5 would take it
for its own: another principal's AS-REP fails decryption
(KRB_AP_ERR_BAD_INTEGRITY), the same principal's fails the nonce check
(KRB5_KDCREP_MODIFIED), though each is a correct answer to the request it
was sent for (integration-tests/storm/async.cc, top comment).

A UDP proxy between kmpc-storm and a real KDC recreates both halves in a
second or two, deterministically:
  - a stray reply: before each real reply, the proxy sends the client the
    reply of the previous login (the other user's); kmpc-storm must drop
    it as a stray, or every login but the first fails with BAD_INTEGRITY;
  - port recycling: once a request was retransmitted, the socket it was
    sent from must stay bound (so the kernel cannot give its port away)
    while the slot goes on with a fresh socket.
"""
import json
import os
import select
import socket
import subprocess
import threading
import time

import pytest

from bench import storm_bench
from kmpc_harness.realm import storm_users_realm

# A load-bearing timing test (a storm, latencies or a window): make test
# runs it alone, after the parallel part (conftest.py, "serial").
pytestmark = pytest.mark.serial

AS_REP, KRB_ERROR = 0x6B, 0x7E


@pytest.fixture(scope="module")
def storm_bin():
    return storm_bench.find_storm()


class Proxy:
    """UDP proxy to the KDC on 127.0.0.1.  One upstream socket per client
    address; `on_request(proxy, client, data)` returns False to drop a
    datagram, `on_reply(proxy, client, data)` returns the datagrams to send
    the client (the reply, possibly preceded by others)."""

    def __init__(self, kdc_port, on_request=None, on_reply=None):
        self.kdc = ("127.0.0.1", kdc_port)
        self.on_request = on_request or (lambda p, c, d: True)
        self.on_reply = on_reply or (lambda p, c, d: [d])
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.up = {}  # client address -> upstream socket
        self.clients = []  # client addresses, in order of first request
        self.errors = []
        self.stop = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        try:
            while not self.stop:
                socks = [self.sock] + list(self.up.values())
                ready, _, _ = select.select(socks, [], [], 0.05)
                for s in ready:
                    if s is self.sock:
                        data, client = s.recvfrom(65536)
                        if client not in self.up:
                            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                            u.connect(self.kdc)
                            self.up[client] = u
                            self.clients.append(client)
                        if self.on_request(self, client, data):
                            self.up[client].send(data)
                    else:
                        data = s.recv(65536)
                        client = next(c for c, u in self.up.items() if u is s)
                        for d in self.on_reply(self, client, data):
                            self.sock.sendto(d, client)
        except Exception as e:  # reported by the test
            self.errors.append(repr(e))

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        for u in self.up.values():
            u.close()
        self.sock.close()


def _storm_argv(storm_bin, realm, proxy, tmp_path, *args, users):
    return [storm_bin, "--keytab", realm.keytab, "--principals", "user%d@" + realm.realm,
            "--users", str(users), "--kdc", f"127.0.0.1:{proxy.port}",
            "--json", str(tmp_path / "storm.json"), "--no-progress", *map(str, args)]


def test_a_stray_reply_for_another_user_is_ignored(realm_factory, storm_bin, tmp_path):
    """Each client first gets the previous reply of the same kind (the other
    user's: one login at a time, users alternate), then its own."""
    realm = storm_users_realm(realm_factory, "aes256-cts-hmac-sha1-96", service=False, users=2)
    last = {}  # first byte (message type) -> last reply of that type
    injected = []

    def on_reply(proxy, client, data):
        out = []
        prev = last.get(data[0])
        if data[0] in (AS_REP, KRB_ERROR) and prev is not None:
            out.append(prev)
            injected.append(data[0])
        last[data[0]] = data
        return out + [data]

    proxy = Proxy(realm.kdc_port, on_reply=on_reply)
    n = 12
    try:
        p = subprocess.run(_storm_argv(storm_bin, realm, proxy, tmp_path,
                                       "-c", 1, "-n", n, "--timeout", 5, users=2),
                           env=realm.env, capture_output=True, text=True, timeout=60)
    finally:
        proxy.close()
    assert not proxy.errors, proxy.errors
    res = json.loads((tmp_path / "storm.json").read_text())
    assert res["failed_all_phases"] == 0, res["errors"]  # else BAD_INTEGRITY
    assert p.returncode == 0 and res["ok"] == n, p.stdout + p.stderr
    # Every login: a PREAUTH_REQUIRED error then an AS-REP, each after the
    # first preceded by the other user's.
    assert injected.count(AS_REP) == n - 1, injected
    assert injected.count(KRB_ERROR) == n - 1, injected
    assert res["stray_replies"] == len(injected), res
    assert f"{len(injected)} stray replies ignored" in p.stdout


def _bound_udp_ports():
    """Local ports of every IPv4 UDP socket on the machine."""
    ports = set()
    with open("/proc/net/udp") as f:
        next(f)
        for line in f:
            ports.add(int(line.split()[1].split(":")[1], 16))
    return ports


def test_a_retransmitted_requests_socket_keeps_its_port(realm_factory, storm_bin, tmp_path):
    """The first copy of the first AS-REQ is dropped: the client retransmits
    it after 1 s, then sends its next request from a fresh socket.  When
    that request arrives, the first socket's port must still be bound by
    kmpc-storm (a late reply to it cannot reach another login)."""
    realm = storm_users_realm(realm_factory, "aes256-cts-hmac-sha1-96", service=False, users=1)
    seen = set()
    checks = []

    def on_request(proxy, client, data):
        if not proxy.clients or client == proxy.clients[0]:
            if data not in seen:
                seen.add(data)
                return False  # lost: the client retransmits
            return True
        if not checks:  # the first request from another port
            first_port = proxy.clients[0][1]
            checks.append((client[1], first_port, first_port in _bound_udp_ports()))
        return True

    proxy = Proxy(realm.kdc_port, on_request=on_request)
    try:
        t0 = time.monotonic()
        p = subprocess.run(_storm_argv(storm_bin, realm, proxy, tmp_path,
                                       "-c", 1, "-n", 1, "--timeout", 8, users=1),
                           env=realm.env, capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
    finally:
        proxy.close()
    assert not proxy.errors, proxy.errors
    res = json.loads((tmp_path / "storm.json").read_text())
    assert p.returncode == 0 and res["ok"] == 1, p.stdout + p.stderr
    assert res["retransmits"] >= 1 and took >= 1.0, res
    assert len(proxy.clients) >= 2 and checks, proxy.clients
    new_port, old_port, still_bound = checks[0]
    assert new_port != old_port
    assert still_bound, (f"port {old_port} of the retransmitted request's socket was "
                         "released while a late reply to it may still come")
