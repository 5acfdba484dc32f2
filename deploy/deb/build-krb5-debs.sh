#!/usr/bin/env bash
# Debian binary packages of the patched krb5: Debian's own krb5 1.20.1
# source package (the one krb5-patches/build-krb5.sh builds from) with
# krb5-patches/series appended to its quilt series (debian/patches/kmpc/)
# and a changelog entry "+kmpcN" above Debian's version, so apt prefers it
# to Debian's build of the same source and a later +kmpcN+1 upgrades it.
#
#   build-krb5-debs.sh BUILD_DIR OUT_DIR
#
# KMPC_DEB_REV (default 1) is N. Only the architecture-dependent packages
# are built (dpkg-buildpackage -B; the -doc and -locales packages of
# Debian's stay valid), with DEB_BUILD_OPTIONS nocheck nodoc parallel=2.
# Rebuilt only when the series, the patches or N change (a stamp in OUT_DIR);
# lintian checks each build.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
patches=$(cd "$here/../../krb5-patches" && pwd)
build=$(mkdir -p "$1" && cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
rev=${KMPC_DEB_REV:-1}
upstream_version=1.20.1
aptdir=$build/apt
work=$build/deb/krb5-work

log() { printf '[krb5-deb] %s\n' "$*"; }
series_list() { awk '!/^#/ && NF {print $1}' "$patches/series"; }

case $rev in (''|*[!0-9]*) echo "error: KMPC_DEB_REV must be a number, not '$rev'" >&2; exit 2;; esac

# The same Debian source package as build-krb5.sh: reuse its download, else
# fetch it with a private apt state (the machine's apt set-up untouched).
fetch_dsc() {
  local dsc
  dsc=$(ls "$aptdir"/dl/krb5_${upstream_version}-*.dsc 2>/dev/null | head -n1 || true)
  if [ -z "$dsc" ]; then
    mkdir -p "$aptdir"/{etc,state/lists/partial,cache/archives/partial,dl}
    printf 'deb-src http://deb.debian.org/debian %s main\n' \
      bookworm bookworm-updates >"$aptdir/etc/sources.list"
    echo 'deb-src http://deb.debian.org/debian-security bookworm-security main' \
      >>"$aptdir/etc/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$aptdir/etc/sources.list"
                -o "Dir::Etc::SourceParts=/dev/null"
                -o "Dir::State=$aptdir/state" -o "Dir::Cache=$aptdir/cache"
                -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root" -qq)
    apt-get "${opts[@]}" update
    (cd "$aptdir/dl" && apt-get "${opts[@]}" source --download-only krb5)
    dsc=$(ls "$aptdir"/dl/krb5_${upstream_version}-*.dsc 2>/dev/null | head -n1 || true)
  fi
  [ -n "$dsc" ] || { echo "error: no Debian krb5 $upstream_version source package" >&2; exit 1; }
  echo "$dsc"
}

stamp_of() {
  (echo "rev=$rev"; cat "$here/build-krb5-debs.sh" "$patches/series"
   for p in $(series_list); do cat "$patches/$p"; done) | sha256sum | cut -c1-64
}

# Appends the kmpc series to Debian's quilt series and the changelog entry.
prepare_tree() {
  local dsc=$1 tree=$2 debver=$3 ver=$4
  rm -rf "$tree"
  dpkg-source --no-check --skip-patches -x "$dsc" "$tree" >/dev/null
  # Every package kmpc's packages link or load gets a "<package>-kmpc"
  # name only this build provides: a later Debian krb5 (a security update
  # sorts above +kmpcN) does not satisfy kmpc-kdc or kmpc-admin.
  awk '{ print }
       /^Package: (libkrb5-3|libk5crypto3|libkdb5-10|libkadm5srv-mit12|krb5-kdc)$/ {
         print "Provides: " $2 "-kmpc (= ${binary:Version})" }' \
    "$tree/debian/control" >"$tree/debian/control.kmpc"
  mv "$tree/debian/control.kmpc" "$tree/debian/control"
  [ "$(grep -c -- '-kmpc (= ' "$tree/debian/control")" = 5 ] || {
    echo "error: debian/control: the -kmpc Provides were not added" >&2; exit 1; }
  mkdir -p "$tree/debian/patches/kmpc"
  for p in $(series_list); do
    cp "$patches/$p" "$tree/debian/patches/kmpc/$p"
    echo "kmpc/$p" >>"$tree/debian/patches/series"
  done
  local entry
  entry=$(mktemp)
  {
    echo "krb5 ($ver) bookworm; urgency=medium"
    echo
    echo "  * kmpc: long-term keys in an MPC cluster (krb5-patches/series of kmpc,"
    echo "    $(series_list | wc -l) patches in debian/patches/kmpc, on Debian's $debver)."
    echo
    echo " -- kmpc build <kmpc@example.org>  $(date -R -u -d @"${SOURCE_DATE_EPOCH:-$(date +%s)}")"
    echo
    cat "$tree/debian/changelog"
  } >"$entry"
  mv "$entry" "$tree/debian/changelog"
  # Every patch must apply: quilt stops at the first that does not.
  (cd "$tree" && QUILT_PATCHES=debian/patches quilt push -aq >/dev/null) || {
    echo "error: the quilt series (Debian's + kmpc's) does not apply" >&2; exit 1; }
}

dsc=$(fetch_dsc)
debver=$(basename "$dsc" .dsc | sed 's/^krb5_//')
ver="$debver+kmpc$rev"
want=$(stamp_of)
if [ "$(cat "$out/.krb5-debs.stamp" 2>/dev/null)" = "$want" ] &&
   ls "$out"/krb5-kdc_"$ver"_*.deb >/dev/null 2>&1; then
  log "krb5 $ver packages up to date in $out"; exit 0
fi
log "build dependencies of $(basename "$dsc") (apt-get build-dep --arch-only)"
# (apt's lists may be missing or stale on a machine whose deps were all
# installed earlier: update once and retry.)
build_dep() { DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq --arch-only "$dsc" >/dev/null; }
build_dep || { apt-get update -qq && build_dep; }
mkdir -p "$work"
tree=$work/krb5-$upstream_version
prepare_tree "$dsc" "$tree" "$debver" "$ver"
log "dpkg-buildpackage -B krb5 $ver (log: $work/build.log)"
t0=$(date +%s)
(cd "$tree" && DEB_BUILD_OPTIONS="nocheck nodoc parallel=${DEB_PARALLEL:-2}" \
   nice -n 10 dpkg-buildpackage -B -uc -us >"$work/build.log" 2>&1) || {
  tail -n 60 "$work/build.log" >&2; echo "error: krb5 package build failed" >&2; exit 1; }
rm -f "$out"/*krb5*_"$debver"+kmpc*.deb "$out"/libk*_"$debver"+kmpc*.deb "$out"/libgss*_"$debver"+kmpc*.deb
for f in "$work"/*_"$ver"_*.deb; do mv "$f" "$out/"; done
rm -f "$work"/*.buildinfo "$work"/*.changes
# lintian once per build, report in krb5-lintian.txt. Errors fail the build
# except two tags that Debian's own 1.20.1-2+deb12u5 packages carry
# (lintian on Debian's krb5-kdc and krb5-kdc-ldap debs shows both):
# depends-on-obsolete-package (lsb-base) and library-not-linked-against-libc
# (kldap.so).
inherited='depends-on-obsolete-package|library-not-linked-against-libc'
debs=$(ls "$out"/*_"$ver"_*.deb | grep -v -- '-dbgsym_')
lintian --tag-display-limit 0 $debs >"$out/krb5-lintian.txt" 2>&1 || true
if grep '^E: ' "$out/krb5-lintian.txt" | grep -Ev "^E: [^:]+: ($inherited) " >&2; then
  echo "error: lintian found errors in the krb5 packages" >&2; exit 1
fi
echo "$want" >"$out/.krb5-debs.stamp"
log "built $(ls "$out"/*_"$ver"_*.deb | wc -l) packages in $(( $(date +%s) - t0 )) s"
