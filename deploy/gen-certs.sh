#!/usr/bin/env bash
# Generate a private CA and the certificates of a local kmpc MPC cluster.
#
#   deploy/gen-certs.sh DIR [EXTRA_CLIENT_CN ...]
#
# DIR/ca.pem                       CA certificate (trust anchor of everyone)
# DIR/ca-private/ca.{key,srl}      the CA's private key (and serial), in a
#                                  0700 directory of its own: no daemon needs
#                                  it, and a daemon pointed at DIR (the KDC
#                                  module's `certs = DIR`) must not find it
#                                  next to its own key. Only this script uses
#                                  it (to issue more certificates); move it
#                                  offline in a real deployment.
# DIR/party-{0,1,2}.{pem,key}      servers, CN kmpc-party-<i>, SAN
#                                  DNS:kmpc-party-<i> (the party's own
#                                  identity: clients check it, see below) and
#                                  127.0.0.1/localhost; used for the ring
#                                  (both TLS ends) and for gRPC
# DIR/kdc.{pem,key}                CN kmpc-kdc    (KeyOps client)
# DIR/admin.{pem,key}              CN kmpc-admin  (Admin client)
# DIR/<cn>.{pem,key}               each EXTRA_CLIENT_CN (tests: e.g. a rogue)
#
# KMPC_CERT_EXTRA_SAN (optional), e.g. "IP:10.77.0.11,IP:10.77.0.12": more
# subjectAltName entries for the server certificates (the network-namespace
# benchmark, integration-tests/bench/netns_bench.py, puts the servers on such addresses).
#
# Party identity: every gRPC client (kmpc-admin, the KDC module,
# kmpc-mpc-client) connects to the server at position i of its server list
# with the TLS target name "kmpc-party-<i>" and so only accepts a
# certificate with the SAN DNS:kmpc-party-<i>. Only party i's certificate
# carries it (the shared SANs 127.0.0.1/localhost/KMPC_CERT_EXTRA_SAN are the
# same on all three and prove nothing about which party answers).
#
# Keys are generated here at run time (EC P-256) and never committed.
#
# Revocation: DIR/crl.pem is the CA's certificate revocation list (written
# empty with the CA; kmpc-mpc-server --crl=DIR/crl.pem refuses gRPC clients
# whose certificate it lists, and re-reads it when it changes or on SIGHUP).
#   deploy/gen-certs.sh DIR --revoke CERT.pem [CERT.pem ...]
#       records the certificates as revoked in the CA's database
#       (DIR/ca-private/index.txt) and writes a new DIR/crl.pem
#   deploy/gen-certs.sh DIR --crl
#       only writes a new DIR/crl.pem (it is valid for KMPC_CRL_DAYS, 365
#       days by default: re-issue it before then)
#   deploy/gen-certs.sh DIR --party I
#       issues a new DIR/party-I.{pem,key} for the server that replaces
#       party I (docs/admin-guide.md: replacing a lost server); refused while the current
#       DIR/party-I.pem is not revoked (--revoke it first), so that the lost
#       server's certificate can never be left valid by mistake. The revoked
#       one is kept as DIR/party-I.revoked-SERIAL.pem.
#   deploy/gen-certs.sh DIR --client NAME [CN]
#       issues only DIR/NAME.{pem,key}, a client certificate with CN (default
#       NAME), e.g. the replacement of a revoked one; the other certificates
#       are left alone (a plain run re-issues all of them)
# crl.pem is replaced atomically (rename), so a server never reads half of it.
# Each CRL carries a CRL Number extension (ca-private/crlnumber, +1 per CRL);
# a server refuses a CRL with a lower number than one it accepted before,
# also after a restart (it records them in STORE_DIR/crl-numbers): restoring
# an older crl.pem un-revokes nothing; issue a new one with --crl instead.
set -euo pipefail
usage() {
  echo "usage: $0 DIR [EXTRA_CLIENT_CN ...]" >&2
  echo "       $0 DIR --revoke CERT.pem [CERT.pem ...] | --crl | --client NAME [CN] | --party I" >&2
  exit 2
}
[ $# -ge 1 ] || usage
dir=$1; shift
mode=issue
case "${1:-}" in
  --revoke) mode=revoke; shift; [ $# -ge 1 ] || usage
            revoke=()
            for f in "$@"; do
              [ -f "$f" ] || { echo "gen-certs: no certificate $f" >&2; exit 1; }
              revoke+=("$(realpath "$f")")
            done
            set -- ;;
  --crl) mode=crl; shift; [ $# -eq 0 ] || usage ;;
  --party) mode=party; shift; [ $# -eq 1 ] || usage
           case "$1" in 0|1|2) party=$1 ;; *) usage ;; esac; set -- ;;
  --client) mode=client; shift; [ $# -ge 1 ] && [ $# -le 2 ] || usage
            client_name=$1; client_cn=${2:-$1}; set -- ;;
  --*) usage ;;
esac
if [ "$mode" != issue ] && [ ! -f "$dir/ca.pem" ]; then
  echo "gen-certs: $dir has no CA (run $0 $dir first)" >&2; exit 1
fi
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
umask 077
days=825

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

mkdir -p ca-private
chmod 700 ca-private
# A CA key left beside the daemons' keys (DIR/ca.key, ca.srl) moves into
# ca-private/, where no daemon pointed at DIR finds it.
for f in ca.key ca.srl; do
  [ -f "$f" ] || continue
  if [ ! -f "ca-private/$f" ]; then mv "$f" "ca-private/$f"
  elif cmp -s "$f" "ca-private/$f" || [ "$f" = ca.srl ]; then rm -f "$f"
  else echo "gen-certs: $dir/$f and $dir/ca-private/$f differ; remove one" >&2; exit 1
  fi
done
cakey=ca-private/ca.key

# The CA's database for `openssl ca` (revocations and CRL numbers only: the
# certificates themselves are signed with `openssl x509 -req` below).
ca_conf() {
  [ -f ca-private/index.txt ] || : > ca-private/index.txt
  [ -f ca-private/crlnumber ] || echo 1000 > ca-private/crlnumber
  cat > ca-private/ca.cnf <<EOF
[ ca ]
default_ca = kmpc_ca
[ kmpc_ca ]
database = $(pwd)/ca-private/index.txt
crlnumber = $(pwd)/ca-private/crlnumber
certificate = $(pwd)/ca.pem
private_key = $(pwd)/$cakey
default_md = sha256
default_crl_days = ${KMPC_CRL_DAYS:-365}
unique_subject = no
crl_extensions = crl_ext
[ crl_ext ]
authorityKeyIdentifier = keyid:always
EOF
}

# A new DIR/crl.pem from the database, swapped in atomically.
gen_crl() {
  ca_conf
  openssl ca -config ca-private/ca.cnf -gencrl -out crl.pem.tmp 2>ca-private/openssl.log ||
    { cat ca-private/openssl.log >&2; exit 1; }
  chmod 644 crl.pem.tmp
  mv -f crl.pem.tmp crl.pem
}

case "$mode" in
  revoke)
    ca_conf
    for f in "${revoke[@]}"; do
      # Only certificates of this CA: a CRL entry is just a serial number.
      openssl verify -CAfile ca.pem "$f" >/dev/null 2>&1 ||
        { echo "gen-certs: $f is not a valid certificate of $(pwd)/ca.pem" >&2; exit 1; }
      serial=$(openssl x509 -noout -serial -in "$f")
      if grep -q "^R.*	${serial#serial=}	" ca-private/index.txt; then
        echo "already revoked: $f ($serial)"; continue
      fi
      openssl ca -config ca-private/ca.cnf -revoke "$f" 2>ca-private/openssl.log ||
        { cat ca-private/openssl.log >&2; exit 1; }
      echo "revoked $f ($serial, $(openssl x509 -noout -subject -in "$f"))"
    done
    gen_crl
    echo "CRL: $(pwd)/crl.pem (the servers re-read it within a second; SIGHUP forces it)"
    exit 0 ;;
  crl)
    gen_crl
    echo "CRL: $(pwd)/crl.pem"
    exit 0 ;;
esac

if [ ! -f ca.pem ]; then
  newkey "$cakey"
  openssl req -x509 -new -key "$cakey" -sha256 -days "$days" -subj "/CN=kmpc-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem 2>/dev/null
fi

# sign NAME CN EXT
sign() {
  local name=$1 cn=$2 ext=$3
  newkey "$name.key"
  openssl req -new -key "$name.key" -subj "/CN=$cn" -out "$name.csr" 2>/dev/null
  printf '%s\n' "$ext" > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey "$cakey" \
    -CAserial ca-private/ca.srl -CAcreateserial \
    -days "$days" -sha256 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

# server_ext I: the extensions of party I's certificate.
server_ext() {
  printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=critical,digitalSignature' \
    'extendedKeyUsage=serverAuth,clientAuth' \
    "subjectAltName=DNS:kmpc-party-$1,IP:127.0.0.1,DNS:localhost${KMPC_CERT_EXTRA_SAN:+,$KMPC_CERT_EXTRA_SAN}"
}
client_ext='basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth'

if [ "$mode" = client ]; then
  sign "$client_name" "$client_cn" "$client_ext"
  chmod 600 "$client_name.key"; chmod 644 "$client_name.pem"
  echo "issued $(pwd)/$client_name.pem ($(openssl x509 -noout -serial -in "$client_name.pem"), CN $client_cn)"
  exit 0
fi

if [ "$mode" = party ]; then
  old=party-$party.pem
  if [ -f "$old" ]; then
    serial=$(openssl x509 -noout -serial -in "$old"); serial=${serial#serial=}
    ca_conf
    if ! grep -q "^R.*	${serial}	" ca-private/index.txt; then
      echo "gen-certs: $(pwd)/$old (serial $serial) is not revoked; revoke the" \
           "lost server's certificate first: $0 $(pwd) --revoke $(pwd)/$old" >&2
      exit 1
    fi
    mv -f "$old" "party-$party.revoked-$serial.pem"
    rm -f "party-$party.key"
  fi
  sign "party-$party" "kmpc-party-$party" "$(server_ext "$party")"
  chmod 600 "party-$party.key"; chmod 644 "party-$party.pem"
  echo "issued $(pwd)/party-$party.pem ($(openssl x509 -noout -serial -in "party-$party.pem"), CN kmpc-party-$party)"
  exit 0
fi

[ -f crl.pem ] || gen_crl
for i in 0 1 2; do sign "party-$i" "kmpc-party-$i" "$(server_ext "$i")"; done
sign kdc kmpc-kdc "$client_ext"
sign admin kmpc-admin "$client_ext"
for cn in "$@"; do sign "$cn" "$cn" "$client_ext"; done
chmod 600 ./*.key ca-private/*
chmod 644 ./*.pem
echo "certificates in $(pwd)"
