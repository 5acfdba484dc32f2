#!/usr/bin/env bash
# Debian binary packages of the patched krb5: Debian 13's krb5 1.21.3
# source package (the revision krb5-patches/build-krb5.sh pins and builds
# from) with krb5-patches/series appended to its quilt series
# (debian/patches/kmpc/), for the release this runs on (a Debian 12 or a
# Debian 13 root: /etc/os-release), with a changelog entry above Debian's
# version:
#
#   Debian 13 (trixie)    1.21.3-5+deb13u1+kmpcN
#   Debian 12 (bookworm)  1.21.3-5+deb13u1+kmpcN~deb12
#
# "+kmpcN" sorts above Debian's build of the same source, so apt prefers
# kmpc's and a later +kmpcN+1 upgrades it; "~deb12" (Debian's backports
# convention, as ~bpo12+1) sorts the Debian 12 build below the Debian 13
# build of the same N, so a 12 -> 13 dist-upgrade moves to kmpc's trixie
# packages, and above Debian 13's own krb5 and bookworm's 1.20.1 (and the
# 1.20.1-based kmpc packages, 1.20.1-2+deb12uM+kmpcN).
#
# On Debian 12 the source is backported: its 64-bit time_t renames are
# reverted (libgssrpc4t64, libkdb5-10t64 -> libgssrpc4, libkdb5-10, as
# bookworm names them; amd64's time_t is 64 bits either way, and Debian's
# wiki asks backports to revert the renames) and the build dependency
# dpkg-dev (>= 1.22.5), which exists for the ${t64:Provides} substitution
# only, is dropped; nothing else of Debian's packaging changes.
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
upstream_version=1.21.3
# The pinned Debian revision: build-krb5.sh's, one place for both builds.
debian_version=$(sed -n 's/^debian_version=\${upstream_version}//p' "$patches/build-krb5.sh")
[ -n "$debian_version" ] || { echo "error: no debian_version in krb5-patches/build-krb5.sh" >&2; exit 1; }
debian_version=$upstream_version$debian_version
. /etc/os-release
case ${VERSION_CODENAME:-} in
  trixie) suffix=; dist=trixie;;
  bookworm) suffix="~deb12"; dist=bookworm;;
  *) echo "error: kmpc builds krb5 packages for Debian 12 or 13, not '${PRETTY_NAME:-?}'" >&2; exit 2;;
esac
aptdir=$build/apt
work=$build/deb/krb5-work

log() { printf '[krb5-deb] %s\n' "$*"; }
series_list() { awk '!/^#/ && NF {print $1}' "$patches/series"; }

case $rev in (''|*[!0-9]*) echo "error: KMPC_DEB_REV must be a number, not '$rev'" >&2; exit 2;; esac

# The same Debian source package as build-krb5.sh: reuse its download, else
# fetch it with a private apt state (the machine's apt set-up untouched).
fetch_dsc() {
  local dsc=$aptdir/dl/krb5_${debian_version}.dsc
  if [ ! -f "$dsc" ]; then
    mkdir -p "$aptdir"/{etc,state/lists/partial,cache/archives/partial,dl}
    printf 'deb-src http://deb.debian.org/debian %s main\n' \
      trixie trixie-updates >"$aptdir/etc/sources.list"
    local opts=(-o "Dir::Etc::SourceList=$aptdir/etc/sources.list"
                -o "Dir::Etc::SourceParts=/dev/null"
                -o "Dir::State=$aptdir/state" -o "Dir::Cache=$aptdir/cache"
                -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root" -qq)
    apt-get "${opts[@]}" update
    (cd "$aptdir/dl" && apt-get "${opts[@]}" source --download-only "krb5=$debian_version") || true
  fi
  [ -f "$dsc" ] || { echo "error: Debian no longer serves the krb5 $debian_version source" \
    "package (deb-src trixie, trixie-updates): see krb5-patches/build-krb5.sh" >&2; exit 1; }
  echo "$dsc"
}

stamp_of() {
  (echo "rev=$rev dist=$dist"; cat "$here/build-krb5-debs.sh" "$patches/series"
   for p in $(series_list); do cat "$patches/$p"; done) | sha256sum | cut -c1-64
}

# Debian 13's packaging as Debian 12 names it (see the top of this file).
backport_tree() {
  local tree=$1 lib f
  for lib in libgssrpc4 libkdb5-10; do
    for f in "$tree"/debian/${lib}t64.*; do
      case $f in (*.lintian-overrides) rm -f "$f";; (*) mv "$f" "${f/${lib}t64/$lib}";; esac
    done
  done
  sed -i -e 's/\b\(libgssrpc4\|libkdb5-10\|libverto-libev1\|libverto-libevent1\)t64\b/\1/g' \
    "$tree/debian/control" "$tree/debian/rules" "$tree"/debian/*.symbols
  # The renamed stanzas' own Provides/Replaces/Breaks of their old names.
  sed -i -e '/^Provides: ${t64:Provides}$/d' -e '/^Replaces: \(libgssrpc4\|libkdb5-10\)$/d' \
    -e '/^Breaks: libgssrpc4 (<< ${source:Version})$/d' \
    -e 's/dpkg-dev (>= 1\.22\.5)/dpkg-dev/' "$tree/debian/control"
  if grep -n 't64' "$tree/debian/control" "$tree/debian/rules"; then
    echo "error: debian/: a 64-bit time_t rename left after the backport" >&2; exit 1
  fi
}

# Appends the kmpc series to Debian's quilt series and the changelog entry.
prepare_tree() {
  local dsc=$1 tree=$2 debver=$3 ver=$4
  rm -rf "$tree"
  dpkg-source --no-check --skip-patches -x "$dsc" "$tree" >/dev/null
  [ "$dist" = bookworm ] && backport_tree "$tree"
  # Every package kmpc's packages link or load gets a "<package>-kmpc"
  # name only this build provides (without trixie's "t64": one name on
  # both releases): a later Debian krb5 (a security update sorts above
  # +kmpcN) does not satisfy kmpc-kdc or kmpc-admin.
  python3 - "$tree/debian/control" <<'PY'
import re, sys
path = sys.argv[1]
stanzas = open(path).read().split("\n\n")
wanted = {"libkrb5-3", "libk5crypto3", "libkdb5-10", "libkadm5srv-mit12", "krb5-kdc"}
for i, st in enumerate(stanzas):
    m = re.match(r"Package: (\S+)$", st, flags=re.M)
    name = m.group(1) if m else ""
    if re.sub(r"t64$", "", name) not in wanted:
        continue
    ours = re.sub(r"t64$", "", name) + "-kmpc (= ${binary:Version})"
    if re.search(r"^Provides:", st, flags=re.M):
        st = re.sub(r"^(Provides:.*)$", lambda p: p.group(1) + ", " + ours, st, count=1, flags=re.M)
    else:
        st = st.replace(m.group(0), m.group(0) + "\nProvides: " + ours, 1)
    stanzas[i] = st
open(path, "w").write("\n\n".join(stanzas))
PY
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
    echo "krb5 ($ver) $dist; urgency=medium"
    echo
    echo "  * kmpc: long-term keys in an MPC cluster (krb5-patches/series of kmpc,"
    echo "    $(series_list | wc -l) patches in debian/patches/kmpc, on Debian's $debver)."
    [ "$dist" = bookworm ] && echo "  * Backport to Debian 12: the 64-bit time_t package renames reverted."
    echo
    echo " -- kmpc build <kmpc@example.org>  $(date -R -u -d @"${SOURCE_DATE_EPOCH:-$(date +%s)}")"
    echo
    cat "$tree/debian/changelog"
  } >"$entry"
  mv "$entry" "$tree/debian/changelog"
  # Every patch must apply: quilt stops at the first that does not.
  (cd "$tree" && QUILT_PATCHES=debian/patches quilt push -aq >/dev/null) || {
    echo "error: the quilt series (Debian's + kmpc's) does not apply" >&2; exit 1; }
  # Since the first kmpc revision of this Debian version, "~" postfixed
  # (lintian: no current Debian revision in a symbols file), below both
  # releases' packages (...+kmpcN, ...+kmpcN~deb12).
  add_symbols "$tree/debian/libkrb5-3.symbols" "$debver+kmpc$rev~" krb5_mpc_set_ticket_decrypt
}

# The functions the kmpc series adds to a library's exports, in its
# Debian symbols file (dpkg-gensymbols fails the build on a new symbol the
# file does not list), since version $2 of the package.
add_symbols() {
  local file=$1 since=$2 sym
  shift 2
  [ -f "$file" ] || { echo "error: $file missing from Debian's packaging" >&2; exit 1; }
  for sym in "$@"; do
    grep -q "^ $sym@" "$file" ||
      printf ' %s@krb5_3_MIT %s\n' "$sym" "$since" >>"$file"
  done
}

dsc=$(fetch_dsc)
debver=$(basename "$dsc" .dsc | sed 's/^krb5_//')
ver="$debver+kmpc$rev$suffix"
want=$(stamp_of)
if [ "$(cat "$out/.krb5-debs.stamp" 2>/dev/null)" = "$want" ] &&
   ls "$out"/krb5-kdc_"$ver"_*.deb >/dev/null 2>&1; then
  log "krb5 $ver packages up to date in $out"; exit 0
fi
mkdir -p "$work"
tree=$work/krb5-$upstream_version
prepare_tree "$dsc" "$tree" "$debver" "$ver"
log "build dependencies of krb5 $ver (apt-get build-dep --arch-only on the prepared tree)"
# (apt's lists may be missing or stale on a machine whose deps were all
# installed earlier: update once and retry.)
build_dep() { DEBIAN_FRONTEND=noninteractive apt-get build-dep -y -qq --arch-only "$tree" >/dev/null; }
build_dep || { apt-get update -qq && build_dep; }
log "dpkg-buildpackage -B krb5 $ver (log: $work/build.log)"
t0=$(date +%s)
(cd "$tree" && DEB_BUILD_OPTIONS="nocheck nodoc parallel=${DEB_PARALLEL:-2}" \
   nice -n 10 dpkg-buildpackage -B -uc -us >"$work/build.log" 2>&1) || {
  tail -n 60 "$work/build.log" >&2; echo "error: krb5 package build failed" >&2; exit 1; }
rm -f "$out"/*_*+kmpc*.deb  # every earlier kmpc krb5 build (kmpc's own carry no +kmpc)
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
