#!/usr/bin/env bash
# make deb DIST=trixie: make-deb.sh run inside a Debian root of that release
# (a chroot made with debootstrap in BUILD_DIR/DIST/buildroot and kept), so
# that the krb5 packages and kmpc's own are built with that release's
# compiler, abseil, gRPC and protobuf; the packages land in
# BUILD_DIR/DIST/deb. The host's release is built by make-deb.sh directly.
#
#   make-deb-dist.sh DIST BUILD_DIR
#
# KMPC_DEB_NEXT=VERSION: only kmpc's own packages again, as VERSION, into
# BUILD_DIR/DIST/deb/next (integration-tests/test_packages.py's upgrade).
#
# /work-style paths stay the same inside: the root bind-mounts the
# checkout's top directory (and git's, for a worktree) at the same paths.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root_dir=$(cd "$here/../.." && pwd)
dist=$1
build=$(mkdir -p "$2" && cd "$2" && pwd)
case $dist in (trixie|bookworm) ;; (*) echo "error: DIST is trixie or bookworm, not '$dist'" >&2; exit 2;; esac
mirror=${KMPC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
broot=$build/$dist/buildroot
log() { printf '[deb-%s] %s\n' "$dist" "$*"; }

# (debootstrap removes the root's debootstrap/ when it succeeded.)
if [ ! -x "$broot/usr/bin/apt-get" ] || [ -d "$broot/debootstrap" ]; then
  log "debootstrap --variant=buildd $dist into $broot"
  rm -rf "$broot"; mkdir -p "$(dirname "$broot")"
  debootstrap --variant=buildd --include=ca-certificates "$dist" "$broot" "$mirror" \
    >"$build/$dist/debootstrap.log" 2>&1 || {
    tail -n 30 "$build/$dist/debootstrap.log" >&2; echo "error: debootstrap failed" >&2; exit 1; }
fi

# The mounts go when this script ends, whatever happens.
mounts=()
cleanup() {
  local i
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind HOST_DIR: the same path inside the root
  mkdir -p "$broot$1"
  mount --bind "$1" "$broot$1"; mounts+=("$broot$1")
}
mount -t proc proc "$broot/proc"; mounts+=("$broot/proc")
bind /dev
bind "$root_dir"
gitdir=$(git -C "$root_dir" rev-parse --git-common-dir)
gitdir=$(cd "$root_dir" && cd "$gitdir" && pwd)
case $gitdir in ("$root_dir"/*) ;; (*) bind "$gitdir";; esac
cp /etc/resolv.conf "$broot/etc/resolv.conf" 2>/dev/null || true
in_root() { chroot "$broot" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  DEBIAN_FRONTEND=noninteractive "$@"; }

# Redone when deploy/debian/control changes (a new build dependency).
ready=$(sha256sum "$root_dir/deploy/debian/control" | cut -d' ' -f1)
if [ "$(cat "$broot/.kmpc-ready" 2>/dev/null)" != "$ready" ]; then
  log "the root's build tools and kmpc's build dependencies (deploy/debian/control)"
  # No daemons start inside (Debian Policy 9.3.3.1).
  printf '#!/bin/sh\nexit 101\n' >"$broot/usr/sbin/policy-rc.d"; chmod 755 "$broot/usr/sbin/policy-rc.d"
  echo "deb $mirror $dist main" >"$broot/etc/apt/sources.list"
  in_root apt-get update -qq
  in_root apt-get install -y -qq --no-install-recommends quilt lintian fakeroot debhelper git \
    python3 dpkg-dev >/dev/null
  in_root apt-get build-dep -y -qq "$root_dir/deploy" >/dev/null 2>&1 || {
    # apt-get build-dep wants a directory holding debian/control.
    tmp=$broot/tmp/kmpc-control; rm -rf "$tmp"; mkdir -p "$tmp/debian"
    cp "$root_dir/deploy/debian/control" "$tmp/debian/"
    in_root apt-get build-dep -y -qq /tmp/kmpc-control >/dev/null; }
  echo "$ready" >"$broot/.kmpc-ready"
fi
git config --file "$broot/root/.gitconfig" --replace-all safe.directory '*' || true

# Debian 13's krb5 source package: build-krb5.sh's download when there is one.
mkdir -p "$build/$dist/apt/dl"
for f in "$build"/apt/dl/krb5_*; do
  [ -e "$f" ] && [ ! -e "$build/$dist/apt/dl/$(basename "$f")" ] && cp -p "$f" "$build/$dist/apt/dl/"
done
if [ -n "${KMPC_DEB_NEXT:-}" ]; then
  # integration-tests/test_packages.py's newer kmpc packages (the upgrade).
  log "kmpc $KMPC_DEB_NEXT inside the $dist root (in $build/$dist/deb/next)"
  in_root env KMPC_DEB_VERSION="$KMPC_DEB_NEXT" KMPC_KRB5_DEBS="$build/$dist/deb" \
    bash "$root_dir/deploy/deb/build-kmpc-debs.sh" "$build/$dist" "$build/$dist/deb/next"
  exit 0
fi
log "make-deb.sh inside the $dist root (packages in $build/$dist/deb)"
in_root bash "$root_dir/deploy/deb/make-deb.sh" "$build/$dist"
