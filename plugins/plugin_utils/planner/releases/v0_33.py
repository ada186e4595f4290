"""vLLM 0.33.0: everything vllm-fleet knows about this release (the block :mod:`.` describes).

Read from its own source (``make vllm-src``: the manylinux wheel's Python files); paths relative to
``site-packages``. Its option names are 0.32's plus the ``added_*`` below (``planner/engine_fields.py``), each
read with ``scripts/vllm_serve_parse.py options`` from 0.33's own parser.
"""

from __future__ import annotations

from . import CC_CU130, RAY_VERSION, Added, Archive, ImageRow, Release, Removed, Source, carried, v0_32

_V = (0, 33, 0)
_RAY_DAG = "removed in vLLM 0.33 with the Ray compiled DAG"
_ROCM = "removed in vLLM 0.33; ROCm only"

RELEASE = Release(
    version="0.33.0",
    sources={
            # 0.32's citations whose lines did not move (checked against 0.33's source like the rest); the Ray
            # compiled-DAG channel variable went with the DAG.
            **carried(v0_32.RELEASE, dropped=("env:VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE",)),
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
            # Weights per GPU by layout (planner/weight_split.py, model.stage_layers): what TP, EP and PP split.
            "tp_column_parallel": Source("vllm/model_executor/layers/linear.py", 436, 436,
                                         "class ColumnParallelLinear(LinearBase):"),
            "tp_row_parallel": Source("vllm/model_executor/layers/linear.py", 1653, 1653,
                                      "class RowParallelLinear(LinearBase):"),
            "pp_layer_split": Source("vllm/distributed/utils.py", 228, 230,
                                     "partitions[-i] += 1"),
            "eplb_physical_experts": Source("vllm/model_executor/layers/fused_moe/layer.py", 82, 82,
                                            "global_num_experts = num_experts + num_redundant_experts"),
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
            # Which formats quantize an untied lm_head (ParallelLMHead; quant_formats.lm_head_bytes).
            "quant:modelopt_lm_head": Source("vllm/model_executor/layers/quantization/modelopt.py", 254, 254,
                                             "if isinstance(layer, (LinearBase, ParallelLMHead)):"),
            "quant:modelopt_mixed_lm_head": Source("vllm/model_executor/layers/quantization/modelopt.py", 1830, 1831,
                                                   'candidates.append("lm_head")'),
            # bitsandbytes left core vLLM: its quant_method is not a known method (precision.py refuses it).
            "quant:bitsandbytes_not_in_core": Source("vllm/config/model.py", 1465, 1468,
                                                     'f"Unknown quantization method: {self.quantization}. Must "'),
            # Recipe settings the plan leaves to vLLM (planner/recipes.py): defaults of this release.
            "recipe:VLLM_USE_DEEP_GEMM": Source("vllm/envs.py", 1600, 1600, 'os.getenv("VLLM_USE_DEEP_GEMM", "1")'),
            "recipe:moe_backend": Source("vllm/engine/arg_utils.py", 571, 571,
                                         "moe_backend: MoEBackend = KernelConfig.moe_backend"),
            "recipe:async_scheduling": Source("vllm/config/vllm.py", 1719, 1719,
                                              "self.scheduler_config.async_scheduling = True"),
            # Load-time shape rules (planner/shape_rules.py): what vLLM checks on the TP/EP shard of each layer.
            "shape:heads_divide_tp": Source("vllm/config/model.py", 1559, 1562,
                                            "must be divisible by tensor parallel size "),
            "shape:kv_heads_replicate": Source("vllm/model_executor/layers/linear.py", 1065, 1068,
                                               "self.num_kv_head_replicas = divide(tp_size, self.total_num_kv_heads)"),
            "shape:fp8_block_moe_called": Source("vllm/model_executor/layers/quantization/fp8.py", 554, 555,
                                                 "validate_fp8_block_shape_moe("),
            # Without expert parallelism an MoE's experts are sliced over the DP x PCP x TP group.
            "shape:moe_tp_flattens_dp": Source("vllm/model_executor/layers/fused_moe/config.py", 1112, 1112,
                                               "flatten_tp_size = dp_size * pcp_size * tp_size"),
            "shape:fp8_moe_refine": Source("vllm/model_executor/layers/fused_moe/oracle/fp8.py", 315, 321,
                                           "refine = math.gcd(block_n, block_k, ispp, config.hidden_dim)"),
            "shape:group_divides_partition": Source("vllm/distributed/utils.py", 145, 150,
                                                    "This happens when tensor_parallel_size splits the layer input "),
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
        # LoRA adapter slots (planner/lora.py): allowed ranks, the slots per layer and how TP shards them.
        "lora:max_ranks": Source("vllm/config/lora.py", 27, 27, "MaxLoRARanks = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]"),
        "lora:dtype_auto": Source("vllm/config/lora.py", 158, 158, "self.lora_dtype = model_config.dtype"),
        "lora:spec_batch_refused": Source("vllm/engine/arg_utils.py", 2722, 2722,
                                          "Consider increasing max_num_batched_tokens or "),
        # ROCm (AMD Instinct, planning only: planner/hardware.py ROCM_*, inputs.py vendor/gfx, precision.py).
        "rocm:gfx_capability": Source("vllm/platforms/rocm.py", 245, 245,
                                      "gfx90a  -> (9, 0)    gfx942  -> (9, 4)    gfx950 -> (9, 5)"),
        "rocm:fp8_fnuz_on_gfx94": Source("vllm/platforms/rocm.py", 1261, 1261, 'return "gfx94" in _GCN_ARCH'),
        "rocm:fp8_dtype": Source("vllm/platforms/rocm.py", 1266, 1266, "return torch.float8_e4m3fnuz"),
        "rocm:supports_fp8": Source("vllm/platforms/rocm.py", 1256, 1256, "return on_cdna() or on_rdna()"),
        "rocm:supports_mx_gfx95": Source("vllm/platforms/rocm.py", 1252, 1252,
                                         'return any(gfx in _GCN_ARCH for gfx in ["gfx95", "gfx1250"])'),
        "rocm:quantization": Source("vllm/platforms/rocm.py", 668, 691, '"gpt_oss_mxfp4",'),
        "rocm:total_memory_amdsmi": Source("vllm/platforms/rocm.py", 1098, 1098,
                                           "return _query_total_memory_from_amdsmi(physical_device_id)"),
        "rocm:attention_first": Source("vllm/platforms/rocm.py", 557, 557,
                                       "backends.append(AttentionBackendEnum.ROCM_ATTN)"),
        "rocm:mla_without_aiter": Source("vllm/platforms/rocm.py", 550, 550, "AttentionBackendEnum.TRITON_MLA,"),
        "rocm:fp8_kv_dtypes": Source("vllm/v1/attention/backends/rocm_attn.py", 148, 149,
                                     '"fp8_e4m3",'),
        "rocm:custom_allreduce_mi300": Source("vllm/platforms/rocm.py", 1273, 1273,
                                              'return any(gfx in _GCN_ARCH for gfx in ["gfx94", "gfx95"])'),
        # Memory: the budget is the same (torch total x gpu_memory_utilization); ROCm differs in two places only.
        "rocm:profiling_fallback": Source("vllm/v1/worker/gpu_worker.py", 140, 140,
                                          "if profile_result.total_consumed >= 0 or not current_platform.is_rocm():"),
    },
    archive=Archive("vllm-0.33.0.tar.gz", 47_101_396,
                    "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112"),
    changes={
        # cuBLAS/cuBLASLt handles created before the memory snapshot (gpu_worker.py:519-529): outside the budget.
        "cublas_outside_budget": True,
        # GB10 (cc 12.1) stays on the small scheduler tier whatever its memory (engine/arg_utils.py:2963).
        "small_tier_capabilities": ("12.1",),
    },
    added_args=(
        Added("monokernel", _V, "runs eligible decode layers as one persistent kernel (config/kernel.py:299)"),
        Added("sleep_mode_backend", _V, "the sleep-mode mechanism, default cumem (config/model.py:379)"),
        Added("watchdog_config", _V, "the stack-dump watchdog (config/watchdog_config.py)"),
    ),
    added_serve_only=frozenset({"reasoning_effort_map"}),
    added_negatable=frozenset({"monokernel"}),
    removed_args=(
        Removed("mamba_cache_mode", _V, ignored=True,
                why="a deprecated no-op since 0.33: Mamba prefix caching follows --enable-prefix-caching "
                    "(engine/arg_utils.py:462-465, 2304-2305)"),
    ),
    removed_env=(
        # 0.33 dropped the Ray compiled-DAG knobs with device_communicators/ray_communicator.py (0.32: envs.py:63-67,
        # 923-946); Ray stays an executor backend (--distributed-executor-backend ray).
        Removed("VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE", _V, _RAY_DAG),
        Removed("VLLM_USE_RAY_COMPILED_DAG_OVERLAP_COMM", _V, _RAY_DAG),
        Removed("VLLM_USE_RAY_WRAPPED_PP_COMM", _V, _RAY_DAG),
        Removed("VLLM_USE_RAY_V2_EXECUTOR_BACKEND", _V, "removed in vLLM 0.33"),
        # ROCm-only knobs 0.33 also dropped (0.32 envs.py:149-159): listed so a copied ROCm recipe is caught too.
        Removed("VLLM_ROCM_AITER_MLA_DCP_VERIFY", _V, _ROCM),
        Removed("VLLM_ROCM_USE_AITER_FP4_ASM_GEMM", _V, _ROCM),
        Removed("VLLM_ROCM_AITER_MEGA_MOE_FUSE_SHARED_EXPERTS", _V, _ROCM),
        Removed("VLLM_ROCM_MONO_DECODE", _V, _ROCM),
    ),
    # 0.33 removed the compiled-graph executor (v1/executor has no ray_executor.py; RayExecutorV2 only, no cupy
    # import; the VLLM_USE_RAY_COMPILED_DAG_* variables are gone): plain Ray.
    images=(
        ImageRow(
            key="cu130",
            variant="cuda",
            vllm_version="0.33.0",
            vllm_package="vllm",
            torch_version="2.14.0",
            cuda_version="13.0",
            torch_cuda="13.0",
            compute_capabilities=CC_CU130,
            base_image="nvidia/cuda:13.0.3-base-ubuntu24.04",
            python_version="3.12",
            glibc="2.39",
            requirements=("vllm==0.33.0", "torch==2.14.0"),
            ray_requirements=(f"ray=={RAY_VERSION}",),
            sources=(
                "vLLM 0.33.0 wheel METADATA and requirements/cuda.txt: torch==2.14.0 (torch 2.14.0 requires "
                "cuda-toolkit 13.0.3 and nvidia-nccl-cu13==2.30.7)",
                "vLLM 0.33.0 docker/versions.json: CUDA_VERSION 13.0.3, FINAL_BASE_IMAGE "
                "nvidia/cuda:13.0.3-base-ubuntu24.04, PYTHON_VERSION 3.12, TORCH_CUDA_ARCH_LIST "
                "'7.5 8.0 8.6 8.9 9.0 10.0 11.0 12.0' (family targets, CMakeLists.txt:124-129)",
                "no cu129 wheel of 0.33.0 could be checked here (its index was unreachable): no cu129 row; an R575 "
                "host falls back to 0.32.0 cu129",
            ),
            notes=("Default upstream build (CUDA 13.0). The upstream image overrides NCCL to 2.31.2 (docker/Dockerfile "
                   "NCCL_VERSION); a pip install keeps torch 2.14.0's pin, nvidia-nccl-cu13 2.30.7."),
        ),
    ),
)
