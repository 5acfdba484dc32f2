#!/usr/bin/env bash
# The module is dlopen'ed into krb5kdc: check that it
#  1. exports kdcmpc_kmpc_initvt and nothing else,
#  2. takes libkrb5 & co. from the private prefix, never the system's,
#  3. brings no library that defines a dynamic symbol the KDC's own
#     libraries (or krb5kdc) also define: gRPC, protobuf, abseil, OpenSSL
#     and friends cannot interpose on krb5, nor krb5 on them.
#   check_symbols.sh MODULE KRB5_PREFIX
set -euo pipefail
mod=$1; prefix=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$mod" | awk '$2 ~ /^[TDBRVWui]$/ {print $3}' | sort > "$tmp/exported"
if [ "$(cat "$tmp/exported")" != "kdcmpc_kmpc_initvt" ]; then
  echo "FAIL: exports other than kdcmpc_kmpc_initvt:"; cat "$tmp/exported"; exit 1
fi

ldd "$mod" > "$tmp/ldd"
if grep -E 'lib(krb5|k5crypto|gssapi_krb5|krb5support|com_err|verto|kadm5srv_mit|kdb5)\.so' "$tmp/ldd" \
   | grep -v "$prefix/lib/"; then
  echo "FAIL: krb5 libraries from outside $prefix"; exit 1
fi

awk '{print $3}' "$tmp/ldd" | grep '^/' | grep -v "^$prefix/" \
  | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt)\.so' \
  > "$tmp/others" || true
{
  for l in "$prefix"/lib/lib*.so; do nm -D --defined-only "$l" 2>/dev/null | awk '{print $3}'; done
  [ -x "$prefix/sbin/krb5kdc" ] && nm -D --defined-only "$prefix/sbin/krb5kdc" | awk '{print $3}'
} | sed 's/@.*//' | sort -u > "$tmp/krb5"
while read -r l; do nm -D --defined-only "$l" 2>/dev/null | awk '{print $3}'; done < "$tmp/others" \
  | sed 's/@.*//' | sort -u > "$tmp/deps"
comm -12 "$tmp/krb5" "$tmp/deps" > "$tmp/clash"
if [ -s "$tmp/clash" ]; then
  echo "FAIL: symbols defined both by krb5 and by the module's other libraries:"
  head -50 "$tmp/clash"; exit 1
fi
echo "ok: 1 export, krb5 from $prefix, $(wc -l < "$tmp/others") other libraries, no clashes"
