#!/usr/bin/env bash
# Installs the `childguard` command into PREFIX/bin, linked statically on Linux with glibc
# (static-pie, as Debian's `tini-static`): no dynamic loader, no libgcc_s, nothing to relocate
# against other libraries before `main`. `childguard init -- true` starts ~0.3 ms sooner than
# the dynamically linked build `cargo install` makes (docs/benchmarks.md, "Our own spawn, fifth
# look"), and the binary can be copied into a container image that has no glibc of its own.
#
#   bash crates/childguard-cli/install.sh /usr/local          # release build, static on *-linux-gnu
#   CHILDGUARD_CLI_PROFILE=dev bash crates/childguard-cli/install.sh /tmp/cg   # quicker to build
#   CHILDGUARD_CLI_LINK=dynamic bash crates/childguard-cli/install.sh /tmp/cg  # as cargo install
#
# Where static linking is not what glibc likes: name lookups. `--ready tcp:HOST:PORT` and
# `http://HOST/…` resolve HOST with getaddrinfo, which in a static glibc loads the NSS modules
# (`libnss_files`, `libnss_dns`) of the glibc it was built with at run time. On the machine that
# built it, or one with the same glibc, that works; elsewhere give addresses (127.0.0.1, [::1]),
# which need no lookup, or install the dynamic build. Other targets (FreeBSD, macOS, musl)
# get the target's default linking.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="${1:?usage: install.sh PREFIX}"
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
profile="${CHILDGUARD_CLI_PROFILE:-release}"
link="${CHILDGUARD_CLI_LINK:-static}"
case "$link" in static | dynamic) ;; *)
    echo "install.sh: CHILDGUARD_CLI_LINK must be static or dynamic, not '$link'" >&2; exit 2 ;;
esac

host="$(rustc -vV | sed -n 's/^host: //p')"
target_dir="$(cargo metadata --format-version 1 --no-deps --manifest-path "$here/Cargo.toml" |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
case "$profile" in dev | test) out=debug ;; *) out="$profile" ;; esac

build=(cargo build --profile "$profile" --manifest-path "$here/Cargo.toml" -p childguard-cli --bin childguard)
if [ "$link" = static ] && [[ "$host" == *-linux-gnu ]]; then
    # An explicit --target: RUSTFLAGS then reach only what is built for the target, not the
    # build scripts and proc macros the compiler loads (those must stay dynamic), and the
    # output goes to a directory of its own, beside the dynamic build, not over it.
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" "${build[@]}" --target "$host"
    built="$target_dir/$host/$out/childguard"
    # What the flag made, not what it was meant to make (RUSTFLAGS could be overridden by
    # CARGO_ENCODED_RUSTFLAGS): a static binary has no program interpreter.
    if LC_ALL=C ldd "$built" 2>&1 | grep -q '=>'; then
        echo "install.sh: $built came out dynamically linked (is CARGO_ENCODED_RUSTFLAGS set?)" >&2
        exit 1
    fi
    what="static-pie ($host)"
else
    "${build[@]}"
    built="$target_dir/$out/childguard"
    what="dynamically linked ($host)"
fi

mkdir -p "$prefix/bin"
install -m 0755 "$built" "$prefix/bin/childguard"
echo "installed childguard, $what, into $prefix/bin"
