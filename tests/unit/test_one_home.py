"""Each fact has one home: no two modules under plugins/ write down the same table.

How: every module-level assignment of a literal table (dict, list, tuple, set, ``frozenset({...})``, a dict
comprehension over a literal) in ``plugins/**/*.py`` is read with ``ast``. Its keys (dict) or elements
(sequence, set; for a record constructor such as ``Removed("swap_space", ...)`` its first argument) become
names, normalised so that ``--swap-space``, ``swap-space`` and ``swap_space`` are the same name. Two tables
in *different* modules that share ``MIN_SHARED`` or more names are two homes of one fact: import the one
instead of writing the other.

Every key counts, numbers included (a copied list of head sizes or ports is a copy too). Pairs of tables that
share keys but hold different facts (say, two tables keyed by compute capability) are listed in ``DISTINCT``
by their names, each with the reason; so is a known copy whose removal is pending, with what to do.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from itertools import combinations
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MIN_SHARED = 3

#: Table-name pairs that share keys but are different facts (or a copy whose removal is pending), with why.
DISTINCT: dict[frozenset[str], str] = {
    frozenset({"_GPU_OPTIONAL_KEYS", "FACT_KEYS"}): (
        "the per-GPU facts a recording may lack (filled with None) vs the facts an outlier is compared on "
        "(clocks and ECC too; no idle link generation, no replay counters)"),
    # Subsets of quantization method names, each a different fact about the methods:
    frozenset({"QUANT_MIN_CC", "GROUP_METHODS"}): "methods' minimum compute capability vs the group-quantized ones",
    frozenset({"ROCM_QUANTIZATION", "GROUP_METHODS"}): "ROCm's method list vs the group-quantized methods",
    frozenset({"KNOWN_METHODS", "GROUP_METHODS"}): "methods the planner sizes vs the group-quantized ones",
    frozenset({"_LABELS", "QUANT_MIN_CC"}): "how a reason line spells three methods vs their minimum compute capability",
    frozenset({"_LABELS", "GROUP_METHODS"}): "how a reason line spells the integer-group methods vs which methods "
    "must keep whole groups per shard",
    frozenset({"QUANT_MIN_CC", "_CHECKPOINT_METHODS"}): "minimum compute capability vs methods that need a checkpoint config",
    frozenset({"ROCM_QUANTIZATION", "_CHECKPOINT_METHODS"}): "ROCm's method list vs methods needing a checkpoint config",
    frozenset({"KNOWN_METHODS", "_CHECKPOINT_METHODS"}): "methods the planner sizes vs methods needing a checkpoint config",
    frozenset({"GROUP_METHODS", "_CHECKPOINT_METHODS"}): "group-quantized methods vs methods needing a checkpoint config",
    frozenset({"QUANT_MIN_CC", "_OVERRIDES"}): "minimum compute capability vs the kernels that override a method",
    frozenset({"ROCM_QUANTIZATION", "_OVERRIDES"}): "ROCm's method list vs the kernels that override a method",
    frozenset({"KNOWN_METHODS", "_OVERRIDES"}): "methods the planner sizes vs the kernels that override a method",
    frozenset({"FILENAMES", "SMALL_FILES"}): "the files the tiny model writes vs the small files the controller reads "
                                             "from a model source to plan",
    frozenset({"ALLOWED_RANKS", "SUPPORTED_HEAD_DIMS"}): "vLLM's LoRA ranks vs the tiny model's attention head sizes",
    frozenset({"ALLOWED_RANKS", "TP_SIZES"}): "vLLM's LoRA ranks vs the tensor-parallel sizes the planner tries",
    frozenset({"GPU_RATES", "TP_SIZES"}): "the GPUs' peak rates (link GB/s numbers read as keys) vs the "
    "tensor-parallel sizes the planner tries",
    frozenset({"GPU_RATES", "ALLOWED_RANKS"}): "the GPUs' peak rates (link GB/s numbers read as keys) vs vLLM's LoRA "
    "ranks",
    frozenset({"ALLOWED_RANKS", "CPU_ATTENTION_HEAD_SIZES"}): "vLLM's LoRA ranks vs the CPU backend's head sizes",
    frozenset({"_GPU_KEYS", "FACT_KEYS"}): "every key of the gpu_facts contract with its types vs the few facts an "
    "outlier host is compared on (observe/predicted.py; PCIe link and XID ones the contract does not have yet)",
    frozenset({"_NVLINKS_PER_GPU", "_CC_CU130"}): "NVLinks per GPU generation vs the wheels' kernel architectures",
    frozenset({"_NVLINKS_PER_GPU", "_CC_CU129"}): "NVLinks per GPU generation vs the wheels' kernel architectures",
    frozenset({"_NVLINKS_PER_GPU", "_CC_CU121"}): "NVLinks per GPU generation vs the wheels' kernel architectures",
    frozenset({"ROCM_QUANTIZATION", "KNOWN_METHODS"}): "the methods vLLM's ROCm platform accepts (verbatim from "
    "platforms/rocm.py, online-only names included) vs the checkpoint formats the planner sizes",
    frozenset({"QUANT_MIN_CC", "KNOWN_METHODS"}): "minimum compute capability per --quantization method vs the "
    "checkpoint formats the planner sizes (online-only and checkpoint-only names differ)",
    # planner/engine_fields.py: every option name vLLM takes per release (read from its parser); planner/options.py
    # declares what the project knows beyond the name for some of them (type, range, owner, file or command line).
    frozenset({"_ENGINE_ARGS_0_32", "_NEGATABLE_0_32"}): "every vLLM engine-argument name vs which are on/off options",
    frozenset({"_ENGINE_ARGS_0_32", "OPTIONS"}): "every vLLM engine-argument name vs the options the project types",
    frozenset({"_NEGATABLE_0_32", "OPTIONS"}): "vLLM's on/off options vs the options the project types",
    frozenset({"_SERVE_ONLY_0_32", "OPTIONS"}): "every vllm serve option that is not an engine argument vs the "
    "options the project types",
    frozenset({"LAUNCH_SETTINGS", "OPTIONS"}): "the launch record's inventory settings vs vLLM's options they become",
    frozenset({"SETTING_KINDS", "KINDS"}): "the value types of an inventory launch setting vs of a vLLM option (a "
    "setting has ports, an option JSON values)",
    frozenset({"QUANT_MIN_CC", "SIXTEEN_BIT_DENSE_METHODS"}): "minimum compute capability per quantization method "
    "vs the methods whose unquantized layers stay 16-bit",
    # module_utils runs on the hosts and cannot import the planner, so tiny_model.py keeps a copy of vLLM's CPU
    # attention head sizes; tests/unit/tiny_model/test_tiny_model_content.py::test_head_sizes_are_the_planners
    # fails when the copy and planner/rules.py differ.
    frozenset({"SUPPORTED_HEAD_DIMS", "CPU_ATTENTION_HEAD_SIZES"}): "host-side copy of rules.CPU_ATTENTION_HEAD_SIZES, "
    "kept equal by test_tiny_model_content.py::test_head_sizes_are_the_planners",
    # engine_fields.py lists every name a release's `vllm serve` parses; rules.py records what changed about a few of
    # them and from which release (deprecated no-ops that still parse, arguments a release added). The same names,
    # different facts: the status and history of some names vs the complete list of one release.
    frozenset({"_ENGINE_ARGS_0_32", "REMOVED_ARGS"}): "all names 0.32 parses vs the deprecated no-ops among them "
    "(ignored since a release) and the names it no longer parses",
    frozenset({"_ENGINE_ARGS_0_33", "REMOVED_ARGS"}): "all names 0.33 parses vs the deprecated no-ops among them "
    "(ignored since a release) and the names it no longer parses",
    frozenset({"_ENGINE_ARGS_0_33", "ADDED_ARGS"}): "all names 0.33 parses vs the release that added some of them",
}

_CONSTRUCTORS = {"frozenset", "set", "tuple", "list", "dict"}


def normalise(value: object) -> str:
    """``--Swap-Space`` → ``swapspace``."""
    return str(value).lower().lstrip("-").replace("-", "").replace("_", "")


def _names(node: ast.expr) -> list[object] | None:
    """The keys/elements of a literal table, or None when ``node`` is not one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CONSTRUCTORS:
        return _names(node.args[0]) if node.args else None
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        out: list[object] = []
        for element in node.elts:
            if isinstance(element, ast.Call) and element.args:
                element = element.args[0]  # a record: Removed("swap_space", ...)
            if isinstance(element, ast.Constant):
                out.append(element.value)
        return out
    if isinstance(node, ast.DictComp):
        return [n.value for n in ast.walk(node.generators[0].iter) if isinstance(n, ast.Constant)]
    return None


def tables(root: Path) -> dict[tuple[str, str], set[str]]:
    """(module path, table name) → the normalised names it holds."""
    found: dict[tuple[str, str], set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for stmt in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets, value = [stmt.target], stmt.value
            else:
                continue
            names = _names(value)
            if not names:
                continue
            keys = {normalise(n) for n in names if isinstance(n, (str, int)) and not isinstance(n, bool)}
            keys.discard("")
            for target in targets:
                if isinstance(target, ast.Name):
                    found[(str(path.relative_to(root)), target.id)] = keys
    return found


def shared_tables(found: dict[tuple[str, str], set[str]],
                  distinct: Iterable[frozenset[str]] = ()) -> list[str]:
    """One line per pair of tables in different modules sharing >= MIN_SHARED names."""
    allowed = set(distinct)
    lines = []
    for (a, keys_a), (b, keys_b) in combinations(sorted(found.items()), 2):
        common = keys_a & keys_b
        if a[0] == b[0] or len(common) < MIN_SHARED or frozenset({a[1], b[1]}) in allowed:
            continue
        lines.append(f"{a[0]}:{a[1]} ~ {b[0]}:{b[1]} share {sorted(common)}")
    return lines


def test_no_table_has_two_homes() -> None:
    copies = shared_tables(tables(ROOT / "plugins"), DISTINCT)
    assert not copies, ("the same table is written in two modules: import it from one (or, when the two are really "
                        "different facts, add the pair to DISTINCT with the reason):\n" + "\n".join(copies))


def test_the_scan_finds_a_copied_table(tmp_path: Path) -> None:
    """The guard can fail: a copy in another spelling (snake vs --flag keys, a set vs a dict) is found, and so is
    a copied list of numbers; tables in one module, or sharing fewer than MIN_SHARED keys, are not reported."""
    (tmp_path / "rules.py").write_text('REMOVED = {"max-paddings": "x", "worker-use-ray": "y", "swap-space": "z"}\n'
                                       "HEADS = (32, 64, 80)\n")
    (tmp_path / "checks.py").write_text('REMOVED_FLAGS = frozenset({"--max_paddings", "--swap_space", '
                                        '"--worker_use_ray", "--device"})\nPORTS = (8000, 8001, 80)\n')
    (tmp_path / "other.py").write_text("CC = ('8.0', '9.0', '10.0')\nOTHER = {'a': 1, 'b': 2, 'swap_space': 3}\n"
                                       "CC2 = ['8.0', '9.0', '10.0']\nSIZES = [32, 64, 80, 96]\n")
    assert shared_tables(tables(tmp_path)) == [
        "checks.py:REMOVED_FLAGS ~ rules.py:REMOVED share ['maxpaddings', 'swapspace', 'workeruseray']",
        "other.py:SIZES ~ rules.py:HEADS share ['32', '64', '80']",
    ]
    assert shared_tables(tables(tmp_path), [frozenset({"REMOVED", "REMOVED_FLAGS"}), frozenset({"SIZES", "HEADS"})]) == []


def test_one_version_parser() -> None:
    """One parser of vLLM versions (planner/releases/, re-exported by rules.py); driver versions have their own,
    differently named one."""
    homes = [path.relative_to(ROOT).as_posix() for path in (ROOT / "plugins").rglob("*.py")
             if re.search(r"^def parse_version\(", path.read_text(encoding="utf-8"), re.M)]
    assert homes == ["plugins/plugin_utils/planner/releases/__init__.py"]
