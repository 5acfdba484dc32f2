#!/usr/bin/env bash
# The key dealer (libkmpc_dealer.so) runs inside kadmind, kadmin.local and
# kdb5_util, and deals keys in the clear: it must carry none of the MPC
# engine's code (mpc-server/core.cmake's kmpc_core): no distributed proof
# (DZKP) or its check, no AND engine or PRSS, no AES kernel, no circuit.
# Reads every symbol of the module, the local ones too (its static
# libraries' code is local: --exclude-libs), and the file names of the
# objects that brought static constructors.
#   check_dealer_links.sh MODULE
set -euo pipefail
mod=$1
hits=$(mktemp); trap 'rm -f "$hits"' EXIT
syms=$(nm -C "$mod")
[ -n "$syms" ] || { echo "FAIL: no symbols in $mod (stripped?)"; exit 1; }
forbidden='kmpc::protocol::(dzkp::|Rep3::|Prss|MulLog|Verif)|kmpc::aes::(avx2::|avx512::|EncryptPlain|KernelName)|kmpc::cts::(Circuit::|ClearEngine|Evaluate)|kmpc::engine::Engine::'
objects='_GLOBAL__sub_I_(dzkp|verify|rep3|prss|prf|aes|kernel_avx2|kernel_avx512|circuit|sha1|engine|cts_jobs)\.cc'
if grep -E "$forbidden|$objects" <<<"$syms" > "$hits"; then
  echo "FAIL: the MPC engine's code is linked into $mod:"
  sed 's/^[0-9a-f]* //' "$hits" | cut -c1-120 | sort -u | head -20
  echo "($(wc -l < "$hits") symbols)"
  exit 1
fi
echo "ok: no DZKP, AND engine, PRSS, AES kernel or circuit code in $mod"
