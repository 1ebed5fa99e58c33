#!/usr/bin/env bash
# Installs what the fan-out benchmark's nchan baseline needs: nginx and its nchan module
# (Debian packages). Does nothing when they are already there.
set -euo pipefail
if [ -e /usr/lib/nginx/modules/ngx_nchan_module.so ] && command -v nginx >/dev/null; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    nginx-light libnginx-mod-nchan
