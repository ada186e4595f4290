"""The planner's I/O edge: plan_for_model takes the model as a config dict or a path (the filters' and CLI's entry)."""

from __future__ import annotations

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError, plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (
    ModelFilesError,
    load_model,
    plan_for_model,
)

from .planner_data import MODELS, facts, model


def test_a_path_is_read_with_its_weight_bytes_and_directory() -> None:
    path = MODELS / "llama-3.1-8b"
    config, weights_total, model_dir = load_model(str(path))
    assert weights_total and model_dir == str(path)
    expected = plan(facts("h200x2"), config, weights_total_bytes=weights_total, model_path=model_dir)
    assert plan_for_model(facts("h200x2"), path) == expected
    assert plan_for_model(facts("h200x2"), path / "config.json") == expected


def test_a_config_dict_has_no_weights_file_and_no_model_path() -> None:
    result = plan_for_model(facts("h200x2"), model("llama-3.1-8b"))
    assert result == plan(facts("h200x2"), model("llama-3.1-8b"))
    assert "model" not in result["engine_args"]


def test_options_are_adapted_as_the_vllm_plan_filter_takes_them() -> None:
    result = plan_for_model(facts("h200x2"), MODELS / "tiny-llama", profile="batch", vllm_version=0.32,
                            engine_args={"max_model_len": 2048}, policy={"max_nodes": 1},
                            extra_args=("--seed=1",), served_model_path="/srv/models/tiny")
    assert result["engine_args"]["model"] == "/srv/models/tiny"
    assert result["engine_args"]["max-model-len"] == 2048
    assert result["vllm_version"] == "0.32.0"


def test_refusals() -> None:
    with pytest.raises(PlanError, match="input must be the gpu_facts dict, not list"):
        plan_for_model([], model("tiny-llama"))
    with pytest.raises(ModelFilesError, match="does not exist"):
        plan_for_model({}, MODELS / "no-such-model")
    with pytest.raises(PlanError, match="unknown profile"):
        plan_for_model({}, model("tiny-llama"), profile="realtime")
