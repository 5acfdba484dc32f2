#!/usr/bin/env bash
# Generate a private CA and the PKINIT certificates of a kmpc realm: the
# KDC's, and clients' (smart-card logins) for the principals named.
#
#   deploy/gen-pkinit-certs.sh DIR REALM [PRINCIPAL ...]
#
# DIR/ca.pem                 CA certificate: pkinit_anchors of the KDC and of
#                            every client (krb5.conf [realms] or libdefaults)
# DIR/ca-private/ca.key      the CA's private key, in a 0700 directory of its
#                            own: the KDC does not need it; move it offline
# DIR/kdc.{pem,key}          the KDC's certificate (EKU id-pkinit-KPKdc, SAN
#                            krbtgt/REALM@REALM, RFC 4556 section 3.2.4):
#                            kdc.conf pkinit_identity = FILE:kdc.pem,kdc.key
# DIR/<principal>.{pem,key}  a client certificate for PRINCIPAL@REALM (EKU
#                            id-pkinit-KPClientAuth, SAN the principal name):
#                            kinit -X X509_user_identity=FILE:<p>.pem,<p>.key
#
# A principal with instance components (host/web) gets files named with "_"
# for "/". The KDC's certificate is valid KMPC_PKINIT_KDC_DAYS (365) days,
# clients' KMPC_PKINIT_CLIENT_DAYS (825); an existing kdc.pem is kept:
# remove it to renew it. Keys are RSA 2048 (what smart cards and Windows clients use), made
# here at run time and never committed; private keys are mode 0600.
#
# Anonymous PKINIT (kinit -n, FAST armor) needs only ca.pem on the client and
# the KDC's certificate on the KDC, plus the WELLKNOWN/ANONYMOUS principal
# (docs/admin-guide.md, "PKINIT").
set -euo pipefail

usage() { echo "usage: $0 DIR REALM [PRINCIPAL ...]" >&2; exit 2; }
[ $# -ge 2 ] || usage
dir=$1; realm=$2; shift 2
case "$realm" in
  ''|*[!A-Za-z0-9.-]*) echo "error: realm '$realm': letters, digits, '.' and '-' only" >&2
     exit 2 ;;
esac
for p in "$@"; do
  case "$p" in
    ''|*@*|*[!A-Za-z0-9._/-]*)
      echo "error: principal '$p': a name without realm, of letters, digits, '.', '_', '-' and '/'" >&2
      exit 2 ;;
  esac
done

mkdir -p "$dir" "$dir/ca-private"
chmod 0700 "$dir/ca-private"
umask 077
conf=$(mktemp)
trap 'rm -f "$conf" "$dir"/*.csr' EXIT

# The KRB5PrincipalName of a SAN otherName (RFC 4556 section 3.2.2):
# SEQUENCE { realm [0] Realm, principalName [1] PrincipalName }.
principal_section() {  # name_type section components...
  local type=$1 section=$2; shift 2
  local i=1
  printf '[%s]\nrealm = EXP:0,GeneralString:%s\nprincipal_name = EXP:1,SEQUENCE:%s_name\n' \
    "$section" "$realm" "$section"
  printf '[%s_name]\nname_type = EXP:0,INTEGER:%s\nname_string = EXP:1,SEQUENCE:%s_parts\n' \
    "$section" "$type" "$section"
  printf '[%s_parts]\n' "$section"
  for c in "$@"; do printf 'part%d = GeneralString:%s\n' "$i" "$c"; i=$((i + 1)); done
}

write_conf() {  # eku section components...
  local eku=$1 section=$2; shift 2
  local type=1
  [ $# -gt 1 ] && type=2  # NT-SRV-INST for krbtgt/REALM and other two-part names
  {
    printf '[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = %s\n' "$section"
    printf '[ext]\nbasicConstraints = CA:FALSE\n'
    printf 'keyUsage = digitalSignature, keyEncipherment, keyAgreement\n'
    printf 'extendedKeyUsage = %s\nsubjectKeyIdentifier = hash\n' "$eku"
    printf 'authorityKeyIdentifier = keyid, issuer\n'
    printf 'subjectAltName = otherName:1.3.6.1.5.2.2;SEQUENCE:%s\n' "$section"
    principal_section "$type" "$section" "$@"
  } >"$conf"
}

if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
    -keyout "$dir/ca-private/ca.key" -out "$dir/ca.pem" \
    -subj "/CN=kmpc PKINIT CA $realm" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  chmod 0644 "$dir/ca.pem"
fi

issue() {  # days file-stem eku components...
  local days=$1 stem=$2 eku=$3; shift 3
  local section
  section=$(printf '%s' "$stem" | tr -c 'A-Za-z0-9\n' '_')
  write_conf "$eku" "p_$section" "$@"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$dir/$stem.key" \
    -out "$dir/$stem.csr" -config "$conf" 2>/dev/null
  openssl x509 -req -in "$dir/$stem.csr" -CA "$dir/ca.pem" \
    -CAkey "$dir/ca-private/ca.key" -CAserial "$dir/ca-private/ca.srl" \
    -CAcreateserial -days "$days" -sha256 \
    -extfile "$conf" -extensions ext -out "$dir/$stem.pem" 2>/dev/null
  chmod 0644 "$dir/$stem.pem"
  chmod 0600 "$dir/$stem.key"
  echo "$dir/$stem.pem"
}

# id-pkinit-KPKdc 1.3.6.1.5.2.3.5, id-pkinit-KPClientAuth 1.3.6.1.5.2.3.4
[ -f "$dir/kdc.pem" ] || issue "${KMPC_PKINIT_KDC_DAYS:-365}" kdc 1.3.6.1.5.2.3.5 krbtgt "$realm" >/dev/null
for p in "$@"; do
  IFS=/ read -r -a parts <<<"$p"
  issue "${KMPC_PKINIT_CLIENT_DAYS:-825}" "${p//\//_}" 1.3.6.1.5.2.3.4 "${parts[@]}" >/dev/null
done
