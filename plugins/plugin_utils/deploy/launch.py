# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""How a plan (Contract 2) becomes running vLLM processes: pure, standard library only, no I/O.

- :data:`LAUNCH_SETTINGS` — the launch settings, one typed :class:`LaunchSetting` each (inventory variable, kind,
  default, scope, help): every deployment setting of a host, container settings included (entrypoint, network and
  IPC mode, shm size, ulimits, restart policy, Docker health check, config directory). :func:`launch_settings` reads
  them, :func:`setting_problem` checks one; :func:`launch_record` puts them in the record, the only route from the
  inventory to a container. Not launch settings, and why: the secrets (``vllm_serve_api_key``,
  ``vllm_serve_hf_token``: never written into a record; their names are, their values reach the container at
  deploy), and the vllm_serve role's runtime knobs, which say how a deploy waits and drains, not what runs
  (``vllm_serve_health_*``, from which the role also sizes the Docker health check's ``start_period``,
  ``vllm_serve_drain_*``, ``vllm_serve_lb_*`` including the load balancer's admin socket,
  ``vllm_serve_min_other_servers_up``, ``vllm_serve_state``).

- :func:`engine_config` — the vLLM config file (``--config FILE``) for one replica: the plan's engine
  arguments, the user's pinned overrides, and what the deployment decides (model path in the
  container, served name, bind address, port).
- :func:`replica_layout` — one entry per replica on a host: container name, port, GPU indexes,
  load-balancer server name.
- :func:`multinode_commands` — the per-node commands for a model that spans several hosts, with vLLM's
  own ``mp`` launcher (``--nnodes/--node-rank/--master-addr/--headless``) or a Ray cluster
  (``ray start`` head and workers, ``--distributed-executor-backend ray``).
- :func:`data_parallel_commands` — the per-node commands of data parallelism across a multi-node group
  (``--data-parallel-size-local/--data-parallel-address/--data-parallel-rpc-port``, and
  ``--data-parallel-start-rank --headless`` on the nodes after the first).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.engine_fields import (
    negatable_names,
    switch_names,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.options import NOT_IN_FILE, option
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    DEFAULT_DP_RPC_PORT,
    DEFAULT_MASTER_PORT,
)

__all__ = [
    "LAUNCH_SETTINGS",
    "LAUNCH_VARIABLES",
    "SECRET_ENV",
    "LaunchError",
    "LaunchSetting",
    "container_env",
    "data_parallel_commands",
    "engine_config",
    "launch_record",
    "launch_settings",
    "lb_servers",
    "multinode_commands",
    "replica_layout",
    "setting_problem",
]


class LaunchError(ValueError):
    """Bad launch input; the message says what to change."""


_KEY = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# Never written to the config file (planner/options.py, in_file=False): secrets travel as environment variables
# (VLLM_API_KEY, HF_TOKEN), and the multi-node flags differ per node (or come from the layout), so they go on each
# node's command line.
_NOT_IN_FILE = NOT_IN_FILE
_SCALARS = (str, int, float, bool)


def _norm_key(key: Any) -> str:
    if not isinstance(key, str):
        raise LaunchError(f"engine argument names must be strings, got {key!r}")
    name = key.strip().lstrip("-").replace("_", "-")
    if not _KEY.match(name):
        raise LaunchError(f"engine argument {key!r} is not a vLLM option name (like 'max-num-seqs')")
    return name


def _check_value(key: str, value: Any) -> None:
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value):
        return
    if isinstance(value, dict):
        return  # JSON-valued options (compilation-config, speculative-config, ...)
    raise LaunchError(f"engine argument {key!r} has an unsupported value {value!r}")


def _extra_args(extra: Any) -> list[str]:
    """The plan's ``extra_args``: a list of strings (one flag or one value each; preflight checked them)."""
    if extra is None:
        return []
    if not isinstance(extra, list | tuple) or not all(isinstance(a, str) for a in extra):
        raise LaunchError(f"extra_args must be a list of strings, got {extra!r}")
    return list(extra)


def engine_config(
    plan: dict[str, Any],
    *,
    model_path: str,
    served_model_name: str,
    host: str,
    port: int,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The content of one replica's vLLM config file (keys are long option names without ``--``).

    Order of precedence: the plan's ``engine_args`` < ``overrides`` (the user's pins; a ``None``
    value removes an argument) < the deployment's own keys (``model``, ``served-model-name``,
    ``host``, ``port``). Keys are normalised (``max_num_seqs`` → ``max-num-seqs``) and sorted, so the
    rendered file is stable and diffs cleanly.

    A switch set to ``false`` is written ``no-NAME: true``. vLLM's ``--config`` loader turns a ``false`` into
    ``--no-NAME`` only when the parser it runs in has that option (vllm/utils/argparse_utils.py:617-621 in 0.32.0),
    and it runs in ``vllm``'s top-level parser (``parse_args`` pulls the file in before the ``serve`` subcommand's
    options exist: argparse_utils.py:335), which has none: ``enable-prefix-caching: false`` would be dropped and
    prefix caching stay on. ``no-NAME: true`` becomes ``--no-NAME`` (line 618-619). A ``false`` plain switch
    (``store_true``, no ``--no-`` form: off unless given) is left out. The release's switches come from
    ``planner/engine_fields.py`` for the plan's ``vllm_version``.

    :raises LaunchError: a bad key or value, a missing ``engine_args``, a secret or per-node flag in
        the arguments (they are never written to the file)
    """
    if not isinstance(plan, dict) or not isinstance(plan.get("engine_args"), dict):
        raise LaunchError("plan must be a dict with an 'engine_args' dict (Contract 2)")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise LaunchError(f"port must be an int in 1..65535, got {port!r}")
    for what, value in (("model_path", model_path), ("served_model_name", served_model_name), ("host", host)):
        if not isinstance(value, str) or not value:
            raise LaunchError(f"{what} must be a non-empty string")
    merged: dict[str, Any] = {}
    for key, value in plan["engine_args"].items():
        name = _norm_key(key)
        if value is not None:
            merged[name] = value
    for key, value in (overrides or {}).items():
        name = _norm_key(key)
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    for name in sorted(_NOT_IN_FILE & merged.keys()):
        declared = option(name)
        if declared is not None and declared.owner == "secret":
            raise LaunchError(f"{name} must not be an engine argument: {declared.instead}")
        raise LaunchError(
            f"{name!r} is set per node by the multi-node launcher; remove it from the engine arguments"
        )
    merged.update(
        {"model": model_path, "served-model-name": served_model_name, "host": host, "port": port}
    )
    for name, value in merged.items():
        _check_value(name, value)
    loaded = _switches_as_loaded(merged, plan.get("vllm_version"))
    return {name: loaded[name] for name in sorted(loaded)}


def _switches_as_loaded(args: dict[str, Any], version: Any) -> dict[str, Any]:
    """``args`` with each ``false`` switch in the form vLLM's ``--config`` loader reads (see :func:`engine_config`)."""
    negatable = negatable_names(str(version) if version else None)
    switches = switch_names(str(version) if version else None)
    out: dict[str, Any] = {}
    for name, value in args.items():
        snake = name.replace("-", "_")
        if value is False and snake in negatable:
            out[f"no-{name}"] = True
        elif value is False and snake in switches:
            continue
        else:
            out[name] = value
    return out


def replica_layout(
    plan: dict[str, Any],
    *,
    name: str,
    base_port: int,
    server_prefix: str,
    address: str,
    gpu_indexes: list[int] | None = None,
) -> list[dict[str, Any]]:
    """One entry per replica on a host.

    ``parallel.replicas`` replicas, each with ``parallel.gpus_per_replica`` GPUs taken in order from
    ``gpu_indexes`` (default ``0..``), on consecutive ports from ``base_port``. One replica keeps the
    plain container name; several get ``NAME-0``, ``NAME-1``, ... A data-parallel plan's replica is one
    container with all its ranks' GPUs (``gpus_per_replica`` = DP x TP x PP): vLLM starts the ranks itself
    and gives rank r the GPUs r x TP x PP onwards of the container's, so ``data-parallel-size`` is never
    split over containers.

    :returns: ``[{"index", "container", "port", "address", "server", "device_ids", "backend"}]``;
        ``device_ids`` is empty on the CPU lane (no GPU device request); ``backend`` is the load
        balancer's entry ``{"server", "address", "port"}``
    """
    if not isinstance(plan, dict):
        raise LaunchError("plan must be a dict (Contract 2)")
    parallel = plan.get("parallel") or {}
    replicas = parallel.get("replicas", 1)
    per_replica = parallel.get("gpus_per_replica", 0) if plan.get("device") == "cuda" else 0
    for what, value in (("parallel.replicas", replicas), ("parallel.gpus_per_replica", per_replica)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise LaunchError(f"plan {what} must be an int >= 0, got {value!r}")
    if replicas < 1:
        raise LaunchError("plan parallel.replicas must be >= 1")
    if plan.get("device") == "cuda" and per_replica < 1:
        raise LaunchError("a cuda plan needs parallel.gpus_per_replica >= 1")
    if isinstance(base_port, bool) or not isinstance(base_port, int) or not 1 <= base_port <= 65535 - replicas:
        raise LaunchError(f"base_port must leave room for {replicas} ports, got {base_port!r}")
    if not name or not server_prefix or not address:
        raise LaunchError("name, server_prefix and address must be non-empty")
    indexes = list(range(replicas * per_replica)) if gpu_indexes is None else list(gpu_indexes)
    if len(indexes) < replicas * per_replica:
        raise LaunchError(
            f"{replicas} replicas × {per_replica} GPUs need {replicas * per_replica} GPUs, "
            f"the host has {len(indexes)}"
        )
    layout = []
    for index in range(replicas):
        suffix = "" if replicas == 1 else f"-{index}"
        gpus = indexes[index * per_replica : (index + 1) * per_replica]
        layout.append(
            {
                "index": index,
                "container": f"{name}{suffix}",
                "port": base_port + index,
                "address": address,
                "server": f"{server_prefix}{suffix}",
                "device_ids": [str(g) for g in gpus],
                "backend": {"server": f"{server_prefix}{suffix}", "address": address, "port": base_port + index},
            }
        )
    return layout


def multinode_commands(
    plan: dict[str, Any],
    *,
    backend: str,
    nodes: list[str],
    server_argv: list[str],
    config_path: str,
    master_port: int = DEFAULT_MASTER_PORT,
    ray_port: int = 6379,
    extra_args: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The command each node of a multi-node replica runs, in start order (head first).

    ``mp`` (vLLM's own launcher): every node runs the server with ``--nnodes N --node-rank R
    --master-addr HEAD --master-port P``; ranks > 0 add ``--headless`` (no API server). Ray: the head
    starts ``ray start --head`` and then the API server with ``--distributed-executor-backend ray``
    (vLLM waits for the placement group, i.e. for the workers to join); workers run
    ``ray start --address HEAD:PORT --block``.

    :param nodes: node addresses in rank order; ``nodes[0]`` is the head (serves the API)
    :param server_argv: how the image starts the API server, e.g. ``["vllm", "serve"]``
    :param extra_args: the plan's ``extra_args``: every node's server command ends with them
    :returns: ``[{"rank", "address", "head", "serves_api", "argv", "shell"}]``; ``argv`` is the full
        command; ``shell`` the same, quoted for a shell (runbooks, ``--check`` output)
    """
    if backend not in ("mp", "ray"):
        raise LaunchError(f"multi-node backend must be 'mp' or 'ray', got {backend!r}")
    if not isinstance(nodes, list) or len(nodes) < 2 or not all(isinstance(n, str) and n for n in nodes):
        raise LaunchError("a multi-node launch needs a list of at least 2 node addresses (head first)")
    if len(set(nodes)) != len(nodes):
        raise LaunchError(f"node addresses must be distinct, got {nodes!r}")
    planned = ((plan or {}).get("parallel") or {}).get("nodes", len(nodes))
    if planned != len(nodes):
        raise LaunchError(f"the plan needs {planned} nodes per replica, the host group has {len(nodes)}")
    if not server_argv or not all(isinstance(a, str) and a for a in server_argv):
        raise LaunchError("server_argv must be a non-empty list of strings")
    for what, value in (("master_port", master_port), ("ray_port", ray_port)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
            raise LaunchError(f"{what} must be an int in 1..65535, got {value!r}")
    head = nodes[0]
    base = [*server_argv, "--config", config_path]
    extra = _extra_args(extra_args)
    out: list[dict[str, Any]] = []
    for rank, address in enumerate(nodes):
        is_head = rank == 0
        if backend == "mp":
            argv = [
                *base,
                "--nnodes", str(len(nodes)),
                "--node-rank", str(rank),
                "--master-addr", head,
                "--master-port", str(master_port),
                "--distributed-executor-backend", "mp",
            ]
            if not is_head:
                argv.append("--headless")
            argv += extra
        elif is_head:
            ray = ["ray", "start", "--head", f"--port={ray_port}", f"--node-ip-address={address}"]
            server = [*base, "--distributed-executor-backend", "ray", *extra]
            argv = ["bash", "-c", f"{shlex.join(ray)} && exec {shlex.join(server)}"]
        else:
            argv = ["ray", "start", "--block", f"--address={head}:{ray_port}", f"--node-ip-address={address}"]
        out.append(
            {
                "rank": rank,
                "address": address,
                "head": is_head,
                "serves_api": is_head,
                "argv": argv,
                "shell": shlex.join(argv),
            }
        )
    return out


def data_parallel_commands(
    plan: dict[str, Any],
    *,
    nodes: list[str],
    server_argv: list[str],
    config_path: str,
    rpc_port: int = DEFAULT_DP_RPC_PORT,
    extra_args: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The command each node runs for data parallelism across a multi-node group, in rank order (head first).

    vLLM 0.32's multi-node data parallelism with internal load balancing: every node runs one ``vllm serve`` with
    ``L = data_parallel_size / nodes`` local engines (``--data-parallel-size-local L``) of TP GPUs each, and all nodes
    name the head's address and one RPC port (``--data-parallel-address HEAD --data-parallel-rpc-port P``), where the
    head binds the engines' handshake socket (``v1/engine/utils.py:1313-1328``) and waits for every node's engines
    before it serves (``v1/engine/utils.py:1370-1397``). The head starts its ranks 0..L-1, runs the API servers and
    balances over all N engines. Node k adds ``--data-parallel-start-rank k*L --headless``: no API server
    (``entrypoints/cli/serve.py:69-77``), its engines take the global ranks k*L onwards and hand shake with the head
    (``serve.py:235-256``), and each local rank l takes the container's GPUs l*TP onwards
    (``v1/engine/utils.py:433-470``). The head gets no ``--data-parallel-start-rank``: without ``--headless`` a start
    rank switches vLLM to hybrid load balancing (``serve.py:88-97``, ``engine/arg_utils.py:2448-2450``), in which
    the head balances over its own engines only and headless engines of other nodes are rejected
    (``v1/engine/utils.py:1460-1471``); unset, the head's rank is 0 (``arg_utils.py:2466-2470``). No ``--nnodes``:
    each rank is a whole TP instance inside its node (``parallel.py`` ``nnodes_within_dp`` is 1).

    :param nodes: node addresses in rank order; ``nodes[0]`` is the head (serves the API, binds the RPC port)
    :param server_argv: how the image starts the API server, e.g. ``["vllm", "serve"]``
    :param extra_args: the plan's ``extra_args``: every node's command ends with them
    :returns: ``[{"rank", "address", "head", "serves_api", "start_rank", "size_local", "argv", "shell"}]``
    """
    if not isinstance(nodes, list) or len(nodes) < 2 or not all(isinstance(n, str) and n for n in nodes):
        raise LaunchError("data parallelism across nodes needs a list of at least 2 node addresses (head first)")
    if len(set(nodes)) != len(nodes):
        raise LaunchError(f"node addresses must be distinct, got {nodes!r}")
    parallel = (plan or {}).get("parallel") or {}
    size, planned = parallel.get("data_parallel_size", 1), parallel.get("nodes", len(nodes))
    if planned != len(nodes):
        raise LaunchError(f"the plan spreads data parallelism over {planned} nodes, the host group has {len(nodes)}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 2 or size % len(nodes):
        raise LaunchError(f"data_parallel_size {size!r} does not split evenly over {len(nodes)} nodes")
    if not server_argv or not all(isinstance(a, str) and a for a in server_argv):
        raise LaunchError("server_argv must be a non-empty list of strings")
    if isinstance(rpc_port, bool) or not isinstance(rpc_port, int) or not 1 <= rpc_port <= 65535:
        raise LaunchError(f"rpc_port must be an int in 1..65535, got {rpc_port!r}")
    local = size // len(nodes)
    head = nodes[0]
    out: list[dict[str, Any]] = []
    for rank, address in enumerate(nodes):
        argv = [
            *server_argv, "--config", config_path,
            "--data-parallel-size-local", str(local),
            "--data-parallel-address", head,
            "--data-parallel-rpc-port", str(rpc_port),
        ]
        if rank:
            argv += ["--data-parallel-start-rank", str(rank * local), "--headless"]
        argv += _extra_args(extra_args)
        out.append({"rank": rank, "address": address, "head": rank == 0, "serves_api": rank == 0,
                    "start_rank": rank * local, "size_local": local, "argv": argv, "shell": shlex.join(argv)})
    return out


# ----------------------------------------------------------------------------------------------------
# The launch record: how one host runs its plan (preflight computes it, deploy reads it).
# ----------------------------------------------------------------------------------------------------

#: The kinds of value a launch setting holds (:class:`LaunchSetting`'s ``kind``).
SETTING_KINDS = ("str", "int", "port", "list", "bool", "choice")
#: Where a setting lands in the launch record: ``host`` — once, at the top of the host's ``launch``; ``replica`` —
#: in every replica's entry (the container's settings; some derived per replica: NAME-i, PORT+i).
SETTING_SCOPES = ("host", "replica")


@dataclass(frozen=True)
class LaunchSetting:
    """One deployment setting of the launch record: its inventory variable, type, default, scope and help line.

    :attr:`LAUNCH_SETTINGS` is the one list of them. Preflight reads each from the host's variables
    (:func:`launch_settings`), type-checks it (:func:`setting_problem`) and refuses any other ``vllm_serve_*``
    name that is not a documented input of the vllm_serve role; the role's README table and defaults are checked
    against this list by a test (tests/unit/roles/test_launch_settings_docs.py).

    ``default`` None means "derived" (the help says from what). An unset variable, or one set to ``""``, takes the
    default, unless ``empty`` says that ``""`` is a value of its own.
    """

    key: str  #: the name in :func:`launch_settings`' answer
    variable: str  #: the inventory variable (vllm_serve_*)
    kind: str  #: one of :data:`SETTING_KINDS`; ``list`` is a list of strings
    default: Any
    scope: str  #: one of :data:`SETTING_SCOPES`
    help: str  #: one line, for the README table and preflight's messages
    choices: tuple[str, ...] = ()  #: the values a ``choice`` takes
    minimum: int = 0  #: the least value of an ``int``; the least length of a ``list``
    pattern: str = ""  #: a regex a ``str`` value, or each item of a ``list``, must match
    form: str = ""  #: ``pattern`` in words, for a refusal ("an absolute path")
    example: str = ""  #: a valid value, shown in a refusal
    empty: bool = False  #: ``""`` is a value (not "take the default")

    def __post_init__(self) -> None:
        if self.kind not in SETTING_KINDS or self.scope not in SETTING_SCOPES:
            raise ValueError(f"{self.variable}: kind {self.kind!r} / scope {self.scope!r} unknown")
        if not self.variable.startswith("vllm_serve_") or not self.help:
            raise ValueError(f"{self.variable}: a launch setting is a vllm_serve_* variable with a help line")
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError(f"{self.variable}: choices go with kind 'choice' only")
        if bool(self.pattern) != bool(self.form):
            raise ValueError(f"{self.variable}: a pattern needs its form in words")
        if self.default is not None and setting_problem(self, self.default) is not None:
            raise ValueError(f"{self.variable}: default {self.default!r} {setting_problem(self, self.default)}")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, str):
        return f"string {value!r}"
    return f"{type(value).__name__} {value!r}"


def _is_unset(setting: LaunchSetting, value: Any) -> bool:
    return value is None or (value == "" and not setting.empty)


def _digits(value: Any) -> bool:
    return isinstance(value, str) and value.strip().isdigit()


def setting_problem(setting: LaunchSetting, value: Any) -> str | None:
    """What is wrong with ``value`` for ``setting``, as the end of a sentence that starts with the variable's name
    and says what to change (``"must be a port (an integer in 1..65535), got string '80x0': set it like 8000"``);
    None when it is good. Unset (None, and ``""`` unless ``setting.empty``) is always good: it takes the default.
    An ``int`` may be a string of digits (``-e NAME=5``); a ``port`` may not (as preflight's port check)."""
    if _is_unset(setting, value):
        return None
    example = f": set it like {setting.example}" if setting.example else ""
    got = f", got {_shown(value)}"
    if setting.kind == "str":
        if not isinstance(value, str):
            return f"must be a string{got}{example}"
        if setting.pattern and value != "" and not re.match(setting.pattern, value):
            return f"must be {setting.form}{got}{example}"
        return None
    if setting.kind in ("int", "port"):
        number = int(value) if setting.kind == "int" and _digits(value) else value
        if isinstance(number, bool) or not isinstance(number, int):
            what = "a port (an integer in 1..65535)" if setting.kind == "port" else f"an integer >= {setting.minimum}"
            hint = (f" (a quoted string: write the number bare; on the command line pass JSON: "
                    f"-e '{{\"{setting.variable}\": {setting.example or 1}}}')" if _digits(value) else "")
            return f"must be {what}{got}{hint}{example}"
        if setting.kind == "port" and not 1 <= number <= 65535:
            return f"must be a port (an integer in 1..65535){got}{example}"
        if setting.kind == "int" and number < setting.minimum:
            return f"must be an integer >= {setting.minimum}{got}{example}"
        return None
    if setting.kind == "list":
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            return f"must be a list of non-empty strings{got}{example}"
        if len(value) < setting.minimum:
            return f"must list at least {setting.minimum} item{'s' if setting.minimum > 1 else ''}{got}{example}"
        bad = [v for v in value if setting.pattern and not re.match(setting.pattern, v)]
        if bad:
            return f"must list {setting.form}, got {bad[0]!r} in it{example}"
        return None
    if setting.kind == "bool":
        return None if isinstance(value, bool) else f"must be true or false{got}"
    if value in setting.choices:
        return None
    quoted = ""
    if isinstance(value, bool) and str(value).lower() in ("false", "true"):
        # YAML 1.1 reads an unquoted no/yes/off/on as a boolean.
        quoted = " (YAML reads an unquoted no as false: quote it)"
    return f"must be one of {', '.join(setting.choices)}{got}{quoted}{example}"


#: The launch settings, in the order of the role's README table. Preflight reads them from the host's variables
#: (the vllm_serve role's documented inputs); nothing else computes a port, a container name, a command or a
#: container setting. Left out on purpose, as role variables: the secrets (vllm_serve_api_key, vllm_serve_hf_token:
#: never written into a record, they reach the container as VLLM_API_KEY / HF_TOKEN at deploy), and the role's own
#: runtime knobs, which say how a deploy waits and drains but not what runs (vllm_serve_health_*,
#: vllm_serve_drain_*, vllm_serve_lb_*, vllm_serve_min_other_servers_up, vllm_serve_state). vllm_serve_image is both:
#: the inventory's pin is recorded here (image.ref), and playbooks/deploy.yml passes the image stage's built ref,
#: which exists only after preflight.
LAUNCH_SETTINGS: tuple[LaunchSetting, ...] = (
    LaunchSetting("container_name", "vllm_serve_container_name", "str", "vllm", "replica",
                  "Container name; replica i of several is NAME-i", pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*$",
                  form="a Docker container name (letters, digits, _ . -)", example="vllm"),
    LaunchSetting("port", "vllm_serve_port", "port", 8000, "replica",
                  "vLLM's API port; replica i of several uses PORT+i", example="8000"),
    LaunchSetting("bind_address", "vllm_serve_bind_address", "str", "0.0.0.0", "replica",
                  "Address vLLM listens on (the engine config's host)", example="0.0.0.0"),
    LaunchSetting("advertise_address", "vllm_serve_advertise_address", "str", None, "host",
                  "How the load balancer and the other nodes reach this host; default ansible_host",
                  example="10.0.0.1"),
    LaunchSetting("model_dir", "vllm_serve_model_dir", "str", None, "host",
                  "The model directory on the host; default the controller's (vllm_fleet_model)",
                  pattern=r"^/", form="an absolute path", example="/srv/models/llama"),
    LaunchSetting("model_mount", "vllm_serve_model_mount", "str", "/models/model", "host",
                  "Where the model directory is mounted in the container (read-only)", pattern=r"^/",
                  form="an absolute path",
                  example="/models/model"),
    LaunchSetting("served_model_name", "vllm_serve_served_model_name", "str", None, "host",
                  "The model name clients ask for; default the model directory's name", example="llama-3.1-8b"),
    LaunchSetting("config_dir", "vllm_serve_config_dir", "str", "/etc/vllm-fleet/serve", "host",
                  "Host directory of the rendered engine config files (NAME.yaml per replica)", pattern=r"^/",
                  form="an absolute path",
                  example="/etc/vllm-fleet/serve"),
    LaunchSetting("config_mount", "vllm_serve_config_mount", "str", "/etc/vllm-fleet/engine.yaml", "host",
                  "Where a replica's engine config is mounted in the container (vllm serve --config)",
                  pattern=r"^/", form="an absolute path", example="/etc/vllm-fleet/engine.yaml"),
    LaunchSetting("server_argv", "vllm_serve_server_argv", "list", ["vllm", "serve"], "replica",
                  "How the image starts the API server; the replica's command adds --config and the extra args",
                  minimum=1, example='["vllm", "serve"]'),
    LaunchSetting("entrypoint", "vllm_serve_entrypoint", "list", ["tini", "--"], "replica",
                  "Container entrypoint (an init that forwards signals)", example='["tini", "--"]'),
    LaunchSetting("network_mode", "vllm_serve_network_mode", "str", "host", "replica",
                  "Docker network mode; host is recommended (and needed for multi-node); else the port is published",
                  example="host"),
    LaunchSetting("ipc_mode", "vllm_serve_ipc_mode", "str", "host", "replica",
                  "Docker IPC mode; host gives vLLM all of /dev/shm; empty: Docker's, with vllm_serve_shm_size",
                  empty=True, example="host"),
    LaunchSetting("shm_size", "vllm_serve_shm_size", "str", "1g", "replica",
                  "Size of /dev/shm when vllm_serve_ipc_mode is not host (vLLM needs more than Docker's 64 MiB)",
                  pattern=r"^[0-9]+[bkmgBKMG]?$",
                  form="a size: a number with b, k, m or g", example="8g"),
    LaunchSetting("ulimits", "vllm_serve_ulimits", "list", [], "replica",
                  "Container ulimits NAME:SOFT:HARD (empty: the daemon's); the node's RDMA needs are added after them",
                  pattern=r"^[a-z]+:-?[0-9]+(:-?[0-9]+)?$",
                  form="NAME:SOFT:HARD items", example='["memlock:-1:-1"]'),
    LaunchSetting("restart_policy", "vllm_serve_restart_policy", "choice", "unless-stopped", "replica",
                  "Docker restart policy", choices=("no", "on-failure", "always", "unless-stopped"),
                  example="unless-stopped"),
    LaunchSetting("healthcheck_test", "vllm_serve_healthcheck_test", "list",
                  ["CMD", "/opt/venv/bin/python", "/usr/local/bin/vllm-healthcheck"], "replica",
                  "Docker health check command (the image's /health probe); NONE on a node that serves no API",
                  minimum=1, example='["CMD", "/usr/local/bin/vllm-healthcheck"]'),
    LaunchSetting("healthcheck_interval_s", "vllm_serve_healthcheck_interval_s", "int", 5, "replica",
                  "Seconds between two Docker health checks", minimum=1, example="5"),
    LaunchSetting("healthcheck_timeout_s", "vllm_serve_healthcheck_timeout_s", "int", 10, "replica",
                  "Seconds one Docker health check may take before it counts as failed", minimum=1, example="10"),
    LaunchSetting("multinode_backend", "vllm_serve_multinode_backend", "choice", "mp", "host",
                  "Multi-node launcher: vLLM's own (mp) or a Ray cluster (ray)", choices=("mp", "ray"),
                  example="mp"),
    LaunchSetting("master_port", "vllm_serve_master_port", "port", DEFAULT_MASTER_PORT, "host",
                  "The mp launcher's --master-port on rank 0 of a multi-node group", example=str(DEFAULT_MASTER_PORT)),
    LaunchSetting("dp_rpc_port", "vllm_serve_dp_rpc_port", "port", DEFAULT_DP_RPC_PORT, "host",
                  "The head's --data-parallel-rpc-port (data parallelism across a multi-node group; vLLM's default)",
                  example=str(DEFAULT_DP_RPC_PORT)),
    LaunchSetting("ray_port", "vllm_serve_ray_port", "port", 6379, "host",
                  "The Ray head's port (multi-node with vllm_serve_multinode_backend: ray)", example="6379"),
    LaunchSetting("image", "vllm_serve_image", "str", None, "host",
                  "Image reference pinned in the inventory; default the image stage's (vllm_image_ref)",
                  example="registry.example/vllm:0.32.0"),
    LaunchSetting("stop_timeout", "vllm_serve_stop_timeout", "int", None, "host",
                  "Seconds docker stop waits before it kills vLLM; default the plan's --shutdown-timeout + 30",
                  minimum=1, example="120"),
)
#: Each launch setting by its inventory variable.
LAUNCH_VARIABLES: dict[str, LaunchSetting] = {s.variable: s for s in LAUNCH_SETTINGS}
#: Seconds ``docker stop`` waits beyond vLLM's ``--shutdown-timeout`` (in-flight requests finishing) for the
#: processes to exit before it kills them.
STOP_GRACE_S = 30
#: The environment variables that carry secrets: their names go in the record, their values never do.
SECRET_ENV = {"api_key": "VLLM_API_KEY", "hf_token": "HF_TOKEN"}
#: Set per replica for the image's health check script (vllm-healthcheck).
HEALTH_ENV = ("FLEET_HEALTH_HOST", "FLEET_HEALTH_PORT")
#: Docker health check: failed checks in a row before the container is unhealthy.
HEALTHCHECK_RETRIES = 3


def _converted(setting: LaunchSetting, value: Any) -> Any:
    if setting.kind == "int" and _digits(value):
        return int(value)
    if setting.kind == "list" and isinstance(value, tuple):
        return list(value)
    return value


def launch_settings(variables: dict[str, Any], *, address: str, model_dir: str) -> dict[str, Any]:
    """The deployment settings of one host from its variables (:data:`LAUNCH_SETTINGS`; unset ones take the
    defaults), keyed by :attr:`LaunchSetting.key`. Preflight type-checked them (:func:`setting_problem`).

    :param address: how other hosts and the load balancer reach this host (ansible_host or its name)
    :param model_dir: the model directory on the controller (the host's default model directory)
    """
    out: dict[str, Any] = {}
    for setting in LAUNCH_SETTINGS:
        value = variables.get(setting.variable)
        out[setting.key] = _copy(setting.default) if _is_unset(setting, value) else _converted(setting, value)
    out["advertise_address"] = out["advertise_address"] or address
    out["model_dir"] = out["model_dir"] or model_dir
    out["served_model_name"] = out["served_model_name"] or str(out["model_dir"]).rstrip("/").rsplit("/", 1)[-1]
    return out


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _stop_timeout(plan: dict[str, Any], pinned: Any) -> int:
    """How long ``docker stop`` waits before it kills vLLM: longer than vLLM's ``--shutdown-timeout``, the window in
    which requests already inside the server finish (a shorter wait would kill them mid-answer)."""
    args = {_norm_key(k): v for k, v in (plan.get("engine_args") or {}).items()}
    shutdown = args.get("shutdown-timeout") or 0
    if isinstance(shutdown, bool) or not isinstance(shutdown, int) or shutdown < 0:
        raise LaunchError(f"shutdown-timeout must be an int >= 0, got {shutdown!r}")
    if pinned is None:
        return shutdown + STOP_GRACE_S
    if isinstance(pinned, bool) or not isinstance(pinned, int) or pinned <= shutdown:
        raise LaunchError(f"vllm_serve_stop_timeout {pinned!r} must be an int above vLLM's shutdown timeout "
                          f"({shutdown} s): docker would kill vLLM while requests still finish; raise it or lower "
                          "--shutdown-timeout")
    return pinned


def _container_settings(settings: dict[str, Any], entry: dict[str, Any], serves_api: bool,
                        node_ulimits: list[str]) -> dict[str, Any]:
    """One replica's container settings, as the vllm_serve role hands them to Docker (nothing is left to compute
    there but the health check's start period, which the role sizes from the health-gate timeout).

    ``ulimits``: the user's (vllm_serve_ulimits), then the node's RDMA needs that are not among them;
    ``shm_size`` only when the container has its own IPC namespace; ``published_ports`` only off host networking;
    a node that serves no API (a headless node of a multi-node group) gets no Docker health check (``NONE``).
    """
    ipc_mode = str(settings["ipc_mode"]) or None
    user_ulimits = [str(u) for u in settings["ulimits"]]
    network_mode = str(settings["network_mode"])
    port = entry["port"]
    return {
        "config_file": f"{str(settings['config_dir']).rstrip('/')}/{entry['container']}.yaml",
        "entrypoint": [str(a) for a in settings["entrypoint"]],
        "network_mode": network_mode,
        "published_ports": [] if network_mode == "host" else [f"{settings['bind_address']}:{port}:{port}"],
        "ipc_mode": ipc_mode,
        "shm_size": None if ipc_mode == "host" else str(settings["shm_size"]),
        "ulimits": user_ulimits + [u for u in node_ulimits if u not in user_ulimits],
        "restart_policy": str(settings["restart_policy"]),
        "healthcheck": {"test": [str(a) for a in settings["healthcheck_test"]] if serves_api else ["NONE"],
                        "interval_s": int(settings["healthcheck_interval_s"]),
                        "timeout_s": int(settings["healthcheck_timeout_s"]), "retries": HEALTHCHECK_RETRIES},
    }


def _probe_host(bind_address: str) -> str:
    return "127.0.0.1" if bind_address in ("0.0.0.0", "::", "") else bind_address


@dataclass(frozen=True)
class _Node:
    """Where this host sits in its multi-node group, and the replicas it runs (:func:`_node_layout`)."""

    nodes: list[str]
    rank: int
    addresses: list[str]
    multinode: bool
    #: data parallelism across the group's nodes (one container per node with its local ranks)
    dp_nodes: bool
    data_parallel: Any
    layout: list[dict[str, Any]]


def _node_layout(plan: dict[str, Any], *, host: str, settings: dict[str, Any], nodes: list[str] | None,
                 node_addresses: list[str] | None, gpu_indexes: list[int] | None) -> _Node:
    """Node layout: this host's rank among its group's nodes, their addresses, and its replicas' share of the GPUs."""
    nodes = list(nodes or [host])
    if host not in nodes:
        raise LaunchError(f"{host} is not one of its multi-node group's nodes {nodes}")
    rank = nodes.index(host)
    addresses = list(node_addresses or [settings["advertise_address"]])
    if len(addresses) != len(nodes):
        raise LaunchError(f"{len(nodes)} nodes but {len(addresses)} node addresses")
    multinode = len(nodes) > 1
    port = settings["port"]
    node_plan = plan
    data_parallel = (plan.get("parallel") or {}).get("data_parallel_size", 1)
    # Data parallelism across the group's nodes: parallel.gpus_per_replica is already one node's (its local ranks x
    # TP), one container per node (data_parallel_commands); for TP x PP across nodes it counts every node's GPUs.
    dp_nodes = multinode and data_parallel != 1
    if dp_nodes and str(settings["multinode_backend"]) != "mp":
        raise LaunchError(f"data_parallel_size {data_parallel} across a multi-node group runs with vLLM's own mp "
                          f"launcher, not {settings['multinode_backend']!r}: set vllm_serve_multinode_backend: mp")
    if multinode and not dp_nodes:  # each node's container gets its share of the group's GPUs
        parallel = dict(plan.get("parallel") or {})
        total = parallel.get("gpus_per_replica", 0)
        if not isinstance(total, int) or total % len(nodes):
            raise LaunchError(f"{total!r} GPUs per replica do not split evenly over {len(nodes)} nodes")
        parallel["gpus_per_replica"] = total // len(nodes)
        node_plan = {**plan, "parallel": parallel}
    layout = replica_layout(
        node_plan,
        name=str(settings["container_name"]),
        base_port=port,
        server_prefix=host,
        address=str(settings["advertise_address"]),
        gpu_indexes=gpu_indexes,
    )
    if multinode and len(layout) != 1:
        raise LaunchError(f"a multi-node plan runs one replica per node group, the plan has {len(layout)}")
    return _Node(nodes=nodes, rank=rank, addresses=addresses, multinode=multinode, dp_nodes=dp_nodes,
                 data_parallel=data_parallel, layout=layout)


def _environment(plan: dict[str, Any], net: dict[str, Any], env: dict[str, Any] | None,
                 secret_names: list[str] | None) -> tuple[dict[str, str], list[str]]:
    """Environment: the plan's, the network's and the user's variables (later wins), and the secret names, checked."""
    base_env = {str(k): str(v) for k, v in {**(plan.get("env") or {}), **(net.get("env") or {}),
                                            **(env or {})}.items()}
    secrets = sorted(set(secret_names or []))
    unknown = sorted(set(secrets) - set(SECRET_ENV.values()))
    if unknown:
        raise LaunchError(f"unknown secret environment variables {unknown}: known {sorted(SECRET_ENV.values())}")
    clash = sorted(set(secrets) & set(base_env))
    if clash:
        raise LaunchError(f"{', '.join(clash)} must not be set in the environment: it is a secret")
    return base_env, secrets


def _replica_env(base_env: dict[str, str], settings: dict[str, Any], entry: dict[str, Any], node: _Node,
                 network: dict[str, Any] | None) -> dict[str, str]:
    """Per-replica environment: the base one, the health probe's address and port, and the node's announced IP."""
    replica_env = dict(base_env)
    replica_env.update({"FLEET_HEALTH_HOST": _probe_host(str(settings["bind_address"])),
                        "FLEET_HEALTH_PORT": str(entry["port"])})
    if node.multinode and network is None:
        # vLLM's processes announce this address to the other nodes (default: the host's first address).
        replica_env.setdefault("VLLM_HOST_IP", node.addresses[node.rank])
    return replica_env


def _replica_command(plan: dict[str, Any], settings: dict[str, Any], node: _Node, *, extra: list[str],
                     rpc_port: Any, data_parallel_address: str | None) -> tuple[list[str], dict[str, Any] | None]:
    """Per-replica command: ``(argv, data-parallel command or None)`` for a single node, TP x PP or DP across nodes."""
    dp_command: dict[str, Any] | None = None
    if node.dp_nodes:
        dp_command = data_parallel_commands(
            plan,
            nodes=[data_parallel_address or node.addresses[0], *node.addresses[1:]],
            server_argv=list(settings["server_argv"]),
            config_path=str(settings["config_mount"]),
            rpc_port=rpc_port,
            extra_args=extra,
        )[node.rank]
        argv = dp_command["argv"]
    elif node.multinode:
        argv = multinode_commands(
            plan,
            backend=str(settings["multinode_backend"]),
            nodes=node.addresses,
            server_argv=list(settings["server_argv"]),
            config_path=str(settings["config_mount"]),
            master_port=int(settings["master_port"]),
            ray_port=int(settings["ray_port"]),
            extra_args=extra,
        )[node.rank]["argv"]
    else:
        # The user's extra args after --config: vLLM reads the file's options first and a later flag wins
        # (vllm/utils/argparse_utils.py:528-531, 557-563 in 0.32.0: "cli > config > defaults").
        argv = [*settings["server_argv"], "--config", str(settings["config_mount"]), *extra]
    return argv, dp_command


def _replica_entry(plan: dict[str, Any], entry: dict[str, Any], node: _Node, settings: dict[str, Any], *,
                   base_env: dict[str, str], secrets: list[str], extra: list[str], network: dict[str, Any] | None,
                   head_port: int | None, data_parallel_address: str | None) -> dict[str, Any]:
    """Replica entry: one replica's record (container, port, GPUs, engine config, environment, command, settings)."""
    serves_api = node.rank == 0
    net = network or {}
    rpc_port = settings.get("dp_rpc_port", DEFAULT_DP_RPC_PORT)
    config = engine_config(
        plan,
        model_path=str(settings["model_mount"]),
        served_model_name=str(settings["served_model_name"]),
        host=str(settings["bind_address"]),
        port=entry["port"],
    )
    replica_env = _replica_env(base_env, settings, entry, node, network)
    argv, dp_command = _replica_command(plan, settings, node, extra=extra, rpc_port=rpc_port,
                                        data_parallel_address=data_parallel_address)
    addresses, multinode = node.addresses, node.multinode
    replica: dict[str, Any] = {
        "index": entry["index"],
        "container": entry["container"],
        "port": entry["port"],
        "server": entry["server"],
        "address": entry["address"],
        "device_ids": entry["device_ids"],
        "backend": entry["backend"] if serves_api else None,
        "engine_args": config,
        "env": dict(sorted(replica_env.items())),
        "env_names": sorted({*replica_env, *secrets}),
        "argv": argv,
        "serves_api": serves_api,
        "node_rank": node.rank,
        "nodes": node.nodes,
        "master_address": addresses[0] if multinode else None,
        # The group serves when rank 0 does: every node's gate waits for this (rank 0 probes its own).
        "group_health_url": (f"http://{addresses[0]}:{head_port or entry['port']}/health"
                             if multinode else None),
        # RDMA (GPUDirect over InfiniBand/RoCE) for a multi-node replica: from network.node_network.
        "devices": list(net.get("devices") or []),
        "cap_add": list(net.get("cap_add") or []),
        **_container_settings(settings, entry, serves_api, list(net.get("ulimits") or [])),
    }
    if dp_command is not None:  # only in this mode: every other record keeps its keys
        replica["data_parallel"] = {"size": node.data_parallel, "size_local": dp_command["size_local"],
                                    "start_rank": dp_command["start_rank"],
                                    "address": data_parallel_address or addresses[0], "rpc_port": rpc_port}
    return replica


def launch_record(
    plan: dict[str, Any],
    *,
    host: str,
    settings: dict[str, Any],
    env: dict[str, Any] | None = None,
    secret_names: list[str] | None = None,
    nodes: list[str] | None = None,
    node_addresses: list[str] | None = None,
    gpu_indexes: list[int] | None = None,
    head_port: int | None = None,
    network: dict[str, Any] | None = None,
    data_parallel_address: str | None = None,
) -> dict[str, Any]:
    """How ``host`` runs ``plan``: the image, and per replica its container, port, GPUs, engine config,
    environment names and command (the ``launch`` part of a host's entry in plans.json).

    :param settings: :func:`launch_settings` of the host
    :param env: the user's environment (vllm_fleet_env; secrets were refused in preflight)
    :param secret_names: the secret environment variables the replicas get at deploy time (VLLM_API_KEY,
        HF_TOKEN): their names are recorded, their values never
    :param nodes: the hosts of its multi-node group in rank order (None or [host]: single node)
    :param node_addresses: their addresses, same order (the launcher's ``--master-addr`` is the first)
    :param gpu_indexes: the host's GPU indexes (from its facts); default 0..
    :param head_port: the API port of the group's rank 0 (multi-node; default this host's port): a headless
        node's health gate waits for the group's ``/health`` there (``group_health_url``)
    :param network: :func:`network.node_network` of this node (its environment, between the plan's and the
        user's; RDMA devices, capabilities and ulimits; the reasons), None when not known
    :param data_parallel_address: the head's IP for data parallelism across the group (``--data-parallel-address``,
        where the head binds its RPC socket); default the first node address

    A plan with ``parallel.data_parallel_size`` > 1 on a multi-node group runs one container per node with the
    node's local ranks (``parallel.gpus_per_replica`` = local ranks x TP GPUs of THIS node) and the commands of
    :func:`data_parallel_commands`; the replica then carries ``data_parallel`` (size, size_local, start_rank, address,
    rpc_port). Any other multi-node plan is one TP x PP instance over the nodes (:func:`multinode_commands`).

    The steps: :func:`_node_layout` (rank, addresses, replicas), :func:`_environment` (variables and secret names),
    then per replica :func:`_replica_entry` (its :func:`_replica_env` and :func:`_replica_command`).
    :raises LaunchError: the plan cannot be laid out with these settings
    """
    node = _node_layout(plan, host=host, settings=settings, nodes=nodes, node_addresses=node_addresses,
                        gpu_indexes=gpu_indexes)
    stop_timeout = _stop_timeout(plan, settings.get("stop_timeout"))
    extra = _extra_args(plan.get("extra_args"))
    net = network or {}
    base_env, secrets = _environment(plan, net, env, secret_names)
    replicas = [_replica_entry(plan, entry, node, settings, base_env=base_env, secrets=secrets, extra=extra,
                               network=network, head_port=head_port, data_parallel_address=data_parallel_address)
                for entry in node.layout]
    multinode = node.multinode
    return {
        # ray: this node runs `ray start` (a TP x PP group with the Ray launcher), so its image needs Ray: the image
        # stage's vllm_image_ray follows it.
        "image": {"device": plan.get("device"), "vllm_version": plan.get("vllm_version"),
                  "ref": settings.get("image") or None,
                  "ray": multinode and not node.dp_nodes and str(settings["multinode_backend"]) == "ray"},
        "model_dir": str(settings["model_dir"]),
        "model_mount": str(settings["model_mount"]),
        "served_model_name": str(settings["served_model_name"]),
        "config_mount": str(settings["config_mount"]),
        "config_dir": str(settings["config_dir"]),
        "node_rank": node.rank,
        "nodes": node.nodes,
        "master_address": node.addresses[0] if multinode else None,
        "serves_api": node.rank == 0,
        "stop_timeout_s": stop_timeout,
        "network_reasons": dict(net.get("reasons") or {}),
        "secret_env_names": secrets,
        "replicas": replicas,
    }


def container_env(replica: dict[str, Any], secrets: dict[str, Any] | None = None) -> dict[str, str]:
    """The environment a replica's container gets: its recorded values plus the secrets, whose names must be
    exactly the record's (a key given at deploy that preflight did not plan for, or a planned key missing,
    is refused rather than served silently without authentication).

    :param secrets: ``{"api_key": "...", "hf_token": "..."}``; empty values mean unset
    """
    env = {str(k): str(v) for k, v in (replica.get("env") or {}).items()}
    given = {SECRET_ENV[k]: str(v) for k, v in (secrets or {}).items() if k in SECRET_ENV and v}
    unknown = sorted(set(secrets or {}) - set(SECRET_ENV))
    if unknown:
        raise LaunchError(f"unknown secrets {unknown}: known {sorted(SECRET_ENV)}")
    expected = set(replica.get("env_names") or []) - set(env)
    if set(given) != expected:
        missing = sorted(expected - set(given))
        extra = sorted(set(given) - expected)
        what = (f"the launch record expects {', '.join(missing)} but no value was given" if missing else
                f"{', '.join(extra)} was given but the launch record has no such variable: re-run preflight")
        raise LaunchError(f"{replica.get('container')}: {what}")
    env.update(given)
    return env


def lb_servers(launches: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The load balancer's servers: every replica that serves the API, in the order of ``launches``."""
    out = []
    for launch in launches:
        for replica in (launch or {}).get("replicas") or []:
            if replica.get("serves_api") and replica.get("backend"):
                out.append(replica["backend"])
    return out
