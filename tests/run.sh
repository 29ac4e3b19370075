#!/usr/bin/env bash
# The README's test command: installs the real servers and tools the tests run against (when
# missing), then runs the whole suite. `.ci/run` calls this script, so the two cannot drift.
#
#   bash tests/run.sh                 # install what is missing, then `cargo test --workspace`,
#                                     # then the Python package's pytest (crates/childguard-python/ci.sh)
#   bash tests/run.sh -- --test close # extra arguments go to `cargo test`
#
# Installing needs root (or sudo) and Debian's apt. With CHILDGUARD_SKIP_PEERS=1 nothing is
# installed, and the tests that need a missing peer say they were skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

# One line per peer: the command (or python module) the tests look for, and its Debian package;
# `lean` after it: installed without its Recommends (docker.io's are apparmor and needrestart,
# whose apt hook restarts services). Add a peer here, nowhere else.
peers=(
    "nbdkit          nbdkit"
    "qemu-nbd        qemu-utils"
    "nbdsh           libnbd-bin"
    "py:nbd          python3-libnbd"
    "strace          strace"
    "pg:initdb       postgresql"
    "redis-server    redis-server"
    "memcached       memcached"
    "nginx           nginx-light"
    "valgrind        valgrind"
    "cc              gcc"
    "pkg-config      pkg-config"
    "python3         python3"
    "curl            curl"
    "tini            tini"
    "dumb-init       dumb-init"
    "catatonit       catatonit"
    "runc            runc"
    "busybox         busybox-static"
    "unshare         util-linux"
    "node            nodejs"
    "npm             npm"
    "podman          podman"
    "newuidmap       uidmap"
    "dockerd         docker.io       lean"
)

present() {
    case "$1" in
        # Debian's python3-* modules go into the system python, which a pyenv/venv python3
        # earlier on PATH lacks.
        py:*) /usr/bin/python3 -c "import ${1#py:}" 2>/dev/null ;;
        # Debian keeps the server binaries off PATH, under the major version.
        pg:*) compgen -G "/usr/lib/postgresql/*/bin/${1#pg:}" >/dev/null ;;
        *) command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] ;;
    esac
}

missing=() lean=()
for line in "${peers[@]}"; do
    read -r probe package how <<<"$line"
    present "$probe" && continue
    missing+=("$package")
    if [ "$how" = lean ]; then lean+=("$package"); fi
done

if [ ${#missing[@]} -gt 0 ] && [ "${CHILDGUARD_SKIP_PEERS:-}" != 1 ]; then
    echo "tests/run.sh: installing ${missing[*]}" >&2
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || {
            echo "tests/run.sh: need root or sudo to apt-get install ${missing[*]}" \
                 "(or set CHILDGUARD_SKIP_PEERS=1 to skip the tests against real servers)" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    command -v apt-get >/dev/null || {
        echo "tests/run.sh: no apt-get here; install ${missing[*]} by hand" \
             "(or set CHILDGUARD_SKIP_PEERS=1)" >&2
        exit 1
    }
    # policy-rc.d exit 101: the packages' own services are not started (the tests start their
    # servers themselves, on private sockets and ports).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee /usr/sbin/policy-rc.d >/dev/null
        "${sudo[@]}" chmod 755 /usr/sbin/policy-rc.d
        trap '"${sudo[@]}" rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    full=()
    for package in "${missing[@]}"; do
        [[ " ${lean[*]} " == *" $package "* ]] || full+=("$package")
    done
    if [ ${#full[@]} -gt 0 ]; then
        "${sudo[@]}" apt-get install -y -qq "${full[@]}" >/dev/null
    fi
    if [ ${#lean[@]} -gt 0 ]; then
        "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
    fi
    for line in "${peers[@]}"; do
        read -r probe package _ <<<"$line"
        present "$probe" || { echo "tests/run.sh: $package installed but $probe not found" >&2; exit 1; }
    done
fi

# Two unprivileged users of the suite's own, made once each, when missing; without them the
# tests that need them fail saying to run this script (or are skipped with
# CHILDGUARD_SKIP_PEERS=1). No login shell, no home (the tests give each a scratch HOME).
# - childguard-attacker, the local attacker of the security tests (tests/tests/security/, issue
#   49): they run it against root's childguard;
# - childguard-user, test bed (a) of issue 50: childguard run as that user, in root's cgroup
#   with nothing delegated, contains its tree without a cgroup (tests/tests/
#   mcp_host_unprivileged.rs).
suite_user() {
    local user=$1 why=$2
    getent passwd "$user" >/dev/null && return 0
    [ "${CHILDGUARD_SKIP_PEERS:-}" = 1 ] && return 0
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null || {
            echo "tests/run.sh: need root or sudo to make the user $user" \
                 "(or set CHILDGUARD_SKIP_PEERS=1)" >&2
            exit 1
        }
        sudo=(sudo)
    fi
    echo "tests/run.sh: useradd $user ($why)" >&2
    "${sudo[@]}" useradd --system --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin "$user"
}
suite_user childguard-attacker "the security tests' attacker"
suite_user childguard-user "the unprivileged user of containment bed (a)"

# The image of the podman bed (tests/src/podman.rs, issue 51: container engines as launchers),
# made here from the busybox installed above so that no test pulls anything (no registry is
# needed): a rootfs of busybox with every applet a symlink to it, imported. Once: skipped when
# the image exists. Rootful podman, as the tests run it.
podman_image=localhost/childguard-busybox:1
sudo=()
if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
if [ "${CHILDGUARD_SKIP_PEERS:-}" != 1 ] &&
    ! "${sudo[@]}" podman image exists "$podman_image" 2>/dev/null; then
    echo "tests/run.sh: podman import $podman_image (busybox, for the podman bed)" >&2
    rootfs=$(mktemp -d)
    busybox=$(command -v busybox)
    if ldd "$busybox" 2>/dev/null | grep -q '=>'; then
        echo "tests/run.sh: $busybox is linked dynamically: the image needs Debian's" \
             "busybox-static" >&2
        exit 1
    fi
    mkdir -p "$rootfs"/{bin,proc,dev,sys,tmp,etc}
    cp "$busybox" "$rootfs/bin/busybox"
    for applet in $("$busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$rootfs/bin/$applet"
    done
    tar -C "$rootfs" -c . | "${sudo[@]}" podman import -q -c 'ENV PATH=/bin' \
        -c 'CMD ["/bin/sh"]' - "$podman_image" >/dev/null
    rm -rf "$rootfs"
    "${sudo[@]}" podman image exists "$podman_image" || {
        echo "tests/run.sh: podman import $podman_image failed" >&2; exit 1
    }
fi

# The beds of the other container engines (issue 51, tests/engine-beds.sh): rootless podman for
# childguard-user (its storage, config and image), and a dockerd of the suite's own, started
# here if none answers on its socket (the tests neither download nor start daemons), with the
# image imported.
if [ "${CHILDGUARD_SKIP_PEERS:-}" != 1 ]; then
    bash tests/engine-beds.sh
fi

# The npm peers (MCP servers, the TypeScript MCP SDK, a language server), pinned by
# tests/package.json and its lockfile: installed here, before any test runs, so nothing is
# downloaded while the tests run. `npm ci` again only when the lockfile changed.
if command -v npm >/dev/null 2>&1; then
    if ! cmp -s tests/package-lock.json tests/node_modules/.childguard-installed-lock 2>/dev/null; then
        echo "tests/run.sh: npm ci (tests/package.json)" >&2
        (cd tests && npm ci --no-audit --no-fund --loglevel=error &&
            cp package-lock.json node_modules/.childguard-installed-lock)
    fi
elif [ "${CHILDGUARD_SKIP_PEERS:-}" != 1 ]; then
    echo "tests/run.sh: npm not found: install Debian's nodejs and npm" \
         "(or set CHILDGUARD_SKIP_PEERS=1)" >&2
    exit 1
fi

# The Python peers (tests/requirements.txt: the MCP Python SDK) in a venv of their own, which
# tests/src/stdio_peers.rs finds; reinstalled only when the requirements changed.
peers_venv="${CARGO_TARGET_DIR:-target}/peers-venv"
if ! cmp -s tests/requirements.txt "$peers_venv/.childguard-installed" 2>/dev/null; then
    echo "tests/run.sh: python venv $peers_venv (tests/requirements.txt)" >&2
    python3 -c 'import venv, ensurepip' 2>/dev/null || {
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        else
            echo "tests/run.sh: python3 cannot make a venv: install python3-venv" >&2; exit 1
        fi
    }
    rm -rf "$peers_venv"
    python3 -m venv "$peers_venv"
    "$peers_venv/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
    cp tests/requirements.txt "$peers_venv/.childguard-installed"
fi

# The same Python peers for childguard-user (tests/src/as_user.rs): a venv that user can run,
# so made with Debian's python (a pyenv python under /root is out of its reach) in a directory
# of root's outside any home, the build directory included (it may be under /root too).
user_venv=/opt/childguard-tests/user-venv
if [ "${CHILDGUARD_SKIP_PEERS:-}" != 1 ] &&
    ! cmp -s tests/requirements.txt "$user_venv/.childguard-installed" 2>/dev/null; then
    echo "tests/run.sh: python venv $user_venv for childguard-user (tests/requirements.txt)" >&2
    sudo=()
    if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
    /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || {
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        else
            echo "tests/run.sh: /usr/bin/python3 cannot make a venv: install python3-venv" >&2
            exit 1
        fi
    }
    "${sudo[@]}" rm -rf "$user_venv"
    "${sudo[@]}" install -d -m 755 "$(dirname "$user_venv")"
    "${sudo[@]}" /usr/bin/python3 -m venv "$user_venv"
    "${sudo[@]}" "$user_venv/bin/pip" install -q --disable-pip-version-check \
        -r tests/requirements.txt
    "${sudo[@]}" chmod -R go+rX "$user_venv"
    "${sudo[@]}" cp tests/requirements.txt "$user_venv/.childguard-installed"
fi

[ "${1:-}" = "--" ] && shift

# Every pass runs even when one before it failed (cargo test --no-fail-fast within a pass), so
# a newcomer sees the whole state; the summary at the end names the passes that failed, and
# the script fails if any did (issue 52).
failed=()
pass() {
    local name=$1
    shift
    printf '\n=== tests/run.sh: %s\n' "$name" >&2
    if ! "$@"; then
        failed+=("$name")
    fi
}

pass "cargo test --workspace" cargo test --workspace --no-fail-fast "$@"

# Both spawn paths (issue 33). The pass above runs each face as a user gets it: the CLI, the C
# library and the Python package on our own clone3 spawn, the Rust library on std's unless a
# test chose (Builder::own_spawn). Two more passes over the tests that spawn the most: the
# library's on our spawn, the faces' on std's. Only for the whole suite.
if [ $# -eq 0 ]; then
    pass "the library on our clone3 spawn" env CHILDGUARD_SPAWN=clone3 \
        cargo test --no-fail-fast -p childguard-tests \
        --test close --test close_with --test contain --test contain_guardian \
        --test contain_leftovers --test env --test stdio --test stdio_server --test capture \
        --test capture_lines --test faults --test no_stranger --test leaks --test limits \
        --test supervise --test reaping --test tokio --test ready --test ready_exec \
        --test notify_main --test notify_watchdog --test detach --test launcher_gone \
        --test async_stdio
    pass "the faces on std's spawn" env CHILDGUARD_SPAWN=std \
        cargo test --no-fail-fast -p childguard-tests \
        --test cli --test ffi --test timeout --test with --test stdio_server --test init
    # The CLI as users install it (crates/childguard-cli/install.sh): static-pie on Linux with
    # glibc, no dynamic loader. Its tests once more on that binary (CHILDGUARD_TEST_CLI); the
    # runc tests bind it into their containers (runc_contain builds its static host helper,
    # cg-stdio-host, itself); container_launcher runs it in front of podman, container_rootless
    # in front of the user's rootless podman, container_docker in front of docker (issue 51).
    cli_prefix="$PWD/target/cli-static"
    static_cli() {
        CHILDGUARD_CLI_PROFILE=dev bash crates/childguard-cli/install.sh "$cli_prefix" &&
            CHILDGUARD_TEST_CLI="$cli_prefix/bin/childguard" cargo test --no-fail-fast \
                -p childguard-tests --test cli --test init --test timeout --test with \
                --test ctrl_c --test skip_ignored --test runc_init --test runc_contain \
                --test container_launcher --test container_rootless --test container_docker
    }
    pass "the static CLI" static_cli
fi

# The Python package (crates/childguard-python): its abi3 wheel built with maturin, pip-installed
# into a fresh venv, pytest there. Only for the whole suite: extra arguments pick Rust tests.
if [ $# -eq 0 ]; then
    pass "the Python package (pytest)" bash crates/childguard-python/ci.sh
fi

if [ ${#failed[@]} -gt 0 ]; then
    printf '\ntests/run.sh: FAILED passes:\n' >&2
    printf '  - %s\n' "${failed[@]}" >&2
    exit 1
fi
echo "tests/run.sh: every pass passed" >&2
