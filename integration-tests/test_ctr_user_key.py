"""A user's aes*-ctr-mpc key runs an AS exchange only (issue 62, finding 4;
docs/security-model.md, "The servers enforce the gate"), on a whole realm:
three kmpc-mpc-server processes, the patched KDC with the real module.

A compromised KDC host holds the KDC's client certificate and can send the
servers raw Run jobs (kmpc-mpc-client jobs, the default `kdc` client
certificate) under any key id it reads from the KDB. The aes*-ctr-mpc
keystream does not depend on the usage, so under a user's ctr-mpc key any
ENCRYPT, CHECKSUM or PAD it asks for, or a DECRYPT under another usage,
is an offline verifier of the user's password, for a user who never logs
in. The servers now refuse every job under such a key but the
PA-ENC-TIMESTAMP's DECRYPT (usage 1) and what is released on it in the
same batch (the reply, usage 3; the PA-REQ-ENC-PA-REP checksum, usage 56)
(mpc-server/src/engine/user_key_rule.h), and the patched kinit still logs
the user in, also when the module prepared nothing for the reply
(speculate = false: the reply runs alone, gated on a copy of its
timestamp, kdc-plugin/src/planner.h Planner::Take).
"""
import os
import secrets
import subprocess

import pytest

import ctr_mpc_ref
from kmpc_harness.cluster import REALM, default_salt, find_built, password as _password

REFUSED = "error 3 under a user's password-derived aes*-ctr-mpc key"  # JOB_MALFORMED


def _key(princ, pw):
    return ctr_mpc_ref.string_to_key("aes256-ctr-mpc", pw.encode(),
                                     default_salt(f"{princ}@{REALM}").encode())


def _ctr0():
    """A counter whose range never wraps (contract::CounterRangeOk)."""
    return bytes(8) + secrets.token_bytes(8)


def _jobs(r, lines):
    """One Run of raw jobs with the KDC's client certificate (kmpc-mpc-client
    jobs: its default certificate for jobs is `kdc`)."""
    p = subprocess.run([find_built("mpc-server/kmpc-mpc-client"), f"--servers={r.cluster.servers}",
                        f"--certs={r.cluster.certs}", "jobs"],
                       input="\n".join(lines) + "\n", capture_output=True, text=True,
                       timeout=120)
    return p.stdout.strip().split("\n")


@pytest.mark.parametrize("speculate", [True, False])
def test_compromised_kdc_gets_no_verifier_under_a_ctr_mpc_user_key(kmpc_factory, speculate):
    r = kmpc_factory(module="real",
                     module_options={"speculate": "true" if speculate else "false"})
    r.setup_krbtgt()
    pw = _password()
    r.add_users({"alice": pw})
    r.start()
    kid = r.key_id("alice")
    key = _key("alice", pw)
    ticket = ctr_mpc_ref.encrypt(key, 2, b"an EncTicketPart of the KDC's choosing", _ctr0())
    attacks = {
        "ungated ENCRYPT, usage 3": f"keystream:aes256 {kid} 3 32",
        "ENCRYPT, usage 2": f"keystream:aes256 {kid} 2 32",
        "CHECKSUM, usage 17": f"checksum:aes256 {kid} 17 {os.urandom(40).hex()}",
        "CHECKSUM, usage 56": f"checksum:aes256 {kid} 56 {os.urandom(40).hex()}",
        "PAD, usage 17": f"pad:aes256 {kid} 17 64",
        "DECRYPT, usage 2": f"decrypt:aes256 {kid} 2 {ticket.hex()}",
    }
    out = _jobs(r, list(attacks.values()))
    assert len(out) == len(attacks), out
    # Before: "ok ..." each, an offline verifier (a keystream of AES_K, a
    # tag under K, a pad to Sign with, a plaintext under K).
    given = [(what, line[:40]) for what, line in zip(attacks, out)
             if not line.startswith(REFUSED)]
    assert not given, given
    # The timestamp's DECRYPT and a reply gated on it, as the KDC sends them.
    ts = ctr_mpc_ref.encrypt(key, 1, b"a PA-ENC-TS-ENC, thirty bytes.", _ctr0())
    out = _jobs(r, [f"decrypt:aes256 {kid} 1 {ts.hex()}", f"keystream@1:aes256 {kid} 3 32"])
    assert out[0] == "ok " + b"a PA-ENC-TS-ENC, thirty bytes.".hex(), out
    assert out[1].startswith("ok "), out
    # A patched kinit logs alice in (the reply's keystream prepared in the
    # timestamp's Run, or, with speculate off, run alone on a copy of it).
    r.login("alice")
    r.login("alice")
    with open(r.kdc_log, errors="replace") as f:
        log = f.read()
    # Without preparation the reply ran alone (on its timestamp's copy).
    assert ("runs alone" in log) == (not speculate), log[-3000:]
    # The Admin certificate is on the KDC host too: re-marking the key a
    # service's or a user+service's (each would compute a keystream on
    # demand) is refused by every server whose operator did not list it
    # (FAILED_PRECONDITION, 9; on the code before, an aes*-ctr-mpc key had
    # "no gate to lose" and both were done).
    for kind in ("service", "user+service"):
        for i in range(3):
            p = subprocess.run([find_built("mpc-server/kmpc-mpc-client"),
                                f"--servers={r.cluster.servers}", f"--certs={r.cluster.certs}",
                                "set-kind", f"--key_id_hex={kid}", f"--key_kind={kind}",
                                "--allow_ungate", f"--only_party={i}"],
                               capture_output=True, text=True, timeout=120)
            assert f"rpc_error {i} 9 " in p.stdout + p.stderr, (kind, p.stdout + p.stderr)
    assert _jobs(r, [attacks["ENCRYPT, usage 2"]])[0].startswith(REFUSED)
    assert r.alive()
