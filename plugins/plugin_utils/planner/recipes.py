"""Recipe-grade settings as plan outputs: what vLLM's recipes set per GPU and checkpoint format, read against the
source of the target release, each with its reason.

What 0.32 and 0.33 make of the recipe settings (``releases/v0_32.py`` / ``v0_33.py`` keys ``recipe:*``):

- **FP8 KV cache** (``--kv-cache-dtype fp8``): a policy choice, ``policy.kv_cache_policy``: ``accuracy_first``
  (default: the model dtype) or ``capacity_first`` (fp8 where it pays: the GPU's first-choice attention backend
  takes an fp8 KV cache, so the choice doubles the KV capacity without moving to a slower backend: FlashAttention
  3/4 on Hopper/Blackwell, FlashInfer on Blackwell; on Ampere/Ada the first choice, FlashAttention 2, has no fp8 KV
  and vLLM would fall back, so it stays ``auto``). The memory plan sizes the KV cache at one byte per element.
- **Async scheduling** and **prefix caching**: on by vLLM's default in these releases (``config/vllm.py``,
  ``config/cache.py``): left to vLLM, the reason says so.
- **VLLM_USE_DEEP_GEMM**: defaults to 1 in ``vllm/envs.py`` (DeepGEMM wherever it applies): not emitted.
- **VLLM_USE_FLASHINFER_MOE_FP8 / _FP4 / _MXFP4_MXFP8**: not read by 0.32 or 0.33 (absent from ``vllm/envs.py``);
  the MoE kernel is ``--moe-backend`` (``config/kernel.py`` MoEBackend, default ``auto``): not emitted.
- **--attention-backend** (replaces the removed ``VLLM_ATTENTION_BACKEND``): vLLM picks the first supported backend
  by priority (planner/hardware.py ``attention_backend``); the plan names it and leaves it to vLLM.

A user pin (``kv_cache_dtype``) always wins, and ``vllm_fleet_env`` overrides the plan's environment in the launch
record (deploy/launch.py ``_environment``: the user's variables come last). Standard library only, no I/O.
"""

from __future__ import annotations

from .decision import Decision
from .hardware import attention_backend, fp8_kv_backends
from .inputs import Gpu
from .model import ModelSpec
from .releases import Release, Source
from .rules import VersionRules

KV_CACHE_POLICIES = ("accuracy_first", "capacity_first")
DEFAULT_KV_CACHE_POLICY = "accuracy_first"


def _release(rules: VersionRules) -> Release | None:
    from .releases import up_to

    blocks = up_to(rules.rules_version or rules.version)
    return blocks[-1] if blocks else None


def _ref(rules: VersionRules, key: str) -> str:
    block = _release(rules)
    source: Source | None = None if block is None else block.sources.get(f"recipe:{key}")
    return f"vLLM {block.version} {source.ref}" if block is not None and source is not None else "vLLM's source"


def fp8_kv_cache(spec: ModelSpec, gpu: Gpu | None, policy: str) -> tuple[str | None, str]:
    """``("fp8", why)`` when ``policy`` is ``capacity_first`` and an fp8 KV cache pays on this GPU, else
    ``(None, why not)``. CPU and AMD lanes: never (their plans stay as they are)."""
    if policy != "capacity_first":
        return None, ""
    if gpu is None:
        return None, ""  # the CPU lane's plans stay as they are
    if gpu.amd:
        return None, "policy capacity_first: fp8 KV cache is proposed on CUDA GPUs only; auto kept"
    first = attention_backend(gpu.compute_capability, spec.mla, gpu.vendor)
    capable = fp8_kv_backends(gpu.compute_capability, spec.mla)
    if first not in capable:
        return None, (f"policy capacity_first, but {gpu.name}'s first-choice attention backend {first} has no fp8 KV "
                      f"cache (fp8 would move it to {', '.join(capable) or 'no backend'}): auto kept")
    return "fp8", (f"policy capacity_first: fp8 KV cache on {first}, {gpu.name}'s first-choice backend (it takes fp8 "
                   "KV), half the bytes per token of a 16-bit cache, so about twice the tokens; costs some accuracy "
                   "(kv_cache_policy: accuracy_first keeps the model dtype)")


def record_recipe_notes(spec: ModelSpec, gpu: Gpu | None, rules: VersionRules, d: Decision) -> None:
    """The recipe settings a GPU plan leaves to vLLM, each with why (CPU lane: nothing, its plans are unchanged)."""
    if gpu is None or gpu.amd:
        return
    d.note("async-scheduling", f"left on (vLLM's default: resolved to True unless pooling, a non-EAGLE/ngram draft "
           f"or PP with the V1 runner; {_ref(rules, 'async_scheduling')})")
    d.note("attention-backend", f"left to vLLM: {attention_backend(gpu.compute_capability, spec.mla, gpu.vendor)} "
           f"is its first choice on cc {gpu.compute_capability} (--attention-backend replaces the removed "
           "VLLM_ATTENTION_BACKEND; pin attention_backend to override)")
    d.note("env:VLLM_USE_DEEP_GEMM", f"not set: defaults to 1 ({_ref(rules, 'VLLM_USE_DEEP_GEMM')})")
    if spec.is_moe:
        d.note("moe-backend", f"left at auto ({_ref(rules, 'moe_backend')}); VLLM_USE_FLASHINFER_MOE_FP8/FP4/"
               f"MXFP4_MXFP8 are not read by vLLM {rules.text} (absent from vllm/envs.py): pin moe_backend instead")
