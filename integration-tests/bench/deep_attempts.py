"""Deep attempts beside honest logins, for cts_bench.py.

What one client can throw at a realm of aes*-cts users, all at once, while
other users log in one at a time beside it:

  addresses  six loops of Debian's kinit by a user who knows only his own
             password, each request with 400 client addresses
             (krb5.conf extra_addresses): an AS-REQ of ~7 KiB, over the
             PA-REQ-ENC-PA-REP splice's cap (1,015 bytes), whose reply
             carries the 400 addresses: an aes*-cts ENCRYPT over
             contract.h's cap, refused before any Run;
  replay     one captured PA-ENC-TIMESTAMP of another user sent again and
             again, each time with a fresh nonce in the request body (the
             timestamp does not cover it, and the KDC's lookaside cache
             answers only byte-identical requests);
  padata     the same captured request with 8 KiB of unknown padata added
             (RFC 4120 5.2.7: a KDC ignores padata types it does not know,
             but the PA-REQ-ENC-PA-REP checksum covers them; the patched
             KDC answers a request over 1,015 bytes without that
             checksum, KDC_MPC_MAX_CTS_SPLICE_BYTES).

The honest logins are Debian's MIT kinit with the users' keytabs, one
process at a time; the figures are their latency (p50, max), how many took
over a second or failed, and what each attack got back: AS-REPs (a replay
answered as a login) or errors. A process per attacker, nothing attached to
the KDC or the servers.
"""

import os
import socket
import statistics
import subprocess
import threading
import time

import krb_der

ADDRESS_LOOPS = 6
ADDRESSES = 400
PADATA_BYTES = 8192
UNKNOWN_PADATA = 4242  # unassigned (IANA Kerberos pre-authentication types)
TARGET_MS = 1000.0
AS_REP, KRB_ERROR = 0x6B, 0x7E
PA_ENC_TIMESTAMP, PA_REQ_ENC_PA_REP = 2, 149  # RFC 4120 7.5.2, RFC 6806 11


# -- The AS-REQ's fields, through krb_der (the tests' DER).

def _fields(buf):
    """[(tag, content)] of a DER sequence body, which it must fill exactly
    (krb_der.children reads what it is given; a truncated buffer is an
    error here)."""
    try:
        kids = krb_der.children(buf)
    except IndexError:
        raise ValueError("DER: truncated") from None
    # A child cut short by the buffer's end no longer encodes as read.
    if any(krb_der.der(tag, body) != whole for tag, whole, body in kids):
        raise ValueError("DER: truncated")
    return [(tag, body) for tag, _, body in kids]


def _as_req_fields(req):
    (tag, body), = _fields(req)
    if tag != 0x6A:
        raise ValueError(f"not an AS-REQ (tag {tag:#x})")
    (tag, seq), = _fields(body)
    if tag != 0x30:
        raise ValueError("AS-REQ: no SEQUENCE")
    return _fields(seq)


def _as_req(fields):
    return krb_der.der(0x6A, krb_der.seq(*(krb_der.der(t, v) for t, v in fields)))


def with_nonce(req, nonce):
    """req with its KDC-REQ-BODY's nonce [7] replaced (RFC 4120 5.4.1)."""
    out = []
    for t, v in _as_req_fields(req):
        if t == 0xA4:
            v = krb_der.seq(*(krb_der.ctx(7, krb_der.der_int(nonce)) if bt == 0xA7
                              else krb_der.der(bt, bv)
                              for bt, bv in _fields(krb_der.content(v))))
        out.append((t, v))
    return _as_req(out)


def with_padata(req, pa_type, pa_value):
    """req with one more PA-DATA { [1] type, [2] value } in its padata [3]."""
    pa = krb_der.seq(krb_der.ctx(1, krb_der.der_int(pa_type)),
                     krb_der.ctx(2, krb_der.der(0x04, pa_value)))
    return _as_req([(t, krb_der.der(0x30, krb_der.content(v) + pa) if t == 0xA3 else v)
                    for t, v in _as_req_fields(req)])


def padata_types(req):
    """The padata types req carries, in order."""
    out = []
    for t, v in _as_req_fields(req):
        if t == 0xA3:
            for _, pa in _fields(krb_der.content(v)):
                for pt, pv in _fields(pa):
                    if pt == 0xA1:
                        out.append(int.from_bytes(krb_der.content(pv), "big", signed=True))
    return out


def has_enc_timestamp(req):
    """Whether req carries PA-ENC-TIMESTAMP (padata type 2)."""
    return PA_ENC_TIMESTAMP in padata_types(req)


# -- The KDC, over UDP and TCP.

def udp_exchange(port, req, timeout=5.0):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(req, ("127.0.0.1", port))
        return s.recv(65536)


class Capture(threading.Thread):
    """A UDP relay in front of the KDC that keeps the requests it relayed
    whose answer was an AS-REP: what an eavesdropper on the path records."""

    def __init__(self, kdc_port):
        super().__init__(daemon=True)
        self.kdc_port = kdc_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.halt = threading.Event()
        self.answered = []

    def run(self):
        while not self.halt.is_set():
            try:
                req, peer = self.sock.recvfrom(65536)
            except socket.timeout:
                continue
            try:
                rep = udp_exchange(self.kdc_port, req)
            except OSError:
                continue
            if rep[:1] == bytes([AS_REP]):
                self.answered.append(req)
            self.sock.sendto(rep, peer)

    def stop(self):
        self.halt.set()
        self.join(5)
        self.sock.close()


def relayed_conf(conf_in, conf_out, port):
    """conf_in with the realm's KDC at the relay's port."""
    with open(conf_in) as f:
        text = f.read()
    lines = [f"        kdc = 127.0.0.1:{port}" if ln.strip().startswith("kdc =") else ln
             for ln in text.split("\n")]
    with open(conf_out, "w") as f:
        f.write("\n".join(lines))
    return conf_out


def capture_timestamp(kdc_port, conf, env, keytab, principal, workdir):
    """A real login's AS-REQ with PA-ENC-TIMESTAMP, recorded on the path."""
    cap = Capture(kdc_port)
    cap.start()
    try:
        e = dict(env, KRB5_CONFIG=relayed_conf(conf, os.path.join(workdir, "relay.conf"),
                                               cap.port),
                 KRB5CCNAME="FILE:" + os.path.join(workdir, "captured.cc"))
        p = subprocess.run(["/usr/bin/kinit", "-k", "-t", keytab, principal], env=e,
                           capture_output=True, text=True, timeout=30)
    finally:
        cap.stop()
    reqs = [r for r in cap.answered if has_enc_timestamp(r)]
    if p.returncode != 0 or not reqs:
        raise RuntimeError(f"no login captured: {(p.stdout + p.stderr)[-300:]}")
    return reqs[-1]


def addresses_conf(conf_in, conf_out, n=ADDRESSES):
    """conf_in with n client addresses (RFC 1918 space; the KDC only copies
    them into the ticket)."""
    with open(conf_in) as f:
        text = f.read()
    addrs = [f"10.{i // 250}.{i % 250}.1" for i in range(n)]
    # One relation per 20 (profile lines are short; krb5 reads every value
    # of a repeated relation).
    extra = "".join(f"    extra_addresses = {','.join(addrs[i:i + 20])}\n"
                    for i in range(0, n, 20))
    with open(conf_out, "w") as f:
        f.write(text.replace("[libdefaults]\n", "[libdefaults]\n    noaddresses = false\n"
                             + extra, 1))
    return conf_out


class Loop(threading.Thread):
    """One attacker: attempt() again and again until stop(); the counts of
    what came back."""

    def __init__(self, name, attempt):
        super().__init__(daemon=True, name=name)
        self.attempt = attempt
        self.halt = threading.Event()
        self.counts = {}

    def run(self):
        i = 0
        while not self.halt.is_set():
            i += 1
            try:
                what = self.attempt(i)
            except (OSError, ValueError) as e:
                what = type(e).__name__
            self.counts[what] = self.counts.get(what, 0) + 1

    def stop(self):
        self.halt.set()
        self.join(60)


def reply_kind(rep):
    return {AS_REP: "as-rep", KRB_ERROR: "krb-error"}.get(rep[:1][0] if rep else None,
                                                          "other")


def attackers(kdc_port, conf, env, attacker_keytab, attacker, captured, workdir):
    """The attack loops (not started)."""
    aconf = addresses_conf(conf, os.path.join(workdir, "addresses.conf"))
    loops = []
    for k in range(ADDRESS_LOOPS):
        e = dict(env, KRB5_CONFIG=aconf,
                 KRB5CCNAME="FILE:" + os.path.join(workdir, f"addresses-{k}.cc"))

        def kinit(_, e=e):
            p = subprocess.run(["/usr/bin/kinit", "-k", "-t", attacker_keytab, attacker],
                               env=e, capture_output=True, text=True, timeout=60)
            if not p.returncode:
                return "ticket"
            # The KDC module's refusal of a request over the cap, or another
            # failure (its last line, for the figures).
            text = (p.stdout + p.stderr).strip()
            if "A service is not available" in text:
                return "svc-unavailable"
            return "other: " + text.split("\n")[-1][-120:]
        loops.append(Loop(f"addresses-{k}", kinit))
    base = int.from_bytes(os.urandom(3), "big")
    loops.append(Loop("replay", lambda i: reply_kind(
        udp_exchange(kdc_port, with_nonce(captured, base + i)))))
    # The KDC checksums the whole request into its reply when the client
    # asks for it (RFC 6806 11: PA-REQ-ENC-PA-REP): ask, so that the 8 KiB
    # would be spliced, not just carried.
    padded = captured
    if PA_REQ_ENC_PA_REP not in padata_types(padded):
        padded = with_padata(padded, PA_REQ_ENC_PA_REP, b"")
    padded = with_padata(padded, UNKNOWN_PADATA, os.urandom(PADATA_BYTES))
    loops.append(Loop("padata", lambda i: reply_kind(
        krb_der.send_tcp(kdc_port, with_nonce(padded, base + (1 << 24) + i)))))
    return loops


def honest_logins(conf, env, keytab, principals, seconds, workdir):
    """One login at a time over principals for `seconds`: latencies (ms) of
    the successful ones and the failures."""
    e = dict(env, KRB5_CONFIG=conf, KRB5CCNAME="FILE:" + os.path.join(workdir, "honest.cc"))
    lat, failed = [], []
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        u = principals[i % len(principals)]
        i += 1
        t0 = time.perf_counter()
        p = subprocess.run(["/usr/bin/kinit", "-k", "-t", keytab, u], env=e,
                           capture_output=True, text=True, timeout=60)
        ms = (time.perf_counter() - t0) * 1e3
        if p.returncode == 0:
            lat.append(ms)
        else:
            failed.append(f"{u}: {(p.stdout + p.stderr).strip()[-160:]}")
    return lat, failed


def figures(lat, failed, loops):
    return {"honest_logins": len(lat) + len(failed),
            "p50_ms": round(statistics.median(lat), 1) if lat else None,
            "max_ms": round(max(lat), 1) if lat else None,
            "over_1s": sum(ms > TARGET_MS for ms in lat),
            "failed": len(failed), "errors": failed[:3],
            "attacks": {lp.name: dict(lp.counts) for lp in loops},
            "met": bool(lat) and not failed and max(lat) <= TARGET_MS}


def run(kdc_port, conf, env, keytabs, principals, seconds, workdir, log=print):
    """The whole measurement. keytabs: {"attacker", "victim", "honest"};
    principals: {"attacker", "victim", "honest": [...]}: the victim's
    timestamp is captured once, the attacker knows only his own key."""
    os.makedirs(workdir, exist_ok=True)
    captured = capture_timestamp(kdc_port, conf, env, keytabs["victim"],
                                 principals["victim"], workdir)
    loops = attackers(kdc_port, conf, env, keytabs["attacker"], principals["attacker"],
                      captured, workdir)
    for lp in loops:
        lp.start()
    try:
        time.sleep(1.0)  # every loop under way before the first honest login
        lat, failed = honest_logins(conf, env, keytabs["honest"], principals["honest"],
                                    seconds, workdir)
    finally:
        for lp in loops:
            lp.stop()
    out = figures(lat, failed, loops)
    out["captured"] = {"bytes": len(captured), "padata": padata_types(captured)}
    log(f"  deep attempts beside one-at-a-time logins: {out['honest_logins']} logins, "
        f"p50 {out['p50_ms']} ms, max {out['max_ms']} ms, over 1 s {out['over_1s']}, "
        f"failed {out['failed']}; attacks: " + "; ".join(
            f"{k} {v}" for k, v in out["attacks"].items()))
    return out
