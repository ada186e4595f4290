#!/usr/bin/env bash
# Build the cuda vLLM image (0.32.0 cu130 on the project's debootstrap base) through playbooks/image.yml on the
# local inventory, for an H200 host's facts (tests/fixtures/gpu/h200x2: driver 580.159.04, compute capability 9.0):
# this builder has no GPU, the image is for the fleet's. Writes the reference to .cache/vllm-image-cuda-ref.
#  - wheelhouse: .cache/vllm-image-cuda/wheelhouse, downloaded once from the indexes pip is configured with and
#    kept by content (the role's marker file carries the digest of the row's requirements and download options);
#    the role replaces the controller's find-links by the wheelhouse folder (they hold a +cpu torch).
#  - needs the Docker engine (10-docker.sh) and the base image vllm-fleet/debian:bookworm (20-base-image.sh).
#  - measured on the project's machine kind (2 cores): wheelhouse 49 s (3.7 GB), BuildKit build 250 s, image 9.5 GB.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${VLLM_IMAGE_CUDA_CACHE:-$PWD/.cache/vllm-image-cuda}"
REF_FILE="${VLLM_IMAGE_CUDA_REF:-$PWD/.cache/vllm-image-cuda-ref}"
mkdir -p "$CACHE"
start=$(date +%s)
ANSIBLE_CONFIG="$PWD/ansible.cfg" .venv/bin/ansible-playbook playbooks/image.yml \
  -i inventories/local/hosts.yml \
  -e vllm_image_variant=cuda -e vllm_image_cuda_base=project -e vllm_image_vllm_version=0.32.0 \
  -e vllm_image_driver_version=580.159.04 -e '{"vllm_image_compute_capabilities": ["9.0"]}' \
  -e "vllm_image_wheelhouse_dir=$CACHE/wheelhouse" \
  -e "vllm_image_build_dir=${VLLM_IMAGE_CUDA_BUILD_DIR:-/var/tmp/vllm-fleet-image-cuda}" \
  -e "vllm_image_ref_file=$REF_FILE" >"$CACHE/playbook.log" 2>&1 \
  || { tail -n 40 "$CACHE/playbook.log" >&2; exit 1; }
ref="$(cat "$REF_FILE")"
docker image inspect "$ref" >/dev/null
echo "testbed: vLLM cuda image $ref ready in $(( $(date +%s) - start )) s (reference in $REF_FILE)"
