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
  libabsl-dev libssl-dev libsodium-dev liblmdb-dev libgtest-dev libgmock-dev
  prometheus-cpp-dev  # HTTP /metrics of the servers and the KDC module
  # tests, demo and benchmarks
  python3 python3-pytest python3-cryptography python3-matplotlib python3-grpcio
  openssl iproute2 procps
  gdb  # bench-soak: heap bytes in use (malloc_info) of each process
  systemd  # systemd-analyze verify of deploy/systemd/ (test_deploy.py)
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
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[deps] done"
