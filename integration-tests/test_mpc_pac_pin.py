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

from kmpc_paths import run_krb5_obj_program


def test_t_mpc_pac_passes():
    r = run_krb5_obj_program("kdc", "t_mpc_pac")
    assert r.returncode == 0, f"t_mpc_pac failed ({r.returncode}): {r.stdout[-3000:]}{r.stderr[-3000:]}"
