#!/usr/bin/env bash
# Build the cpu vLLM image once per run through playbooks/image.yml on the local inventory, and write its
# full reference to .cache/vllm-image-ref (the deploy and monitoring tests start containers from it).
# Idempotent: the role builds only when the content-addressed tag is absent.
#  - wheelhouse mode: wheels are downloaded on this machine into .cache/vllm-image/wheelhouse (pip finds
#    torch 2.13.0+cpu through its find-links setting; elsewhere set VLLM_IMAGE_FIND_LINKS to a folder
#    holding that wheel) and installed in the build with --no-index: no TLS needed inside the build.
#  - needs the Docker engine (10-docker.sh) and the base image vllm-fleet/debian:bookworm (20-base-image.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
REF_FILE="$PWD/.cache/vllm-image-ref"
mkdir -p .cache/vllm-image
extra=()
if [ -n "${VLLM_IMAGE_FIND_LINKS:-}" ]; then
  extra+=(-e "{\"vllm_image_pip_find_links\": [\"$VLLM_IMAGE_FIND_LINKS\"]}")
fi
start=$(date +%s)
ANSIBLE_CONFIG="$PWD/ansible.cfg" .venv/bin/ansible-playbook playbooks/image.yml \
  -i inventories/local/hosts.yml \
  -e vllm_image_variant=cpu \
  -e "vllm_image_wheelhouse_dir=$PWD/.cache/vllm-image/wheelhouse" \
  -e "vllm_image_ref_file=$REF_FILE" \
  "${extra[@]}" >.cache/vllm-image/playbook.log 2>&1 \
  || { tail -n 40 .cache/vllm-image/playbook.log >&2; exit 1; }
ref="$(cat "$REF_FILE")"
docker image inspect "$ref" >/dev/null
echo "testbed: vLLM cpu image $ref ready in $(( $(date +%s) - start )) s (reference in $REF_FILE)"
