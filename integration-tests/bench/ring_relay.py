#!/usr/bin/env python3
"""A TCP relay that holds every chunk for a one-way delay in both directions,
order kept: an MPC ring link between emulated server rooms where the kernel
has no sch_netem (ring_delay.py puts one on each server's link to its
predecessor).

  ring_relay.py --listen HOST:PORT --to HOST:PORT --control PATH [--delay-ms D]

Every accepted connection gets a connection of its own to --to. Bytes that
reached the relay's socket at time t (the kernel's receive timestamp, so
that the relay's own wake-up to read them is not added to the delay) are
written to the other side at t + delay, or later when the bytes read before
them on that side are not written yet: each direction is a FIFO, so lowering
the delay never reorders. The delay changes
at run time over the Unix stream socket --control, one line per connection:
  "delay MS"  -> "ok MS"
  "stats"     -> one JSON line: the relay's own lateness (time a chunk was
                 written minus its due time; p50, p90, p99, max in us), its
                 read lag (time it read a chunk minus the chunk's arrival)
                 and the chunks and bytes it forwarded since the last "stats"
  "ping"      -> "ok"
One thread around select(), whose timeout has microsecond resolution
(epoll's, which asyncio uses, has a millisecond's), with the thread's timer
slack at 1 ns (prctl). A timed wake-up still comes late (25-70 us on a
VM): the relay asks to wake that much early (the median of its last
oversleeps, at most MAX_LEAD and half the delay) and writes a chunk once it
is due within that lead, so that the delay a chunk sees is near the one
configured; "stats" reports the lateness left (negative: early). Prints
"listening HOST:PORT" when ready; SIGTERM ends it.

kmpc-ring-relay (mpc-server/tools/ring_relay.cc) is this relay in C++,
with the same command line and protocol and a fraction of its cost
(relay_ab.py); ring_delay.py starts it where it is built, this one
otherwise: this file is its reference and the tests run both.
"""

import argparse
import collections
import ctypes
import json
import os
import select
import signal
import socket
import struct
import sys
import time

PR_SET_TIMERSLACK = 29
# Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS), which Python does not name:
# each read carries the kernel's arrival time of its last segment.
SO_TIMESTAMPNS = 35
CHUNK = 1 << 18
# A direction stops reading its source past this many queued bytes (the
# sender then sees TCP's own back-pressure).
MAX_QUEUED = 64 << 20
MAX_SAMPLES = 1 << 20
MAX_LEAD = 100e-6


def addr(text):
    host, _, port = text.rpartition(":")
    return host, int(port)


def set_timer_slack(ns=1):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, ctypes.c_ulong(ns), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def percentiles_us(samples):
    """{"n", "p50_us", "p90_us", "p99_us", "max_us"} of samples (seconds)."""
    xs = sorted(samples)
    if not xs:
        return {"n": 0}
    at = lambda q: round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1e6, 1)  # noqa: E731
    return {"n": len(xs), "p50_us": at(0.5), "p90_us": at(0.9), "p99_us": at(0.99),
            "max_us": round(xs[-1] * 1e6, 1)}


class Direction:
    """One way of one relayed connection. Invariant: queue holds (due,
    bytes) in read order; sent counts the head's bytes already written."""

    def __init__(self, src, dst):
        self.src, self.dst = src, dst
        self.queue = collections.deque()
        self.queued = 0
        self.sent = 0
        self.eof = False
        self.blocked = False  # dst's buffer was full: wait until writable
        self.shut = False

    def readable(self):
        return not self.eof and self.queued < MAX_QUEUED


class Relay:
    def __init__(self, listen, to, control, delay_s):
        self.to = to
        self.delay = delay_s
        self.lsock = socket.create_server(listen, reuse_port=False)
        self.lsock.setblocking(False)
        if os.path.exists(control):
            os.unlink(control)
        self.control_path = control
        self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.ctl.bind(control)
        self.ctl.listen(8)
        self.pairs = []  # [Direction a->b, Direction b->a]
        self.lateness = []
        self.read_lags = []
        self.chunks = 0
        self.bytes = 0
        self.lead = 0.0  # how early a timed wake-up is asked for
        self.oversleeps = collections.deque(maxlen=64)

    # ---- connections --------------------------------------------------
    def accept(self):
        try:
            a, _ = self.lsock.accept()
        except BlockingIOError:
            return
        try:
            b = socket.create_connection(self.to, timeout=2)
        except OSError:
            a.close()  # the peer is not up: the server dials again
            return
        for s in (a, b):
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.pairs.append([Direction(a, b), Direction(b, a)])

    def close(self, pair):
        for d in pair:
            try:
                d.src.close()
            except OSError:
                pass
        self.pairs.remove(pair)

    def read(self, d, now):
        try:
            data, anc, _, _ = d.src.recvmsg(CHUNK, socket.CMSG_SPACE(16))
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not data:
            d.eof = True
            return True
        arrived = now
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, ns = struct.unpack("qq", raw[:16])
                lag = max(time.time_ns() - (sec * 1_000_000_000 + ns), 0) / 1e9
                arrived = time.monotonic() - lag
                if len(self.read_lags) < MAX_SAMPLES:
                    self.read_lags.append(lag)
        d.queue.append((arrived + self.delay, data))
        d.queued += len(data)
        return True

    def write(self, d, now):
        """Writes every due chunk of d; False when the connection broke."""
        while d.queue and d.queue[0][0] - self.lead <= now:
            due, data = d.queue[0]
            if d.sent == 0:
                if len(self.lateness) < MAX_SAMPLES:
                    self.lateness.append(now - due)
                self.chunks += 1
            try:
                n = d.dst.send(data[d.sent:])
            except BlockingIOError:
                d.blocked = True
                return True
            except OSError:
                return False
            d.sent += n
            self.bytes += n
            if d.sent < len(data):
                d.blocked = True
                return True
            d.queue.popleft()
            d.queued -= len(data)
            d.sent = 0
        d.blocked = False
        if d.eof and not d.queue and not d.shut:
            d.shut = True
            try:
                d.dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        return True

    # ---- control -------------------------------------------------------
    def command(self, line):
        words = line.split()
        if words[:1] == ["delay"] and len(words) == 2:
            self.delay = max(float(words[1]), 0.0) / 1e3
            self.oversleeps.clear()
            self.lead = 0.0
            return f"ok {self.delay * 1e3:g}"
        if words == ["stats"]:
            out = {"delay_ms": self.delay * 1e3, "chunks": self.chunks, "bytes": self.bytes,
                   "connections": len(self.pairs), "lead_us": round(self.lead * 1e6, 1),
                   "lateness": percentiles_us(self.lateness),
                   "read_lag": percentiles_us(self.read_lags)}
            self.lateness, self.read_lags, self.chunks, self.bytes = [], [], 0, 0
            return json.dumps(out)
        if words == ["ping"]:
            return "ok"
        return "error: delay MS | stats | ping"

    def control(self):
        c, _ = self.ctl.accept()
        with c:
            c.settimeout(2)
            buf = b""
            try:
                while not buf.endswith(b"\n"):
                    part = c.recv(4096)
                    if not part:
                        break
                    buf += part
                c.sendall((self.command(buf.decode(errors="replace")) + "\n").encode())
            except (OSError, ValueError) as e:
                try:
                    c.sendall(f"error: {e}\n".encode())
                except OSError:
                    pass

    # ---- the loop ------------------------------------------------------
    def timeout(self, now):
        dues = [d.queue[0][0] for p in self.pairs for d in p if d.queue and not d.blocked]
        return max(min(dues) - self.lead - now, 0.0) if dues else None

    def slept(self, asked, t0, now):
        """A select that timed out after asking for `asked` seconds: its
        oversleep updates the lead."""
        self.oversleeps.append(now - t0 - asked)
        xs = sorted(self.oversleeps)
        self.lead = min(max(xs[len(xs) // 2], 0.0), MAX_LEAD, self.delay / 2)

    def step(self):
        now = time.monotonic()
        dirs = [d for p in self.pairs for d in p]
        rl = [self.lsock, self.ctl] + [d.src for d in dirs if d.readable()]
        wl = [d.dst for d in dirs if d.blocked]
        timeout = self.timeout(now)
        r, w, _ = select.select(rl, wl, [], timeout)
        t0, now = now, time.monotonic()
        if not r and not w and timeout:
            self.slept(timeout, t0, now)
        if self.lsock in r:
            self.accept()
        if self.ctl in r:
            self.control()
        ready = set(r) | set(w)
        for pair in list(self.pairs):
            ok = all(self.read(d, now) for d in pair if d.src in ready and d.readable())
            ok = ok and all(self.write(d, time.monotonic()) for d in pair)
            if not ok or all(d.shut for d in pair):
                self.close(pair)

    def serve(self):
        try:
            while True:
                self.step()
        finally:
            try:
                os.unlink(self.control_path)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True, type=addr)
    ap.add_argument("--to", required=True, type=addr)
    ap.add_argument("--control", required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    args = ap.parse_args()

    def on_term(signum, frame):
        raise SystemExit(0)
    signal.signal(signal.SIGTERM, on_term)
    set_timer_slack()
    relay = Relay(args.listen, args.to, args.control, args.delay_ms / 1e3)
    print(f"listening {args.listen[0]}:{relay.lsock.getsockname()[1]}", flush=True)
    relay.serve()


if __name__ == "__main__":
    sys.exit(main())
