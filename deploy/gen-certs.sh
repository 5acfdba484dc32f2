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
# benchmark, deploy/netns_cluster.py, puts the servers on such addresses).
#
# Party identity: every gRPC client (kmpc-admin, the KDC module,
# kmpc-mpc-client) connects to the server at position i of its server list
# with the TLS target name "kmpc-party-<i>" and so only accepts a
# certificate with the SAN DNS:kmpc-party-<i>. Only party i's certificate
# carries it (the shared SANs 127.0.0.1/localhost/KMPC_CERT_EXTRA_SAN are the
# same on all three and prove nothing about which party answers).
#
# Keys are generated here at run time (EC P-256) and never committed.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 DIR [EXTRA_CLIENT_CN ...]" >&2; exit 2; }
dir=$1; shift
mkdir -p "$dir"
chmod 700 "$dir"
cd "$dir"
umask 077
days=825

newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

mkdir -p ca-private
chmod 700 ca-private
# Older layout: the CA key next to everything else.
for f in ca.key ca.srl; do
  [ -f "$f" ] || continue
  if [ ! -f "ca-private/$f" ]; then mv "$f" "ca-private/$f"
  elif cmp -s "$f" "ca-private/$f" || [ "$f" = ca.srl ]; then rm -f "$f"
  else echo "gen-certs: $dir/$f and $dir/ca-private/$f differ; remove one" >&2; exit 1
  fi
done
cakey=ca-private/ca.key
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

for i in 0 1 2; do sign "party-$i" "kmpc-party-$i" "$(server_ext "$i")"; done
sign kdc kmpc-kdc "$client_ext"
sign admin kmpc-admin "$client_ext"
for cn in "$@"; do sign "$cn" "$cn" "$client_ext"; done
chmod 600 ./*.key ca-private/*
chmod 644 ./*.pem
echo "certificates in $(pwd)"
