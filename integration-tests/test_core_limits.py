"""The processes that hold keys in the clear or shares of them keep them
out of core dumps: krb5kdc with the kmpc module (keystream and tag shares,
session keys) and kadmind with the key dealer (each new key in the clear
while it is split). Each is non-dumpable (prctl) and its core size limit is
0: with fs.suid_dumpable = 2 the kernel writes a root-owned core of a
non-dumpable process, so the limit is what keeps the core from being made.

Real binaries: krb5kdc and kadmind of the patched krb5, kadmin over RPC."""
import time

from test_key_lifecycle import ADMIN, ADMIN_PW, realm  # noqa: F401 (fixture)


def core_limit(pid):
    """(soft, hard) of pid's "Max core file size" in /proc/pid/limits."""
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max core file size"):
                soft, hard = line.split()[4:6]
                return soft, hard
    raise AssertionError(f"no core limit line for pid {pid}")


def test_kdc_and_kadmind_dealer_make_no_core_dumps(realm):  # noqa: F811
    t0 = time.monotonic()
    kr = realm
    assert kr.kdc_alive()
    assert core_limit(kr.kdc_proc.pid) == ("0", "0")
    # A key dealt through kadmind: the dealer plugin is loaded and has run.
    out = kr.run(["kadmin", "-r", kr.realm, "-p", ADMIN, "-w", ADMIN_PW,
                  "-q", "addprinc -pw Core-Limit-Pw-1 corelimit"])
    assert kr.kadmind_proc.poll() is None, out
    assert core_limit(kr.kadmind_proc.pid) == ("0", "0")
    print(f"test_kdc_and_kadmind_dealer_make_no_core_dumps: {time.monotonic() - t0:.1f} s")
