"""Preflight's planning step (plugins/plugin_utils/preflight/planning.py): options and the plan as data."""

from __future__ import annotations

import json
from pathlib import Path

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight import planning as fp

ROOT = Path(__file__).resolve().parents[3]
T4 = json.loads((ROOT / "tests/fixtures/preflight/recorded_facts/t4-a.json").read_text())
MODELS = ROOT / "tests/fixtures/preflight/models"


def test_plan_options_are_the_set_variables() -> None:
    variables = {"vllm_fleet_profile": "batch", "vllm_fleet_policy": None, "vllm_fleet_model": "/m", "other": 1}
    assert fp.plan_options(variables) == {"profile": "batch"}
    assert set(fp.PLAN_OPTIONS) == {"profile", "vllm_version", "engine_args", "policy", "extra_args",
                                    "served_model_path", "draft_model"}


def test_plan_options_size_a_multinode_group() -> None:
    records = {"a": {"multinode_group": "g"}, "b": {"multinode_group": "g"}, "c": {"multinode_group": "g"}}
    assert fp.plan_options({"vllm_fleet_policy": {"offline": True}}, records, "b") == {
        "policy": {"offline": True, "max_nodes": 3}}
    assert fp.plan_options({}, records, "unknown") == {}


def test_try_plan_answers_with_data() -> None:
    ok = fp.try_plan(T4, str(MODELS / "llama-3.2-1b"), "t4-a", {"served_model_path": "/srv/m"})
    assert ok["error"] is None and ok["plan"]["engine_args"]["model"] == "/srv/m"
    assert fp.try_plan("facts", {}, "h") == {"plan": None, "error": "h: input must be the gpu_facts dict, not str"}
    missing = fp.try_plan(T4, str(MODELS / "nope"), "h")
    assert missing["plan"] is None and missing["error"].startswith("h: model path ")
    unknown = fp.try_plan(T4, {}, "h", {"profil": "chat", "zz": 1})
    assert unknown["error"] == ("h: vllm_plan rejected the options: unknown option(s) profil, zz (known: "
                                + ", ".join(fp.PLAN_OPTIONS) + ")")
    wrong = fp.try_plan(T4, str(MODELS / "llama-3.2-1b"), "h", {"engine_args": 5})
    assert wrong["plan"] is None and wrong["error"].startswith("h: vllm_plan rejected the options: ")


def test_plan_options_drop_unset_and_a_pinned_max_nodes_wins() -> None:
    variables = {"vllm_fleet_engine_args": {"max_model_len": 4096}, "vllm_fleet_profile": None,
                 "vllm_fleet_vllm_version": "0.32.0"}
    assert fp.plan_options(variables) == {"engine_args": {"max_model_len": 4096}, "vllm_version": "0.32.0"}
    records = {"a": {"multinode_group": "g"}, "b": {"multinode_group": "g"}, "c": {"multinode_group": None}}
    assert fp.plan_options(variables, records, "a")["policy"] == {"max_nodes": 2}
    assert "policy" not in fp.plan_options(variables, records, "c")
    pinned = dict(variables, vllm_fleet_policy={"max_nodes": 1})
    assert fp.plan_options(pinned, records, "a")["policy"] == {"max_nodes": 1}


def test_try_plan_keeps_the_planners_choice_and_its_refusal_is_one_line() -> None:
    """A T4 gets no bfloat16; a model too large for it is refused in one line naming the host."""
    ok = fp.try_plan(T4, str(MODELS / "llama-3.2-1b"), "t4-a", {"engine_args": {"max_model_len": 4096}})
    assert ok["error"] is None and ok["plan"]["device"] == "cuda"
    assert ok["plan"]["engine_args"].get("dtype") != "bfloat16"
    bad = fp.try_plan(T4, str(MODELS / "llama-3.1-405b"), "t4-a")
    assert bad["plan"] is None and bad["error"].startswith("t4-a: the model does not fit")
    assert "\n" not in bad["error"]
