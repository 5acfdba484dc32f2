"""krb5-config in the private prefix names the prefix's real include and
library directories: a program built with its flags compiles, links against
the patched libraries (it knows the aes*-ctr-mpc enctypes, which the
system's libk5crypto does not) and runs."""
import os
import subprocess

from kmpc_paths import KRB5_PREFIX

PROGRAM = r"""
#include <stdio.h>
#include <krb5.h>
int main(void) {
    krb5_enctype e;
    if (krb5_string_to_enctype("aes256-ctr-mpc", &e) != 0) return 2;
    printf("%d\n", (int)e);
    return 0;
}
"""


def _config(*args):
    return subprocess.run([os.path.join(KRB5_PREFIX, "bin", "krb5-config"), *args],
                          check=True, capture_output=True, text=True).stdout.split()


def test_krb5_config_names_existing_directories():
    cflags = _config("--cflags", "krb5")
    incdirs = [f[2:] for f in cflags if f.startswith("-I") and len(f) > 2]
    incdirs += [cflags[i + 1] for i, f in enumerate(cflags[:-1]) if f == "-isystem"]
    assert incdirs, cflags
    for d in incdirs:
        assert os.path.isfile(os.path.join(d, "krb5.h")), d
    libdirs = [f[2:] for f in _config("--libs", "krb5") if f.startswith("-L")]
    assert libdirs, "krb5-config --libs names no library directory"
    for d in libdirs:
        assert os.path.isfile(os.path.join(d, "libkrb5.so")), d


def test_program_built_with_krb5_config_uses_patched_libraries(tmp_path):
    src = tmp_path / "t.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "t"
    subprocess.run(["cc", str(src), "-o", str(exe), *_config("--cflags", "krb5"),
                    *_config("--libs", "krb5")], check=True, capture_output=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0, out
    assert out.stdout.strip() == "-29002"
