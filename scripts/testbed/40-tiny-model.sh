#!/usr/bin/env bash
# The generated tiny model (LlamaForCausalLM, no weights: vLLM serves it with --load-format dummy)
# at .cache/tiny-model. Idempotent: files are rewritten only when their content differs.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR="${TINY_MODEL_DIR:-.cache/tiny-model}"
start=$(date +%s%N)
python3 scripts/testbed/tiny_model.py "$DIR"
echo "testbed: tiny model ready in $DIR in $(( ($(date +%s%N) - start) / 1000000 )) ms"
