"""Regression against 14 real vLLM start-up observations (tests/fixtures/calibration).

Current-engine observations (V1, vLLM >= 0.10): the README publishes median |error| 1.1 % and worst
over-prediction +4.9 % of predicted KV-cache tokens; the bounds sit just above those figures (1.2 %, 5.0 %), so a
regression fails here instead of hiding under a loose target. The table and the published line are printed
every run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_fleet.calibration import CaseResult, component_errors, evaluate, format_table, summary

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "calibration"


@pytest.fixture(scope="module")
def results():
    observations = [json.loads(line) for line in (DATA / "vllm_startup_observations.jsonl").read_text().splitlines()
                    if line.strip()]
    models = json.loads((DATA / "model_configs.json").read_text())
    return evaluate(observations, models)


def test_every_observation_is_planned(results, capsys):
    with capsys.disabled():
        print("\n" + format_table(results))
    assert len(results) == 14
    assert all(r.predicted_tokens is not None for r in results), [r.note for r in results if r.note]


def test_current_engine_accuracy_targets(results, capsys):
    figures = summary(results)["current_engine"]
    with capsys.disabled():
        print(f"\nREADME: median |error| {figures['median_abs_error']:.1%}, worst over-prediction "
              f"+{figures['max_overprediction']:.1%} ({figures['cases']} current-engine cases)")
    assert figures["cases"] >= 9
    assert figures["median_abs_error"] <= 0.012
    assert figures["max_overprediction"] <= 0.050


def test_every_case_within_twenty_percent(results):
    # V0-era observations are reported too; they must stay within a loose bound.
    for r in results:
        assert abs(r.error) <= 0.20, (r.case_id, r.error)


def test_per_component_errors_where_the_logs_give_them(results):
    # Published figures (docs/sizing.md §6): weights median 0.4 % over 13 logs, KV cache 1.6 % over 14; the
    # activation peak is the weakest term (median 34 %, 8 logs) and its error moves between releases.
    comps = component_errors(results)
    assert list(comps) == ["weights", "activation", "non-torch", "CUDA graphs", "KV cache"]
    assert comps["weights"]["cases"] == 13 and comps["weights"]["median_abs_error"] <= 0.005
    assert comps["KV cache"]["cases"] == 14 and comps["KV cache"]["median_abs_error"] <= 0.017
    assert comps["activation"]["cases"] == 8 and comps["activation"]["median_abs_error"] <= 0.34
    assert comps["activation"]["drift"] and not comps["weights"]["drift"]
    assert "DRIFT" in format_table(results)


def test_drift_flags_a_component_whose_error_moves_between_releases():
    def case(version: str, observed: float, predicted: float) -> CaseResult:
        return CaseResult("c", "v1", version, 1, 1, 0.0, None, None, components={"activation": (observed, predicted)})

    steady = component_errors([case("0.32.0", 1.0, 1.1), case("0.33.0", 2.0, 2.2)])["activation"]
    moved = component_errors([case("0.32.0", 1.0, 1.1), case("0.33.0", 0.5, 1.1)])["activation"]
    assert not steady["drift"] and steady["by_version"] == {"0.32": pytest.approx(0.1), "0.33": pytest.approx(0.1)}
    assert moved["drift"] and moved["by_version"]["0.33"] == pytest.approx(1.2)
