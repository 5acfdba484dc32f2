#!/usr/bin/env python3
"""The three-host deployment's files, from one place: the servers' flag
files (abseil --flagfile, /etc/kmpc/party<i>.flags) and the command lines
of the systemd units in deploy/systemd/. deploy/THREE-HOSTS.md tells the
administrator to use it; integration-tests/bench/netns_bench.py (make bench-netns) uses the
same functions, so the emulated hosts run what the guide installs.

  kmpc_deploy.py flags --party I --hosts H0,H1,H2 [--port 7000]
      [--ring-port 7100] [--certs /etc/kmpc/certs] [--store /var/lib/kmpc]
      [--workers 2] [--metrics-addr 127.0.0.1:9100] [--crl] [-o FILE]
  kmpc_deploy.py execstart UNIT [--instance I]   the unit's ExecStart argv

Party i listens for gRPC on H_i:PORT and for its ring successor on
H_i:RING_PORT, and dials party i-1's H_{i-1}:RING_PORT
(mpc-server/src/main.cc). Ports may differ per party (PORT[,PORT,PORT]).
"""

import argparse
import os
import re
import shlex
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
UNIT_DIR = os.path.join(HERE, "systemd")
SERVER_UNIT = os.path.join(UNIT_DIR, "kmpc-mpc-server@.service")
KDC_UNIT = os.path.join(UNIT_DIR, "kmpc-krb5kdc.service")
KPROPD_UNIT = os.path.join(UNIT_DIR, "kmpc-kpropd.service")  # replica hosts

# Where the guide installs things (the units name these paths).
CONF_DIR = "/etc/kmpc"
CERT_DIR = "/etc/kmpc/certs"
STATE_DIR = "/var/lib/kmpc"
BIN_DIR = "/usr/local/bin"
KRB5_PREFIX = "/opt/kmpc/krb5"


def _per_party(v, n=3):
    """An int or a list of 3 ints (one per party) as a list of 3."""
    if isinstance(v, (list, tuple)):
        if len(v) != n:
            raise ValueError(f"expected {n} values, got {len(v)}")
        return [int(x) for x in v]
    return [int(v)] * n


def server_flags(party, hosts, port=7000, ring_port=7100, certs=CERT_DIR,
                 store=STATE_DIR, workers=2, metrics_addr=None, crl=False,
                 extra=(), pins=None):
    """The flag file of party `party` (text, one --name=value per line).
    hosts: the three parties' addresses, in party order. pins: optional
    three spki-sha256:<hex> pins of the parties' certificate keys, in party
    order (docs/security-model.md: when to pin the ring)."""
    if party not in (0, 1, 2):
        raise ValueError("party must be 0, 1 or 2")
    if len(hosts) != 3:
        raise ValueError("three hosts, in party order")
    ports, rings = _per_party(port), _per_party(ring_port)
    prev, nxt = (party + 2) % 3, (party + 1) % 3
    if pins is not None and len(pins) != 3:
        raise ValueError("three pins, in party order")
    lines = [
        f"# kmpc-mpc-server flags of party {party} (kmpc_deploy.py flags)",
        f"--party={party}",
        f"--listen={hosts[party]}:{ports[party]}",
        f"--ring_listen={hosts[party]}:{rings[party]}",
        f"--ring_prev={hosts[prev]}:{rings[prev]}",
        f"--ring_next={hosts[nxt]}",
        f"--cert={certs}/party-{party}.pem",
        f"--key={certs}/party-{party}.key",
        f"--ca={certs}/ca.pem",
        f"--store_dir={store}/store-{party}",
        f"--workers={workers}",
    ]
    if crl:
        lines.append(f"--crl={certs}/crl.pem")
    if pins is not None:
        lines.append(f"--ring_pin_prev={pins[prev]}")
        lines.append(f"--ring_pin_next={pins[nxt]}")
    if metrics_addr:
        lines.append(f"--metrics_addr={metrics_addr}")
    lines += list(extra)
    return "\n".join(lines) + "\n"


def unit_exec_start(unit_path, instance=None, env=None):
    """The argv of a unit's ExecStart= line: %i replaced by the instance,
    ${VAR} / $VAR by env (systemd's own expansion rules for whole words).
    Raises ValueError when the unit has no single ExecStart."""
    with open(unit_path) as f:
        # A line ending in a backslash continues on the next (systemd.syntax).
        text = re.sub(r"\\\n", " ", f.read())
    lines = [l.strip() for l in text.splitlines() if l.strip().startswith("ExecStart=")]
    if len(lines) != 1:
        raise ValueError(f"{unit_path}: expected one ExecStart=, found {len(lines)}")
    cmd = lines[0][len("ExecStart="):]
    if instance is not None:
        cmd = cmd.replace("%i", str(instance))
    if "%" in cmd:
        raise ValueError(f"{unit_path}: unexpanded specifier in {cmd!r}")
    argv = []
    for word in shlex.split(cmd):
        for k, v in (env or {}).items():
            word = word.replace("${" + k + "}", v)
            if word == "$" + k:
                word = v
        if "$" in word:
            raise ValueError(f"{unit_path}: no value for {word!r}")
        argv.append(word)
    return argv


def relocate(argv, mapping):
    """argv with path prefixes replaced (mapping {installed: here}), longest
    prefix first: the units' installed paths -> a test's build and work
    directories. Only paths and --flag=PATH values are touched."""
    keys = sorted(mapping, key=len, reverse=True)

    def one(s):
        for k in keys:
            if s.startswith(k):
                return mapping[k] + s[len(k):]
        return s

    out = []
    for a in argv:
        if a.startswith("--") and "=" in a:
            name, val = a.split("=", 1)
            out.append(f"{name}={one(val)}")
        else:
            out.append(one(a))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("flags", help="write a server's flag file")
    f.add_argument("--party", type=int, required=True)
    f.add_argument("--hosts", required=True, help="H0,H1,H2 in party order")
    f.add_argument("--port", default="7000", help="gRPC port (or P0,P1,P2)")
    f.add_argument("--ring-port", default="7100", help="ring port (or P0,P1,P2)")
    f.add_argument("--certs", default=CERT_DIR)
    f.add_argument("--store", default=STATE_DIR)
    f.add_argument("--workers", type=int, default=2)
    f.add_argument("--metrics-addr", default=None)
    f.add_argument("--crl", action="store_true", help="--crl=CERTS/crl.pem")
    f.add_argument("--ring-pins", default=None,
                   help="PIN0,PIN1,PIN2: spki-sha256:<hex> of the three parties' "
                        "certificate keys, in party order (pins the ring)")
    f.add_argument("-o", "--output", default="-")
    e = sub.add_parser("execstart", help="print a unit's ExecStart argv")
    e.add_argument("unit")
    e.add_argument("--instance", default=None)
    args = ap.parse_args()
    if args.cmd == "flags":
        def ports(s):
            p = [int(x) for x in s.split(",")]
            return p[0] if len(p) == 1 else p
        text = server_flags(args.party, args.hosts.split(","), ports(args.port),
                            ports(args.ring_port), args.certs, args.store,
                            args.workers, args.metrics_addr, args.crl,
                            pins=args.ring_pins.split(",") if args.ring_pins else None)
        if args.output == "-":
            sys.stdout.write(text)
        else:
            with open(args.output, "w") as out:
                out.write(text)
        return 0
    print(shlex.join(unit_exec_start(args.unit, args.instance, dict(os.environ))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
