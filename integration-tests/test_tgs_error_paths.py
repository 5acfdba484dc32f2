"""Failure paths of the KDC's MPC layer under valgrind.

1. The TGS finishing path (krb5 patch 0015, tgs_fin_complete): each failed finishing job's error message is taken from
the context when the job fails (the context is shared by every request in
flight) and freed once logged.

A realm without MPC servers (clusters=0, krb5's test module): the krbtgt
key is local, the service's key is MPC-held, so a TGS-REQ's only MPC job is
the CHECKSUM of the new ticket's PAC signature under the service's handle;
the test module fails every job while its fail flag exists. krb5kdc runs
under valgrind's memcheck; five such TGS-REQs must leave no block
definitely lost (before the fix: one error string per request, from
krb5_get_error_message in tgs_fin_complete).

2. A module completing inside submit with no timer to defer the delivery
(krb5 patch 0008, kdc_mpc_submit): the job fails instead of running its
continuation under the submitter. Before the fix valgrind reported an
invalid read in tgs_fin_encrypt (the request state freed by the
continuation, then used by the submitter).
"""
import os
import re

import kmpc_harness.realm as realm_mod
from kmpc_harness.cluster import password as _password

SERVICE = "host/mpc.kmpc.test"


def start_kdc_under_valgrind(m, monkeypatch, tmp_path, preload=None):
    """Start m's krb5kdc under valgrind's memcheck (definite leaks reported),
    with `preload` as LD_PRELOAD if given; returns valgrind's log path."""
    real = realm_mod.binpath
    wrapper = tmp_path / "krb5kdc"
    vg_log = tmp_path / "valgrind.log"
    env = f"LD_PRELOAD={preload} " if preload else ""
    wrapper.write_text(f"#!/bin/sh\n{env}exec valgrind --leak-check=full "
                       "--show-leak-kinds=definite "
                       f"--log-file={vg_log} {real('krb5kdc')} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(realm_mod, "binpath",
                        lambda n: str(wrapper) if n == "krb5kdc" else real(n))
    m.start_kdc(timeout=120)
    monkeypatch.setattr(realm_mod, "binpath", real)
    return vg_log


def stop_kdc_for_report(m, vg_log):
    """SIGTERM: krb5kdc leaves its loop and exits, valgrind then checks
    leaks; returns valgrind's report."""
    m.kdc_proc.send_signal(15)
    m.kdc_proc.wait(180)
    m.kdc_proc = None
    return vg_log.read_text()


def test_failed_tgs_finishing_leaks_nothing(kmpc_factory, monkeypatch, tmp_path):
    m = kmpc_factory(clusters=0, test_module_delay_ms=30)
    m.add_service()
    m.add_user("alice")
    pw = _password()
    m.addprinc(SERVICE, pw, enctypes=["aes256-ctr-mpc"], flags="")
    m.migrate(SERVICE, pw)
    vg_log = start_kdc_under_valgrind(m, monkeypatch, tmp_path)
    m.login("alice", timeout=120)
    # The path works without failures (not stored: each kvno below asks).
    m.run(["kvno", "--no-store", SERVICE], timeout=120)
    open(m.test_failflag, "w").close()
    for _ in range(5):
        out = m.run(["kvno", SERVICE], expected_code=1, timeout=120)
        assert "A service is not available" in out, out
    log = m.kdc_log_text()
    assert log.count("kdcmpc: finishing the issued ticket failed") == 5, log
    report = stop_kdc_for_report(m, vg_log)
    assert re.search(r"ERROR SUMMARY: \d+ errors", report), report
    assert "definitely lost: 0 bytes in 0 blocks" in report or \
        "definitely lost" not in report, report
    assert "do_tgs_req.c" not in report, report


# An LD_PRELOAD shim for krb5kdc: verto_add_timeout() with a zero interval
# (the KDC's deferred delivery of a job the module completed inside submit)
# fails, as it would under memory exhaustion; every other call goes on.
VERTO_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>
typedef void *(*add_fn)(void *, int, void *, time_t);
void *verto_add_timeout(void *ctx, int flags, void *cb, time_t interval)
{
    static add_fn real;
    if (interval == 0)
        return NULL;
    if (real == NULL)
        real = (add_fn)dlsym(RTLD_NEXT, "verto_add_timeout");
    return real(ctx, flags, cb, interval);
}
"""


def test_inline_completion_without_a_timer_fails_the_job(kmpc_factory, monkeypatch,
                                                         tmp_path):
    """krb5 patch 0008 kdc_mpc_submit: a module that completes a job inside
    submit (a contract breach: the test module's inline = true) has its
    result delivered from the event loop; when no timer can be made for that,
    the job fails (the request gets KDC_ERR_SVC_UNAVAILABLE) instead of
    running the continuation under its submitter, which still uses the
    request state the continuation frees (tgs_fin_encrypt, as_req_mpc_start).
    Under valgrind: no invalid read or write, no leak, the KDC stays up."""
    import subprocess
    shim = tmp_path / "verto_shim.so"
    src = tmp_path / "verto_shim.c"
    src.write_text(VERTO_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(src), "-ldl"],
                   check=True)
    m = kmpc_factory(clusters=0, test_module_delay_ms=0,
                     module_options={"inline": "true"})
    m.add_service()
    # alice's key and the krbtgt's stay local: her AS-REQ needs no job.
    pw = _password()
    m.addprinc("alice", pw, enctypes=["aes256-cts-hmac-sha1-96"])
    m.passwords["alice"] = pw
    m.add_user("bob")  # bob's key is MPC-held
    spw = _password()
    m.addprinc(SERVICE, spw, enctypes=["aes256-ctr-mpc"], flags="")
    m.migrate(SERVICE, spw)
    vg_log = start_kdc_under_valgrind(m, monkeypatch, tmp_path, preload=shim)
    m.login("alice", timeout=120)
    for _ in range(3):
        # The new ticket's PAC CHECKSUM under the service's handle.
        out = m.run(["kvno", SERVICE], expected_code=1, timeout=120)
        assert "A service is not available" in out, out
        # bob's encrypted timestamp under his handle.
        out = m.login("bob", expected_code=1, timeout=120)
        assert "A service is not available" in out, out
    assert m.kdc_alive()
    assert any(l.startswith("submit") for l in m.journal_lines()), m.journal_lines()
    report = stop_kdc_for_report(m, vg_log)
    assert re.search(r"ERROR SUMMARY: 0 errors", report), report
