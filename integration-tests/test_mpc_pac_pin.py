"""The pin of kdc_mpc_pac.c to MIT's PAC and CAMMAC code (krb5 patch 0011,
src/kdc/t_mpc_pac.c): MIT's `make check` in src/kdc runs it; this test builds
and runs that one program in the patched tree `make krb5` left in
build/krb5-obj, so that it runs in `make test` (the rest of src/kdc's check
needs k5test's runenv.py). t_mpc_pac fails if the MPC signing path's ticket
differs from krb5_kdc_sign_ticket()'s outside the signature values, if MIT's
krb5_kdc_verify_ticket() or cammac_check_kdcver() refuses what it signs, or
if kdc_mpc_verify_ticket() refuses MIT's signing or accepts a signature with
one bit changed.
"""

import os
import subprocess

from kmpc_paths import BUILD

OBJDIR = os.path.join(BUILD, "krb5-obj", "kdc")
SRCDIR = os.path.join(BUILD, "krb5-src", "src")
LOCK = os.path.join(BUILD, ".krb5.lock")


def test_t_mpc_pac_passes():
    assert os.path.isfile(os.path.join(OBJDIR, "Makefile")), (
        f"{OBJDIR}: no configured krb5 tree; run `make krb5` first")
    # The lock `make krb5` holds while it rebuilds this tree.
    p = subprocess.run(["flock", LOCK, "make", "-s", "-C", OBJDIR, "t_mpc_pac"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"building t_mpc_pac failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}"
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BUILD, "krb5-obj", "lib"),
               KRB5_CONFIG=os.path.join(SRCDIR, "config-files", "krb5.conf"), LC_ALL="C")
    r = subprocess.run(["./t_mpc_pac"], cwd=OBJDIR, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"t_mpc_pac failed ({r.returncode}): {r.stdout[-3000:]}{r.stderr[-3000:]}"
