"""The option names ``vllm serve`` accepts, keyed by vLLM release series: data read from vLLM's own source.

Preflight refuses a pinned engine argument or an extra CLI flag that is not one of these names (a typo such as
``max_num_seq`` next to the planned ``max_num_seqs`` would otherwise reach ``vllm serve``, which exits 2 on an
unrecognized argument), with the nearest name as a suggestion. Types, ranges and removed names are
``rules.py``'s; this module holds only the complete list of names.

To add a release: in a venv with that vLLM, read ``dataclasses.fields(AsyncEngineArgs)`` (vllm/engine/arg_utils.py),
``dataclasses.fields(FrontendArgs)`` (vllm/entrypoints/launchers/cli_args.py) and the long options of
``make_arg_parser(FlexibleArgumentParser())``; add one frozenset each, keyed by the series.
"""

from __future__ import annotations

from collections.abc import Mapping

from .releases import RELEASES, parse_version

#: vLLM 0.32.0 engine arguments: the fields of ``class EngineArgs`` (vllm/engine/arg_utils.py, line 471) plus
#: ``AsyncEngineArgs.enable_log_requests`` (``vllm serve`` builds an AsyncEngineArgs), snake_case. Left out: the
#: fields ``vllm serve`` has no option for (``_api_process_count``, ``_api_process_rank``, ``model_weights``,
#: ``mamba_config``, ``enable_mm_processor_stats``): a ``--config`` file holding one makes ``vllm serve`` exit 2.
_ENGINE_ARGS_0_32: frozenset[str] = frozenset({
    "additional_config", "aggregate_engine_logging", "all2all_backend", "allow_deprecated_quantization",
    "allowed_local_media_path", "allowed_media_domains", "async_scheduling", "attention_backend",
    "attention_config", "aux_output_config", "block_size", "code_revision", "collect_detailed_traces",
    "compilation_config", "config_format", "convert", "cp_kv_cache_interleave_size",
    "cpu_distributed_timeout_seconds", "cpu_offload_gb", "cpu_offload_params", "cudagraph_capture_sizes",
    "cudagraph_metrics", "custom_histogram_buckets", "data_parallel_address", "data_parallel_backend",
    "data_parallel_external_lb", "data_parallel_hybrid_lb", "data_parallel_multi_port_external_lb",
    "data_parallel_rank", "data_parallel_rpc_port", "data_parallel_size", "data_parallel_size_local",
    "data_parallel_start_rank", "dbo_decode_token_threshold", "dbo_prefill_token_threshold",
    "dcp_comm_backend", "dcp_kv_cache_interleave_size", "dcp_q_replicate", "decode_context_parallel_size",
    "default_mm_loras", "device_ids", "diffusion_config", "disable_cascade_attn",
    "disable_chunked_mm_input", "disable_custom_all_reduce", "disable_hybrid_kv_cache_manager",
    "disable_log_stats", "disable_nccl_for_dp_synchronization", "disable_sliding_window",
    "distributed_executor_backend", "distributed_timeout_seconds", "download_dir", "dp_sync_interval",
    "dtype", "ec_manager_config", "ec_transfer_config", "elastic_ep_max_dp_size",
    "enable_batch_sharded_sampling", "enable_chunked_prefill", "enable_cumem_allocator", "enable_dbo",
    "enable_elastic_ep", "enable_ep_weight_filter", "enable_eplb", "enable_expert_parallel",
    "enable_fault_tolerance", "enable_flashinfer_autotune", "enable_hc_sp",
    "enable_layerwise_nvtx_tracing", "enable_log_requests", "enable_logging_iteration_details",
    "enable_lora", "enable_mamba_cache_stochastic_rounding", "enable_mamba_shared_prefix_checkpoint",
    "enable_mfu_metrics", "enable_mixed_moe_lora_format", "enable_mm_embeds", "enable_moe_shared_loras",
    "enable_nccl_comm_suspend", "enable_prefix_caching", "enable_prompt_embeds",
    "enable_return_routed_experts", "enable_shm_tensor_arena", "enable_sleep_mode",
    "enable_tower_connector_lora", "enable_trace_replay", "enforce_eager", "engram_config", "eplb_config",
    "expert_placement_strategy", "fail_on_environ_validation", "fault_tolerance_config",
    "fully_sharded_loras", "gdn_prefill_backend", "generation_config", "gpu_memory_utilization",
    "hf_config_path", "hf_overrides", "hf_token", "ignore_patterns", "interleave_mm_strings",
    "io_processor_plugin", "ir_op_priority", "jit_monitor_mode", "jit_monitor_verbose",
    "kda_decode_backend", "kda_prefill_backend", "kernel_config", "kv_cache_dtype",
    "kv_cache_dtype_skip_layers", "kv_cache_memory_bytes", "kv_cache_metrics", "kv_cache_metrics_sample",
    "kv_events_config", "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill",
    "kv_transfer_config", "language_model_only", "limit_mm_per_prompt", "linear_backend", "load_format",
    "log_config_file", "log_level", "logging_config", "logits_processors", "logprobs_mode",
    "long_prefill_token_threshold", "long_prefill_token_threshold_adaptive", "lora_dtype",
    "lora_target_modules", "mamba_backend", "mamba_block_size", "mamba_cache_dtype", "mamba_cache_mode",
    "mamba_cache_philox_rounds", "mamba_ssm_cache_dtype", "mamba_ssu_algorithm", "master_addr",
    "master_port", "max_cpu_loras", "max_cudagraph_capture_size", "max_logprobs", "max_lora_cls_labels",
    "max_lora_rank", "max_loras", "max_model_len", "max_num_active_seqs", "max_num_batched_tokens",
    "max_num_queued_reqs", "max_num_queued_tokens", "max_num_scheduled_tokens", "max_num_seqs",
    "max_parallel_loading_workers", "media_io_kwargs", "mm_device_do_normalize",
    "mm_encoder_attn_backend", "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path",
    "mm_encoder_fp8_scale_save_margin", "mm_encoder_fp8_scale_save_path", "mm_encoder_only",
    "mm_encoder_tp_mode", "mm_hasher_algorithm", "mm_ipc_gpu_memory_gb", "mm_processor_cache_gb",
    "mm_processor_cache_type", "mm_processor_device", "mm_processor_kwargs",
    "mm_shm_cache_max_object_size_mb", "mm_tensor_ipc", "model", "model_class_overrides", "model_impl",
    "model_loader_extra_config", "moe_backend", "nnodes", "node_rank", "num_gpu_blocks_override",
    "numa_bind", "numa_bind_cpus", "numa_bind_nodes", "offload_backend", "offload_group_size",
    "offload_num_in_group", "offload_params", "offload_prefetch_step", "optimization_level",
    "otlp_traces_endpoint", "override_generation_config", "per_request_spec_decode_metrics",
    "performance_mode", "pipeline_parallel_size", "pooler_config", "prefill_context_parallel_size",
    "prefill_schedule_interval", "prefix_cache_retention_interval", "prefix_caching_hash_algo",
    "prefix_match_unit", "profiler_config", "pt_load_map_location", "quantization", "quantization_config",
    "ray_workers_use_nsight", "reasoning_config", "reasoning_parser", "reasoning_parser_plugin",
    "renderer_num_workers", "replayssm_buffer_len", "return_sampling_mask", "revision", "runner",
    "safetensors_load_strategy", "safetensors_prefetch_block_size", "safetensors_prefetch_num_threads",
    "scheduler_cls", "scheduler_reserve_full_isl", "scheduling_policy", "seed", "served_model_name",
    "show_hidden_metrics_for_version", "shutdown_timeout", "skip_mm_profiling", "skip_tokenizer_init",
    "sleep_mode_offload_cudagraph", "sleep_preserve_parameter_names", "sparse_indexer_topk_backend",
    "spec_method", "spec_model", "spec_tokens", "specialize_active_lora", "speculative_config",
    "stream_interval", "structured_outputs_config", "swa_bounded_replay", "tensor_parallel_size",
    "tokenizer", "tokenizer_mode", "tokenizer_revision", "tokens_only", "trust_remote_code",
    "ubatch_size", "use_fp64_gumbel", "use_replayssm", "use_tqdm_on_load", "video_pruning_method",
    "video_pruning_rate", "watermark", "watermark_config", "weight_transfer_config", "worker_cls",
    "worker_extension_cls"
})

#: vLLM 0.32.0 ``vllm serve`` options that are not engine arguments: the fields of ``FrontendArgs`` (API server,
#: tools, TLS, CORS; vllm/entrypoints/launchers/cli_args.py) and ``make_arg_parser``'s own ``--headless``,
#: ``--api-server-count``, ``--config`` and ``--grpc``.
_SERVE_ONLY_0_32: frozenset[str] = frozenset({
    "allow_credentials", "allowed_headers", "allowed_methods", "allowed_origins",
    "anthropic_disabled_thinking_effort", "api_key", "api_server_count", "chat_template",
    "chat_template_content_format", "cohere_format", "cohere_is_reasoning_model", "config",
    "data_parallel_supervisor_port", "default_chat_template_kwargs", "disable_access_log_for_endpoints",
    "disable_fastapi_docs", "disable_uvicorn_access_log", "dp_supervisor_probe_failure_threshold",
    "dp_supervisor_probe_interval_s", "dp_supervisor_probe_timeout_s", "enable_auto_tool_choice",
    "enable_flash_late_interaction", "enable_force_include_usage", "enable_log_deltas",
    "enable_log_outputs", "enable_offline_docs", "enable_per_request_metrics",
    "enable_prompt_tokens_details", "enable_request_id_headers", "enable_scale_out",
    "enable_server_load_tracking", "enable_ssl_refresh", "enable_tokenizer_info_endpoint",
    "exclude_tools_when_tool_choice_none", "fingerprint_mode", "fingerprint_value", "grpc", "grpc_port",
    "h11_max_header_count", "h11_max_incomplete_event_size", "headless", "host", "log_error_stack",
    "lora_modules", "max_log_len", "middleware", "port", "response_role", "return_tokens_as_token_ids",
    "root_path", "sse_keep_alive_interval", "ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile",
    "ssl_ciphers", "ssl_keyfile", "tool_call_parser", "tool_parser_plugin", "tool_server",
    "tool_strict_level", "trust_request_chat_template", "trust_request_mm_kwargs", "uds",
    "uvicorn_log_level"
})

#: vLLM 0.32.0 option spellings that are not a field name → the field they set (``make_arg_parser``'s aliases:
#: ``--device-memory-utilization`` and the short forms such as ``-tp``).
_ALIASES_0_32: dict[str, str] = {
    "device_memory_utilization": "gpu_memory_utilization", "tp": "tensor_parallel_size",
    "pp": "pipeline_parallel_size", "dp": "data_parallel_size", "dcp": "decode_context_parallel_size",
    "pcp": "prefill_context_parallel_size", "dpn": "data_parallel_rank", "dpr": "data_parallel_start_rank",
    "dpl": "data_parallel_size_local", "dpa": "data_parallel_address", "dpp": "data_parallel_rpc_port",
    "dpb": "data_parallel_backend", "dph": "data_parallel_hybrid_lb", "dpe": "data_parallel_external_lb",
    "dpm": "data_parallel_multi_port_external_lb", "ep": "enable_expert_parallel", "q": "quantization",
    "n": "nnodes", "r": "node_rank", "sc": "speculative_config", "dc": "diffusion_config",
    "cc": "compilation_config", "ac": "attention_config", "asc": "api_server_count",
}


#: vLLM 0.32.0 on/off options that take both ``--NAME`` and ``--no-NAME`` (``argparse.BooleanOptionalAction``: every
#: ``bool`` field, vllm/engine/arg_utils.py:378-380, and the explicit ones such as ``--enable-log-requests``), read
#: from the real parser with ``scripts/vllm_serve_parse.py options``. A pinned ``false`` is written ``--no-NAME``
#: on a command line; vLLM's ``--config`` loader does the same (vllm/utils/argparse_utils.py:617-621).
_NEGATABLE_0_32: frozenset[str] = frozenset({
    "allow_credentials", "allow_deprecated_quantization", "async_scheduling", "cohere_is_reasoning_model",
    "cudagraph_metrics", "data_parallel_external_lb", "data_parallel_hybrid_lb", "dcp_q_replicate",
    "disable_cascade_attn", "disable_chunked_mm_input", "disable_custom_all_reduce", "disable_fastapi_docs",
    "disable_hybrid_kv_cache_manager", "disable_nccl_for_dp_synchronization", "disable_sliding_window",
    "disable_uvicorn_access_log", "enable_auto_tool_choice", "enable_batch_sharded_sampling",
    "enable_chunked_prefill", "enable_cumem_allocator", "enable_dbo", "enable_elastic_ep",
    "enable_ep_weight_filter", "enable_eplb", "enable_expert_parallel", "enable_fault_tolerance",
    "enable_flash_late_interaction", "enable_flashinfer_autotune", "enable_force_include_usage", "enable_hc_sp",
    "enable_layerwise_nvtx_tracing", "enable_log_deltas", "enable_log_outputs", "enable_log_requests",
    "enable_logging_iteration_details", "enable_lora", "enable_mamba_cache_stochastic_rounding",
    "enable_mamba_shared_prefix_checkpoint", "enable_mfu_metrics", "enable_mixed_moe_lora_format",
    "enable_mm_embeds", "enable_moe_shared_loras", "enable_nccl_comm_suspend", "enable_offline_docs",
    "enable_per_request_metrics", "enable_prefix_caching", "enable_prompt_embeds", "enable_prompt_tokens_details",
    "enable_request_id_headers", "enable_return_routed_experts", "enable_scale_out", "enable_server_load_tracking",
    "enable_shm_tensor_arena", "enable_sleep_mode", "enable_ssl_refresh", "enable_tokenizer_info_endpoint",
    "enable_tower_connector_lora", "enable_trace_replay", "enforce_eager", "exclude_tools_when_tool_choice_none",
    "fail_on_environ_validation", "fully_sharded_loras", "interleave_mm_strings", "jit_monitor_verbose",
    "kv_cache_metrics", "kv_sharing_fast_prefill", "language_model_only", "log_error_stack",
    "long_prefill_token_threshold_adaptive", "mm_device_do_normalize", "mm_encoder_only", "numa_bind",
    "ray_workers_use_nsight", "return_sampling_mask", "return_tokens_as_token_ids", "scheduler_reserve_full_isl",
    "skip_mm_profiling", "skip_tokenizer_init", "sleep_mode_offload_cudagraph", "specialize_active_lora",
    "swa_bounded_replay", "tokens_only", "trust_remote_code", "trust_request_chat_template",
    "trust_request_mm_kwargs", "use_fp64_gumbel", "use_replayssm", "use_tqdm_on_load",
})
#: vLLM 0.32.0 switches with no ``--no-`` form (``store_true``): off unless given; a pinned ``false`` is left out.
_SWITCHES_0_32: frozenset[str] = frozenset({
    "aggregate_engine_logging", "data_parallel_multi_port_external_lb", "disable_log_stats", "grpc", "headless",
})


def _per_release() -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]], dict[str, frozenset[str]],
                            dict[str, frozenset[str]], dict[str, dict[str, str]]]:
    """Each release series' names: the 0.32 lists above, then every later release block's changes (its
    ``added_args``, ``added_serve_only``, ``added_negatable``; engine arguments it removed outright leave the
    list, ignored ones stay: vLLM still parses them), carried forward release by release."""
    engine, serve, negatable = _ENGINE_ARGS_0_32, _SERVE_ONLY_0_32, _NEGATABLE_0_32
    out: tuple[dict[str, frozenset[str]], dict[str, frozenset[str]], dict[str, frozenset[str]],
               dict[str, frozenset[str]], dict[str, dict[str, str]]] = ({}, {}, {}, {}, {})
    for release in RELEASES:
        if release.key > (0, 32, 0):
            gone = {entry.name for entry in release.removed_args if not entry.ignored}
            engine = (engine | {entry.name for entry in release.added_args}) - gone
            serve = serve | release.added_serve_only
            negatable = (negatable | release.added_negatable) - gone
        out[0][release.series] = frozenset(engine)
        out[1][release.series] = frozenset(serve)
        out[2][release.series] = frozenset(negatable)
        out[3][release.series] = _SWITCHES_0_32
        out[4][release.series] = _ALIASES_0_32
    return out


#: Release series → engine-argument names (snake_case). The newest series answers for any version not listed.
#: Release series → ``vllm serve`` options that are not engine arguments (snake_case).
#: Release series → the on/off options with a ``--no-`` form (snake_case).
#: Release series → the ``store_true`` switches (snake_case).
#: Release series → option aliases (snake_case, without dashes) → the name they stand for.
ENGINE_ARG_NAMES, SERVE_ONLY_NAMES, NEGATABLE_NAMES, SWITCH_NAMES, OPTION_ALIASES = _per_release()


def _series(version: str | None, table: Mapping[str, object]) -> str:
    """The series key of ``table`` for ``version`` (``"0.32.1"`` → ``"0.32"``); the newest listed when the version is
    unset, unreadable or not listed (names vLLM removed are rules.REMOVED_ARGS, which preflight checks first)."""
    newest = max(table, key=parse_version)
    try:
        major, minor, _patch = parse_version(str(version))
    except (TypeError, ValueError):
        return newest
    key = f"{major}.{minor}"
    return key if key in table else newest


def covers(version: str | None = None) -> bool:
    """Whether these lists speak for ``version``: its series is listed, or it is newer than every listed one (or
    unset/unreadable: the default target). An older release had names since removed that no list here holds, so
    preflight does not refuse unknown names for it."""
    try:
        wanted = parse_version(str(version))
    except (TypeError, ValueError):
        return True
    return any(wanted[:2] >= parse_version(series)[:2] for series in ENGINE_ARG_NAMES)


def engine_arg_names(version: str | None = None) -> frozenset[str]:
    """The engine-argument names (snake_case) of vLLM ``version``: what ``vllm_fleet_engine_args`` may hold."""
    return ENGINE_ARG_NAMES[_series(version, ENGINE_ARG_NAMES)]


def serve_only_names(version: str | None = None) -> frozenset[str]:
    """The ``vllm serve`` options of ``version`` that are not engine arguments (``api_key``, ``tool_call_parser``…)."""
    return SERVE_ONLY_NAMES[_series(version, SERVE_ONLY_NAMES)]


def option_aliases(version: str | None = None) -> dict[str, str]:
    """Alias spellings of ``vllm serve`` options (``tp``, ``device_memory_utilization``) → the name they set."""
    return dict(OPTION_ALIASES[_series(version, OPTION_ALIASES)])


def negatable_names(version: str | None = None) -> frozenset[str]:
    """The on/off options of ``version`` that ``--no-NAME`` turns off (snake_case; the newest list for an unlisted
    version)."""
    return NEGATABLE_NAMES[_series(version, NEGATABLE_NAMES)]


def switch_names(version: str | None = None) -> frozenset[str]:
    """The ``store_true`` switches of ``version`` (snake_case): no ``--no-`` form."""
    return SWITCH_NAMES[_series(version, SWITCH_NAMES)]
