"""The TGS finishing path's failures under valgrind (krb5 patch 0008,
tgs_fin_complete): each failed finishing job's error message is taken from
the context when the job fails (the context is shared by every request in
flight) and freed once logged.

A realm without MPC servers (clusters=0, krb5's test module): the krbtgt
key is local, the service's key is MPC-held, so a TGS-REQ's only MPC job is
the CHECKSUM of the new ticket's PAC signature under the service's handle;
the test module fails every job while its fail flag exists. krb5kdc runs
under valgrind's memcheck; five such TGS-REQs must leave no block
definitely lost (before the fix: one error string per request, from
krb5_get_error_message in tgs_fin_complete).
"""
import os
import re

import kmpc_harness.realm as realm_mod
from kmpc_harness.cluster import password as _password

SERVICE = "host/mpc.kmpc.test"


def test_failed_tgs_finishing_leaks_nothing(kmpc_factory, monkeypatch, tmp_path):
    real = realm_mod.binpath
    wrapper = tmp_path / "krb5kdc"
    vg_log = tmp_path / "valgrind.log"
    wrapper.write_text("#!/bin/sh\nexec valgrind --leak-check=full "
                       "--show-leak-kinds=definite "
                       f"--log-file={vg_log} {real('krb5kdc')} \"$@\"\n")
    wrapper.chmod(0o755)
    m = kmpc_factory(clusters=0, test_module_delay_ms=30)
    m.add_service()
    m.add_user("alice")
    pw = _password()
    m.addprinc(SERVICE, pw, enctypes=["aes256-ctr-mpc"], flags="")
    m.migrate(SERVICE, pw)
    monkeypatch.setattr(realm_mod, "binpath",
                        lambda n: str(wrapper) if n == "krb5kdc" else real(n))
    m.start_kdc(timeout=120)
    monkeypatch.setattr(realm_mod, "binpath", real)
    m.login("alice", timeout=120)
    # The path works without failures (not stored: each kvno below asks).
    m.run(["kvno", "--no-store", SERVICE], timeout=120)
    open(m.test_failflag, "w").close()
    for _ in range(5):
        out = m.run(["kvno", SERVICE], expected_code=1, timeout=120)
        assert "A service is not available" in out, out
    log = m.kdc_log_text()
    assert log.count("kdcmpc: finishing the issued ticket failed") == 5, log
    # SIGTERM: krb5kdc leaves its loop and exits, valgrind then checks leaks.
    m.kdc_proc.send_signal(15)
    m.kdc_proc.wait(180)
    m.kdc_proc = None
    report = vg_log.read_text()
    assert re.search(r"ERROR SUMMARY: \d+ errors", report), report
    assert "definitely lost: 0 bytes in 0 blocks" in report or \
        "definitely lost" not in report, report
    assert "do_tgs_req.c" not in report, report
