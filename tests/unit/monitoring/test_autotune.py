"""Auto-tune grid and winner choice (plugins/plugin_utils/observe/autotune.py)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import autotune as at


def trial(seqs: int, tokens: int, tput: float, p99: float, completed: int = 32) -> dict[str, Any]:
    return {
        "engine": {"max_num_seqs": seqs, "max_num_batched_tokens": tokens},
        "result": {"completed": completed, "output_throughput": tput, "p99_ttft_ms": p99},
    }


def test_grid_drops_pairs_vllm_refuses() -> None:
    grid = at.trial_grid([256, 64], [128, 2048])
    assert grid == [
        {"max_num_seqs": 64, "max_num_batched_tokens": 128},
        {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
    ]


@pytest.mark.parametrize(
    ("seqs", "tokens", "message"),
    [([], [1], "at least one"), ([0], [8], "positive"), ([512], [128], "must be >= max_num_seqs")],
)
def test_grid_errors(seqs: list[int], tokens: list[int], message: str) -> None:
    with pytest.raises(at.AutotuneError, match=message):
        at.trial_grid(seqs, tokens)


def test_best_throughput_that_meets_the_target_wins() -> None:
    decision = at.choose(
        [trial(64, 2048, 900.0, 300.0), trial(256, 8192, 1500.0, 800.0), trial(128, 4096, 1200.0, 450.0)],
        500.0,
    )
    assert decision["met_target"]
    assert decision["best"]["engine"] == {"max_num_seqs": 128, "max_num_batched_tokens": 4096}
    assert [t["meets_target"] for t in decision["trials"]] == [True, False, True]


def test_no_trial_meets_target_reports_lowest_latency_and_writes_nothing() -> None:
    decision = at.choose([trial(64, 2048, 900.0, 700.0), trial(256, 8192, 1500.0, 900.0)], 500.0)
    assert not decision["met_target"]
    assert decision["best"]["engine"]["max_num_seqs"] == 64
    assert at.group_overrides(decision, {"max_model_len": 4096}) == {
        "vllm_fleet_engine_args": {"max_model_len": 4096}
    }


def test_failed_trials_never_win() -> None:
    decision = at.choose([trial(64, 2048, 0.0, 0.0, completed=0), trial(128, 2048, 500.0, 400.0)], 500.0)
    assert decision["best"]["engine"]["max_num_seqs"] == 128
    assert at.group_overrides(decision) == {
        "vllm_fleet_engine_args": {"max_num_seqs": 128, "max_num_batched_tokens": 2048}
    }
