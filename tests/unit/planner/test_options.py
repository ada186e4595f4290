"""planner/options.py: one declaration per option the project knows beyond its name, and what derives from it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy import launch
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import (
    engine_args,
    engine_fields,
    options,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import _SERVE_OWNED

RELEASES = sorted(engine_fields.ENGINE_ARG_NAMES)


@pytest.mark.parametrize("series", RELEASES)
def test_every_declared_option_is_a_vllm_option_of_every_release(series: str) -> None:
    every = engine_fields.engine_arg_names(series) | engine_fields.serve_only_names(series)
    assert {o.name for o in options.OPTIONS} <= every, sorted({o.name for o in options.OPTIONS} - every)


@pytest.mark.parametrize("series", RELEASES)
def test_the_declared_kinds_agree_with_vllms_parser(series: str) -> None:
    """An option declared bool is one of the release's on/off options (read from vLLM's parser), and back."""
    switches = engine_fields.negatable_names(series) | engine_fields.switch_names(series)
    for opt in options.OPTIONS:
        assert (opt.kind == "bool") == (opt.name in switches), opt


def test_the_derived_tables() -> None:
    assert options.ENGINE_ARG_ORDER[0] == "model" and "enable-eplb" not in options.ENGINE_ARG_ORDER
    assert options.INT_ENGINE_ARGS["max_model_len"] == (16, 100_000_000)
    assert options.FLOAT_ENGINE_ARGS["gpu_memory_utilization"] == (0.0, 1.0)
    assert engine_args.INT_ARGS["seed"] == 0 and engine_args.INT_ARGS["max-num-seqs"] == 1
    assert {"api-key", "nnodes", "headless", "data-parallel-rpc-port"} <= launch._NOT_IN_FILE
    assert "max-num-seqs" not in launch._NOT_IN_FILE
    assert _SERVE_OWNED["port"].startswith("set vllm_serve_port")
    assert set(options.NOT_MODELLED) == {o.name for o in options.OPTIONS if o.owner == "refused"}


def test_a_bad_declaration_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown"):
        options.EngineOption("x", "integer", "planner", "x")


def test_the_cli_flags_and_help_come_from_the_table() -> None:
    out = subprocess.run([sys.executable, "-m", "vllm_fleet.cli", "plan", "--help"], capture_output=True, text=True,
                         check=True).stdout
    flat = " ".join(out.split())
    for opt in options.OPTIONS:
        if opt.cli:
            assert f"--{opt.key}" in out, opt.key
            assert " ".join(opt.help.split()[:4]) in flat, opt.help
