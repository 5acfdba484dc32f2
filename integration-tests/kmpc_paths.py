"""Paths of the kmpc build shared by the enctype tests (no fixtures here:
conftest.py belongs to the realm harness)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("KMPC_BUILD", os.path.join(ROOT, "build"))
KRB5_PREFIX = os.environ.get("KRB5_PREFIX", os.path.join(BUILD, "krb5"))

# Copy of shared/vectors/enctype-vectors.json (vectors from an independent
# implementation), kept in the repository so that `make test` needs nothing
# outside it.  test_enctype.py checks it still matches the shared original
# when that is present.
VECTORS = os.environ.get(
    "KMPC_VECTORS", os.path.join(ROOT, "krb5-patches", "tests", "enctype-vectors.json"))
# shared/ sits beside the clone (CI, developers' machines).
SHARED_VECTORS = os.path.join(os.path.dirname(ROOT), "shared", "vectors", "enctype-vectors.json")


def t_ctr_mpc():
    """The C test program, built by CMake from krb5-patches/tests (in
    $KMPC_CMAKE_BUILD when set, as the other built files)."""
    cmake = os.environ.get("KMPC_CMAKE_BUILD") or os.path.join(BUILD, "cmake")
    return os.environ.get(
        "KMPC_T_CTR_MPC", os.path.join(cmake, "krb5-patches", "tests", "t_ctr_mpc"))


def run_krb5_obj_program(subdir, name, timeout=300):
    """Build and run one test program of MIT's `make check` in the patched
    tree `make krb5` left in build/krb5-obj/SUBDIR (the rest of that check
    needs k5test's runenv.py); the finished process. Holds the lock `make
    krb5` takes while it rebuilds that tree."""
    import subprocess
    objdir = os.path.join(BUILD, "krb5-obj", subdir)
    assert os.path.isfile(os.path.join(objdir, "Makefile")), (
        f"{objdir}: no configured krb5 tree; run `make krb5` first")
    p = subprocess.run(["flock", os.path.join(BUILD, ".krb5.lock"), "make", "-s", "-C",
                        objdir, name], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"building {name} failed:\n{p.stdout[-3000:]}{p.stderr[-3000:]}"
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(BUILD, "krb5-obj", "lib"),
               KRB5_CONFIG=os.path.join(BUILD, "krb5-src", "src", "config-files",
                                        "krb5.conf"), LC_ALL="C")
    return subprocess.run(["./" + name], cwd=objdir, env=env, capture_output=True,
                          text=True, timeout=timeout)
