#!/usr/bin/env bash
# Make Podman's Docker-compatible service answer on a unix socket, with the sandbox image in it.
#
#   scripts/ensure-podman.sh [IMAGE]      (IMAGE: sandbox-agent:latest)
#
# As root on Debian: installs podman (and catatonit, the init it runs for `init=True`), starts
# `podman system service --time=0 unix://SOCK` in the background (pid in PIDFILE), and copies
# IMAGE from Docker with `docker save IMAGE | podman load` whenever Podman's copy is missing or
# older (same image id, or load). sandbox-agent then reaches it with DOCKER_HOST=unix://SOCK.
#
# Rootful on purpose: rootless Podman runs here, but on this cgroup v1 host it ignores every
# resource limit ("Resource limits are not supported and ignored on cgroups V1 rootless
# systems"): no pids, memory or CPU limit would hold. See docs/SECURITY.md.
set -euo pipefail

IMAGE="${1:-sandbox-agent:latest}"
SOCK="${SANDBOX_AGENT_PODMAN_SOCK:-/run/sandbox-agent-podman/podman.sock}"
PIDFILE="${SANDBOX_AGENT_PODMAN_PIDFILE:-/run/sandbox-agent-podman.pid}"
LOG="${SANDBOX_AGENT_PODMAN_LOG:-/var/log/sandbox-agent-podman.log}"

answers() {
    DOCKER_HOST="unix://$SOCK" timeout 20 docker version --format '{{.Server.Version}}' \
        >/dev/null 2>&1
}

if [ "$(id -u)" != 0 ]; then
    if answers; then
        exit 0  # someone else's service: its image is theirs to load
    fi
    echo "error: no Podman service answers on $SOCK; as root, run scripts/ensure-podman.sh" >&2
    exit 1
fi
if ! command -v podman >/dev/null || [ ! -x /usr/libexec/podman/catatonit ]; then
    echo "installing podman ..."
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1
    apt-get install -y -qq podman catatonit >/tmp/sandbox-agent-apt.log 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq podman catatonit \
                 >/tmp/sandbox-agent-apt.log 2>&1; } \
        || { tail -20 /tmp/sandbox-agent-apt.log >&2; exit 1; }
fi
if ! answers; then
    mkdir -p "$(dirname "$SOCK")"
    chmod 700 "$(dirname "$SOCK")"  # the socket is root-equivalent, like Docker's
    rm -f "$SOCK"
    echo "starting podman system service --time=0 unix://$SOCK (log: $LOG) ..."
    # from its socket's directory: conmon leaves files (an `oom` marker when a container is
    # OOM-killed) in the service's working directory, which was the checkout's
    (cd "$(dirname "$SOCK")" && exec nohup podman system service --time=0 "unix://$SOCK" \
        >"$LOG" 2>&1) &
    echo $! > "$PIDFILE"
    for _ in $(seq 1 30); do
        answers && break
        sleep 1
    done
    if ! answers; then
        echo "error: the Podman service did not come up in 30 s; last log lines:" >&2
        tail -20 "$LOG" >&2
        exit 1
    fi
fi

want=$(docker image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
have=$(podman image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
if [ -z "$want" ]; then
    echo "error: Docker has no image $IMAGE to copy into Podman (make image)" >&2
    exit 1
fi
if [ "${want#sha256:}" != "${have#sha256:}" ]; then
    echo "copying $IMAGE from Docker into Podman ..."
    docker save "$IMAGE" | podman load -q >/dev/null
    podman image prune -f >/dev/null  # the copy this one replaced
fi
echo "Podman $(podman version --format '{{.Server.Version}}' 2>/dev/null \
    || podman --version) answers on unix://$SOCK with $IMAGE"
