# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""One host's inventory inputs, preflight's first layer (no facts needed).

:func:`check_host_inputs` checks the SKU group (exactly one ``gpu_<sku>`` or ``cpu_<lane>``), the variable names
(removed and renamed ones, unknown ``vllm_fleet_*`` and ``vllm_serve_*`` names, with the nearest known name), their
types, and the launch settings' types (:func:`check_launch_settings`); the engine arguments, extra arguments and
environment through :mod:`.engine_args`; secrets in the wrong variable and the API key through :mod:`.secrets`.
:func:`host_warnings` gives the one-line warnings that do not stop a run (a missing API key when only planning).

Every check returns a list of one-line messages (empty = all good), each naming the host and saying what to change;
nothing here raises on bad input. Pure (stdlib only, typed, no I/O).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (
    LAUNCH_VARIABLES,
    setting_problem,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.engine_args import (
    check_engine_args,
    check_env,
    check_extra_args,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.machines import (
    DEFAULT_PORT_VARIABLES,
    PORT_VARIABLES_ERROR,
    check_port,
    port_variables,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.secrets import (
    SECRET_VALUE_VARIABLES,
    api_key_problem,
    secret_values,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.values import (
    did_you_mean,
    is_name_list,
    type_name,
)

#: SKU groups: ``gpu_<sku>`` for GPU hosts, ``cpu_<lane>`` for the CPU lane. A host is in exactly one.
SKU_GROUP_RE = re.compile(r"^(gpu|cpu)_[a-z0-9_]+$")

#: Top-level variables that existed in older layouts or old blog recipes, and what to use instead.
REMOVED_VARIABLES: dict[str, str] = {
    "vllm_max_paddings": "removed in vLLM V1 (the scheduler works by token budget): drop it, or pin "
    "vllm_fleet_engine_args.max_num_batched_tokens",
    "vllm_swap_space": "removed in vLLM V1 (preemption recomputes): drop it; for CPU KV offload pin "
    "vllm_fleet_engine_args.kv_offloading_size",
    "vllm_worker_use_ray": "removed: pin vllm_fleet_engine_args.distributed_executor_backend: ray",
    "vllm_disable_log_requests": "removed: request logging is off by default in vLLM 0.32",
    "vllm_use_v1": "removed: V1 is the only engine",
    "vllm_model": "renamed to vllm_fleet_model",
    "vllm_profile": "renamed to vllm_fleet_profile",
    "vllm_version": "renamed to vllm_fleet_vllm_version",
    "vllm_gpu_memory_utilization": "renamed to vllm_fleet_engine_args.gpu_memory_utilization",
    "vllm_tensor_parallel_size": "renamed to vllm_fleet_engine_args.tensor_parallel_size",
    "vllm_max_model_len": "renamed to vllm_fleet_engine_args.max_model_len",
    "vllm_extra_args": "renamed to vllm_fleet_extra_args",
    "vllm_api_key": "renamed to vllm_fleet_api_key",
    "vllm_port": "renamed to vllm_serve_port (the vllm_serve role's port)",
    "gpu_count": "discovered facts are never typed into the inventory: remove it (gpu_facts finds it)",
    "gpu_name": "discovered facts are never typed into the inventory: remove it (gpu_facts finds it)",
    "gpu_memory_mib": "discovered facts are never typed into the inventory: remove it (gpu_facts finds it)",
}

#: Every variable preflight reads. Anything else named ``vllm_fleet_*`` is a typo.
KNOWN_VARIABLES: dict[str, str] = {
    "vllm_fleet_model": "str",
    "vllm_fleet_profile": "str",
    "vllm_fleet_vllm_version": "str",
    "vllm_fleet_engine_args": "dict",
    "vllm_fleet_extra_args": "list",
    "vllm_fleet_policy": "dict",
    "vllm_fleet_served_model_path": "str",
    "vllm_fleet_draft_model": "str",  # or a dict: the draft's config.json (speculative decoding)
    "vllm_fleet_env": "dict",
    "vllm_fleet_port_variables": "list",
    "vllm_fleet_api_key": "secret",
    "vllm_fleet_api_key_required": "bool",
    "vllm_fleet_multinode_group": "str",
    "vllm_fleet_recorded_facts_dir": "str",
    "vllm_fleet_image_cuda_version": "cuda",
    "vllm_fleet_sku_match": "str",
    "vllm_fleet_artifacts_dir": "str",
    "vllm_fleet_report": "bool",
    # Read by playbooks/deploy.yml: a failed first start is re-planned from vLLM's message and retried once
    # (false: the failed replica is stopped and the proposed fix printed). docs/runbooks/oom-startup.md.
    "vllm_fleet_autocorrect": "bool",
    # Read by playbooks/deploy.yml (rollout shape).
    "vllm_fleet_rollout_canary": "any",
    "vllm_fleet_rollout_batch": "any",
    "vllm_fleet_rollout_max_fail_percentage": "any",
    # Read by playbooks/deploy.yml (secrets reach vLLM as HF_TOKEN; plan feedback).
    "vllm_fleet_hf_token": "secret",
    # A model reference (plugin_utils/planner/model_source.py) and its staging (playbooks/stage.yml).
    "vllm_fleet_model_root": "str",
    "vllm_fleet_model_cache": "str",
    "vllm_fleet_offline": "bool",
    "vllm_fleet_model_keep": "any",
    "vllm_fleet_stage_batch": "any",
    "vllm_fleet_stage_rate_bytes": "any",
    "vllm_fleet_stage_progress_steps": "any",
    "vllm_fleet_stage_timeout_s": "any",
    "vllm_fleet_feedback_dir": "str",
    "vllm_fleet_feedback_tolerance": "any",
    # Facts preflight itself sets (allowed to exist on a re-run inside one ansible-playbook process).
    "vllm_fleet_plan": "any",
    "vllm_fleet_facts": "any",
    "vllm_fleet_launch": "any",
    # The plan feedback deploy.yml sets on each host before it plans the fleet again with the observed components.
    "vllm_fleet_feedback": "any",
}

#: ``vllm_serve_*`` names preflight knows beyond the launch settings (``deploy/launch.py`` LAUNCH_SETTINGS) and the
#: vllm_serve role's documented inputs (its meta/argument_specs.yml, which the filter passes as ``role_inputs``):
#: the role's loop variable, which stays a host fact after a deploy (a re-run inside one ansible-playbook process).
#: The port variables (:data:`.machines.DEFAULT_PORT_VARIABLES`, vllm_fleet_port_variables) and the secrets are
#: known too.
SET_BY_ROLE: frozenset[str] = frozenset({"vllm_serve_replica"})

_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+([.+-][0-9A-Za-z.+-]+)?$")
_CUDA_RE = re.compile(r"^\d+\.\d+$")


def sku_groups(group_names: Iterable[str]) -> list[str]:
    """The SKU groups (``gpu_*``/``cpu_*``) among a host's groups, sorted."""
    return sorted(g for g in group_names if SKU_GROUP_RE.match(g))


def planning_only(variables: Mapping[str, Any]) -> bool:
    """True when the run only plans: GPU facts come from ``vllm_fleet_recorded_facts_dir``, no host is reached."""
    value = variables.get("vllm_fleet_recorded_facts_dir")
    return isinstance(value, str) and bool(value.strip())


def host_warnings(host: str, variables: Mapping[str, Any], *, planning: bool | None = None) -> list[str]:
    """One host's warnings: what does not stop this run but would stop a deploy.

    ``planning`` says the run only plans (default: :func:`planning_only`); then a missing or placeholder API key
    is a warning here instead of an error of :func:`check_host_inputs`.
    """
    if not (planning_only(variables) if planning is None else planning):
        return []
    problem = api_key_problem(variables)
    if problem is None:
        return []
    state = "is not set" if problem == "missing" else "is empty or a placeholder"
    return [f"{host}: the API-key secret vllm_fleet_api_key {state}: fine for planning from recorded facts, but a "
            "deploy needs it: put it in an ansible-vault file or export VLLM_FLEET_API_KEY (or set "
            "vllm_fleet_api_key_required: false for a closed lab)"]


def _unknown(host: str, name: str, known: Iterable[str]) -> str:
    return f"{host}: unknown variable {name}{did_you_mean(name, known)}: rename it, or remove it"


def serve_variables(variables: Mapping[str, Any], role_inputs: Iterable[str] = ()) -> frozenset[str]:
    """Every ``vllm_serve_*`` name preflight accepts for a host: the launch settings, the vllm_serve role's
    documented inputs (``role_inputs``), the port variables it checks, the secrets and :data:`SET_BY_ROLE`."""
    try:
        ports = port_variables(variables.get("vllm_fleet_port_variables"))
    except ValueError:
        ports = list(DEFAULT_PORT_VARIABLES)
    return frozenset({*LAUNCH_VARIABLES, *role_inputs, *DEFAULT_PORT_VARIABLES, *ports, *SECRET_VALUE_VARIABLES,
                      *SET_BY_ROLE})


def check_launch_settings(host: str, variables: Mapping[str, Any]) -> list[str]:
    """The launch settings a host sets (``vllm_serve_*``, ``deploy/launch.py`` LAUNCH_SETTINGS) have their types.

    A port is checked as :func:`.machines.check_ports` checks it (the same line: fleet preflight reports it once).
    """
    errors: list[str] = []
    for name in sorted(LAUNCH_VARIABLES.keys() & variables.keys()):
        setting, value = LAUNCH_VARIABLES[name], variables[name]
        if setting.kind == "port" and value is not None and value != "":
            errors += check_port(host, name, value)
            continue
        problem = setting_problem(setting, value)
        if problem:
            errors.append(f"{host}: {name} {problem}")
    return errors


def check_host_inputs(host: str, variables: Mapping[str, Any], group_names: Sequence[str], *,
                      planning: bool | None = None, role_inputs: Iterable[str] = ()) -> list[str]:
    """Validate one host's inventory: SKU group, variable names, types, ranges, secrets.

    ``variables`` holds every host variable whose name starts with ``vllm_`` or is a removed name
    (the playbook collects them with the ``varnames`` lookup), already templated. ``planning`` says the run only
    plans (default: :func:`planning_only`, i.e. ``vllm_fleet_recorded_facts_dir`` is set): a missing API key is then
    :func:`host_warnings`' warning, not an error. A secret in any other variable is an error either way.
    ``role_inputs``: the vllm_serve role's documented inputs (its argument spec's options); any other
    ``vllm_serve_*`` name that is not a launch setting is refused with the nearest known name (:func:`serve_variables`).
    """
    errors: list[str] = []
    skus = sku_groups(group_names)
    if not skus:
        errors.append(f"{host}: is in no SKU group: add it to exactly one gpu_<sku> group (or cpu_<lane> for "
                      f"the CPU lane); its groups are {', '.join(sorted(group_names)) or 'none'}")
    elif len(skus) > 1:
        errors.append(f"{host}: is in {len(skus)} SKU groups ({', '.join(skus)}): a host has exactly one GPU "
                      "SKU; remove it from all but one")

    serve = serve_variables(variables, role_inputs)
    for name in sorted(variables):
        if name in REMOVED_VARIABLES:
            errors.append(f"{host}: variable {name} is no longer used: {REMOVED_VARIABLES[name]}")
        elif name.startswith("vllm_fleet_") and name not in KNOWN_VARIABLES:
            errors.append(_unknown(host, name, KNOWN_VARIABLES))
        elif name.startswith("vllm_serve_") and name not in serve:
            errors.append(_unknown(host, name, serve))
    errors += check_launch_settings(host, variables)

    model = variables.get("vllm_fleet_model")
    if model is None:
        errors.append(f"{host}: vllm_fleet_model is not set: set it to a model directory or config.json "
                      "on the controller")
    elif not isinstance(model, (str, Mapping)) or (isinstance(model, str) and not model.strip()):
        errors.append(f"{host}: vllm_fleet_model must be a path (model directory or config.json), "
                      f"got {type_name(model)} {model!r}")

    if "vllm_fleet_policy" in variables and not isinstance(variables["vllm_fleet_policy"], Mapping):
        errors.append(f"{host}: vllm_fleet_policy must be a dict (e.g. {{max_nodes: 2}}), "
                      f"got {type_name(variables['vllm_fleet_policy'])}")
    for name in ("vllm_fleet_multinode_group", "vllm_fleet_served_model_path", "vllm_fleet_recorded_facts_dir",
                 "vllm_fleet_sku_match", "vllm_fleet_artifacts_dir"):
        if name in variables and variables[name] is not None and not isinstance(variables[name], str):
            errors.append(f"{host}: {name} must be a string, got {type_name(variables[name])}")
    for name in ("vllm_fleet_api_key_required", "vllm_fleet_report", "vllm_fleet_autocorrect"):
        if name in variables and not isinstance(variables[name], bool):
            errors.append(f"{host}: {name} must be true or false, got {type_name(variables[name])} "
                          f"{variables[name]!r} (use JSON on the command line: -e '{{\"{name}\": true}}')")

    version = variables.get("vllm_fleet_vllm_version")
    if version is not None and (not isinstance(version, str) or not _VERSION_RE.match(version)):
        errors.append(f"{host}: vllm_fleet_vllm_version must be a quoted version like \"0.32.0\", got {version!r}")
    image_version = variables.get("vllm_image_vllm_version")
    if version is not None and image_version is not None and str(image_version) != str(version):
        errors.append(f"{host}: vllm_image_vllm_version {image_version!r} differs from vllm_fleet_vllm_version "
                      f"{version!r}: the image must run the vLLM the plan was made for; set them equal")
    cuda = variables.get("vllm_fleet_image_cuda_version")
    if cuda is not None and (not isinstance(cuda, str) or not _CUDA_RE.match(cuda)):
        errors.append(f"{host}: vllm_fleet_image_cuda_version must be a quoted CUDA version like \"13.0\", "
                      f"got {cuda!r}")

    target = version if isinstance(version, str) else None
    secrets = secret_values(variables)
    if "vllm_fleet_engine_args" in variables:
        errors += check_engine_args(host, variables["vllm_fleet_engine_args"], vllm_version=target, secrets=secrets)
    if "vllm_fleet_extra_args" in variables:
        pinned = variables.get("vllm_fleet_engine_args")
        errors += check_extra_args(host, variables["vllm_fleet_extra_args"],
                                   pinned if isinstance(pinned, Mapping) else None, vllm_version=target,
                                   secrets=secrets)
    if "vllm_fleet_env" in variables:
        errors += check_env(host, variables["vllm_fleet_env"], vllm_version=target, secrets=secrets)

    if not is_name_list(variables.get("vllm_fleet_port_variables", DEFAULT_PORT_VARIABLES)):
        errors.append(f"{host}: {PORT_VARIABLES_ERROR}")

    hf_token = variables.get("vllm_fleet_hf_token")
    if hf_token is not None and not isinstance(hf_token, str):
        errors.append(f"{host}: vllm_fleet_hf_token must be a string (an ansible-vault value), "
                      f"got {type_name(hf_token)}")

    problem = api_key_problem(variables)
    if not (planning_only(variables) if planning is None else planning):
        if problem == "missing":
            errors.append(f"{host}: the API-key secret vllm_fleet_api_key is missing: put it in an "
                          "ansible-vault file or export VLLM_FLEET_API_KEY (or set vllm_fleet_api_key_required: "
                          "false for a closed lab)")
        elif problem == "placeholder":
            errors.append(f"{host}: the API-key secret vllm_fleet_api_key is empty or a placeholder: "
                          "set a real key (ansible-vault or VLLM_FLEET_API_KEY)")
    return errors
