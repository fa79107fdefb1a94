#!/usr/bin/env bash
# Host tools the tests and benchmarks compare against (ripgrep: the toolbox's search engine is
# checked against the Python fallback, and timed against rg on the host; openssl makes the
# certificates of the TLS engine the remote-engine tests start; chromium renders the HTML audit
# report headless, to check that nothing in it runs). Installs them with
# apt when running as root on Debian; otherwise says what is missing (the tests then skip those
# comparisons; the product itself needs nothing on the host).
set -euo pipefail

missing=()
command -v rg >/dev/null || missing+=(ripgrep)
command -v git >/dev/null || missing+=(git)
command -v openssl >/dev/null || missing+=(openssl)
command -v chromium >/dev/null || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} ..."
    export DEBIAN_FRONTEND=noninteractive NEEDRESTART_MODE=a NEEDRESTART_SUSPEND=1
    apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null && apt-get install -y -qq "${missing[@]}" >/dev/null; }
else
    echo "note: ${missing[*]} not installed on the host; install them to run every comparison" >&2
fi
