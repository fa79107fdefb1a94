#!/usr/bin/env bash
# Make sure a Docker engine answers, with gVisor's runsc among its runtimes. If none answers and
# we are root on Debian, install docker.io and start `dockerd --bridge=none --iptables=false` in
# the background (sandbox containers use no network, and the engine must not create bridges on
# private address ranges). Then scripts/ensure-runsc.sh installs runsc and registers it with
# the engine, also one that was already running (root only; otherwise a note).
set -euo pipefail
here="$(dirname "$0")"

runsc() {
    if ! "$here/ensure-runsc.sh" && [ "$(id -u)" = 0 ]; then
        exit 1
    fi
    return 0
}

if docker info >/dev/null 2>&1; then
    runsc
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "error: no Docker engine answers; start one (or run this script as root to install docker.io)" >&2
    exit 1
fi
if ! command -v dockerd >/dev/null; then
    echo "installing docker.io ..."
    export DEBIAN_FRONTEND=noninteractive
    export NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1
    apt-get update -qq >/dev/null
    apt-get install -y -qq docker.io >/tmp/sandbox-agent-apt.log 2>&1 \
        || { tail -20 /tmp/sandbox-agent-apt.log >&2; exit 1; }
fi
if ! command -v docker >/dev/null; then
    echo "error: docker CLI missing after installing docker.io" >&2
    exit 1
fi
LOG="${DOCKERD_LOG:-/var/log/sandbox-agent-dockerd.log}"
echo "starting dockerd --bridge=none --iptables=false (log: $LOG) ..."
(cd / && exec nohup dockerd --bridge=none --iptables=false >"$LOG" 2>&1) &
echo $! > /run/sandbox-agent-dockerd.pid
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "Docker engine is up"
        runsc
        exit 0
    fi
    sleep 1
done
echo "error: dockerd did not come up in 60 s; last log lines:" >&2
tail -20 "$LOG" >&2
exit 1
