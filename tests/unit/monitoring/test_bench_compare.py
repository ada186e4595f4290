"""The pure benchmark comparison logic (plugins/plugin_utils/observe/bench.py)."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import bench as bc


def result(
    concurrency: int, tput: float, p99_ttft: float = 50.0, p99_e2e: float = 200.0, **extra: Any
) -> dict[str, Any]:
    """The fields `vllm bench serve --save-result` writes that the comparison uses."""
    return {
        "max_concurrency": concurrency,
        "completed": 200,
        "output_throughput": tput,
        "request_throughput": tput / 16,
        "p50_ttft_ms": p99_ttft / 2,
        "p99_ttft_ms": p99_ttft,
        "p50_e2el_ms": p99_e2e / 2,
        "p99_e2el_ms": p99_e2e,
        **extra,
    }


BASE = bc.summarize([result(1, 100.0), result(4, 300.0)])


def test_summary_is_keyed_by_concurrency_with_medians() -> None:
    s = bc.summarize([result(4, 300.0), result(4, 330.0), result(4, 100.0), result(1, 90.0)])
    assert list(s) == ["1", "4"]
    assert s["4"]["output_throughput"] == 300.0
    assert s["4"]["repeats"] == 3
    assert s["4"]["output_throughput_spread"] == pytest.approx((330 - 100) / 300)
    assert "output_throughput_spread" not in s["1"]


def test_same_numbers_no_regression() -> None:
    c = bc.compare(BASE, BASE)
    assert not c["regressed"] and c["compared_levels"] == [1, 4]
    assert len(c["findings"]) == 2 * len(bc.GATED)


@pytest.mark.parametrize(
    ("current", "regressed", "metric"),
    [
        ([result(1, 100.0), result(4, 256.0)], False, None),  # -14.7 %: inside 15 %
        ([result(1, 100.0), result(4, 254.0)], True, "output_throughput"),  # -15.3 %
        ([result(1, 100.0), result(4, 400.0)], False, None),  # faster is never a regression
        ([result(1, 100.0, p99_ttft=58.0), result(4, 300.0)], True, "p99_ttft_ms"),  # +16 %
        ([result(1, 100.0, p99_ttft=57.0), result(4, 300.0)], False, None),  # +14 %
        ([result(1, 100.0), result(4, 300.0, p99_e2e=240.0)], True, "p99_e2el_ms"),  # +20 %
        ([result(1, 100.0), result(4, 300.0, p99_e2e=100.0)], False, None),  # latency fell
    ],
)
def test_threshold_edges(current: list[dict[str, Any]], regressed: bool, metric: str | None) -> None:
    c = bc.compare(BASE, bc.summarize(current))
    assert c["regressed"] is regressed
    if metric:
        assert [f["metric"] for f in c["regressions"]] == [metric]


def test_threshold_is_a_parameter() -> None:
    slower = bc.summarize([result(1, 100.0), result(4, 240.0)])  # -20 %
    assert bc.compare(BASE, slower, 0.15)["regressed"]
    assert not bc.compare(BASE, slower, 0.25)["regressed"]
    with pytest.raises(bc.BenchError, match="between 0 and 1"):
        bc.compare(BASE, slower, 15)


def test_repeat_spread_widens_the_limit_but_not_for_big_drops() -> None:
    noisy_base = bc.summarize([result(4, 300.0), result(4, 240.0), result(4, 330.0)])  # spread 30 %
    small_drop = bc.summarize([result(4, 250.0)])  # -16.7 %, inside the noise
    big_drop = bc.summarize([result(4, 100.0)])  # -66.7 %
    c = bc.compare(noisy_base, small_drop)
    assert not c["regressed"]
    assert c["findings"][0]["limit"] == pytest.approx(0.3)
    assert bc.compare(noisy_base, big_drop)["regressed"]
    very_noisy = bc.summarize([result(4, 300.0), result(4, 60.0), result(4, 330.0)])  # spread 90 %
    c = bc.compare(very_noisy, bc.summarize([result(4, 120.0)]))  # -60 %: more than noise may excuse
    assert c["regressed"] and c["findings"][0]["limit"] == bc.DEFAULT_MAX_NOISE
    assert not bc.compare(very_noisy, bc.summarize([result(4, 120.0)]), max_noise=0.7)["regressed"]


def test_levels_in_only_one_run_are_reported_not_compared() -> None:
    c = bc.compare(BASE, bc.summarize([result(4, 100.0), result(16, 50.0)]))
    assert c["compared_levels"] == [4] and c["missing_levels"] == [1, 16]
    assert c["regressed"]


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([], "no benchmark results"),
        ([{"completed": 3, "output_throughput": 1.0}], "without max_concurrency"),
        ([result(4, 100.0, completed=0)], "completed no request"),
        ([{"max_concurrency": 2, "completed": 1}], "no output_throughput"),
    ],
)
def test_bad_results_are_refused(results: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(bc.BenchError, match=message):
        bc.summarize(results)


def test_plan_hash_is_stable_and_ignores_explanations() -> None:
    plan = {"vllm_version": "0.32.0", "device": "cpu", "cli_args": ["--max-num-seqs", "8"], "env": {}}
    same = {**plan, "reasons": {"max-num-seqs": "words"}, "warnings": ["w"]}
    other = {**plan, "cli_args": ["--max-num-seqs", "16"]}
    assert bc.plan_hash(plan) == bc.plan_hash(same)
    assert bc.plan_hash(plan) != bc.plan_hash(other)
    assert len(bc.plan_hash(plan)) == 12
    assert bc.plan_hash(None) == "noplan"


def test_key_path_is_file_system_safe() -> None:
    key = bc.baseline_key("gpu-01", "meta-llama/Llama 3", "registry:5000/vllm:0.32-abc", "deadbeef")
    assert bc.key_path(key) == ["gpu-01", "meta-llama_Llama_3", "registry_5000_vllm_0.32-abc", "deadbeef"]
    assert bc.key_path(bc.baseline_key("..", "m", "i", "p"))[0] == "unknown"


def test_markdown_report() -> None:
    key = bc.baseline_key("local", "tiny", "img", "abc")
    slower = bc.summarize([result(1, 100.0), result(4, 100.0)])
    md = bc.render_markdown(key, slower, bc.compare(BASE, slower), ["python", "bench"])
    assert "**REGRESSION**" in md and "| 4 | output tok/s | 300.00 | 100.00 | -66.7 % | 15 % | yes |" in md
    assert "python bench" in md
    assert "this run is now the baseline" in bc.render_markdown(key, BASE, None)


def test_a_p99_over_few_requests_gives_way_to_the_p50() -> None:
    """32 requests: their P99 is the slowest one (CI saw +136 % on an unchanged server while its neighbour restarted),
    so the P50 is gated, and the finding and the report say so; with enough requests the P99 is gated again."""
    few = bc.summarize([result(1, 100.0, completed=32)])
    stalled = bc.summarize([result(1, 100.0, completed=32, p99_ttft_ms=150.0, p99_e2el_ms=600.0)])
    c = bc.compare(few, stalled)
    assert not c["regressed"], c["findings"]
    assert [f["metric"] for f in c["findings"]] == ["output_throughput", "p50_ttft_ms", "p50_e2el_ms"]
    assert c["findings"][1]["note"] == ("P99 TTFT ms over 32 requests is the slowest one or two: P50 TTFT ms gated "
                                        "instead (P99 needs 100)")
    slower_median = bc.summarize([result(1, 100.0, completed=32, p50_ttft_ms=40.0)])  # +60 % on the P50
    assert [f["metric"] for f in bc.compare(few, slower_median)["regressions"]] == ["p50_ttft_ms"]
    many = bc.summarize([result(1, 100.0, completed=100)])
    assert [f["metric"] for f in bc.compare(many, bc.summarize([result(1, 100.0, p99_ttft=150.0)]))["regressions"]] \
        == ["p99_ttft_ms"]
    old_baseline = {"1": {k: v for k, v in BASE["1"].items() if k != "completed"}}  # libraries written before
    assert [f["metric"] for f in bc.compare(old_baseline, BASE)["findings"]] == list(bc.GATED)
    md = bc.render_markdown(bc.baseline_key("h", "m", "i", "p"), stalled, c)
    assert "- concurrency 1: P99 TTFT ms over 32 requests is the slowest one or two" in md
