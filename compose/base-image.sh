#!/usr/bin/env bash
# A base image for the Dockerfile from Debian's packages alone, for a machine that
# reaches a Debian mirror but no image registry:
#
#   compose/base-image.sh [--tag fedpriv-base:bookworm] [--mirror URL]
#   docker build --build-arg BASE_IMAGE=fedpriv-base:bookworm ...
#
# debootstrap (minbase) of bookworm with python3 (3.11, as the torch CPU wheel),
# python3-venv, python3-pip and ca-certificates, imported with `docker import`.
# Needs root, debootstrap and a running Docker daemon.
set -euo pipefail

TAG=fedpriv-base:bookworm
MIRROR=http://deb.debian.org/debian
SUITE=bookworm
. "$(dirname "$0")/options.sh"
parse_options "$0" 2,10 "--tag=TAG --mirror=MIRROR" "" -- "$@"

missing=()
for tool in debootstrap docker tar; do
    command -v "$tool" > /dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "base-image.sh: missing ${missing[*]} (apt-get install debootstrap docker.io)" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || { echo "base-image.sh: debootstrap needs root" >&2; exit 2; }

ROOTFS=$(mktemp -d /var/tmp/fedpriv-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,ca-certificates \
    "$SUITE" "$ROOTFS" "$MIRROR"
# The image keeps no package cache or index (apt-get update in a derived image).
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
tar --numeric-owner -C "$ROOTFS" -c . |
    docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' - "$TAG" > /dev/null
docker run --rm "$TAG" python3 -c 'import sys, venv, ssl; print("python", sys.version.split()[0])'
echo "built $TAG from Debian $SUITE"
