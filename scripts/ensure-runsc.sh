#!/usr/bin/env bash
# Make gVisor's runsc an OCI runtime of the running Docker engine, named "runsc".
#
# As root on Debian: installs Debian's runsc package when it is missing, merges the runtime into
# /etc/docker/daemon.json (every other setting, and other runtimes, are kept; a backup is left
# beside it), reloads dockerd with SIGHUP (or `systemctl reload docker`), and checks `docker info`.
# The runtime arguments are required, not tuning:
#   --network=none  Debian's runsc (0.0~20221219) cannot start a container otherwise: "cannot run
#                   with network enabled in root network namespace" (our containers have none);
#   --oci-seccomp   without it runsc ignores the container's seccomp profile, and the rules that
#                   refuse set-id modes and unix sockets (executor/sandbox/seccomp.py) are gone.
# Idempotent: exits 0 at once when the engine already offers runsc with these arguments.
set -euo pipefail

NAME=runsc
REQUIRED_ARGS=(--network=none --oci-seccomp)
CONF="${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}"  # dockerd's --config-file
PIDFILE="${DOCKERD_PIDFILE:-}"  # dockerd's --pidfile, when it is not one of the usual ones

registered() {
    docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
runtime = json.load(sys.stdin).get(sys.argv[1]) or {}
sys.exit(not set(sys.argv[2:]) <= set(runtime.get("runtimeArgs") or []))
' "$NAME" "${REQUIRED_ARGS[@]}"
}

if registered; then
    exit 0
fi
if ! docker info >/dev/null 2>&1; then
    echo "error: no Docker engine answers; start one first (make engine)" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "note: the engine has no '$NAME' runtime with ${REQUIRED_ARGS[*]}; as root, run" \
         "scripts/ensure-runsc.sh (or make engine) to install and register gVisor" >&2
    exit 1
fi
if ! command -v runsc >/dev/null; then
    echo "installing runsc (gVisor) ..."
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1
    apt-get install -y -qq runsc >/tmp/sandbox-agent-apt.log 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq runsc \
                 >/tmp/sandbox-agent-apt.log 2>&1; } \
        || { tail -20 /tmp/sandbox-agent-apt.log >&2; exit 1; }
fi

# Merge, never overwrite: keep every other key and runtime, add only the missing arguments.
mkdir -p "$(dirname "$CONF")"
python3 - "$CONF" "$NAME" "$(command -v runsc)" "${REQUIRED_ARGS[@]}" <<'EOF'
import json, os, shutil, sys

conf, name, path, required = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
config = {}
if os.path.exists(conf):
    try:
        with open(conf, encoding="utf-8") as f:
            config = json.load(f)
    except ValueError as exc:
        sys.exit(f"error: {conf} is not valid JSON ({exc}); fix it, then run this again")
    if not isinstance(config, dict):
        sys.exit(f"error: {conf} is not a JSON object; fix it, then run this again")
    shutil.copy2(conf, conf + ".sandbox-agent.bak")
runtimes = config.setdefault("runtimes", {})
runtime = runtimes.setdefault(name, {})
runtime.setdefault("path", path)
args = runtime.setdefault("runtimeArgs", [])
args += [arg for arg in required if arg not in args]
with open(conf + ".tmp", "w", encoding="utf-8") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
os.replace(conf + ".tmp", conf)
print(f"registered runtime {name!r} in {conf}: {json.dumps(runtime)}")
EOF

# Reload the running engine: dockerd rereads daemon.json (runtimes included) on SIGHUP.
if [ -z "$PIDFILE" ] && command -v systemctl >/dev/null \
        && systemctl is-active --quiet docker 2>/dev/null; then
    systemctl reload docker
else
    pid=""
    for file in $PIDFILE /run/sandbox-agent-dockerd.pid /var/run/docker.pid; do
        if [ -s "$file" ] && [ "$(cat "/proc/$(cat "$file")/comm" 2>/dev/null)" = dockerd ]; then
            pid=$(cat "$file")
            break
        fi
    done
    if [ -z "$pid" ]; then
        echo "error: cannot find the running dockerd's pid to reload it; restart it" >&2
        exit 1
    fi
    kill -HUP "$pid"
fi
for _ in $(seq 1 20); do
    if registered; then
        echo "the Docker engine offers runtime '$NAME' (gVisor $(runsc --version | head -1))"
        exit 0
    fi
    sleep 0.5
done
echo "error: dockerd did not pick up runtime '$NAME' from $CONF; see its log" >&2
exit 1
