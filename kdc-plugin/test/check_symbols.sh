#!/usr/bin/env bash
# A kmpc krb5 plugin is dlopen'ed into krb5kdc (the KDC module) or kadmind,
# kadmin.local and kdb5_util (the key dealer): check that it
#  1. exports the global names of its version script and nothing else
#     (the KDC module: kdcmpc_kmpc_initvt),
#  2. takes libkrb5 & co. from the private prefix, never the system's,
#  3. brings no library that defines a dynamic symbol the KDC's own
#     libraries (or krb5kdc) also define: gRPC, protobuf, abseil, OpenSSL
#     and friends cannot interpose on krb5, nor krb5 on them.
#   check_symbols.sh MODULE KRB5_PREFIX [VERSION_SCRIPT]
# (without VERSION_SCRIPT: the KDC module's one export)
set -euo pipefail
mod=$1; prefix=$2; script=${3:-}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if [ -n "$script" ]; then
  # The names between "global:" and "local:", one "name;" each.
  sed -n '/global:/,/local:/p' "$script" | grep -oE '^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*;' \
    | tr -d ' \t;' | sort > "$tmp/expected"
  [ -s "$tmp/expected" ] || { echo "FAIL: no global names in $script"; exit 1; }
else
  echo kdcmpc_kmpc_initvt > "$tmp/expected"
fi
nm -D --defined-only "$mod" | awk '$2 ~ /^[TDBRVWui]$/ {print $3}' | sort > "$tmp/exported"
if ! cmp -s "$tmp/expected" "$tmp/exported"; then
  echo "FAIL: the exports are not exactly $(tr '\n' ' ' < "$tmp/expected"):"
  cat "$tmp/exported"; exit 1
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
echo "ok: $(wc -l < "$tmp/expected") export(s), krb5 from $prefix, $(wc -l < "$tmp/others") other libraries, no clashes"
