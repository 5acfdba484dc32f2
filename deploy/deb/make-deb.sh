#!/usr/bin/env bash
# make deb: the kmpc build of Debian's krb5 and kmpc's own packages in
# BUILD_DIR/deb, then lintian on kmpc's packages (errors fail the build;
# warnings are printed and written to BUILD_DIR/deb/lintian.txt).
#
#   make-deb.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(mkdir -p "$1" && cd "$1" && pwd)
out=$build/deb
t0=$(date +%s)
bash "$here/build-krb5-debs.sh" "$build" "$out"
t1=$(date +%s)
bash "$here/build-kmpc-debs.sh" "$build" "$out"
t2=$(date +%s)
debs=$(ls "$out"/kmpc-{mpc-server,kdc,admin}_*.deb)
# lintian exits non-zero on errors only (its default --fail-on error).
if ! lintian --tag-display-limit 0 $debs >"$out/lintian.txt" 2>&1; then
  cat "$out/lintian.txt" >&2; echo "error: lintian found errors in kmpc's packages" >&2; exit 1
fi
printf '[deb] lintian: %s error(s), %s warning(s) (%s)\n' \
  "$(grep -c '^E: ' "$out/lintian.txt" || true)" "$(grep -c '^W: ' "$out/lintian.txt" || true)" \
  "$out/lintian.txt"
printf '[deb] krb5 packages %s s, kmpc packages %s s, lintian %s s\n' \
  $((t1 - t0)) $((t2 - t1)) $(( $(date +%s) - t2 ))
