"""Measure achievable HBM bandwidth, BF16/FP8 dense GEMM rates and kernel-launch cost on one GPU with PyTorch (no vLLM).

Writes a JSON object to the path given as the first argument (default stdout). Run on an H200 to name the
planner's achievable-fraction constants for Hopper (plugins/plugin_utils/planner/perf.py), and on an H100 to check
that they carry over (tests/fixtures/calibration/perf/SOURCE.md).
Run: python scripts/bench/hopper_rates.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import torch


def _time(fn, iters: int) -> float:
    """Median seconds of one call of fn over iters timed calls (after warm-up)."""
    for _warm in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _iter in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth(nbytes: int) -> float:
    """GB/s of a device-to-device copy (bytes read + bytes written)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    sec = _time(lambda: dst.copy_(src), 20)
    return 2 * nbytes / sec / 1e9


def read_bandwidth(nbytes: int) -> float:
    """GB/s of a read-mostly reduction (sum of a bf16 tensor), closer to decode's weight streaming."""
    x = torch.ones(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    sec = _time(lambda: x.sum(dtype=torch.float32), 20)
    return nbytes / sec / 1e9


def gemm_tflops(m: int, n: int, k: int, dtype: str) -> float:
    """Dense TFLOP/s of an m x k @ k x n matmul in bf16 or fp8 (e4m3, torch._scaled_mm, bf16 out)."""
    if dtype == "bf16":
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        sec = _time(lambda: a @ b, 20)
    else:
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        sec = _time(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), 20)
    return 2 * m * n * k / sec / 1e12


def launch_us(kernels: int = 2000) -> dict[str, float]:
    """Microseconds per small kernel: launched one by one from Python (eager), and replayed from a CUDA graph that
    captured the same kernels (the cost eager mode pays per launch that a graph does not). Median of 5 rounds."""
    x = torch.zeros(1, device="cuda")

    def launches() -> None:
        for _k in range(kernels):
            x.add_(1.0)

    def wall(fn) -> float:
        rounds = []
        for _round in range(5):
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            rounds.append((time.perf_counter() - start) / kernels * 1e6)
        rounds.sort()
        return rounds[len(rounds) // 2]

    launches()  # warm-up
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launches()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launches()
    return {"eager": wall(launches), "graph": wall(graph.replay)}


def main() -> None:
    result: dict[str, object] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "copy_gbs": {str(g): copy_bandwidth(g << 30) for g in (1, 4)},
        "read_gbs": {str(g): read_bandwidth(g << 30) for g in (1, 4)},
        "gemm_tflops": {},
        "launch_us": launch_us(),
        "memory_mib": torch.cuda.get_device_properties(0).total_memory >> 20,
    }
    shapes = [(8192, 8192, 8192), (4096, 4096, 4096), (16, 8192, 8192), (256, 8192, 8192), (2048, 8192, 8192)]
    for dtype in ("bf16", "fp8"):
        for m, n, k in shapes:
            result["gemm_tflops"][f"{dtype}:{m}x{n}x{k}"] = gemm_tflops(m, n, k, dtype)  # type: ignore[index]
    text = json.dumps(result, indent=2, sort_keys=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
