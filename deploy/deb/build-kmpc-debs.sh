#!/usr/bin/env bash
# kmpc's own Debian packages (deploy/debian): kmpc-mpc-server, kmpc-kdc,
# kmpc-admin, built with dpkg-buildpackage against the kmpc build of
# Debian's krb5 (the packages build-krb5-debs.sh made in OUT_DIR).
#
#   build-kmpc-debs.sh BUILD_DIR OUT_DIR
#
# KMPC_DEB_VERSION: build this version (a changelog entry above
# deploy/debian/changelog's; default: that file's version). On Debian 12
# the version takes "~deb12" (as the kmpc krb5 packages' backport does):
# the Debian 13 build of the same version sorts above it, so a dist-upgrade
# moves kmpc's packages to trixie's with the krb5 ones. The source
# tree is staged in BUILD_DIR/deb/kmpc/src (this checkout's tracked and
# new files, timestamps kept) and CMake builds in BUILD_DIR/deb/kmpc/obj,
# kept between runs: a rebuild recompiles only what changed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(mkdir -p "$1" && cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
work=$build/deb/kmpc
src=$work/src
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
mkdir -p "$work"
# The kmpc krb5 packages to build against (KMPC_KRB5_DEBS, default OUT_DIR).
krb5dir=${KMPC_KRB5_DEBS:-$out}
log() { printf '[kmpc-deb] %s\n' "$*"; }

# The kmpc krb5 packages: their version, and their headers and libraries
# unpacked into a prefix (include/, lib/) for CMake's KRB5_PREFIX.
krb5_dev() {
  local dev ver r=$work/krb5-dev-root pfx=$work/krb5-prefix f
  dev=$(ls -t "$krb5dir"/krb5-multidev_*+kmpc*.deb 2>/dev/null | head -n1 || true)
  [ -n "$dev" ] || { echo "error: no kmpc krb5-multidev package in $krb5dir (make deb builds it)" >&2; exit 1; }
  ver=$(dpkg-deb -f "$dev" Version)
  rm -rf "$r" "$pfx"; mkdir -p "$r" "$pfx/lib"
  # (libgssrpc4 and libkdb5-10 are libgssrpc4t64 and libkdb5-10t64 in the
  # Debian 13 build: trixie's 64-bit time_t renames.)
  local arch deb
  arch=$(dpkg --print-architecture)
  for p in krb5-multidev libkrb5-dev libkrb5-3 libk5crypto3 libkrb5support0 libgssapi-krb5-2 \
           libgssrpc4 libkadm5srv-mit12 libkadm5clnt-mit12 libkdb5-10; do
    deb=$krb5dir/${p}_${ver}_$arch.deb
    [ -f "$deb" ] || deb=$krb5dir/${p}t64_${ver}_$arch.deb
    dpkg-deb -x "$deb" "$r"
  done
  ln -s "$r/usr/include/mit-krb5" "$pfx/include"
  for f in "$r/usr/lib/$ma/mit-krb5"/*.so; do ln -s "$f" "$pfx/lib/"; done
  # verto and com_err are Debian's own (libverto-dev, comerr-dev), as for
  # Debian's build of krb5 (--with-system-verto --with-system-et).
  for f in libverto.so libcom_err.so; do
    [ -e "/usr/lib/$ma/$f" ] || { echo "error: /usr/lib/$ma/$f missing (deploy/install-deps.sh)" >&2; exit 1; }
    ln -sfn "/usr/lib/$ma/$f" "$pfx/lib/$f"
  done
  KRB5_VER=$ver KRB5_ROOT=$r KRB5_PFX=$pfx
}

stage_source() {
  # Tracked and untracked-but-not-ignored files with their timestamps (tar
  # keeps mtimes), so the kept CMake tree sees only real changes;
  # deploy/debian too (CMake's install rules install its examples).
  rm -rf "$src"; mkdir -p "$src"
  (cd "$root" && git ls-files -co --exclude-standard -z |
     tar --null -T - -cf -) | tar -xf - -C "$src"
  cp -a "$root/deploy/debian" "$src/debian"
  local codename base want
  codename=$(. /etc/os-release; echo "$VERSION_CODENAME")
  base=$(dpkg-parsechangelog -l "$root/deploy/debian/changelog" -S Version)
  want=${KMPC_DEB_VERSION:-$base}
  if [ "$codename" = bookworm ] && [[ "$want" != *"~deb12" ]]; then want="$want~deb12"; fi
  if [ "$want" != "$base" ]; then
    { echo "kmpc ($want) $codename; urgency=medium"; echo
      echo "  * Build of $want for $codename."; echo
      echo " -- kmpc maintainers <kmpc@example.org>  $(date -R -u)"; echo
      cat "$root/deploy/debian/changelog"; } >"$src/debian/changelog"
  fi
}

krb5_dev
stage_source
ver=$(cd "$src" && dpkg-parsechangelog -S Version)
log "dpkg-buildpackage kmpc $ver against krb5 $KRB5_VER (log: $work/build.log)"
t0=$(date +%s)
ldflags="-Wl,-rpath-link=$KRB5_ROOT/usr/lib/$ma"
(cd "$src" && KMPC_KRB5_PREFIX=$KRB5_PFX KMPC_KRB5_VERSION=$KRB5_VER KMPC_DEB_OBJ=$work/obj \
   DEB_LDFLAGS_APPEND="$ldflags" DEB_BUILD_OPTIONS="nocheck parallel=${DEB_PARALLEL:-2}" \
   nice -n 10 dpkg-buildpackage -b -uc -us >"$work/build.log" 2>&1) || {
  tail -n 60 "$work/build.log" >&2; echo "error: kmpc package build failed" >&2; exit 1; }
for p in kmpc-mpc-server kmpc-kdc kmpc-admin; do
  rm -f "$out/${p}"_*.deb "$out/${p}-dbgsym"_*.deb
  mv "$work/${p}_${ver}_"*.deb "$out/"
  mv "$work/${p}-dbgsym_${ver}_"*.deb "$out/" 2>/dev/null || true
done
rm -f "$work"/kmpc_*.buildinfo "$work"/kmpc_*.changes
log "kmpc $ver packages in $out ($(( $(date +%s) - t0 )) s)"
