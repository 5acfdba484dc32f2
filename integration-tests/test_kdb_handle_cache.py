"""libkdb5's cache of decrypted key handles (krb5 patch 0018, lib/kdb/kdb_mpc.c).

An AS request decrypts the krbtgt's stored key twice and the client's once;
for MPC-protected principals that key is a handle, and libkdb5 keeps what the
master key decrypts it to, keyed by the exact stored ciphertext and the master
key. MIT's lib/kdb `make check` runs t_hcache (the patch adds it); this test
builds and runs that one program in the patched tree `make krb5` left in
build/krb5-obj, so that it runs in `make test` (the rest of lib/kdb's check
needs k5test's runenv.py). t_hcache fails if a cached answer differs from the
stored key, if an ordinary key is kept, if another master key gets an answer
from the cache, if more master keys than the cache's table lose a key, or if
the cache's memory holds a master key's bytes or is not marked MADV_DONTDUMP
(the "dd" flag in /proc/self/smaps).
"""

import os
import time

from kmpc_paths import run_krb5_obj_program


def test_t_hcache_passes():
    t0 = time.monotonic()
    r = run_krb5_obj_program(os.path.join("lib", "kdb"), "t_hcache", timeout=120)
    assert r.returncode == 0, f"t_hcache failed ({r.returncode}): {r.stdout}{r.stderr}"
    print(f"t_hcache: {time.monotonic() - t0:.1f} s")


def _dontdump_kib(pid):
    """The sizes (KiB) of pid's mappings marked MADV_DONTDUMP (VmFlags dd,
    proc(5))."""
    out, size = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if line.startswith("Size:"):
                size = int(line.split()[1])
            elif line.startswith("VmFlags:") and " dd" in f" {line[8:]}":
                out.append(size)
    return out


def test_a_running_kdcs_cache_is_left_out_of_core_dumps(kmpc_factory):
    """A real krb5kdc with MPC-held keys (krb5's test kdcmpc module): the
    cache is made by the first AS request, as one mapping marked
    MADV_DONTDUMP; none is there before."""
    from test_kdc_handles import handle_realm
    t0 = time.monotonic()
    m = handle_realm(kmpc_factory).setup(users=("alice",)).start()
    pid = m.kdc_proc.pid
    before = _dontdump_kib(pid)
    m.login("alice")
    after = _dontdump_kib(pid)
    assert len(after) == len(before) + 1, (before, after)
    assert m.kdc_alive()
    print(f"test_a_running_kdcs_cache_is_left_out_of_core_dumps: {after} KiB; "
          f"{time.monotonic() - t0:.1f} s")
