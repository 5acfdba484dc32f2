#!/usr/bin/env bash
# Fetch Debian 13's krb5 1.21.3 source package (one pinned revision), apply
# Debian's patch series and then ours (krb5-patches/series), build and
# install into a private prefix.
#
#   build-krb5.sh BUILD_DIR
#
# Nothing outside BUILD_DIR is written: apt-get runs with its own sources
# list, state and cache directories, so the machine's apt set-up is untouched.
# Re-running it rebuilds only what changed: the source tree is a git
# repository whose "debian" tag is the pristine Debian tree; when the patch
# series changes, the tree is reset to that tag and the series re-applied,
# which rewrites only the files the patches touch, and make does the rest.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=$(mkdir -p "$1" && cd "$1" && pwd)
upstream_version=1.21.3
# The Debian revision the series is made against: trixie's point release
# (trixie-updates serves it too).  Pinned, so that a new revision is taken
# on purpose (re-run check-series.py and MIT's tests on it), never by chance;
# trixie-security is not listed: its newer revision's debian tarball was not
# served (404) when the series moved here.
debian_version=${upstream_version}-5+deb13u1
src_root=$build/krb5-src           # dpkg-source tree (git repo)
prefix=$build/krb5                 # private install prefix
objdir=$build/krb5-obj             # out-of-tree build directory
aptdir=$build/apt
jobs=${JOBS:-$(nproc)}

# One build at a time per build directory: concurrent runs would reset the
# tree under each other and race on configure's outputs.
exec 9>"$build/.krb5.lock"
if ! flock -n 9; then
  printf '[krb5] waiting for another build in %s to finish\n' "$build"
  flock 9
fi

log() { printf '[krb5] %s\n' "$*"; }
series_list() { awk '!/^#/ && NF {print $1}' "$here/series"; }

fetch_source() {
  mkdir -p "$aptdir"/{etc,state/lists/partial,cache/archives/partial,dl}
  cat >"$aptdir/etc/sources.list" <<SRC
deb-src http://deb.debian.org/debian trixie main
deb-src http://deb.debian.org/debian trixie-updates main
SRC
  local opts=(-o "Dir::Etc::SourceList=$aptdir/etc/sources.list"
              -o "Dir::Etc::SourceParts=/dev/null"
              -o "Dir::State=$aptdir/state" -o "Dir::Cache=$aptdir/cache"
              -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root" -qq)
  log "fetching Debian krb5 $debian_version source package (private apt state in $aptdir)"
  apt-get "${opts[@]}" update
  local dsc=$aptdir/dl/krb5_${debian_version}.dsc
  if ! (cd "$aptdir/dl" && rm -rf ./* &&
        apt-get "${opts[@]}" source --download-only "krb5=$debian_version") ||
     [ ! -f "$dsc" ]; then
    {
      echo "error: Debian no longer serves the krb5 $debian_version source package"
      echo "  (deb-src trixie, trixie-updates; now served:" \
        "$(apt-cache "${opts[@]}" showsrc krb5 2>/dev/null |
           awk '/^Version:/ {printf "%s%s", sep, $2; sep = " "}'))."
      echo "  kmpc's series is made against $debian_version: move it to a served"
      echo "  revision (debian_version in krb5-patches/build-krb5.sh), then run"
      echo "  'make krb5-series' and MIT's tests (docs/krb5-patches.md)."
    } >&2
    exit 1
  fi
  log "unpacking $(basename "$dsc") with Debian's patch series"
  rm -rf "$src_root.tmp"
  dpkg-source --no-check -x "$dsc" "$src_root.tmp" >/dev/null
  (cd "$src_root.tmp" &&
    git init -q && git config user.email kmpc@localhost && git config user.name kmpc-build &&
    git add -A && git commit -qm "Debian krb5 $(basename "$dsc" .dsc)" && git tag debian)
  mv "$src_root.tmp" "$src_root"
}

# MIT's make knows a source's headers from the committed `deps` files, which
# name none of the headers the series adds (kdcmpc_plugin.h, kdc_mpc.h, ...):
# after a series change that edits such a header, every source including it
# is touched, so that make rebuilds it instead of linking objects compiled
# against the old declarations (a struct of another size).
touch_includers() {
  local h base names="" more
  for h in $(git -C "$src_root" diff --name-only "$1" "$2" -- '*.h'); do
    base=$(basename "$h")
    grep -rqs --include=deps -F "/$base" "$src_root/src" && continue
    names="$names $base"
  done
  [ -n "$names" ] || return 0
  # Headers including one of them (kdc_mpc.h includes kdcmpc_plugin.h), to
  # a fixed point; then every source including any of them.
  while :; do
    more=$(cd "$src_root" && for base in $names; do
             grep -rlsF --include='*.h' "$base" src; done |
           xargs -r -n1 basename | sort -u | grep -vxF -f <(printf '%s\n' $names) || true)
    [ -n "$more" ] || break
    names="$names $more"
  done
  (cd "$src_root" && for base in $names; do grep -rlsF --include='*.c' "$base" src; done |
     sort -u | xargs -r touch)
}

apply_series() {
  local want have
  want=$( (cat "$here/series"; for p in $(series_list); do cat "$here/$p"; done) |
           sha256sum | cut -c1-64)
  have=$(cat "$build/.krb5-series" 2>/dev/null || true)
  [ "$want" = "$have" ] && return 0
  log "applying krb5-patches/series"
  # The series is applied in a scratch worktree, and the source tree then
  # checks out the result on a branch of its own ("series-applied"): git
  # rewrites only the files that differ from what the tree holds, so make
  # rebuilds only what a change of the series touches.  The branch that
  # krb5-patches/ is exported from ("kmpc", made here from the applied
  # series when it does not exist yet) is never reset.
  local scratch=$build/krb5-series-apply head
  git -C "$src_root" worktree remove --force "$scratch" >/dev/null 2>&1 || rm -rf "$scratch"
  git -C "$src_root" worktree prune
  git -C "$src_root" worktree add -q --detach "$scratch" refs/tags/debian
  for p in $(series_list); do
    log "  $p"
    (cd "$scratch" && git am -q --keep-cr "$here/$p") || {
      echo "error: patch $p does not apply" >&2; exit 1; }
  done
  head=$(git -C "$scratch" rev-parse HEAD)
  git -C "$src_root" worktree remove --force "$scratch"
  local prev
  prev=$(git -C "$src_root" rev-parse -q --verify series-applied || true)
  (cd "$src_root" &&
    git am --abort >/dev/null 2>&1 || true
    git checkout -q -f -B series-applied "$head")
  [ -n "$prev" ] && touch_includers "$prev" "$head"
  if ! git -C "$src_root" rev-parse -q --verify refs/heads/kmpc >/dev/null; then
    git -C "$src_root" branch kmpc series-applied
  elif [ "$(git -C "$src_root" rev-parse 'kmpc^{tree}')" != \
         "$(git -C "$src_root" rev-parse 'series-applied^{tree}')" ]; then
    log "note: branch kmpc of $src_root differs from krb5-patches/:"
    log "  export it with 'make krb5-series', or drop it with"
    log "  'git -C $src_root branch -f kmpc series-applied'"
  fi
  echo "$want" >"$build/.krb5-series"
  rm -f "$build/.krb5-configured"
}

configure_tree() {
  # Reconfigure only when configure.ac or our options changed.
  local opts="--prefix=$prefix --with-crypto-impl=builtin \
--with-ldap --disable-nls --without-keyutils --with-lmdb=no \
--without-system-verto --enable-shared --disable-static"
  local key
  key=$(printf '%s\n' "$opts" | cat - "$src_root/src/configure.ac" | sha256sum | cut -c1-64)
  if [ "$(cat "$build/.krb5-configured" 2>/dev/null)" = "$key" ] && [ -f "$objdir/Makefile" ]; then
    return 0
  fi
  log "configuring (prefix $prefix)"
  if [ ! -x "$src_root/src/configure" ] || [ "$src_root/src/configure.ac" -nt "$src_root/src/configure" ]; then
    (cd "$src_root/src" && autoreconf -fi >"$build/krb5-autoreconf.log" 2>&1) || {
      tail -n 20 "$build/krb5-autoreconf.log" >&2; exit 1; }
  fi
  mkdir -p "$objdir"
  # RUNPATH (new dtags) to the private lib dir: binaries and libraries load
  # the patched libraries, never the system's.
  (cd "$objdir" && CFLAGS="-O2 -g" LDFLAGS="-Wl,--enable-new-dtags" \
     "$src_root/src/configure" $opts >"$build/krb5-configure.log" 2>&1) || {
    tail -n 40 "$build/krb5-configure.log" >&2; exit 1; }
  echo "$key" >"$build/.krb5-configured"
}

sync_tree() {
  local from=$1 to=$2 f s d
  (cd "$from" && find . \( -type f -o -type l \) -print0) |
  while IFS= read -r -d '' f; do
    s=$from/$f; d=$to/$f
    if [ -L "$s" ]; then
      [ -L "$d" ] && [ "$(readlink "$s")" = "$(readlink "$d")" ] && continue
      mkdir -p "$(dirname "$d")"; ln -sfn "$(readlink "$s")" "$d"
    else
      [ -f "$d" ] && [ ! -L "$d" ] && cmp -s "$s" "$d" && continue
      mkdir -p "$(dirname "$d")"; cp -p "$s" "$d.kmpc-new" && mv -f "$d.kmpc-new" "$d"
    fi
  done
}

# A source tree of another Debian revision (an earlier base of the series)
# is moved aside, with any branch edited in it, and the pinned one fetched.
if [ -d "$src_root/.git" ] &&
   [ "$(git -C "$src_root" log -1 --format=%s refs/tags/debian 2>/dev/null)" != \
     "Debian krb5 krb5_$debian_version" ]; then
  old=$src_root.$(date +%Y%m%d%H%M%S)
  log "$src_root is not Debian krb5 $debian_version: moved to $old"
  mv "$src_root" "$old"
  rm -rf "$objdir" "$build/.krb5-series" "$build/.krb5-configured"
fi
[ -d "$src_root/.git" ] || fetch_source
apply_series
configure_tree
log "building (make -j$jobs; log in $build/krb5-make.log)"
(cd "$objdir" && make -j"$jobs" >"$build/krb5-make.log" 2>&1 &&
  rm -rf "$build/krb5-stage" &&
  make install DESTDIR="$build/krb5-stage" >>"$build/krb5-make.log" 2>&1) || {
  tail -n 60 "$build/krb5-make.log" >&2; exit 1; }
# Debian's krb5-config.in (debian/patches) names Debian's multiarch layout,
# include/mit-krb5 and lib/<triplet>/mit-krb5; this prefix installs into
# include/ and lib/, so krb5-config --cflags/--libs must name those.
sed -i -e "s#^includedir=.*#includedir=$prefix/include#" \
  -e "s#^libdir=.*#libdir=$prefix/lib#" "$build/krb5-stage$prefix/bin/krb5-config"
# MIT's install rules rewrite every library and header; copying from a
# staging tree only what differs keeps the prefix's timestamps stable, so the
# C/C++ parts built against it are not rebuilt for nothing. Files are
# replaced by rename, so a running daemon keeps its mapped copy.
sync_tree "$build/krb5-stage$prefix" "$prefix"
log "installed into $prefix"
