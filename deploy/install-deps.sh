#!/usr/bin/env bash
# Install every Debian package kmpc needs (build, tests, demo, bench).
# Idempotent and quiet when everything is already there.
set -euo pipefail
pkgs=(
  # toolchain and krb5 source build
  build-essential cmake ninja-build pkg-config autoconf automake bison
  dpkg-dev git ca-certificates
  # C++ dependencies
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libabsl-dev libssl-dev liblmdb-dev libgtest-dev libgmock-dev
  # (no libsodium: key shares live in SecretBytes, wiped with explicit_bzero,
  # in processes that dump no core; nothing here links it)
  prometheus-cpp-dev  # HTTP /metrics of the servers and the KDC module
  libcli11-dev  # kmpc-admin's command line (header-only)
  # tests, demo and benchmarks
  python3 python3-pytest python3-cryptography python3-matplotlib python3-grpcio
  python3-pytest-xdist  # make test runs the integration test files in parallel
  python3-protobuf  # the tests decode kmpc.proto messages with protoc's classes
  openssl iproute2 procps
  python3-pip  # test_code_layout.py: pip install --target build/pydeps lizard
  gdb  # bench-soak: heap bytes in use (malloc_info) of each process
  valgrind  # test_tgs_error_paths.py: krb5kdc's TGS failure path leaks nothing
  systemd  # systemd-analyze verify of deploy/systemd/ (test_deploy.py)
  # Debian's own, unpatched MIT clients (test_unmodified_clients.py): kinit,
  # kvno, klist, kdestroy; gss-client and gss-server for delegation
  krb5-user krb5-gss-samples
  # Debian's PKINIT plugin for those clients (test_pkinit.py): kinit -n,
  # certificate logins
  krb5-pkinit
  # curl --negotiate to Apache's mod_auth_gssapi (test_cts_interop.py): run
  # by the test on loopback as the test's user, never as the system service
  curl apache2 libapache2-mod-auth-gssapi
  # Debian packages (make deb, test_packages.py): the krb5 package's own
  # build dependencies come from `apt-get build-dep` of its .dsc
  debhelper quilt fakeroot lintian debootstrap libverto-dev comerr-dev
  # LDAP KDB (test_ldap.py): OpenLDAP headers for MIT's kldap module, and
  # Debian's slapd and clients, run by the tests on loopback only
  libldap2-dev libsasl2-dev slapd ldap-utils
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "[deps] installing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# krb5-config (a dependency of krb5-user) copies a template with
# default_realm = ATHENA.MIT.EDU to /etc/krb5.conf when there is none
# (its postinst; the file is no conffile). Every krb5 program on the host,
# this build's included, reads /etc/krb5.conf unless KRB5_CONFIG says
# otherwise, so a host that had none keeps none; an existing one is left
# as it is.
had_krb5_conf=0
[ -e /etc/krb5.conf ] || [ -L /etc/krb5.conf ] && had_krb5_conf=1
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [ $had_krb5_conf -eq 0 ] && [ -f /etc/krb5.conf ] && [ ! -L /etc/krb5.conf ] \
   && grep -q '^[[:space:]]*default_realm = ATHENA.MIT.EDU' /etc/krb5.conf; then
  $SUDO rm -f /etc/krb5.conf
fi
echo "[deps] done"
