"""Planned weight bytes against real checkpoints' PUBLISHED sizes (issue 33, item 5).

Each case takes a fixture copied verbatim (tests/fixtures/planner/checkpoints, sources in SOURCES.json) and a
published size recorded there with its URL and verbatim line: a file list, a GGUF file size or a start-up log. The
planner is asked for its estimate from config.json (and hf_quant_config.json) ALONE — no safetensors ``total_size``
— so the test checks the estimate, within 3 %. A published size that is per GPU is compared with the planner's
bytes on one GPU at that layout. What each published number includes beyond the tensors is in its ``inferred``.

Formats without two published sizes yet (see docs/sizing.md §2a): ModelOpt FP8 / NVFP4 / mixed, compressed-tensors,
GPTQ, AWQ (two public vLLM logs, but no verbatim config.json of those releases found), AutoRound, per-tensor FP8,
Quark.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model import weights_bytes_per_gpu

from .test_checkpoint_formats import CHECKPOINTS, GIB, SOURCES, spec_of

GB = 10**9


def planned_bytes(fixture: str, tp: int = 1) -> float:
    """The planner's weight bytes on the fullest GPU at TP ``tp`` (experts sliced over the same GPUs), from the
    fixture's config files only: ``load_model`` reads no index here (none is vendored), so no ``total_size``."""
    assert not (CHECKPOINTS / fixture / "model.safetensors.index.json").exists()
    spec = spec_of(fixture)
    return float(max(weights_bytes_per_gpu(spec, tp, 1, 2, spec.quantization, tp)))


def published_bytes(published: dict[str, Any]) -> float:
    kind = published["kind"]
    if kind == "hf_file_sizes_gb":
        return sum(published["shards_gb"]) * GB
    if kind in ("gguf_file_size_gib", "vllm_log_weights_gib", "vllm_log_model_loading_gib"):
        return published["value_gib"] * GIB
    raise AssertionError(f"unknown published kind {kind}")


#: (case id, SOURCES.json key, fixture, format): every case whose published size is a byte count of the weights.
CASES = [
    ("gpt-oss-20b files", "gpt-oss-20b-file-sizes", "gpt-oss-20b", "mxfp4"),
    ("gpt-oss-120b gguf", "gpt-oss-120b", "gpt-oss-120b", "mxfp4"),
    ("Qwen3-235B-A22B-FP8 TP8+EP log", "qwen3-235b-a22b-fp8", "qwen3-235b-a22b-fp8", "fp8-block"),
    ("DeepSeek-R1 TP8 log", "deepseek-r1", "deepseek-r1", "fp8-block"),
]


def test_every_published_size_names_its_evidence() -> None:
    for _case, key, fixture, _fmt in CASES:
        entry = SOURCES[key]
        assert entry.get("fixture", key) == fixture and (CHECKPOINTS / fixture / "config.json").is_file()
        published = entry["published"]
        assert published["url"] and published["line"] and published["inferred"]  # a URL or a repository path
        if published["per_gpu"]:
            assert published["tp"] >= 1


@pytest.mark.parametrize(("key", "fixture", "fmt"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_planned_weights_match_the_published_size(key: str, fixture: str, fmt: str) -> None:
    published = SOURCES[key]["published"]
    tp = published["tp"] if published["per_gpu"] else 1
    spec = spec_of(fixture)
    assert {"mxfp4": spec.quantization.method == "mxfp4",
            "fp8-block": spec.quantization.method == "fp8" and spec.quantization.block_fp8}[fmt]
    planned, expected = planned_bytes(fixture, tp), published_bytes(published)
    assert planned == pytest.approx(expected, rel=0.03), f"{planned / expected - 1:+.1%}"


def test_deepseek_r1_and_v3_ship_the_same_shapes() -> None:
    """The R1 release reuses V3's config.json verbatim: one block-FP8 estimate covers both."""
    assert (CHECKPOINTS / "deepseek-r1" / "config.json").read_bytes() == \
        (CHECKPOINTS / "deepseek-v3" / "config.json").read_bytes()
