"""What vllm-fleet knows about each vLLM option beyond its name: one declaration per option.

vLLM declares each option once (a typed config dataclass field with its docstring; ``EngineArgs`` and the CLI derive
from it). This table does the same for the project: an option's type and range or choices, who owns it (the
planner computes it, the user passes it through, the launcher or the deployment sets it, or it is refused), whether
it goes in the replica's ``--config`` file or on each node's command line, its help line, and whether
``vllm-fleet plan`` offers it as a flag. From it derive:

- the planner's validation of pinned engine args (``engine_args.py``: the integer floors, the float range);
- preflight's type and range checks and its messages (``preflight/engine_args.py``: ``check_engine_args``,
  ``check_extra_args``: which flags must be pinned as engine args instead, which are refused and why);
- the launch record's file / command-line split (``deploy/launch.py`` ``engine_config``);
- the CLI's engine-argument flags and their help (``vllm_fleet/cli.py``).

``planner/engine_fields.py`` stays the complete list of names per release (every option ``vllm serve`` takes, and
which on/off options have a ``--no-`` form); an option that is not declared here is a plain user option: its name is
checked against that list, its value passes through. The choices of ``dtype`` and ``kv_cache_dtype`` are per
release (:class:`.rules.VersionRules`); the table says only that they are choices.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Who sets an option. planner: computed from the facts (a pin wins and is validated); user: the user's to pin
#: (typed here, passed through); deployment: the vllm_serve role sets it per replica (an inventory variable instead);
#: launcher: set per node by the multi-node layout (never pinned, never in the file); secret: reaches vLLM through
#: the environment only; refused: not modelled (the reason says what to do instead).
OWNERS = ("planner", "user", "deployment", "launcher", "secret", "refused")
KINDS = ("int", "float", "bool", "choice", "str", "json", "list")


@dataclass(frozen=True)
class EngineOption:
    """One vLLM option as vllm-fleet handles it.

    :param name: the snake_case name (the ``EngineArgs`` field / the ``vllm serve`` option's dest)
    :param kind: the value's type (:data:`KINDS`)
    :param owner: who sets it (:data:`OWNERS`)
    :param help: one line: what it does here (the CLI's help, the docs)
    :param low: int/float: the least value (inclusive for int, exclusive for float)
    :param high: int/float: the largest value (inclusive; None: no maximum)
    :param choices: choice: the values (empty: the release's own list, ``rules.VersionRules``)
    :param in_file: whether it may be written in the replica's ``--config`` file (False: command line or env only)
    :param cli: whether ``vllm-fleet plan`` offers ``--NAME`` for it
    :param instead: deployment/secret/refused/launcher: what to set instead (the refusal's fix)
    """

    name: str
    kind: str
    owner: str
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    in_file: bool = True
    cli: bool = False
    instead: str = ""

    def __post_init__(self) -> None:
        if self.owner not in OWNERS or self.kind not in KINDS:
            raise ValueError(f"option {self.name}: owner {self.owner!r} / kind {self.kind!r} unknown")

    @property
    def key(self) -> str:
        """The dash form (``max-num-seqs``): the flag without ``--`` and the config file's key."""
        return self.name.replace("_", "-")


_DP_ADVICE = ("only data_parallel_size is modelled (every rank in one container on one host, or over the hosts of a "
              "multi-node group with the size-local, start rank, address and RPC port computed by the layout; the "
              "RPC port is vllm_serve_dp_rpc_port), vLLM balancing between the ranks; hybrid and external "
              "load-balanced data parallelism are not modelled yet: every container of the layout would get this, "
              "each waiting for peers that are never started, and none could start; pin data_parallel_size alone, or "
              "serve more replicas instead (the layout runs one replica per DP x TP group and the load balancer "
              "spreads requests over them)")
_LAUNCHER = "the multi-node launcher sets it per node (vllm_fleet_multinode_group); remove it"


def _refused_dp(name: str, kind: str, help_: str, *, in_file: bool = True) -> EngineOption:
    return EngineOption(name, kind, "refused", help_, in_file=in_file, instead=_DP_ADVICE)


#: The options the project knows beyond their names, in the planner's output order for the ones it computes.
OPTIONS: tuple[EngineOption, ...] = (
    # --- computed by the planner (a pin wins and is validated) ---------------------------------------------------
    EngineOption("model", "str", "deployment", "the model directory (the launch record writes the container's path)"),
    EngineOption("data_parallel_size", "int", "planner", "engines of TP x PP GPUs each in one replica on this host, "
                 "or spread evenly over --max-nodes hosts (TP only; vLLM balances them)", low=1, high=1024, cli=True),
    EngineOption("tensor_parallel_size", "int", "planner", "GPUs per replica (must divide the attention heads)",
                 low=1, high=1024, cli=True),
    EngineOption("pipeline_parallel_size", "int", "planner",
                 "pipeline stages (across hosts when one host is not enough)", low=1, high=1024, cli=True),
    EngineOption("gpu_memory_utilization", "float", "planner",
                 "fraction of each GPU vLLM may budget (default: from absolute headroom)", low=0.0, high=1.0, cli=True),
    EngineOption("kv_cache_memory_bytes", "int", "planner",
                 "fixed KV cache size in bytes (bypasses the utilisation budget)", low=1, cli=True),
    EngineOption("max_model_len", "int", "planner", "longest request in tokens (default: the model's limit, clamped "
                 "to fit; 'auto' or -1 lets vLLM fit it)", low=16, high=100_000_000, cli=True),
    EngineOption("max_num_seqs", "int", "planner",
                 "concurrent sequences (default: from predicted KV capacity and the profile)",
                 low=1, high=1_000_000, cli=True),
    EngineOption("max_num_batched_tokens", "int", "planner",
                 "tokens per scheduler step (default: from the profile and the GPU)", low=1, high=100_000_000, cli=True),
    EngineOption("dtype", "choice", "planner", "auto, bfloat16, float16 or float32", cli=True),
    EngineOption("quantization", "str", "planner", "quantization method (default: read from the checkpoint)",
                 cli=True),
    EngineOption("kv_cache_dtype", "choice", "planner", "auto, fp8, fp8_e4m3, fp8_e5m2", cli=True),
    EngineOption("block_size", "int", "planner", "KV block size (default: left to the attention backend)",
                 low=1, high=4096, cli=True),
    EngineOption("enable_expert_parallel", "bool", "planner",
                 "shard MoE experts over the TP x DP ranks (default: by the planner's layout comparison)"),
    EngineOption("enforce_eager", "bool", "planner", "no CUDA graphs / compilation", cli=True),
    # --- the user's, typed ---------------------------------------------------------------------------------------
    EngineOption("optimization_level", "int", "user", "-O0..-O3 (vLLM's default 2)", low=0, high=3),
    EngineOption("seed", "int", "user", "random seed", low=0),
    EngineOption("max_loras", "int", "user", "LoRA adapters in one batch", low=1),
    EngineOption("shutdown_timeout", "int", "user", "seconds in-flight requests get to finish when vLLM stops "
                 "(config/vllm.py Field(default=0, ge=0); 0 aborts them); docker stop waits longer", low=0,
                 high=86_400),
    EngineOption("kv_offloading_size", "float", "user", "GiB of KV cache offloaded to CPU memory", low=0.0,
                 high=1.0e6),
    EngineOption("cpu_offload_gb", "float", "user", "GiB of weights offloaded to CPU memory", low=-1.0e-9, high=1.0e6),
    EngineOption("performance_mode", "choice", "user", "vLLM's batch defaults preset (vllm-facts B1)",
                 choices=("balanced", "interactivity", "throughput")),
    # The planner budgets EPLB's redundant experts and migration buffers (planner/gpu_lane.py eplb_inputs): pinned
    # in vllm_fleet_engine_args only, never past the planner in extra args.
    EngineOption("enable_eplb", "bool", "planner", "expert-parallel load balancing (budgeted when pinned)"),
    EngineOption("eplb_config", "json", "planner", "EPLB's settings (num_redundant_experts is budgeted)"),
    # --- set by the deployment, the launcher, or secret ----------------------------------------------------------
    EngineOption("served_model_name", "str", "deployment", "the served name",
                 instead="set vllm_serve_served_model_name instead"),
    EngineOption("host", "str", "deployment", "the bind address", instead="set vllm_serve_bind_address instead"),
    EngineOption("port", "int", "deployment", "the API port",
                 instead="set vllm_serve_port (vllm_serve_ports for several replicas) instead"),
    EngineOption("config", "str", "launcher", "the engine config file", in_file=False, instead=_LAUNCHER),
    EngineOption("nnodes", "int", "launcher", "nodes of a multi-node instance", in_file=False, instead=_LAUNCHER),
    EngineOption("node_rank", "int", "launcher", "this node's rank", in_file=False, instead=_LAUNCHER),
    EngineOption("master_addr", "str", "launcher", "rank 0's address", in_file=False, instead=_LAUNCHER),
    EngineOption("master_port", "int", "launcher", "rank 0's port", in_file=False, instead=_LAUNCHER),
    EngineOption("headless", "bool", "launcher", "no API server on this node", in_file=False, instead=_LAUNCHER),
    EngineOption("distributed_executor_backend", "choice", "launcher", "mp, ray, uni or external_launcher (the "
                 "layout sets it per node of a multi-node group)", choices=("mp", "ray", "uni", "external_launcher"),
                 in_file=False, instead=_LAUNCHER),
    EngineOption("api_key", "str", "secret", "the API key", in_file=False,
                 instead="set vllm_serve_api_key (Vault) instead"),
    # Data parallelism beyond data_parallel_size: the layout sets the first four per node (command line) for data
    # parallelism across a multi-node group (deploy/launch.py data_parallel_commands); a pin of any is refused.
    _refused_dp("data_parallel_size_local", "int", "local data-parallel ranks of a node", in_file=False),
    _refused_dp("data_parallel_start_rank", "int", "a node's first data-parallel rank", in_file=False),
    _refused_dp("data_parallel_address", "str", "the data-parallel head's address", in_file=False),
    _refused_dp("data_parallel_rpc_port", "int", "the data-parallel head's RPC port", in_file=False),
    _refused_dp("data_parallel_rank", "int", "a data-parallel rank (external load balancing)"),
    _refused_dp("data_parallel_backend", "str", "mp or ray for data parallelism"),
    _refused_dp("data_parallel_hybrid_lb", "bool", "hybrid load-balanced data parallelism"),
    _refused_dp("data_parallel_external_lb", "bool", "externally load-balanced data parallelism"),
    _refused_dp("data_parallel_multi_port_external_lb", "bool", "one API server per local rank"),
)

#: Name → its declaration.
BY_NAME: dict[str, EngineOption] = {o.name: o for o in OPTIONS}


def option(name: str) -> EngineOption | None:
    """The declaration of ``name`` (snake or dash form), None for a plain user option."""
    return BY_NAME.get(name.strip().lstrip("-").replace("-", "_"))


def names(*, owner: str | None = None, kind: str | None = None) -> frozenset[str]:
    """The declared names with this owner and/or kind (snake_case)."""
    return frozenset(o.name for o in OPTIONS if (owner is None or o.owner == owner) and (kind is None or o.kind == kind))


#: Integer options → (min, max; None: no max): preflight's range, the planner's floor.
INT_ENGINE_ARGS: dict[str, tuple[int, int | None]] = {
    o.name: (int(o.low or 0), None if o.high is None else int(o.high)) for o in OPTIONS
    if o.kind == "int" and o.low is not None and o.owner in ("planner", "user")}
#: Float options → (exclusive lower bound, inclusive upper bound).
FLOAT_ENGINE_ARGS: dict[str, tuple[float, float]] = {
    o.name: (float(o.low or 0.0), float(o.high if o.high is not None else 1.0e18)) for o in OPTIONS
    if o.kind == "float" and o.owner in ("planner", "user")}
#: Options with a fixed set of values the table lists (``dtype``/``kv_cache_dtype`` are the release's).
CHOICE_ENGINE_ARGS: dict[str, tuple[str, ...]] = {o.name: o.choices for o in OPTIONS if o.kind == "choice" and o.choices}
#: Options preflight refuses when pinned, → why and what to do instead.
NOT_MODELLED: dict[str, str] = {o.name: o.instead for o in OPTIONS if o.owner == "refused"}
#: Planner-owned options it never emits but budgets when pinned (EPLB): pinned in vllm_fleet_engine_args only.
BUDGETED_PINS: frozenset[str] = frozenset({"enable_eplb", "eplb_config"})
#: The dash-form keys never written to a replica's config file (per node on the command line, or the environment).
NOT_IN_FILE: frozenset[str] = frozenset(o.key for o in OPTIONS if not o.in_file)
#: The planner's output order of the engine args it computes (dash form); user args follow in the order set.
ENGINE_ARG_ORDER: tuple[str, ...] = ("model", *(o.key for o in OPTIONS if o.owner == "planner"
                                                and o.name not in BUDGETED_PINS))
#: ``vllm-fleet plan``'s engine-argument flags: (flag, type, help).
CLI_FLAGS: tuple[tuple[str, type, str], ...] = tuple(
    (f"--{o.key}", {"int": int, "float": float}.get(o.kind, str), o.help) for o in OPTIONS
    if o.cli and o.kind != "bool")
