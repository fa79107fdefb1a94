#!/usr/bin/env bash
# Build the sandbox base image from Debian packages, for machines that reach Debian's package
# mirror but no container registry: debootstrap a minimal bookworm with python3, pytest, ripgrep,
# git, pip and venv, then `docker import` it. Usage: scripts/build-base-image.sh [IMAGE_NAME]
set -euo pipefail

NAME="${1:-sandbox-agent-base:bookworm}"
SUITE="${SUITE:-bookworm}"

HAS='command -v rg && command -v git && python3 -m pytest --version && python3 -m pip --version && python3 -m venv --help'
if docker image inspect "$NAME" >/dev/null 2>&1; then
    if docker run --rm --network none "$NAME" sh -c "$HAS" >/dev/null 2>&1; then
        echo "base image $NAME already present"
        exit 0
    fi
    echo "base image $NAME lacks a package this script includes: building it again"
fi
if [ "$(id -u)" != 0 ]; then
    echo "error: debootstrap needs root; run: sudo $0 $NAME" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    echo "installing debootstrap ..."
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1
    apt-get install -y -qq debootstrap >/tmp/sandbox-agent-apt.log 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq debootstrap \
             >/tmp/sandbox-agent-apt.log 2>&1; } || { tail -20 /tmp/sandbox-agent-apt.log >&2; exit 1; }
fi

# Use the mirror apt is already configured with (deb822 or one-line format), else debootstrap's default.
MIRROR="${MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}"
if [ -z "$MIRROR" ]; then
    MIRROR="$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
fi

ROOTFS="$(mktemp -d /tmp/sandbox-agent-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "debootstrap $SUITE into $ROOTFS (about a minute) ..."
debootstrap --variant=minbase --include=python3,python3-pytest,python3-pip,python3-venv,ripgrep,git "$SUITE" "$ROOTFS" ${MIRROR:+"$MIRROR"} \
    > "$ROOTFS.log" 2>&1 || { tail -20 "$ROOTFS.log" >&2; exit 1; }
rm -f "$ROOTFS.log"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
echo "importing as $NAME ..."
tar -C "$ROOTFS" -c . | docker import -c 'CMD ["sleep", "infinity"]' - "$NAME" >/dev/null
docker run --rm --network none "$NAME" python3 -c 'import json; print("base ok: python3 with json")'
