"""Run vLLM's own serving benchmark (``vllm.benchmarks.serve``, the code behind ``vllm bench serve``) at
several concurrency levels in ONE process: importing vLLM costs tens of seconds, the runs themselves are
short. Run it with the vLLM venv's python. One result JSON per level and repeat:
``<result-dir>/c<concurrency>-r<repeat>.json``.

    .cache/vllm-venv/bin/python scripts/bench_serve.py --base-url http://127.0.0.1:8000 --model tiny \
        --tokenizer .cache/tiny-model --input-len 32 --output-len 16 --concurrency 1 4 \
        --prompts-per-level 16 --result-dir /tmp/results

Everything after ``--`` goes to ``vllm bench serve`` unchanged.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--tokenizer", required=True, help="tokenizer directory (the model's)")
    p.add_argument("--input-len", type=int, required=True)
    p.add_argument("--output-len", type=int, required=True)
    p.add_argument("--concurrency", type=int, nargs="+", required=True)
    p.add_argument("--prompts-per-level", type=int, default=0, help="default: 4 x concurrency, at least 8")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--warmups", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--result-dir", type=Path, required=True)
    p.add_argument("--api-key-file", type=Path, default=None,
                   help="file holding the server's API key (vLLM's client sends OPENAI_API_KEY as the bearer token)")
    args = p.parse_args(argv)
    if args.api_key_file is not None:
        os.environ["OPENAI_API_KEY"] = args.api_key_file.read_text().strip()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")

    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    bench_parser = FlexibleArgumentParser()
    serve.add_cli_args(bench_parser)
    args.result_dir.mkdir(parents=True, exist_ok=True)
    for level in args.concurrency:
        prompts = args.prompts_per_level or max(8, 4 * level)
        for repeat in range(args.repeats):
            ns = bench_parser.parse_args(
                [
                    "--base-url", args.base_url,
                    "--model", args.model,
                    "--tokenizer", args.tokenizer,
                    "--dataset-name", "random",
                    "--random-input-len", str(args.input_len),
                    "--random-output-len", str(args.output_len),
                    "--num-prompts", str(prompts),
                    "--max-concurrency", str(level),
                    "--num-warmups", str(args.warmups),
                    "--seed", str(args.seed + repeat),
                    "--ignore-eos",
                    "--percentile-metrics", "ttft,tpot,itl,e2el",
                    "--metric-percentiles", "50,99",
                    "--save-result",
                    "--result-dir", str(args.result_dir),
                    "--result-filename", f"c{level}-r{repeat}.json",
                    "--disable-tqdm",
                    *extra,
                ]
            )  # fmt: skip
            result = serve.main(ns)
            if int(result.get("completed", 0)) == 0:
                print(f"bench_serve: no request completed at concurrency {level}", file=sys.stderr)
                return 1
    sys.stdout.flush()
    # vLLM's triton stub leaks nanobind objects at interpreter exit (noise on stderr): skip the teardown.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
