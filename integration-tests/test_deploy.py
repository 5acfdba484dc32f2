"""The three-host deployment's files (deploy/THREE-HOSTS.md): the systemd
units pass `systemd-analyze verify` and carry the hardening the guide
promises, and three servers started the way the units start them (the
unit's ExecStart, flag files from deploy/kmpc_deploy.py) form a ring on
loopback and serve /metrics. make bench-netns runs the same command lines
on four emulated hosts (bench/netns_bench.py). No unit is started here.
"""
import hashlib
import os
import shutil
import subprocess
import time
import urllib.request

import pytest

from kmpc_harness import cluster as kmpc_cluster
from kmpc_harness.deploy_tool import kmpc_deploy
from kmpc_harness import realm as kmpc_realm

HARDENING = ("NoNewPrivileges=yes", "ProtectSystem=strict", "LimitCORE=0",
             "PrivateTmp=yes", "ProtectHome=yes", "UMask=0077")


def unit_text(path):
    with open(path) as f:
        return f.read()


@pytest.mark.parametrize("unit,binary", [
    (kmpc_deploy.SERVER_UNIT, "mpc-server"),
    (kmpc_deploy.KDC_UNIT, "krb5kdc"),
    (kmpc_deploy.KPROPD_UNIT, "kpropd"),
])
def test_unit_verifies_and_is_hardened(tmp_path, unit, binary):
    text = unit_text(unit)
    for d in HARDENING:
        assert f"\n{d}\n" in text, f"{os.path.basename(unit)} lacks {d}"
    assert "\nUser=" in text and "\nUser=root" not in text
    assert "\nReadWritePaths=" in text
    if binary == "kpropd":  # a replica's, as its KDC's user (THREE-HOSTS.md, 12)
        assert "\nUser=kmpc-kdc\n" in text
        assert "\nReadWritePaths=/var/lib/kmpc-kdc\n" in text
    # The installed executables do not exist here: point them at the
    # built ones (systemd-analyze checks that ExecStart is executable).
    if binary == "mpc-server":
        text = text.replace(os.path.join(kmpc_deploy.BIN_DIR, "kmpc-mpc-server"),
                            kmpc_cluster.find_built("mpc-server/kmpc-mpc-server"))
    else:
        text = text.replace(kmpc_deploy.KRB5_PREFIX, kmpc_realm.PREFIX)
    path = tmp_path / os.path.basename(unit)
    path.write_text(text)
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze missing (deploy/install-deps.sh installs systemd)"
    p = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True,
                       timeout=60)
    out = (p.stdout + p.stderr).strip()
    assert p.returncode == 0 and out == "", out


def test_verify_catches_a_bad_unit(tmp_path):
    """The check above can fail: a misspelt hardening value is reported."""
    text = unit_text(kmpc_deploy.SERVER_UNIT).replace(
        "ProtectSystem=strict", "ProtectSystem=stricter").replace(
        os.path.join(kmpc_deploy.BIN_DIR, "kmpc-mpc-server"), "/bin/true")
    path = tmp_path / "bad@.service"
    path.write_text(text)
    p = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert "protect system value" in p.stdout + p.stderr


def test_execstart_and_flags():
    argv = kmpc_deploy.unit_exec_start(kmpc_deploy.SERVER_UNIT, instance=2)
    assert argv == ["/usr/local/bin/kmpc-mpc-server", "--flagfile=/etc/kmpc/party2.flags"]
    kdc = kmpc_deploy.unit_exec_start(kmpc_deploy.KDC_UNIT, env={"KMPC_REALM": "EX.ORG"})
    assert kdc == ["/opt/kmpc/krb5/sbin/krb5kdc", "-n", "-r", "EX.ORG"]
    with pytest.raises(ValueError):
        kmpc_deploy.unit_exec_start(kmpc_deploy.KDC_UNIT)  # no realm given
    # kpropd's ExecStart= continues over three lines (backslashes).
    kpropd = kmpc_deploy.unit_exec_start(kmpc_deploy.KPROPD_UNIT, env={"KMPC_REALM": "EX.ORG"})
    assert kpropd[:4] == ["/opt/kmpc/krb5/sbin/kpropd", "-D", "-r", "EX.ORG"], kpropd
    assert kpropd[-2:] == ["-p", "/opt/kmpc/krb5/sbin/kdb5_util"], kpropd
    text = kmpc_deploy.server_flags(0, ["10.0.0.11", "10.0.0.12", "10.0.0.13"])
    assert "--ring_prev=10.0.0.13:7100\n" in text  # party 0 dials party 2
    assert "--ring_next=10.0.0.12\n" in text  # party 1 dials party 0
    assert "--ring_pin" not in text
    pins = [f"spki-sha256:{c * 64}" for c in "abc"]
    text = kmpc_deploy.server_flags(0, ["10.0.0.11", "10.0.0.12", "10.0.0.13"], pins=pins)
    assert f"--ring_pin_prev={pins[2]}\n" in text  # party 0 dials party 2
    assert f"--ring_pin_next={pins[1]}\n" in text  # party 1 dials party 0
    assert "--store_dir=/var/lib/kmpc/store-0\n" in text


def test_three_servers_from_the_units_command_lines(tmp_path):
    """The guide's steps on loopback: certificates, one flag file per
    party (kmpc_deploy.py flags, as the administrator runs it), each server
    started with its unit's ExecStart; the ring comes up and /metrics
    answers."""
    certs = tmp_path / "certs"
    subprocess.run(["bash", os.path.join(kmpc_realm.ROOT, "deploy", "gen-certs.sh"),
                    str(certs)], check=True, capture_output=True, timeout=120)
    etc = tmp_path / "etc-kmpc"
    etc.mkdir()
    base = kmpc_cluster.free_base()
    mbase = kmpc_realm.free_port_block((0, 1, 2), udp=False)
    server = kmpc_cluster.find_built("mpc-server/kmpc-mpc-server")
    # The ring pinned to the three certificates' keys, as THREE-HOSTS.md
    # step 5 computes the pins.
    pins = []
    for i in range(3):
        pub = subprocess.run(["openssl", "x509", "-in", str(certs / f"party-{i}.pem"),
                              "-noout", "-pubkey"], check=True, capture_output=True,
                             timeout=30).stdout
        der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "DER"], input=pub,
                             check=True, capture_output=True, timeout=30).stdout
        pins.append("spki-sha256:" + hashlib.sha256(der).hexdigest())
    procs, logs = [], []
    try:
        for i in range(3):
            subprocess.run(
                ["/usr/bin/python3", os.path.join(kmpc_realm.ROOT, "deploy", "kmpc_deploy.py"),
                 "flags", "--party", str(i), "--hosts", "127.0.0.1,127.0.0.1,127.0.0.1",
                 "--port", ",".join(str(base + j) for j in range(3)),
                 "--ring-port", ",".join(str(base + 10 + j) for j in range(3)),
                 "--certs", str(certs), "--store", str(tmp_path), "--crl",
                 "--metrics-addr", f"127.0.0.1:{mbase + i}", "--ring-pins", ",".join(pins),
                 "-o", str(etc / f"party{i}.flags")], check=True, timeout=30)
            assert f"--ring_pin_next={pins[(i + 1) % 3]}\n" in (etc / f"party{i}.flags").read_text()
            argv = kmpc_deploy.relocate(
                kmpc_deploy.unit_exec_start(kmpc_deploy.SERVER_UNIT, instance=i),
                {os.path.join(kmpc_deploy.BIN_DIR, "kmpc-mpc-server"): server,
                 kmpc_deploy.CONF_DIR: str(etc)})
            assert argv == [server, f"--flagfile={etc}/party{i}.flags"]
            log = open(tmp_path / f"party-{i}.log", "wb")
            logs.append(tmp_path / f"party-{i}.log")
            procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                          start_new_session=True))
            log.close()
        admin = kmpc_cluster.find_built("mpc-server/kmpc-admin")
        servers = ",".join(f"127.0.0.1:{base + j}" for j in range(3))
        deadline = time.time() + 30
        out = ""
        while time.time() < deadline:
            p = subprocess.run([admin, f"--servers={servers}", f"--ca={certs}/ca.pem",
                                f"--cert={certs}/admin.pem", f"--key={certs}/admin.key",
                                "--timeout-ms=2000", "status"], capture_output=True,
                               text=True, timeout=60,
                               env={k: v for k, v in os.environ.items()
                                    if k != "KMPC_ADMIN_CONFIG"})
            out = p.stdout + p.stderr
            if out.count(", ring up,") == 3:
                break
            assert all(pr.poll() is None for pr in procs), \
                "\n".join(l.read_text() for l in logs)
            time.sleep(0.2)
        assert out.count(", ring up,") == 3, out + "\n".join(l.read_text() for l in logs)
        for i in range(3):
            with urllib.request.urlopen(f"http://127.0.0.1:{mbase + i}/metrics",
                                        timeout=10) as r:
                assert f'kmpc_jobs_total{{party="{i}"}}' in r.read().decode()
            assert os.path.isdir(tmp_path / f"store-{i}")
    finally:
        kmpc_cluster.stop_pids([p.pid for p in procs])
