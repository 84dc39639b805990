#!/usr/bin/env bash
# Builds the jetsink container image from deploy/Containerfile with buildah, offline:
# the binary comes from this machine's `cargo build --release`, the base is `scratch`,
# and the shared libraries are the ones `ldd` lists for the binary, copied from this
# machine (the image carries its own glibc, so the host it later runs on does not matter).
# Then it runs `jetsink --version` and `jetsink validate` inside the image: with
# `podman run` where the machine can run OCI containers, otherwise with buildah's chroot
# isolation, which runs the command on exactly the image's filesystem (no namespaces).
#
# usage: deploy/build-image.sh [TAG]          (default localhost/jetsink:<version>)
# env:   JETSINK_BIN  use this binary instead of building target/release/jetsink
#        BUILDAH_STORAGE_DRIVER  (default: vfs, which works without overlay support)
#        SMOKE=0  skip the checks inside the image
# needs: cargo, ldd, buildah (Debian: apt-get install buildah; podman to run it)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
tag=${1:-localhost/jetsink:$version}

if [ -z "${JETSINK_BIN:-}" ]; then
  cargo build --release --locked
  JETSINK_BIN="${CARGO_TARGET_DIR:-$repo/target}/release/jetsink"
fi
[ -x "$JETSINK_BIN" ] || { echo "no binary at $JETSINK_BIN" >&2; exit 2; }

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
root="$context/rootfs"
mkdir -p "$root/usr/local/bin" "$root/etc/jetsink" "$root/etc/ssl/certs" "$context/state"
install -m 0755 "$JETSINK_BIN" "$root/usr/local/bin/jetsink"

# Exactly what the dynamic loader will ask for: every "=> /path" and the loader itself.
# cp -L stores the file a symlink points to under the name the binary asks for.
libs=$(ldd "$JETSINK_BIN" | awk '/=> \// {print $3} /^\s*\/[^ ]+ \(/ {print $1}')
if [ -z "$libs" ]; then
  echo "ldd lists no libraries: a static binary, nothing to copy"
fi
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
  echo "library: $lib"
done

# System roots for tls:// NATS URLs and database TLS (rustls-native-certs reads this file).
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
else
  echo "warning: no /etc/ssl/certs/ca-certificates.crt; TLS needs a ca_file in the config" >&2
fi
# Names for the unprivileged user, for tools that show them; jetsink does not need them.
printf 'root:x:0:0:root:/:/nonexistent\njetsink:x:65532:65532:jetsink:/var/lib/jetsink:/nonexistent\n' >"$root/etc/passwd"
printf 'root:x:0:\njetsink:x:65532:\n' >"$root/etc/group"

export STORAGE_DRIVER="${BUILDAH_STORAGE_DRIVER:-vfs}"
buildah --storage-driver "$STORAGE_DRIVER" build \
  --layers=false \
  --label "org.opencontainers.image.title=jetsink" \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.licenses=Apache-2.0" \
  -f "$repo/deploy/Containerfile" -t "$tag" "$context"
buildah --storage-driver "$STORAGE_DRIVER" images "$tag"
echo "built $tag"

[ "${SMOKE:-1}" = 1 ] || exit 0
# The checks: the binary starts from the image alone, as the unprivileged user, and a
# config mounted read-only at /etc/jetsink validates.
config_dir="$context/config"
mkdir -p "$config_dir"
cp "$repo/config/quickstart.json" "$config_dir/jetsink.json"
chmod -R a+rX "$config_dir"
inside=(--version)
check=(validate --config /etc/jetsink/jetsink.json)
if podman --storage-driver "$STORAGE_DRIVER" run --rm --read-only "$tag" "${inside[@]}" 2>"$context/podman.err"; then
  podman --storage-driver "$STORAGE_DRIVER" run --rm --read-only \
    -v "$config_dir:/etc/jetsink:ro" "$tag" "${check[@]}"
  echo "checked with podman run: --version and validate pass inside the image"
else
  echo "podman cannot run containers here ($(tail -n 1 "$context/podman.err")); using buildah's chroot isolation"
  ctr=$(buildah --storage-driver "$STORAGE_DRIVER" from "$tag")
  trap 'buildah --storage-driver "$STORAGE_DRIVER" rm "$ctr" >/dev/null 2>&1; rm -rf "$context"' EXIT
  run_inside() {
    buildah --storage-driver "$STORAGE_DRIVER" run --isolation chroot --user 65532:65532 \
      -v "$config_dir:/etc/jetsink:ro" "$ctr" -- /usr/local/bin/jetsink "$@"
  }
  run_inside "${inside[@]}"
  run_inside "${check[@]}"
  echo "checked with buildah run --isolation chroot: --version and validate pass inside the image"
fi
