#!/usr/bin/env bash
# Build revtree's base evaluation image without a container registry:
#   debootstrap --variant=minbase --include=python3,python3-pip,python3-venv <suite> DIR,
#   then tar | docker import.
# Usage: scripts/bootstrap-base-image.sh [--force] [TAG]
#        scripts/bootstrap-base-image.sh --print-tag   (the tag it builds, and nothing else)
# Needs root, Docker and a Debian mirror (the one apt uses). The tag caches the image:
# nothing is done when it exists (unless --force). Same recipe as `revtree sandbox
# bootstrap-base` (revtree/sandboxes/images.py; RECIPE_VERSION there = the -vN below).
set -euo pipefail
force=0
print_tag=0
if [[ "${1:-}" == "--force" ]]; then force=1; shift; fi
if [[ "${1:-}" == "--print-tag" ]]; then print_tag=1; shift; fi
suite=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
suite=${suite:-bookworm}
tag=${1:-revtree-base:${suite}-v2}
if [[ $print_tag == 1 ]]; then echo "$tag"; exit 0; fi
if [[ $force == 0 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag exists"; exit 0
fi
if ! command -v debootstrap >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
mirror=$(grep -hoE '^\s*(URIs:|deb( \[[^]]*\])?)\s+\S+' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
    | awk '{print $NF}' | grep '/debian' | grep -v security | head -n1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
dir=$(mktemp -d /tmp/revtree-rootfs-XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "building $tag: debootstrap $suite from $mirror, then docker import (1 to 4 min, once)"
# debootstrap's stages as they pass, with the seconds spent (its full output: $dir/log)
stages() {
    local line stage last=""
    while IFS= read -r line; do
        printf '%s\n' "$line" >>"$dir/log"
        case "$line" in
            "I: Retrieving InRelease"* | "I: Checking component"* | "I: Extracting"* | \
            "I: Installing core"* | "I: Unpacking required"* | "I: Configuring required"* | \
            "I: Unpacking the base"* | "I: Configuring the base"* | "I: Base system"*)
                stage=$(cut -d' ' -f2-3 <<<"$line")
                [[ $stage == Extracting* ]] && stage=Extracting
                if [[ $stage != "$last" ]]; then
                    printf '[%4d s] %s\n' "$SECONDS" "${line#I: }"
                    last=$stage
                fi ;;
        esac
    done
}
SECONDS=0
debootstrap --variant=minbase --include=python3,python3-pip,python3-venv "$suite" "$dir/rootfs" "$mirror" 2>&1 \
    | stages || { tail -n 30 "$dir/log"; echo "debootstrap failed" >&2; exit 1; }
echo "[$(printf '%4d' "$SECONDS") s] docker import"
mkdir -p "$dir/rootfs/usr/local/bin"
ln -sf /usr/bin/python3 "$dir/rootfs/usr/local/bin/python"
rm -f "$dir"/rootfs/var/cache/apt/archives/*.deb
tar --numeric-owner -C "$dir/rootfs" -c . | docker import --change 'CMD ["python3"]' - "$tag" >/dev/null
echo "built $tag in $SECONDS s"
