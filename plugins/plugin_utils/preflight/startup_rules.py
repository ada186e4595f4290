# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""The inventory of vLLM 0.32's and 0.33's start-up rules, and what preflight does about each.

Every entry is one check vLLM makes when the engine starts (``vllm/config/*.py``, ``engine/arg_utils.py``, the
attention backend registry and selector, the quantization methods, the LoRA and speculative configs, the platform
and worker checks): its id, vLLM's own words (a fragment of the source line, so the test can find it), the file
and line in each version's source (``.cache/vllm-src/<version>``, ``make vllm-src``), and either

- ``check``: the preflight check or planner rule that refuses the same input before any host changes, as
  ``<package>.<module>:<function>`` under ``plugins/plugin_utils`` (``preflight.startup`` holds the ones this
  inventory added), or
- ``reason`` and ``kind``: why preflight does not refuse it. ``at_start``: only known when the container starts
  (the GPU's free memory, its kernels, NCCL, what vLLM resolves at start); ``vllm_code``: decided by vLLM's model
  registry or model code, not by anything in config.json; ``not_planned``: decidable in principle, but about an
  option vllm-fleet does not plan or never writes (P/D KV transfer, watermarking, NUMA binding, ...), so vLLM's
  own words at start are the refusal.

tests/unit/preflight/test_startup_rules.py fails when an entry has neither (or both), when a named check does not
exist, or when vLLM's words are no longer at the cited line. docs/preflight.md gives the counts.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["KINDS", "RULES", "StartupRule", "counts"]


class StartupRule(NamedTuple):
    """One start-up rule of vLLM; exactly one of ``check`` and ``reason`` is set."""

    id: str
    words: str
    where: dict[str, str]  # vLLM version -> "vllm/<file>.py:<line>"
    check: str = ""
    kind: str = ""  # at_start | vllm_code | not_planned, with reason
    reason: str = ""


RULES: tuple[StartupRule, ...] = (
    StartupRule(
        'scheduler.chunked_off_tokens_below_len',
        'smaller than max_model_len ({max_model_len}). ',
        {"0.32.0": 'vllm/config/scheduler.py:321', "0.33.0": 'vllm/config/scheduler.py:324'},
        check='preflight.startup:scheduler_pins',
    ),
    StartupRule(
        'scheduler.tokens_below_seqs',
        'be greater than or equal to max_num_seqs',
        {"0.32.0": 'vllm/config/scheduler.py:331', "0.33.0": 'vllm/config/scheduler.py:334'},
        check='preflight.startup:scheduler_pins',
    ),
    StartupRule(
        'scheduler.active_seqs_above_seqs',
        'max_num_active_seqs ({self.max_num_active_seqs}) cannot be',
        {"0.32.0": 'vllm/config/scheduler.py:340', "0.33.0": 'vllm/config/scheduler.py:343'},
        check='preflight.startup:scheduler_pins',
    ),
    StartupRule(
        'scheduler.long_prefill_above_len',
        'than the max_model_len ({max_model_len}).',
        {"0.32.0": 'vllm/config/scheduler.py:356', "0.33.0": 'vllm/config/scheduler.py:359'},
        check='preflight.startup:scheduler_pins',
    ),
    StartupRule(
        'scheduler.plan_limits',
        'def verify_max_model_len',
        {"0.32.0": 'vllm/config/scheduler.py:314', "0.33.0": 'vllm/config/scheduler.py:317'},
        check='preflight.startup:check_plan',
    ),
    StartupRule(
        'lora.cpu_loras_below_loras',
        'max_cpu_loras ({self.max_cpu_loras}) must be >=',
        {"0.32.0": 'vllm/config/lora.py:124', "0.33.0": 'vllm/config/lora.py:125'},
        check='preflight.startup:lora_cpu_slots',
    ),
    StartupRule(
        'lora.dual_stream_cuda_only',
        'Dual CUDA streams are only supported on CUDA platforms',
        {"0.32.0": 'vllm/config/lora.py:128', "0.33.0": 'vllm/config/lora.py:129'},
        kind='not_planned',
        reason=(
            'set by VLLM_LORA_ENABLE_DUAL_STREAM; preflight refuses unknown and removed VLLM_* but '
            "does not model this knob: vLLM's own words suffice at start"
        ),
    ),
    StartupRule(
        'lora.max_lora_rank_values',
        'MaxLoRARanks = Literal',
        {"0.32.0": 'vllm/config/lora.py:26', "0.33.0": 'vllm/config/lora.py:27'},
        check='planner.lora:resolve_lora',
    ),
    StartupRule(
        'model.quantization_mismatch',
        'does not match the quantization',
        {"0.32.0": 'vllm/config/model.py:1446', "0.33.0": 'vllm/config/model.py:1459'},
        check='preflight.startup:quantization_matches_checkpoint',
    ),
    StartupRule(
        'model.quantization_unknown',
        'Unknown quantization method: {self.quantization}',
        {"0.32.0": 'vllm/config/model.py:1454', "0.33.0": 'vllm/config/model.py:1467'},
        check='planner.precision:resolve_precision',
    ),
    StartupRule(
        'model.quantization_deprecated',
        'The quantization method %s is deprecated',
        {"0.32.0": 'vllm/config/model.py:1462', "0.33.0": 'vllm/config/model.py:1475'},
        check='preflight.startup:quantization_not_deprecated',
    ),
    StartupRule(
        'model.expert_parallel_dense',
        'Number of experts in the model must be greater than 0',
        {"0.32.0": 'vllm/config/model.py:1488', "0.33.0": 'vllm/config/model.py:1501'},
        check='preflight.startup:expert_parallel_needs_moe',
    ),
    StartupRule(
        'model.tp_divides_heads',
        'must be divisible by tensor parallel size',
        {"0.32.0": 'vllm/config/model.py:1549', "0.33.0": 'vllm/config/model.py:1562'},
        check='planner.gpu_lane:gpu_inputs',
    ),
    StartupRule(
        'model.pp_supported_model',
        'Pipeline parallelism is not supported for this model',
        {"0.32.0": 'vllm/config/model.py:1561', "0.33.0": 'vllm/config/model.py:1574'},
        kind='vllm_code',
        reason=(
            "needs vLLM's model registry (SupportsPP per architecture class): not in config.json; "
            'vLLM refuses at start with its own words'
        ),
    ),
    StartupRule(
        'model.dcp_gqa_tp_above_kv_heads',
        'Decode context parallelism for GQA/MQA requires',
        {"0.32.0": 'vllm/config/model.py:1570', "0.33.0": 'vllm/config/model.py:1583'},
        check='preflight.startup:decode_context_parallel',
    ),
    StartupRule(
        'model.dcp_max_size',
        'exceeds the maximum',
        {"0.32.0": 'vllm/config/model.py:1581', "0.33.0": 'vllm/config/model.py:1594'},
        check='preflight.startup:decode_context_parallel',
    ),
    StartupRule(
        'model.dcp_q_per_kv',
        "The model's number of query heads per KV head",
        {"0.32.0": 'vllm/config/model.py:1590', "0.33.0": 'vllm/config/model.py:1603'},
        check='preflight.startup:decode_context_parallel',
    ),
    StartupRule(
        'model.hc_sp_cuda',
        '--enable-hc-sp currently requires CUDA',
        {"0.32.0": 'vllm/config/model.py:1538', "0.33.0": 'vllm/config/model.py:1551'},
        kind='vllm_code',
        reason=(
            "needs the registry's per-architecture support list (is_hc_sp_supported_model): not "
            'decidable from config.json'
        ),
    ),
    StartupRule(
        'model.max_model_len_positive',
        'max_model_len must be a positive integer',
        {"0.32.0": 'vllm/config/model.py:1059', "0.33.0": 'vllm/config/model.py:1072'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'model.max_model_len_beyond_derived',
        'To allow overriding this maximum, set',
        {"0.32.0": 'vllm/config/model.py:2663', "0.33.0": 'vllm/config/model.py:2681'},
        check='planner.engine_args:wanted_max_model_len',
    ),
    StartupRule(
        'model.fp16_unsupported_model',
        'does not support float16. Reason:',
        {"0.32.0": 'vllm/config/model.py:2399', "0.33.0": 'vllm/config/model.py:2417'},
        kind='vllm_code',
        reason=(
            "the per-model-type float16 ban list lives in vLLM's model code "
            "(_FLOAT16_NOT_SUPPORTED_MODELS); preflight only plans dtype for sm<80 with the planner's"
            ' rule'
        ),
    ),
    StartupRule(
        'model.runner_pooling',
        'This model does not support `--runner pooling`',
        {"0.32.0": 'vllm/config/model.py:723', "0.33.0": 'vllm/config/model.py:734'},
        kind='not_planned',
        reason=(
            'pooling runners are not deployed by vllm-fleet (generate only): the option is not '
            'planned'
        ),
    ),
    StartupRule(
        'model.prompt_embeds_encdec',
        '--enable-prompt-embeds is not supported with encoder-decoder',
        {"0.32.0": 'vllm/config/model.py:1067', "0.33.0": 'vllm/config/model.py:1080'},
        kind='vllm_code',
        reason="encoder-decoder detection needs vLLM's registry; rare option, left to vLLM",
    ),
    StartupRule(
        'model.bf16_below_sm80',
        'Bfloat16 is only supported on GPUs ',
        {"0.32.0": 'vllm/platforms/cuda.py:649', "0.33.0": 'vllm/platforms/cuda.py:651'},
        check='planner.precision:choose_dtype',
    ),
    StartupRule(
        'vllm.quant_min_capability',
        'is not supported for the current GPU. Minimum',
        {"0.32.0": 'vllm/config/vllm.py:903', "0.33.0": 'vllm/config/vllm.py:933'},
        check='planner.precision:check_quantization',
    ),
    StartupRule(
        'vllm.quant_act_dtype',
        'is not supported for quantization',
        {"0.32.0": 'vllm/config/vllm.py:910', "0.33.0": 'vllm/config/vllm.py:940'},
        kind='vllm_code',
        reason=(
            'get_supported_act_dtypes per method instance needs the parsed quant config object; the '
            "planner's dtype rule covers the common fp16/bf16 cases only"
        ),
    ),
    StartupRule(
        'vllm.routed_experts_moe',
        '--enable-return-routed-experts is incompatible with',
        {"0.32.0": 'vllm/config/vllm.py:1162', "0.33.0": 'vllm/config/vllm.py:1214'},
        kind='not_planned',
        reason='debug/RL option not planned; left to vLLM',
    ),
    StartupRule(
        'vllm.async_sched_executor',
        'does not support async scheduling yet',
        {"0.32.0": 'vllm/config/vllm.py:1583', "0.33.0": 'vllm/config/vllm.py:1683'},
        kind='at_start',
        reason=(
            'whether an executor supports async scheduling is a property of its class, resolved at '
            'start; vllm-fleet leaves async_scheduling to vLLM, whose default turns it on only where '
            'supported'
        ),
    ),
    StartupRule(
        'vllm.mamba_block_size_prefix',
        '--mamba-block-size can only be set with --enable-prefix-caching',
        {"0.32.0": 'vllm/config/vllm.py:3314', "0.33.0": 'vllm/config/vllm.py:3450'},
        kind='not_planned',
        reason='hybrid-model knob not planned (the planner leaves mamba_block_size to vLLM)',
    ),
    StartupRule(
        'vllm.nvfp4_kv_mla',
        'nvfp4 KV cache is not supported with MLA',
        {"0.32.0": 'vllm/config/vllm.py:3297', "0.33.0": 'vllm/config/vllm.py:3433'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'vllm.hybrid_kv_manager_forced',
        'Hybrid KV cache manager was explicitly enabled but is not',
        {"0.32.0": 'vllm/config/vllm.py:2199', "0.33.0": 'vllm/config/vllm.py:2286'},
        kind='at_start',
        reason="depends on the KV connector and the model's layer specs resolved at start",
    ),
    StartupRule(
        'vllm.kv_connector_unknown',
        'KV connector {self.kv_transfer_config.kv_connector} is',
        {"0.32.0": 'vllm/config/vllm.py:1225', "0.33.0": 'vllm/config/vllm.py:1292'},
        kind='not_planned',
        reason='KV transfer (P/D disaggregation) is not deployed by vllm-fleet',
    ),
    StartupRule(
        'vllm.watermark_spec',
        'Speculative decoding with watermarking requires',
        {"0.32.0": 'vllm/config/vllm.py:1295', "0.33.0": 'vllm/config/vllm.py:1362'},
        kind='not_planned',
        reason='watermarking is not a planned option',
    ),
    StartupRule(
        'vllm.model_runner_unsupported',
        'Model Runner V2 does not yet support:',
        {"0.32.0": 'vllm/config/vllm.py:3195', "0.33.0": 'vllm/config/vllm.py:3329'},
        kind='at_start',
        reason="the runner is picked by VLLM_USE_V2_MODEL_RUNNER and the model's features at start",
    ),
    StartupRule(
        'parallel.dp_local_le_dp',
        'must be <= data_parallel_size ({self.data_parallel_size})',
        {"0.32.0": 'vllm/config/parallel.py:544', "0.33.0": 'vllm/config/parallel.py:548'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'parallel.dp_external_lb_needs_dp',
        'data_parallel_external_lb can only be set when',
        {"0.32.0": 'vllm/config/parallel.py:549', "0.33.0": 'vllm/config/parallel.py:553'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'parallel.eplb_platform',
        'Expert parallelism load balancing is only supported on',
        {"0.32.0": 'vllm/config/parallel.py:562', "0.33.0": 'vllm/config/parallel.py:566'},
        kind='not_planned',
        reason=(
            'holds on every GPU fleet vllm-fleet deploys (CUDA/ROCm); it is what the CPU lane '
            'refuses, and the CPU lane never pins EPLB (the planner budgets EPLB on GPUs only)'
        ),
    ),
    StartupRule(
        'parallel.eplb_needs_ep',
        'enable_expert_parallel must be True to use EPLB',
        {"0.32.0": 'vllm/config/parallel.py:566', "0.33.0": 'vllm/config/parallel.py:570'},
        check='preflight.startup:eplb_needs_expert_parallel',
    ),
    StartupRule(
        'parallel.eplb_needs_parallelism',
        'EPLB requires tensor, prefill-context, or data parallelism',
        {"0.32.0": 'vllm/config/parallel.py:576', "0.33.0": 'vllm/config/parallel.py:580'},
        check='planner.gpu_lane:eplb_inputs',
    ),
    StartupRule(
        'parallel.redundant_experts_without_eplb',
        'but EPLB is not',
        {"0.32.0": 'vllm/config/parallel.py:585', "0.33.0": 'vllm/config/parallel.py:589'},
        check='planner.gpu_lane:eplb_inputs',
    ),
    StartupRule(
        'parallel.eplb_async_policy',
        'Async EPLB is only supported with the default policy',
        {"0.32.0": 'vllm/config/parallel.py:122', "0.33.0": 'vllm/config/parallel.py:123'},
        kind='not_planned',
        reason="eplb_config sub-fields are passed through unplanned; vLLM's own words at start",
    ),
    StartupRule(
        'parallel.tp_divisible_by_dcp',
        'must be divisible by dcp_size',
        {"0.32.0": 'vllm/config/parallel.py:596', "0.33.0": 'vllm/config/parallel.py:600'},
        check='preflight.startup:decode_context_parallel',
    ),
    StartupRule(
        'parallel.nnodes_dp_groups',
        'must be divisible by the number of',
        {"0.32.0": 'vllm/config/parallel.py:826', "0.33.0": 'vllm/config/parallel.py:830'},
        check='preflight.multinode:check_data_parallel_groups',
    ),
    StartupRule(
        'parallel.world_size_gpus',
        'is larger than the number of',
        {"0.32.0": 'vllm/config/parallel.py:1053', "0.33.0": 'vllm/config/parallel.py:1072'},
        check='planner.gpu_lane:gpu_inputs',
    ),
    StartupRule(
        'parallel.nnodes_executor',
        'nnodes > 1 can only be set when distributed executor',
        {"0.32.0": 'vllm/config/parallel.py:1093', "0.33.0": 'vllm/config/parallel.py:1112'},
        kind='not_planned',
        reason=(
            "vllm-fleet's multi-node launcher writes --nnodes only with the mp backend "
            '(deploy/launch.py), never from a pin'
        ),
    ),
    StartupRule(
        'parallel.executor_unknown',
        'Unrecognized distributed executor backend',
        {"0.32.0": 'vllm/config/parallel.py:1138', "0.33.0": 'vllm/config/parallel.py:1157'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'parallel.nsight_needs_ray',
        'Unable to use nsight profiling unless workers run with Ray',
        {"0.32.0": 'vllm/config/parallel.py:1156', "0.33.0": 'vllm/config/parallel.py:1175'},
        kind='not_planned',
        reason='profiling option not planned',
    ),
    StartupRule(
        'parallel.dbo_thresholds',
        'dbo_decode_token_threshold and dbo_prefill_token_threshold must',
        {"0.32.0": 'vllm/config/parallel.py:1166', "0.33.0": 'vllm/config/parallel.py:1185'},
        kind='not_planned',
        reason='dual-batch overlap is not planned; left to vLLM',
    ),
    StartupRule(
        'parallel.elastic_ep_eplb',
        'Elastic EP is only supported with enable_eplb=True',
        {"0.32.0": 'vllm/config/parallel.py:957', "0.33.0": 'vllm/config/parallel.py:976'},
        kind='not_planned',
        reason='elastic EP is not deployed by vllm-fleet',
    ),
    StartupRule(
        'parallel.dp_rank_range',
        'must be in the range [0, {self.data_parallel_size})',
        {"0.32.0": 'vllm/config/parallel.py:1001', "0.33.0": 'vllm/config/parallel.py:1020'},
        check='deploy.launch:launch_record',
    ),
    StartupRule(
        'parallel.offline_dp_dense',
        'Offline data parallel mode is not supported/useful',
        {"0.32.0": 'vllm/config/parallel.py:1013', "0.33.0": 'vllm/config/parallel.py:1032'},
        kind='not_planned',
        reason='offline (LLM class) mode only; vllm-fleet launches the server',
    ),
    StartupRule(
        'parallel.numa_bind',
        'numa_bind_nodes and numa_bind_cpus require numa_bind=True',
        {"0.32.0": 'vllm/config/parallel.py:556', "0.33.0": 'vllm/config/parallel.py:560'},
        kind='not_planned',
        reason='NUMA binding options are not planned; left to vLLM',
    ),
    StartupRule(
        'cache.kv_layout_unknown',
        'Unknown KV cache layout',
        {"0.32.0": 'vllm/config/cache.py:34', "0.33.0": 'vllm/config/cache.py:39'},
        kind='not_planned',
        reason='read from VLLM_KV_CACHE_LAYOUT at start; not a planned option',
    ),
    StartupRule(
        'cache.block_size_backend',
        'DEFAULT_BLOCK_SIZE',
        {"0.32.0": 'vllm/config/cache.py:72', "0.33.0": 'vllm/config/cache.py:185'},
        check='planner.gpu_lane:_block_size',
    ),
    StartupRule(
        'cache.kv_dtype_backend',
        'def flash_attn_supports_kv_cache_dtype',
        {"0.32.0": 'vllm/v1/attention/backends/fa_utils.py:282', "0.33.0": 'vllm/v1/attention/backends/fa_utils.py:282'},
        check='planner.precision:kv_cache_dtype_bytes',
    ),
    StartupRule(
        'attention.backend_unknown',
        "Unknown attention backend: '{name}'",
        {"0.32.0": 'vllm/v1/attention/backends/registry.py:29', "0.33.0": 'vllm/v1/attention/backends/registry.py:29'},
        check='preflight.startup:attention_backend_exists',
    ),
    StartupRule(
        'attention.backend_and_config',
        'attention_backend and attention_config.backend',
        {"0.32.0": 'vllm/engine/arg_utils.py:2690', "0.33.0": 'vllm/engine/arg_utils.py:2731'},
        check='preflight.startup:attention_backend_exists',
    ),
    StartupRule(
        'attention.backend_gpu_support',
        'def get_valid_backends',
        {"0.32.0": 'vllm/platforms/cuda.py:375', "0.33.0": 'vllm/platforms/cuda.py:377'},
        kind='at_start',
        reason=(
            'needs the GPU at start-up (free memory, the loaded kernels or the platform) - not known '
            'before the container starts (per-backend head size, dtype and capability probing imports'
            ' the kernels)'
        ),
    ),
    StartupRule(
        'args.spec_flag_conflict',
        'are mutually exclusive',
        {"0.32.0": 'vllm/engine/arg_utils.py:2079', "0.33.0": 'vllm/engine/arg_utils.py:2119'},
        kind='not_planned',
        reason=(
            'the planner owns --speculative-config and refuses the separate flags in extra args '
            '(check_extra_args planner-owned flags)'
        ),
    ),
    StartupRule(
        'args.device_ids_range',
        'is out of range for',
        {"0.32.0": 'vllm/engine/arg_utils.py:2135', "0.33.0": 'vllm/engine/arg_utils.py:2175'},
        kind='not_planned',
        reason=(
            'vllm-fleet never passes --device-ids: the launch record gives the container its GPUs '
            '(see env.device_visibility)'
        ),
    ),
    StartupRule(
        'args.dp_launch_options',
        'Invalid data-parallel launch options: ',
        {"0.32.0": 'vllm/engine/arg_utils.py:2344', "0.33.0": 'vllm/engine/arg_utils.py:2385'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'args.dp_external_non_moe',
        'Non-MoE models do not support external data parallel mode',
        {"0.32.0": 'vllm/engine/arg_utils.py:2421', "0.33.0": 'vllm/engine/arg_utils.py:2462'},
        check='preflight.engine_args:check_engine_args',
    ),
    StartupRule(
        'args.cudagraph_sizes_twice',
        'cudagraph_capture_sizes and compilation_config.',
        {"0.32.0": 'vllm/engine/arg_utils.py:2792', "0.33.0": 'vllm/engine/arg_utils.py:2837'},
        kind='not_planned',
        reason="compilation config is passed through; vLLM's words at start",
    ),
    StartupRule(
        'quant.fp8_online_bf16',
        'The `fp8` quantization method no longer supports online',
        {"0.32.0": 'vllm/model_executor/layers/quantization/fp8.py:108', "0.33.0": 'vllm/model_executor/layers/quantization/fp8.py:108'},
        check='planner.precision:resolve_precision',
    ),
    StartupRule(
        'quant.config_file_missing',
        'Cannot find the config file for',
        {"0.32.0": 'vllm/model_executor/model_loader/weight_utils.py:375', "0.33.0": 'vllm/model_executor/model_loader/weight_utils.py:380'},
        check='preflight.startup:quantization_matches_checkpoint',
    ),
    StartupRule(
        'quant.plugins_removed',
        'QuantizationMethods = Literal',
        {"0.32.0": 'vllm/model_executor/layers/quantization/__init__.py:15', "0.33.0": 'vllm/model_executor/layers/quantization/__init__.py:15'},
        check='planner.precision:check_quantization',
    ),
    StartupRule(
        'spec.num_tokens_required',
        'num_speculative_tokens must be provided with',
        {"0.32.0": 'vllm/config/speculative.py:1821', "0.33.0": 'vllm/config/speculative.py:1948'},
        check='planner.speculative:resolve_speculative',
    ),
    StartupRule(
        'spec.draft_tp',
        'def _verify_and_get_draft_tp',
        {"0.32.0": 'vllm/config/speculative.py:1712', "0.33.0": 'vllm/config/speculative.py:1849'},
        check='planner.speculative:check_draft_tp',
    ),
    StartupRule(
        'env.device_visibility',
        'CUDA_VISIBLE_DEVICES',
        {"0.32.0": 'vllm/platforms/cuda.py:58', "0.33.0": 'vllm/platforms/cuda.py:59'},
        check='preflight.startup:container_env_device_visibility',
    ),
    StartupRule(
        'env.vllm_port',
        'def get_vllm_port',
        {"0.32.0": 'vllm/envs.py:516', "0.33.0": 'vllm/envs.py:518'},
        check='preflight.startup:container_env_port',
    ),
    StartupRule(
        'platform.free_memory_below_utilization',
        'less than desired GPU memory utilization',
        {"0.32.0": 'vllm/v1/worker/utils.py:766', "0.33.0": 'vllm/v1/worker/utils.py:766'},
        kind='at_start',
        reason=(
            'needs the GPU at start-up (free memory, the loaded kernels or the platform) - not known '
            'before the container starts (free memory at worker init; the planner budgets it from '
            'discovered free memory)'
        ),
    ),
    StartupRule(
        'platform.kv_cache_too_small',
        "To serve at least one request with the model's max seq len ",
        {"0.32.0": 'vllm/v1/core/kv_cache_utils.py:1031', "0.33.0": 'vllm/v1/core/kv_cache_planning.py:78'},
        check='planner.core:plan',
    ),
    StartupRule(
        'platform.nccl_init',
        'def init_distributed_environment',
        {"0.32.0": 'vllm/distributed/parallel_state.py:1814', "0.33.0": 'vllm/distributed/parallel_state.py:1837'},
        kind='at_start',
        reason=(
            'needs the GPU at start-up (free memory, the loaded kernels or the platform) - not known '
            'before the container starts (NCCL communicators; multi-node reachability is checked by '
            'deploy/network.py)'
        ),
    ),
)


KINDS = ("at_start", "vllm_code", "not_planned")


def counts(version: str) -> dict[str, int]:
    """``{"scanned", "mirrored", "at_start", "vllm_code", "not_planned"}`` for one vLLM version (docs/preflight.md)."""
    rules = [rule for rule in RULES if version in rule.where]
    found = {"scanned": len(rules), "mirrored": sum(1 for rule in rules if rule.check)}
    found.update({kind: sum(1 for rule in rules if rule.kind == kind) for kind in KINDS})
    return found
