#!/usr/bin/env bash
# Makes a local Debian 12 base image with Python 3.11 (venv, pip, CA certificates,
# `python` pointing at `python3`) from Debian's package archive alone, for building the
# images where no container registry is reachable:
#
#   sudo docker/base-image.sh                       # prints the tag it made
#   docker build --build-arg BASE_IMAGE=localhost/simpletvm-base:bookworm \
#       -f docker/cpu.Dockerfile -t simpletvm:cpu .
#
# Options: --engine docker|podman (default: docker if installed, else podman),
# --tag TAG (default: localhost/simpletvm-base:bookworm), --mirror URL (default:
# http://deb.debian.org/debian). Needs root and debootstrap (apt-get install debootstrap).
set -euo pipefail

engine=""
tag="localhost/simpletvm-base:bookworm"
mirror="http://deb.debian.org/debian"
usage="usage: $0 [--engine docker|podman] [--tag TAG] [--mirror URL]"
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine="${2:?$usage}"; shift 2 ;;
        --tag) tag="${2:?$usage}"; shift 2 ;;
        --mirror) mirror="${2:?$usage}"; shift 2 ;;
        -h|--help) echo "$usage"; exit 0 ;;
        *) echo "$usage" >&2; exit 2 ;;
    esac
done
if [ -z "$engine" ]; then
    if command -v docker >/dev/null; then engine=docker; else engine=podman; fi
fi
case "$engine" in
    docker|podman) ;;
    *) echo "base-image.sh: --engine must be docker or podman, not $engine" >&2; exit 2 ;;
esac
for program in "$engine" debootstrap; do
    if ! command -v "$program" >/dev/null; then
        echo "base-image.sh: $program is not installed (apt-get install $program)" >&2
        exit 127
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "base-image.sh: debootstrap needs root: run it with sudo" >&2
    exit 1
fi

rootfs="$(mktemp -d "${TMPDIR:-/var/tmp}/simpletvm-base.XXXXXX")"
trap 'rm -rf "$rootfs"' EXIT

# minbase: dpkg, apt and the essential packages; Python 3.11 is bookworm's python3
debootstrap --variant=minbase \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
    bookworm "$rootfs" "$mirror"

# apt in the image gets the point-release and security updates too
rm -f "$rootfs/etc/apt/sources.list"
cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
# no downloaded packages, package lists or this host's name and resolver in the image
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/tmp/*
: > "$rootfs/etc/resolv.conf"
: > "$rootfs/etc/hostname"

chmod 755 "$rootfs"   # mktemp's 700 would become the image's /: closed to non-root users

tar --numeric-owner -C "$rootfs" -c . \
    | "$engine" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["bash"]' - "$tag" >/dev/null
echo "$tag"
