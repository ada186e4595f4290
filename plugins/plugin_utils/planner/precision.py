"""Number formats: the compute dtype, the checkpoint's quantization and the KV-cache dtype, checked per GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .decision import Decision
from .errors import PlanError
from .hardware import (
    COMPRESSED_TENSORS_MIN_CC,
    QUANT_MIN_CC,
    QUANT_PLUGINS,
    cc_int,
    fp8_kv_backends,
    rocm_fp8_dtype,
    rocm_fp8_kv_backends,
    rocm_supports_quantization,
)
from .inputs import Gpu
from .model import FP16_UNSAFE_MODEL_TYPES, ModelSpec, mtp_bytes_per_gpu, weights_bytes_per_gpu
from .quant_formats import KNOWN_METHODS, Quantization
from .rules import KNOWN_DTYPES, KV_DTYPES, VersionRules

#: Above this relative difference between the per-tensor estimate and the safetensors index's total_size the plan
#: warns (the index wins either way: it is what vLLM loads).
WEIGHTS_MISMATCH_WARN = 0.03
GIB = 1024**3

# Checkpoint formats whose unquantized (dense) layers are stored in 16 bits whatever the compute dtype.
SIXTEEN_BIT_DENSE_METHODS = tuple(m for m in KNOWN_METHODS if m not in QUANT_PLUGINS)


@dataclass(frozen=True)
class Precision:
    """Bytes per element the memory model uses, and the quantization the weights are sized by."""

    act_bytes: int  # activations (the compute dtype)
    kv_bytes: int  # one KV-cache element
    dense_bytes: int  # unquantized weights
    quant: Quantization


def resolve_precision(spec: ModelSpec, gpu: Gpu | None, user: dict[str, Any], rules: VersionRules,
                      d: Decision) -> Precision:
    """Decide dtype, quantization and KV dtype (recording each) and return their byte sizes."""
    _dtype, act_bytes = choose_dtype(spec, gpu, user.get("dtype"), d)
    quant = check_quantization(spec, gpu, user.get("quantization"), rules, d)
    kv_choice = kv_cache_dtype_bytes(spec, gpu, user.get("kv-cache-dtype"), d)
    kv_bytes = act_bytes if kv_choice == -1 else kv_choice
    dense_bytes = act_bytes if spec.torch_dtype != "float32" else 4
    if spec.quantization.method in SIXTEEN_BIT_DENSE_METHODS:
        dense_bytes = 2
    return Precision(act_bytes=act_bytes, kv_bytes=kv_bytes, dense_bytes=dense_bytes, quant=quant)


def choose_dtype(spec: ModelSpec, gpu: Gpu | None, user: str | None, d: Decision) -> tuple[str, int]:
    """Resolve the compute dtype; return (dtype, bytes)."""
    model_dtype = spec.torch_dtype
    if spec.quantization.method in ("awq", "gptq") and model_dtype == "bfloat16":
        model_dtype = "float16"  # AWQ/GPTQ kernels run in fp16; vLLM picks it for dtype=auto
    if user is not None:
        want = KNOWN_DTYPES.get(str(user).lower())
        if want is None:
            raise PlanError(f"--dtype {user} is not a dtype vLLM accepts (auto, bfloat16, float16, float32)")
        if want == "bfloat16" and gpu is not None and cc_int(gpu.compute_capability) < 80:
            raise PlanError(f"--dtype bfloat16 needs compute capability 8.0+, {gpu.name} is "
                            f"{gpu.compute_capability}: use --dtype float16 (or leave dtype auto)")
        if want != "auto":
            d.set("dtype", want, "set by you; checked against the GPU")
            return want, 4 if want == "float32" else 2
    if gpu is not None and cc_int(gpu.compute_capability) < 80 and model_dtype == "bfloat16":
        if spec.model_type in FP16_UNSAFE_MODEL_TYPES:
            d.set("dtype", "float32", f"{spec.model_type} is unstable in fp16 and "
                  f"{gpu.name} (cc {gpu.compute_capability}) has no bf16: vLLM would fall back to fp32")
            d.warnings.append("fp32 doubles weight and activation memory")
            return "float32", 4
        d.set("dtype", "half", f"checkpoint is bf16 but {gpu.name} (cc {gpu.compute_capability}) has no bf16: "
              "run fp16 (vLLM would warn and do the same)")
        return "float16", 2
    d.note("dtype", f"auto: {model_dtype} from the checkpoint"
           + ("" if gpu is None else f", supported on cc {gpu.compute_capability}"))
    return model_dtype, 4 if model_dtype == "float32" else 2


def _user_quantization(q: Quantization, gpu: Gpu | None, method: str, rules: VersionRules,
                       d: Decision) -> Quantization:
    """Check a --quantization the user set against the checkpoint, the version and the GPU."""
    if method in QUANT_PLUGINS:
        raise PlanError(f"--quantization {method} is not in vLLM {rules.text} core: install "
                        f"{QUANT_PLUGINS[method]}")
    if method == "fp8" and q.method == "none" and rules.version >= (0, 30, 0):
        raise PlanError("--quantization fp8 now means 'the checkpoint is already FP8'; for online FP8 of "
                        "this bf16 checkpoint use fp8_per_tensor, fp8_per_block or fp8_per_channel")
    if method not in QUANT_MIN_CC:
        raise PlanError(f"--quantization {method} is not a method vLLM {rules.text} knows "
                        f"(e.g. {', '.join(sorted(QUANT_MIN_CC)[:6])}, ...)")
    _check_rocm_method(gpu, method, "--quantization")
    floor = QUANT_MIN_CC[method]
    if gpu is not None and cc_int(gpu.compute_capability) < floor:
        raise PlanError(f"--quantization {method} needs compute capability {floor / 10:.1f}+, "
                        f"{gpu.name} is {gpu.compute_capability}")
    d.set("quantization", method, "set by you; minimum compute capability checked")
    if q.method == "none" and method.startswith("fp8"):
        return Quantization(method=method, weight_bits=8.0, group_size=0)
    return q


def _check_rocm_method(gpu: Gpu | None, method: str, what: str) -> None:
    """Refuse on an AMD GPU a quantization method vLLM's ROCm platform does not list (rules "rocm:quantization")."""
    if gpu is not None and gpu.amd and method != "none" and not rocm_supports_quantization(method):
        raise PlanError(f"{what} {method} is not supported by vLLM on ROCm ({gpu.name}): use an FP8, AWQ, GPTQ, "
                        "compressed-tensors, Quark or MXFP4 checkpoint (platforms/rocm.py supported_quantization)")


def check_quantization(spec: ModelSpec, gpu: Gpu | None, user: str | None, rules: VersionRules,
                       d: Decision) -> Quantization:
    """The quantization the weights are sized by: the user's (checked) or the checkpoint's (checked)."""
    q = spec.quantization
    if q.method in QUANT_PLUGINS:
        raise PlanError(f"{q.method} checkpoints need the {QUANT_PLUGINS[q.method]} package with vLLM "
                        f"{rules.text} (removed from core): install it in the image or use an AWQ/GPTQ/FP8 checkpoint")
    if user is not None:
        return _user_quantization(q, gpu, str(user).lower(), rules, d)
    if q.method == "none":
        d.note("quantization", "none: the checkpoint is not quantized")
        return q
    if q.method == "modelopt_mixed" and q.source.startswith("hf_quant_config") and rules.version < (0, 33, 0):
        # rules.VERIFIED quant:modelopt_legacy_method: 0.32 raises "Unknown ModelOpt quant algo" on this layout.
        raise PlanError(f"vLLM {rules.text} cannot read MIXED_PRECISION from hf_quant_config.json (0.33 can): "
                        "target vLLM 0.33, or move the quantization into config.json's quantization_config")
    _check_rocm_method(gpu, q.method, "the checkpoint's quantization")
    floor = QUANT_MIN_CC.get(q.method, 75)
    if q.method == "compressed-tensors":
        floor = COMPRESSED_TENSORS_MIN_CC.get(q.scheme, 75)
    if gpu is not None and cc_int(gpu.compute_capability) < floor:
        raise PlanError(f"the checkpoint is {q.method}{' ' + q.scheme if q.scheme else ''}, which needs "
                        f"compute capability {floor / 10:.1f}+; {gpu.name} is {gpu.compute_capability}: "
                        "use a bf16/fp16 or AWQ/GPTQ checkpoint")
    note = (f"{q.method} read from the checkpoint's {q.source.removeprefix('config.json ')}"
            f"{': ' + q.why if q.why else ''}; vLLM detects it (no flag needed)")
    if gpu is not None and gpu.amd and ("fp8" in q.method or q.method in ("modelopt", "fbgemm_fp8")):
        note += (f"; on {gpu.gfx} vLLM computes FP8 as {rocm_fp8_dtype(gpu.gfx)}"
                 + (" (OCP e4m3fn weights are converted at load, same bytes)" if "gfx94" in gpu.gfx else ""))
    if q.method == "fp8" and gpu is not None and not gpu.amd and cc_int(gpu.compute_capability) < 89:
        d.warnings.append(f"FP8 weights on cc {gpu.compute_capability} run weight-only through FP8-Marlin "
                          "(no FP8 tensor cores below 8.9)")
    d.note("quantization", note)
    return q


def kv_cache_dtype_bytes(spec: ModelSpec, gpu: Gpu | None, user: str | None, d: Decision) -> int:
    """Check --kv-cache-dtype; return bytes per KV element, or -1 for auto (the model dtype)."""
    if user is None or user == "auto":
        d.note("kv-cache-dtype", "auto: the KV cache uses the model dtype (fp8 only when you ask: it costs accuracy)")
        return -1
    if user not in KV_DTYPES:
        raise PlanError(f"--kv-cache-dtype {user} is not one of {', '.join(KV_DTYPES)}")
    if user.startswith("fp8"):
        if gpu is not None and gpu.amd:
            backends = rocm_fp8_kv_backends(spec.mla, user)
            if not backends:
                raise PlanError(f"--kv-cache-dtype {user} has no ROCm attention backend for this MLA model "
                                "(TRITON_MLA takes fp8 and fp8_e4m3): use --kv-cache-dtype fp8")
            d.set("kv-cache-dtype", user, f"set by you; runs on {', '.join(backends)} on ROCm, stored as "
                  f"{'fp8_e5m2' if user == 'fp8_e5m2' else rocm_fp8_dtype(gpu.gfx)} on {gpu.gfx}")
            return 1
        if gpu is not None:
            backends = fp8_kv_backends(gpu.compute_capability, spec.mla)
            if user == "fp8_e5m2":
                backends = [b for b in backends if b != "FLASH_ATTN"]
            if not backends:
                raise PlanError(f"--kv-cache-dtype {user} has no attention backend on {gpu.name} "
                                f"(cc {gpu.compute_capability}): FlashInfer needs 8.0+, Triton 8.9+, "
                                "FlashAttention 9.0+; use --kv-cache-dtype auto")
            d.set("kv-cache-dtype", user, f"set by you; runs on {', '.join(backends)} on this GPU")
        else:
            d.set("kv-cache-dtype", user, "set by you; the CPU backend supports fp8 KV")
        return 1
    d.set("kv-cache-dtype", user, "set by you")
    return 2


def reconcile_weights(spec: ModelSpec, prec: Precision, total_size: int | None, d: Decision) -> None:
    """Say which weight size the plan uses: the safetensors index's ``total_size`` when given, else the estimate
    from the config and its quantization; with both, by how much they differ (over 3 %: a warning)."""
    estimate = sum(weights_bytes_per_gpu(spec, 1, 1, prec.dense_bytes, prec.quant))
    if total_size:  # the checkpoint's files hold its MTP layers too (loaded only under speculative decoding)
        estimate += mtp_bytes_per_gpu(spec, 1, 1, prec.dense_bytes, prec.quant)
    how = prec.quant.why if prec.quant.method != "none" else f"{prec.dense_bytes} bytes per parameter"
    if not total_size:
        d.note("weights", f"{estimate / GIB:.2f} GiB estimated from config.json ({how}); give the model directory "
               "with its model.safetensors.index.json to use the checkpoint's real size")
        return
    diff = (estimate - total_size) / total_size
    d.note("weights", f"{total_size / GIB:.2f} GiB from model.safetensors.index.json total_size (used); the "
           f"estimate from config.json ({how}) is {estimate / GIB:.2f} GiB, {diff:+.1%}")
    if abs(diff) > WEIGHTS_MISMATCH_WARN:
        d.warnings.append(f"the checkpoint's total_size ({total_size / GIB:.2f} GiB) and the estimate from its "
                          f"config ({estimate / GIB:.2f} GiB) differ by {diff:+.1%}: the plan uses total_size; "
                          "check that config.json and its quantization describe these weights")
