#!/usr/bin/env bash
# The container engines' beds of issue 51 beyond rootful podman (tests/src/engines.rs), made by
# tests/run.sh once the peers are installed and childguard-user exists. Idempotent: what is
# there and works is kept. Root (or sudo: it re-runs itself with it).
#
# - rootless podman for childguard-user (tests/tests/container_rootless.rs): a HOME of its own
#   (the user's is /nonexistent) holding its storage, a config of root's (netns "none": the
#   sandbox's /dev/net/tun is root's only, so slirp4netns fails; cgroupfs; events to a file),
#   a runtime directory on /run, subordinate ids in /etc/subuid and /etc/subgid (without them
#   podman maps the user's one uid and warns), and the busybox image imported into that
#   storage as the user;
# - docker (tests/tests/container_docker.rs): a dockerd of the suite's own on a socket of its
#   own, no networking of its own (no bridge, no iptables), vfs storage, and the busybox image
#   imported. It is started here, not by the tests, because a test must not download or set up
#   a daemon for minutes, and a daemon started by one test binary would outlive it anyway; here
#   it is left running for the test passes that follow (CI's processes end with its job). A
#   dockerd that cannot start (no kernel support) is said here and by each docker test.
#
# The image, localhost/childguard-busybox:1, is made from Debian's busybox-static as the
# rootful podman bed's is (tests/run.sh): nothing is pulled, no registry is needed.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || {
        echo "tests/engine-beds.sh: need root or sudo (or set CHILDGUARD_SKIP_PEERS=1)" >&2
        exit 1
    }
    exec sudo bash "$0" "$@"
fi

image=localhost/childguard-busybox:1
user=childguard-user
# Where the tests find them (tests/src/engines.rs; keep the two in step).
podman_user=/opt/childguard-tests/podman-user
podman_user_run=/run/childguard-tests/podman-user
docker_run=/run/childguard-tests/docker
docker_data=/opt/childguard-tests/docker
docker_sock=$docker_run/docker.sock

say() { echo "tests/engine-beds.sh: $*" >&2; }

# tar of a busybox rootfs on stdout: every applet a symlink to busybox, PATH=/bin.
busybox_tar() {
    local busybox rootfs
    busybox=$(command -v busybox)
    if ldd "$busybox" 2>/dev/null | grep -q '=>'; then
        say "$busybox is linked dynamically: the image needs Debian's busybox-static"
        return 1
    fi
    rootfs=$(mktemp -d)
    mkdir -p "$rootfs"/{bin,proc,dev,sys,tmp,etc}
    cp "$busybox" "$rootfs/bin/busybox"
    for applet in $("$busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$rootfs/bin/$applet"
    done
    tar -C "$rootfs" -c .
    rm -rf "$rootfs"
}

# --- rootless podman for childguard-user ----------------------------------------------------
uid=$(id -u "$user")
gid=$(id -g "$user")

# Its podman run as the tests run it: the user's ids, no supplementary group, only this
# environment, from /. exec-style (setpriv), so a pid held is podman's.
as_user() {
    (cd / && setpriv --reuid="$uid" --regid="$gid" --clear-groups env -i \
        PATH=/usr/local/bin:/usr/bin:/bin HOME="$podman_user/home" \
        XDG_RUNTIME_DIR="$podman_user_run" XDG_CONFIG_HOME="$podman_user/config" "$@")
}

install -d -m 755 "$podman_user" "$podman_user/config" "$podman_user/config/containers" \
    "$(dirname "$podman_user_run")"
install -d -m 700 -o "$uid" -g "$gid" "$podman_user/home" "$podman_user_run"
write_conf() { # NAME TEXT: root's file, readable by all, rewritten only when it changed.
    local path=$podman_user/config/containers/$1
    if [ "$(cat "$path" 2>/dev/null)" != "$2" ]; then
        printf '%s\n' "$2" >"$path.partial" && chmod 644 "$path.partial"
        mv "$path.partial" "$path"
    fi
}
write_conf containers.conf '# The rootless podman bed of childguard-user (tests/engine-beds.sh).
[containers]
netns = "none"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"'
write_conf storage.conf '[storage]
driver = "overlay"'

# Subordinate ids: 65536 from 200000, or past the highest range given already.
if ! grep -q "^$user:" /etc/subuid 2>/dev/null || ! grep -q "^$user:" /etc/subgid 2>/dev/null; then
    start=$(cat /etc/subuid /etc/subgid 2>/dev/null |
        awk -F: 'BEGIN { m = 200000 } NF == 3 && $2 + $3 > m { m = $2 + $3 } END { print m }')
    say "subordinate ids $start-$((start + 65535)) for $user"
    grep -q "^$user:" /etc/subuid 2>/dev/null || usermod --add-subuids "$start-$((start + 65535))" "$user"
    grep -q "^$user:" /etc/subgid 2>/dev/null || usermod --add-subgids "$start-$((start + 65535))" "$user"
    # A user namespace made before holds the old mapping: podman makes it again.
    if [ -d "$podman_user/home/.local/share/containers" ]; then
        as_user podman system migrate >/dev/null 2>&1 || true
    fi
fi

# The first rootless podman command starts the user's pause process (catatonit -P), which lives
# on: started here, outside any test.
if ! as_user podman image exists "$image" 2>/dev/null; then
    say "podman import $image as $user (rootless, into $podman_user/home)"
    busybox_tar | as_user podman import -q -c 'ENV PATH=/bin' -c 'CMD ["/bin/sh"]' - "$image" \
        >/dev/null
    as_user podman image exists "$image" || { say "podman import $image as $user failed"; exit 1; }
fi

# --- docker: a dockerd of the suite's own ---------------------------------------------------
docker_cli() { docker -H "unix://$docker_sock" "$@"; }

if ! docker_cli version >/dev/null 2>&1; then
    install -d -m 700 "$docker_run" "$docker_data"
    pidfile=$docker_run/dockerd.pid
    if [ -s "$pidfile" ] && [ "$(cat "/proc/$(cat "$pidfile")/comm" 2>/dev/null)" = dockerd ]; then
        say "dockerd $(cat "$pidfile") of $docker_run does not answer on $docker_sock;" \
            "the docker tests will fail (its log: $docker_run/dockerd.log)"
        exit 0
    fi
    rm -f "$pidfile"
    # Its own (empty) config: a daemon.json of the machine's must not mix in.
    echo '{}' >"$docker_run/daemon.json"
    say "starting dockerd on $docker_sock (log: $docker_run/dockerd.log)"
    # setsid -f: a session of its own, not this script's job; its output to its log, so that
    # it holds none of the pipes of whoever runs tests/run.sh.
    (cd / && setsid -f dockerd --config-file "$docker_run/daemon.json" --data-root "$docker_data" \
        --exec-root "$docker_run/exec" --pidfile "$pidfile" -H "unix://$docker_sock" \
        --iptables=false --ip-forward=false --ip-masq=false --bridge=none \
        --storage-driver=vfs </dev/null >>"$docker_run/dockerd.log" 2>&1)
    for _ in $(seq 1 300); do
        docker_cli version >/dev/null 2>&1 && break
        sleep 0.1
    done
    if ! docker_cli version >/dev/null 2>&1; then
        say "dockerd did not answer on $docker_sock within 30 s; the docker tests will fail." \
            "The end of its log:"
        tail -n 15 "$docker_run/dockerd.log" >&2
        exit 0
    fi
fi
if ! docker_cli image inspect "$image" >/dev/null 2>&1; then
    say "docker import $image"
    busybox_tar | docker_cli import -c 'ENV PATH=/bin' -c 'CMD ["/bin/sh"]' - "$image" >/dev/null
fi
