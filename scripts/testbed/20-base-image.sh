#!/usr/bin/env bash
# Build the Debian 12 base image locally (no registry is reachable): debootstrap + docker import.
# Produces vllm-fleet/debian:bookworm (systemd-capable, python3 for Ansible). Idempotent.
set -euo pipefail
IMAGE="${VLLM_FLEET_BASE_IMAGE:-vllm-fleet/debian:bookworm}"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "testbed: base image $IMAGE already present"
  exit 0
fi
# The mirror this machine is configured with (never hard-coded).
MIRROR="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
if [ -z "$MIRROR" ]; then
  MIRROR="$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
fi
[ -n "$MIRROR" ] || { echo "testbed: cannot find the Debian mirror in /etc/apt" >&2; exit 1; }
ROOTFS="$(mktemp -d /tmp/vllm-fleet-rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT
echo "testbed: debootstrap bookworm from $MIRROR (about 45 s)"
debootstrap --variant=minbase \
  --include=python3,python3-apt,sudo,procps,iproute2,systemd,systemd-sysv,ca-certificates,curl,gnupg \
  bookworm "$ROOTFS" "$MIRROR" >/tmp/vllm-fleet-debootstrap.log 2>&1 \
  || { tail -n 30 /tmp/vllm-fleet-debootstrap.log >&2; exit 1; }
# Same apt sources as the host, so containers reach the same mirror.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  rm -f "$ROOTFS/etc/apt/sources.list"
  mkdir -p "$ROOTFS/etc/apt/sources.list.d"
  cp /etc/apt/sources.list.d/debian.sources "$ROOTFS/etc/apt/sources.list.d/debian.sources"
fi
tar -C "$ROOTFS" -c . | docker import \
  --change 'CMD ["/lib/systemd/systemd"]' --change 'ENV container=docker' - "$IMAGE" >/dev/null
echo "testbed: imported $IMAGE"
