"""Inventory mistakes preflight catches before anything runs (preflight/inputs.py, engine_args.py, secrets.py):
unknown engine-arg names, a flag and its value in one extra-args item, secrets in the wrong variable, and the API
key when only planning. Every message is one line that names the host and says what to change."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import (
    check_engine_args,
    check_extra_args,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.inputs import (
    check_host_inputs,
    host_warnings,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.secrets import secret_kind

HOST = "h200-a"
KEY = "sk-fleet-7f3a9c2e41b8d6"  # the vault value in these tests
HF = "hf_Zq8rT2mWv4Lp9sXc"
BASE: dict[str, Any] = {
    "vllm_fleet_model": "/models/llama/config.json",
    "vllm_fleet_vllm_version": "0.32.0",
    "vllm_fleet_api_key": KEY,
}


def errors_for(**changes: Any) -> list[str]:
    return check_host_inputs(HOST, {**BASE, **changes}, ["vllm_servers", "gpu_h200"])


def one(errors: list[str]) -> str:
    assert len(errors) == 1, errors
    message = errors[0]
    assert message.startswith(f"{HOST}: ") and "\n" not in message
    return message


# ---- 1. unknown engine-argument names ---------------------------------------------------------------

def test_a_misspelt_engine_arg_is_refused_with_the_nearest_name() -> None:
    message = one(errors_for(vllm_fleet_engine_args={"max_num_seq": 64}))
    assert message == (f"{HOST}: vllm_fleet_engine_args.max_num_seq is not a vLLM 0.32 engine argument (did you mean "
                       "max_num_seqs?): fix the name (the names are vLLM's EngineArgs fields, vllm/engine/arg_utils.py)")


def test_a_misspelt_name_next_to_the_right_one_is_still_refused() -> None:
    message = one(errors_for(vllm_fleet_engine_args={"max_num_seqs": 128, "max_num_seq": 64}))
    assert "max_num_seq is not a vLLM 0.32 engine argument (did you mean max_num_seqs?)" in message


@pytest.mark.parametrize(("key", "needle"), [
    ("gpu_memory_utilisation", "did you mean gpu_memory_utilization?"),
    ("enable_prefix_cache", "did you mean enable_prefix_caching?"),
    ("zzz_unheard_of", "is not a vLLM 0.32 engine argument: fix the name"),
    ("tp", "is not a vLLM 0.32 engine argument name: write it as tensor_parallel_size"),
    ("tool_call_parser", "is a vllm serve option, not an engine argument: pass it in vllm_fleet_extra_args as "
                         "--tool-call-parser"),
    ("port", "is a vllm serve option the vllm_serve role sets: set vllm_serve_port"),
])
def test_unknown_engine_arg_names(key: str, needle: str) -> None:
    message = one(errors_for(vllm_fleet_engine_args={key: 1}))
    assert message.startswith(f"{HOST}: vllm_fleet_engine_args.{key} ") and needle in message


def test_every_vllm_engine_arg_name_is_accepted_by_name() -> None:
    """No refusal says "is not a vLLM ... engine argument" for a real name (type checks still apply)."""
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_fields import (
        engine_arg_names,
    )
    for name in sorted(engine_arg_names("0.32.0")):
        errors = check_engine_args(HOST, {name: None})
        assert not any("engine argument" in e and "is not a" in e for e in errors if "ignored" not in e), (name, errors)


def test_unknown_names_are_not_refused_for_a_release_before_the_list() -> None:
    assert check_engine_args(HOST, {"some_old_v0_field": 1}, vllm_version="0.6.3") == []


def test_extra_args_flags_are_checked_by_name() -> None:
    message = one(errors_for(vllm_fleet_extra_args=["--max-num-seq", "64"]))
    assert message == (f"{HOST}: vllm_fleet_extra_args has --max-num-seq, which vLLM 0.32 does not know (did you mean "
                       "--max-num-seqs?): fix the flag (vllm serve exits 2 on an unrecognized argument)")


@pytest.mark.parametrize("extra", [
    ["--enable-log-requests"], ["--tool-call-parser", "hermes", "--enable-auto-tool-choice"],
    ["--no-enable-prefix-caching"], ["--compilation-config.mode", "3"], ["-O3"], ["--chat-template", "a b c"],
    ["--uvicorn-log-level=warning"], ["--max-logprobs", "5"],
])
def test_real_flags_pass(extra: list[str]) -> None:
    assert errors_for(vllm_fleet_extra_args=extra) == []


@pytest.mark.parametrize(("extra", "message"), [
    # Extra args end the command and win over the engine file: these would break what the role set per replica
    # (the health gate's served name and port, a server without its API).
    (["--served-model-name", "chat"], "sets --served-model-name, which the vllm_serve role sets for every replica: "
                                      "set vllm_serve_served_model_name instead"),
    (["--port", "9000"], "sets --port, which the vllm_serve role sets for every replica: set vllm_serve_port"),
    (["--headless"], "sets --headless, which the layout sets for every replica: the multi-node launcher sets it per "
                     "node (vllm_fleet_multinode_group); remove it"),
    (["--seed", "3"], "sets --seed, which preflight type-checks: pin it as vllm_fleet_engine_args.seed instead"),
])
def test_flags_the_launch_record_owns_are_refused(extra: list[str], message: str) -> None:
    assert message in one(errors_for(vllm_fleet_extra_args=extra))


@pytest.mark.parametrize(("flag", "snake"), [("-tp", "tensor_parallel_size"),
                                             ("--device-memory-utilization", "gpu_memory_utilization")])
def test_aliases_of_planned_flags_are_refused(flag: str, snake: str) -> None:
    message = one(errors_for(vllm_fleet_extra_args=[flag, "2"]))
    assert f"sets {flag}, which the planner computes: pin it as vllm_fleet_engine_args.{snake}" in message


# ---- 2. a flag and its value in one list item -------------------------------------------------------

def test_a_flag_and_its_value_in_one_item_is_refused() -> None:
    errors = errors_for(vllm_fleet_extra_args=["--enable-log-requests", "--tool-call-parser hermes"])
    assert one(errors) == (f"{HOST}: vllm_fleet_extra_args[1] '--tool-call-parser hermes' holds a flag and its value "
                           "in one item (vLLM would get them as one unknown argument): write them as two items "
                           '["--tool-call-parser", "hermes"]')


def test_swap_space_in_one_item_gets_both_fixes() -> None:
    errors = errors_for(vllm_fleet_extra_args=["--swap-space 16"])
    assert len(errors) == 2 and all(e.startswith(f"{HOST}: ") for e in errors)
    assert 'write them as two items ["--swap-space", "16"]' in errors[0]
    assert "--swap-space, which vLLM 0.32 rejects" in errors[1] and "kv_offloading_size" in errors[1]


def test_flag_equals_value_with_spaces_in_the_value_is_one_item() -> None:
    assert errors_for(vllm_fleet_extra_args=['--default-chat-template-kwargs={"a": 1}']) == []


# ---- 5. secrets in the wrong variable ---------------------------------------------------------------

def assert_secret_refused(errors: list[str], where: str, fix: str, *values: str) -> None:
    message = one(errors)
    assert message.startswith(f"{HOST}: {where}") and fix in message, message
    for value in (KEY, HF, *values):
        assert value not in message


API_FIX = "put it in vllm_fleet_api_key (ansible-vault) — it reaches vLLM as VLLM_API_KEY"
HF_FIX = "put it in vllm_fleet_hf_token (ansible-vault) — it reaches vLLM as HF_TOKEN"


@pytest.mark.parametrize(("key", "value", "fix"), [
    ("api_key", KEY, API_FIX), ("api-key", "another-key-123", API_FIX), ("hf_token", HF, HF_FIX),
    ("served_model_name", KEY, API_FIX),  # by value: the API key's value under any name
])
def test_secret_in_engine_args(key: str, value: str, fix: str) -> None:
    errors = errors_for(vllm_fleet_engine_args={key: value}, vllm_fleet_hf_token=HF)
    assert_secret_refused(errors, f"vllm_fleet_engine_args.{key} holds ", fix, value)


@pytest.mark.parametrize(("extra", "fix"), [
    (["--api-key", "another-key-123"], API_FIX), (["--api-key=another-key-123"], API_FIX),
    (["--api-key another-key-123"], API_FIX), (["--hf-token", HF], HF_FIX),
])
def test_secret_flag_in_extra_args(extra: list[str], fix: str) -> None:
    flag = extra[0].split("=")[0].split()[0]
    errors = errors_for(vllm_fleet_extra_args=extra, vllm_fleet_hf_token=HF)
    assert_secret_refused(errors, f"vllm_fleet_extra_args has {flag}, which takes ", fix, "another-key-123")


def test_the_api_keys_value_in_extra_args() -> None:
    errors = errors_for(vllm_fleet_extra_args=["--enable-log-requests", "--middleware", KEY])
    assert_secret_refused(errors, "vllm_fleet_extra_args[2] holds the value of vllm_fleet_api_key", API_FIX)


@pytest.mark.parametrize(("name", "fix"), [
    ("VLLM_API_KEY", API_FIX), ("OPENAI_API_KEY", API_FIX), ("HF_TOKEN", HF_FIX),
    ("HUGGING_FACE_HUB_TOKEN", HF_FIX), ("GITHUB_TOKEN", "keep secrets out of it"),
    ("DB_PASSWORD", "keep secrets out of it"), ("AWS_SECRET_ACCESS_KEY", "keep secrets out of it"),
])
def test_secret_names_in_env(name: str, fix: str) -> None:
    errors = errors_for(vllm_fleet_env={name: "s3cr3t-in-env", "VLLM_LOGGING_LEVEL": "INFO"})
    assert_secret_refused(errors, f"vllm_fleet_env.{name} holds ", fix, "s3cr3t-in-env")


def test_the_api_keys_value_under_any_env_name() -> None:
    errors = errors_for(vllm_fleet_env={"MY_SERVICE_AUTH": KEY})
    assert_secret_refused(errors, "vllm_fleet_env.MY_SERVICE_AUTH holds the value of vllm_fleet_api_key", API_FIX)


@pytest.mark.parametrize("name", ["TOKENIZERS_PARALLELISM", "VLLM_MULTI_STREAM_GEMM_TOKEN_THRESHOLD",
                                  "VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE", "VLLM_ENABLE_PREGRAD_PASSES", "HF_TOKEN_PATH"])
def test_vllm_knobs_with_token_in_the_name_are_not_secrets(name: str) -> None:
    assert errors_for(vllm_fleet_env={name: "1"}) == []


def test_only_api_key_and_hf_token_of_vllms_names_look_secret() -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_fields import (
        engine_arg_names,
        serve_only_names,
    )
    secret = {n for n in engine_arg_names() | serve_only_names() if secret_kind(n)}
    assert secret == {"api_key", "hf_token"}


def test_no_message_ever_holds_a_secret_value() -> None:
    errors = errors_for(
        vllm_fleet_hf_token=HF,
        vllm_fleet_engine_args={"api_key": KEY, "hf_token": HF, "max_num_seqs": KEY, "speculative_config": {"k": KEY}},
        vllm_fleet_extra_args=["--api-key", KEY, f"--hf-token={HF}", f"--api-key {KEY}", KEY, f"--x {KEY}"],
        vllm_fleet_env={"VLLM_API_KEY": KEY, "HF_TOKEN": HF, "OTHER": KEY, "NESTED": [KEY]},
    )
    assert len(errors) >= 11
    for message in errors:
        assert message.startswith(f"{HOST}: ")
        assert KEY not in message and HF not in message


def test_a_placeholder_key_is_not_a_secret_value() -> None:
    """A placeholder key (refused on its own) does not make every 'changeme' elsewhere a secret."""
    errors = errors_for(vllm_fleet_api_key="changeme", vllm_fleet_env={"MODE": "changeme"})
    assert one(errors).endswith("is empty or a placeholder: set a real key (ansible-vault or VLLM_FLEET_API_KEY)")


# ---- 6. the API key when only planning ---------------------------------------------------------------

PLANNING = {"vllm_fleet_recorded_facts_dir": "/fleet/recorded_facts"}


@pytest.mark.parametrize("key", [None, "", "CHANGEME"])
def test_planning_only_warns_about_a_missing_key(key: str | None) -> None:
    variables = {**BASE, **PLANNING, "vllm_fleet_api_key": key}
    if key is None:
        del variables["vllm_fleet_api_key"]
    assert check_host_inputs(HOST, variables, ["gpu_h200"]) == []
    warning = one(host_warnings(HOST, variables))
    assert "vllm_fleet_api_key" in warning and "a deploy needs it: put it in an ansible-vault file" in warning


def test_deploying_still_requires_the_key() -> None:
    variables = {k: v for k, v in BASE.items() if k != "vllm_fleet_api_key"}
    assert "the API-key secret vllm_fleet_api_key is missing: put it in an ansible-vault file" in one(
        check_host_inputs(HOST, variables, ["gpu_h200"]))
    assert host_warnings(HOST, variables) == []
    # A caller that knows better overrides the guess from vllm_fleet_recorded_facts_dir, both ways.
    assert one(check_host_inputs(HOST, {**variables, **PLANNING}, ["gpu_h200"], planning=False))
    assert check_host_inputs(HOST, variables, ["gpu_h200"], planning=True) == []
    assert one(host_warnings(HOST, variables, planning=True))


def test_no_warning_when_the_key_is_set_or_not_required() -> None:
    assert host_warnings(HOST, {**BASE, **PLANNING}) == []
    assert host_warnings(HOST, {"vllm_fleet_api_key_required": False, **PLANNING}) == []


def test_hf_token_variable_is_known_and_a_string() -> None:
    assert errors_for(vllm_fleet_hf_token=HF) == []
    assert "vllm_fleet_hf_token must be a string" in one(errors_for(vllm_fleet_hf_token=123))


# ---- what the planner does not model is refused, never passed through ---------------------------------------------

_DP_NEEDLE = "only data_parallel_size is modelled (every rank in one container on one host"


@pytest.mark.parametrize(("args", "needle"), [
    ({"data_parallel_size_local": 2}, _DP_NEEDLE),
    ({"data_parallel_rank": 1}, _DP_NEEDLE),
    ({"data_parallel_start_rank": 2}, _DP_NEEDLE),
    ({"data_parallel_address": "10.0.0.1"}, _DP_NEEDLE),
    ({"data_parallel_rpc_port": 13345}, _DP_NEEDLE),
    ({"data_parallel_backend": "ray"}, _DP_NEEDLE),
    ({"data_parallel_hybrid_lb": True}, _DP_NEEDLE),
    ({"data_parallel_external_lb": True}, _DP_NEEDLE),
    ({"data_parallel_multi_port_external_lb": True}, _DP_NEEDLE),
])
def test_unmodelled_engine_args_are_refused(args: dict[str, Any], needle: str) -> None:
    (key, value), = args.items()
    message = one(check_engine_args(HOST, args))
    assert message.startswith(f"{HOST}: vllm_fleet_engine_args.{key} = {value!r} is refused: ") and needle in message
    assert "serve more replicas" in message


@pytest.mark.parametrize("args", [{"enable_eplb": True}, {"enable_eplb": True, "eplb_config": {"num_redundant_experts": 8}}])
def test_eplb_is_accepted_for_the_planner_to_budget(args: dict[str, Any]) -> None:
    """The planner counts EPLB's redundant experts and buffers (tests/unit/planner/test_moe_layouts.py)."""
    assert check_engine_args(HOST, args) == []


@pytest.mark.parametrize("size", [1, 4])
def test_data_parallel_size_is_accepted(size: int) -> None:
    """The planner lays it out inside one host (tests/unit/preflight/test_data_parallel_layout.py)."""
    assert check_engine_args(HOST, {"data_parallel_size": size}) == []
    assert errors_for(vllm_fleet_engine_args={"data_parallel_size": size}) == []


@pytest.mark.parametrize(("extra", "needle"), [
    (["--data-parallel-size-local", "2"], "has --data-parallel-size-local, which is refused: only data_parallel_size"),
    (["-dpe"], "has -dpe, which is refused: only data_parallel_size is modelled"),
    (["--enable-eplb"], "sets --enable-eplb, which changes the memory plan: pin it as vllm_fleet_engine_args.enable_eplb"),
    (["--eplb-config", "{}"], "pin it as vllm_fleet_engine_args.eplb_config"),
    (["--data-parallel-size", "4"], "pin it as vllm_fleet_engine_args.data_parallel_size"),
    (["-dp", "4"], "pin it as vllm_fleet_engine_args.data_parallel_size"),
])
def test_unmodelled_flags_in_extra_args_are_refused(extra: list[str], needle: str) -> None:
    assert needle in one(check_extra_args(HOST, extra))
