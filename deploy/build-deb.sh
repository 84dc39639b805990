#!/usr/bin/env bash
# Builds the Debian package target/debian/jetsink_<version>_<arch>.deb with dpkg-deb from a
# staged tree: nothing to install beyond dpkg-dev's dpkg-shlibdeps and binutils' strip,
# which a machine that builds jetsink has. What goes where:
#
#   /usr/bin/jetsink                       the binary (stripped copy)
#   /lib/systemd/system/jetsink.service    deploy/jetsink.service, binary path /usr/bin
#   /etc/jetsink/jetsink.json              config/quickstart.json, a conffile
#   /usr/lib/sysusers.d/jetsink.conf       the jetsink system user and group
#   /usr/lib/tmpfiles.d/jetsink.conf       /var/lib/jetsink, 0750 jetsink:jetsink
#   /usr/share/doc/jetsink/                copyright, changelog.gz, README and the
#                                          configuration and operations guides
#   /usr/share/lintian/overrides/jetsink   the lintian tags tolerated, each with its reason
#
# The maintainer scripts are deploy/debian/{postinst,prerm,postrm}: they never enable or
# start the service (see deploy/README.md, "Debian package"). tests/deb.rs checks the
# package: contents, modes, scripts, lintian, and an install, remove and purge in a
# scratch root.
#
# usage: deploy/build-deb.sh [--binary PATH] [--out DIR] [--compress xz|gzip|zstd|none]
#   --binary PATH  package this binary instead of building target/release/jetsink
#   --out DIR      where the .deb goes (default target/debian)
#   --compress     dpkg-deb's compressor (default xz, Debian's; the test uses gzip, as
#                  xz takes a minute on the 60 MB stripped debug binary)
# env:   DEB_MAINTAINER  the Maintainer field (default "jetsink <dev@jetsink.invalid>")
#        SOURCE_DATE_EPOCH  file dates and the changelog's (default: the last commit's)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

binary=""
compress=xz
out="${CARGO_TARGET_DIR:-$repo/target}/debian"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=${2:?--binary needs a path}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --compress) compress=${2:?--compress needs xz, gzip, zstd or none}; shift 2 ;;
    *) echo "build-deb.sh: unknown argument $1 (usage: build-deb.sh [--binary PATH] [--out DIR] [--compress xz|gzip|zstd|none])" >&2; exit 2 ;;
  esac
done

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
license=$(sed -n 's/^license = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
maintainer=${DEB_MAINTAINER:-jetsink <dev@jetsink.invalid>}
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

if [ -z "$binary" ]; then
  cargo build --release --locked
  binary="${CARGO_TARGET_DIR:-$repo/target}/release/jetsink"
fi
[ -x "$binary" ] || { echo "build-deb.sh: no executable at $binary" >&2; exit 2; }

mkdir -p "$out"
stage=$(mktemp -d "$out/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/jetsink" \
  "$root/usr/lib/sysusers.d" "$root/usr/lib/tmpfiles.d" "$root/usr/share/doc/jetsink" \
  "$root/usr/share/lintian/overrides"

# A stripped copy, as dh_strip leaves it (the release profile already strips; a debug
# binary given with --binary is stripped here).
install -m 0755 "$binary" "$root/usr/bin/jetsink"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/jetsink"

# The unit as it is in the tree; only the binary's path changes, to where a package puts it
# (Debian packages never install into /usr/local).
sed 's#/usr/local/bin/jetsink#/usr/bin/jetsink#g' deploy/jetsink.service >"$root/lib/systemd/system/jetsink.service"
chmod 0644 "$root/lib/systemd/system/jetsink.service"
if grep -q /usr/local "$root/lib/systemd/system/jetsink.service"; then
  echo "build-deb.sh: deploy/jetsink.service still names /usr/local after the rewrite" >&2
  exit 1
fi

install -m 0644 config/quickstart.json "$root/etc/jetsink/jetsink.json"
install -m 0644 deploy/debian/jetsink.sysusers "$root/usr/lib/sysusers.d/jetsink.conf"
install -m 0644 deploy/debian/jetsink.tmpfiles "$root/usr/lib/tmpfiles.d/jetsink.conf"
install -m 0644 deploy/debian/jetsink.lintian-overrides "$root/usr/share/lintian/overrides/jetsink"
for script in postinst prerm postrm; do
  install -m 0755 "deploy/debian/$script" "$root/DEBIAN/$script"
done
echo /etc/jetsink/jetsink.json >"$root/DEBIAN/conffiles"
chmod 0644 "$root/DEBIAN/conffiles"

# copyright in the machine-readable format; the license text itself is in
# /usr/share/common-licenses, where Debian keeps Apache-2.0.
cat >"$root/usr/share/doc/jetsink/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: jetsink

Files: *
Copyright: $(date -u -d "@$SOURCE_DATE_EPOCH" +%Y) jetsink authors
License: $license
 On Debian systems, the full text of the Apache License, Version 2.0 can be found
 in the file /usr/share/common-licenses/Apache-2.0.
EOF
chmod 0644 "$root/usr/share/doc/jetsink/copyright"

# A native package's changelog, one entry for this version.
changelog_date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
cat >"$stage/changelog" <<EOF
jetsink ($version) unstable; urgency=medium

  * Package built by deploy/build-deb.sh from the jetsink source tree.

 -- $maintainer  $changelog_date
EOF
gzip -9nc "$stage/changelog" >"$root/usr/share/doc/jetsink/changelog.gz"
chmod 0644 "$root/usr/share/doc/jetsink/changelog.gz"

# The operator's documentation, compressed as Debian policy asks for files over 4 kB.
for doc in README.md docs/configuration.md docs/operations.md; do
  gzip -9nc "$doc" >"$root/usr/share/doc/jetsink/$(basename "$doc").gz"
  chmod 0644 "$root/usr/share/doc/jetsink/$(basename "$doc").gz"
done

# The shared libraries' packages, as dpkg-shlibdeps finds them (it wants a debian/control
# in the directory it runs in).
mkdir -p "$stage/src/debian"
printf 'Source: jetsink\n\nPackage: jetsink\nArchitecture: any\n' >"$stage/src/debian/control"
shlibs=$(cd "$stage/src" && dpkg-shlibdeps -O -e "$root/usr/bin/jetsink" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "build-deb.sh: dpkg-shlibdeps found no libraries for $binary" >&2; exit 1; }

installed_size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat >"$root/DEBIAN/control" <<EOF
Package: jetsink
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $shlibs, systemd | systemd-sysusers | systemd-standalone-sysusers
Suggests: nats-server
Section: net
Priority: optional
Description: NATS JetStream to durable destinations, acknowledging after commit
 jetsink reads NATS JetStream streams through durable pull consumers and
 writes each batch into a destination (SQLite, files, PostgreSQL, MySQL, S3,
 HTTP, NATS, a command), acknowledging the messages only after the destination
 committed them.
 .
 The package installs the daemon, a hardened systemd unit (not enabled: edit
 /etc/jetsink/jetsink.json, then systemctl enable --now jetsink), the jetsink
 system user and the state directory /var/lib/jetsink.
EOF
chmod 0644 "$root/DEBIAN/control"

(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
  | xargs -0 md5sum >DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/md5sums"

# Same dates everywhere, so the same inputs give the same package.
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
deb="$out/jetsink_${version}_${arch}.deb"
dpkg-deb --root-owner-group "-Z$compress" --build "$root" "$deb" >/dev/null
echo "$deb"
