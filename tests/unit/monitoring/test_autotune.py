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


# ---- repeats and the noise rule (issue 15) --------------------------------------------------------


def bench(tput: float, p99: float = 300.0, completed: int = 32) -> dict[str, Any]:
    return {"completed": completed, "output_throughput": tput, "p99_ttft_ms": p99}


def repeated(engine: dict[str, Any], tputs: list[float], p99: float = 300.0) -> dict[str, Any]:
    return {"engine": engine, "results": [bench(t, p99) for t in tputs]}


CANDIDATE = {"max_num_seqs": 8, "max_num_batched_tokens": 512}


def test_noisy_winner_within_the_noise_keeps_the_current_configuration() -> None:
    # current: median 1000, spread (1100 - 900) / 1000 = 20 %; the candidate's median is only 10 % higher.
    decision = at.choose(
        [repeated({}, [900.0, 1000.0, 1100.0]), repeated(CANDIDATE, [1090.0, 1100.0, 1110.0])], 500.0
    )
    assert decision["met_target"] and decision["kept_current"]
    assert decision["best"]["engine"] == {}
    assert decision["candidate"]["engine"] == CANDIDATE
    assert decision["noise"] == pytest.approx(0.2)
    assert "+10.0 %" in decision["reason"] and "20.0 %" in decision["reason"]
    assert at.group_overrides(decision, {"dtype": "float16"}) == {
        "vllm_fleet_engine_args": {"dtype": "float16"}
    }
    assert decision["summary"][1] == "after:  unchanged"


def test_clear_winner_beyond_the_noise_wins() -> None:
    decision = at.choose(
        [repeated({}, [950.0, 1000.0, 1050.0]), repeated(CANDIDATE, [1400.0, 1500.0, 1450.0])], 500.0
    )
    assert decision["met_target"] and not decision["kept_current"]
    assert decision["best"]["engine"] == CANDIDATE
    assert decision["best"]["output_throughput"] == 1450.0
    assert decision["noise"] == pytest.approx(0.1)  # the current configuration's spread, the larger one
    assert "+45.0 %" in decision["reason"]
    assert at.group_overrides(decision, {"dtype": "float16"}) == {
        "vllm_fleet_engine_args": {"dtype": "float16", **CANDIDATE}
    }
    assert decision["summary"][0].startswith("before: 1,000.0 output tok/s, P99 TTFT 300.0 ms (median of 3")
    assert decision["summary"][1].startswith("after:  1,450.0 output tok/s")


def test_the_candidates_own_spread_counts_as_noise() -> None:
    # current steady, candidate median +20 % but its repeats spread 30 %.
    decision = at.choose([repeated({}, [1000.0] * 3), repeated(CANDIDATE, [1050.0, 1200.0, 1410.0])], 500.0)
    assert decision["kept_current"] and decision["noise"] == pytest.approx(0.3)


def test_medians_decide_not_a_single_lucky_repeat() -> None:
    lucky = repeated(CANDIDATE, [800.0, 2000.0, 810.0])  # best single repeat, worst median
    steady = repeated({"max_num_seqs": 16, "max_num_batched_tokens": 512}, [1200.0, 1210.0, 1190.0])
    decision = at.choose([repeated({}, [1000.0, 1000.0, 1000.0]), lucky, steady], 500.0)
    assert decision["best"]["engine"] == steady["engine"]
    assert decision["trials"][1]["output_throughput"] == 810.0
    assert decision["trials"][1]["output_throughputs"] == [800.0, 2000.0, 810.0]
    assert decision["trials"][1]["repeats"] == 3


def test_median_latency_decides_the_target() -> None:
    one_slow = {
        "engine": CANDIDATE,
        "results": [bench(2000.0, 300.0), bench(2000.0, 900.0), bench(2000.0, 310.0)],
    }
    two_slow = {
        "engine": {"max_num_seqs": 16},
        "results": [bench(3000.0, 300.0), bench(3000.0, 900.0), bench(3000.0, 950.0)],
    }
    decision = at.choose([repeated({}, [1000.0] * 3), one_slow, two_slow], 500.0)
    assert [t["meets_target"] for t in decision["trials"]] == [True, True, False]
    assert decision["best"]["engine"] == CANDIDATE


def test_min_gain_is_a_floor_on_the_margin() -> None:
    trials = [repeated({}, [1000.0]), repeated(CANDIDATE, [1040.0])]
    assert not at.choose(trials, 500.0)["kept_current"]
    decision = at.choose(trials, 500.0, min_gain=0.05)
    assert decision["kept_current"] and "min_gain 5.0 %" in decision["reason"]
    with pytest.raises(at.AutotuneError, match="min_gain must be >= 0"):
        at.choose(trials, 500.0, min_gain=-0.1)


def test_one_repeat_trials_have_no_spread_and_any_gain_wins() -> None:
    decision = at.choose([repeated({}, [1000.0]), repeated(CANDIDATE, [1001.0])], 500.0)
    assert decision["noise"] == 0.0 and decision["trials"][0]["spread"] == 0.0
    assert decision["best"]["engine"] == CANDIDATE and not decision["kept_current"]


def test_equal_throughput_keeps_the_current_configuration() -> None:
    decision = at.choose([repeated({}, [1000.0]), repeated(CANDIDATE, [1000.0])], 500.0)
    assert decision["kept_current"] and decision["best"]["engine"] == {}
    assert "highest median" in decision["reason"]


def test_old_result_key_is_one_repeat() -> None:
    decision = at.choose([{"engine": {}, "result": bench(1000.0)}, trial(8, 512, 1500.0, 200.0)], 500.0)
    assert decision["trials"][1]["repeats"] == 1 and decision["trials"][1]["output_throughputs"] == [1500.0]
    assert decision["best"]["engine"] == {"max_num_seqs": 8, "max_num_batched_tokens": 512}


def test_current_missing_the_target_loses_without_the_noise_check() -> None:
    decision = at.choose(
        [repeated({}, [2000.0] * 3, p99=900.0), repeated(CANDIDATE, [900.0, 1000.0, 1100.0])], 500.0
    )
    assert not decision["kept_current"] and decision["best"]["engine"] == CANDIDATE
    assert "misses the target" in decision["reason"]


def test_target_not_met_writes_nothing() -> None:
    decision = at.choose(
        [repeated({}, [1000.0] * 3, p99=700.0), repeated(CANDIDATE, [2000.0] * 3, p99=600.0)], 500.0
    )
    assert not decision["met_target"] and not decision["kept_current"]
    assert decision["best"]["engine"] == CANDIDATE  # reported: the lowest median latency
    assert "no trial met the target" in decision["reason"]
    assert at.group_overrides(decision, {"dtype": "float16"}) == {
        "vllm_fleet_engine_args": {"dtype": "float16"}
    }


def test_a_failed_repeat_fails_the_trial() -> None:
    flaky = {"engine": CANDIDATE, "results": [bench(5000.0), bench(0.0, completed=0), bench(5000.0)]}
    decision = at.choose([repeated({}, [1000.0] * 3), flaky], 500.0)
    assert decision["kept_current"] and decision["trials"][1]["reason"].startswith("repeat 2 of 3")


def test_group_overrides_respects_kept_current() -> None:
    decision = {"met_target": True, "kept_current": True, "best": {"engine": CANDIDATE}}
    assert at.group_overrides(decision, {"dtype": "float16"}) == {
        "vllm_fleet_engine_args": {"dtype": "float16"}
    }
    assert at.group_overrides({**decision, "kept_current": False})["vllm_fleet_engine_args"] == CANDIDATE


@pytest.mark.parametrize(
    ("trials", "message"),
    [
        ([{"engine": {}}], "has no 'results'"),
        ([{"engine": {}, "results": []}], "autotune_repeats must be >= 1"),
        ([{"results": [bench(1.0)]}], "no 'engine'"),
        ([], "no trials"),
        ([{"engine": {}, "results": [bench(0.0, completed=0)]}], "no trial completed requests"),
    ],
)
def test_choose_errors(trials: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(at.AutotuneError, match=message):
        at.choose(trials, 500.0)


def test_filter_wraps_errors() -> None:
    from ansible.errors import AnsibleFilterError
    from ansible_collections.vllm_fleet.fleet.plugins.filter import observe

    with pytest.raises(AnsibleFilterError, match="autotune_choose: trial 0 has no 'results'"):
        observe.autotune_choose([{"engine": {}}], 500)
    decision = observe.autotune_choose(
        [repeated({}, [1000.0]), repeated(CANDIDATE, [900.0])], "500", min_gain="0.05"
    )
    assert observe.autotune_overrides(decision, {}) == {"vllm_fleet_engine_args": {}}
