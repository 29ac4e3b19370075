#!/usr/bin/env bash
# Installs the childguard C library: libchildguard.so and .a into PREFIX/lib, childguard.h into
# PREFIX/include, childguard.pc into PREFIX/lib/pkgconfig. Then a C program builds with
#
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs childguard)
#
# (PREFIX/lib/pkgconfig is searched by default for PREFIX=/usr/local on Debian).
#
#   bash crates/childguard-ffi/install.sh /usr/local    # cargo build --release, then install
#   CHILDGUARD_LIB_DIR=target/debug bash crates/childguard-ffi/install.sh /tmp/cg
#                                                       # install libraries already built there
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="${1:?usage: install.sh PREFIX}"
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
libdir="$prefix/lib"
includedir="$prefix/include"

built="${CHILDGUARD_LIB_DIR:-}"
if [ -z "$built" ]; then
    cargo build --release --manifest-path "$here/Cargo.toml" -p childguard-ffi
    target="$(cargo metadata --format-version 1 --no-deps --manifest-path "$here/Cargo.toml" |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
    built="$target/release"
fi
for f in libchildguard.so libchildguard.a; do
    [ -f "$built/$f" ] || { echo "install.sh: $built/$f is missing (cargo build -p childguard-ffi)" >&2; exit 1; }
done

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../../Cargo.toml" | head -1)"
mkdir -p "$libdir/pkgconfig" "$includedir"
install -m 0755 "$built/libchildguard.so" "$libdir/"
install -m 0644 "$built/libchildguard.a" "$libdir/"
install -m 0644 "$here/include/childguard.h" "$includedir/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@INCLUDEDIR@|$includedir|" \
    -e "s|@VERSION@|$version|" "$here/childguard.pc.in" >"$libdir/pkgconfig/childguard.pc"
echo "installed childguard $version into $prefix (pkg-config: $libdir/pkgconfig/childguard.pc)"
