"""PT2 (torch.compile) for the trainer: compiling the dense part, its Inductor options, the CPU
vector-ISA verdict and the portable mega-cache.

Compile time itself is reported by PyTorch's own compile hooks, through
``collector.integrations.torch`` (``trainer.train`` installs it): every compilation — the
first step's, a recompile when a guard fails, a backward graph compiled lazily on its first
use — becomes a ``compile`` span with the PT2 cache hits and misses in its ``attrs``, and
pauses the train tracker meanwhile, so those seconds never count as productive.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.compile_store import MEGA_CACHE_FILE, VEC_ISA_FILE
from trainer.integrity import write_atomic


def inductor_options(autotune_pruning: bool, device: str) -> dict[str, Any]:
    """Inductor options: the ``autotune_pruning`` switch restricts what max-autotune searches.

    On CPU there is little to prune: max-autotune with the default (C++ template) GEMM backend
    fails on this torch (PYTORCH_NOTES), so the baseline does not autotune and the pruned mode
    autotunes over ATen only — one candidate per GEMM, nothing to benchmark.

    On CUDA the baseline is what a team gets by switching max-autotune on: every GEMM is
    benchmarked against cuBLAS and each Triton GEMM template that fits its shapes (compiled
    in a worker pool), and every pointwise/reduction kernel is compiled in several Triton
    configurations and benchmarked too — on every fresh compile, so restarts repeat it unless
    the caches survive. The pruned mode autotunes the GEMMs only (where the choice pays),
    drops configurations that do not fit the GPU's shared memory, and keeps the chosen
    configurations in the local autotune cache. Why the default GEMM search space in both and
    not the exhaustive one: the exhaustive space takes many minutes per compile, longer than
    the borrowed GPU's whole benchmark may run. Options this torch does not know are dropped
    (:func:`known_inductor_options`), so one table serves several torch releases.
    """
    if device == "cpu":
        return {"max_autotune": True, "max_autotune_gemm_backends": "ATEN"} \
            if autotune_pruning else {}
    if autotune_pruning:
        return known_inductor_options({
            "max_autotune_gemm": True, "max_autotune_pointwise": False,
            "max_autotune_gemm_backends": "ATEN,TRITON",
            "max_autotune_gemm_search_space": "DEFAULT",
            "max_autotune_prune_choices_based_on_shared_mem": True,
            "autotune_local_cache": True})
    return known_inductor_options({"max_autotune": True,
                                   "max_autotune_gemm_backends": "ATEN,TRITON",
                                   "max_autotune_gemm_search_space": "DEFAULT"})


def known_inductor_options(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` less the keys this torch's inductor config lacks.

    Why: ``torch.compile(options=...)`` rejects an unknown key with an error at the first
    call, and the GPU machine runs another torch release than this one.
    """
    from torch._inductor import config

    return {key: value for key, value in options.items() if hasattr(config, key)}


def mark_batch_dynamic(module: nn.Module, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> None:
    """Forward pre-hook: the batch dimension of every tensor input is dynamic.

    Why a hook outside the compiled function: ``mark_dynamic`` may not run inside a compiled
    region, and the inputs of the interaction and over arches are made in eager code each step.
    Keyword inputs count too: DLRM calls its interaction arch with ``dense_features=`` and
    ``sparse_features=``. A batch of one is left alone (PT2 specializes sizes 0 and 1).
    """
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] > 1:
            torch._dynamo.mark_dynamic(value, 0)


def compile_arches(arches: list[nn.Module], *, dynamic_batch: bool, options: dict[str, Any],
                   device_type: str) -> str:
    """Compile each module's ``forward`` in place (parameter names, hence checkpoints, keep);
    returns what :func:`settle_cpu_vec_isa` did (empty off CPU).

    Why ``forward`` and not ``Module.compile``: forward pre-hooks must run in eager code for
    :func:`mark_batch_dynamic`, and ``Module.compile`` would trace them. Why the ISA verdict
    here: it is part of the FX-graph cache key, so every process that compiles into a folder
    (the trainer and its warm-up) must settle it the same way, before compiling.
    """
    vec_isa = ""
    if device_type == "cpu":
        vec_isa = settle_cpu_vec_isa(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    for arch in arches:
        arch.forward = torch.compile(arch.forward, options=options or None)
        if dynamic_batch:
            arch.register_forward_pre_hook(mark_batch_dynamic, with_kwargs=True)
    return vec_isa


def settle_cpu_vec_isa(cache: str | None) -> str:
    """Inductor's CPU vector-ISA probe, run once per machine and kept in the compile cache.

    Why: before its first CPU kernel in every process, Inductor checks each vector ISA the CPU
    claims (AVX-512, AVX2, ...) by building a probe library and loading it in a child Python:
    measured 1.36 s of the 1.9 s a warm compile took on 2 cores, paid again by every attempt
    and every warm-up. The verdict depends only on the machine and torch, so it is kept in the
    cache folder (:data:`~trainer.compile_store.VEC_ISA_FILE`) with that fingerprint. When
    every claimed ISA passed, ``cpp.vec_isa_ok = True`` says so without probing (Inductor's
    documented switch: the ISA list it yields is the one the probes gave). It is set in every
    process that compiles against the folder, the first one (which probes) included, since the
    setting is part of the FX-graph cache key. A recorded failure, another machine or torch,
    or an operator's own ``TORCHINDUCTOR_VEC_ISA_OK`` leave Inductor to probe as before.
    """
    import json
    import platform

    from torch._inductor import config, cpu_vec_isa

    if not cache or config.cpp.vec_isa_ok is not None:
        return "left to inductor"
    if platform.machine() not in ("x86_64", "AMD64"):
        return "left to inductor (not x86)"
    try:
        flags = cpu_vec_isa.x86_isa_checker()
        candidates = [isa for isa in cpu_vec_isa.supported_vec_isa_list
                      if all(flag in flags for flag in str(isa).split())]
    except Exception as exc:  # another torch's internals: probe as Inductor always did
        return f"left to inductor ({type(exc).__name__})"
    fingerprint = {"torch": torch.__version__, "flags": sorted(flags),
                   "candidates": [str(isa) for isa in candidates]}
    path = Path(cache) / VEC_ISA_FILE
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        recorded = None
    if isinstance(recorded, dict) and recorded.get("fingerprint") == fingerprint:
        verdict = "recorded"
        all_ok = recorded.get("all_ok") is True
    else:
        verdict = "probed"
        all_ok = all(bool(isa) for isa in candidates)  # bool() runs Inductor's own probe
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, json.dumps({"fingerprint": fingerprint, "all_ok": all_ok}))
        except OSError:
            pass  # an unwritable cache only costs the next process its own probe
    if not all_ok:
        return f"{verdict}: an ISA failed, left to inductor"
    config.cpp.vec_isa_ok = True
    return f"{verdict}: {' '.join(fingerprint['candidates']) or 'none'}"


def load_mega_cache(folder: Path) -> str:
    """Load the portable mega-cache kept in ``folder``, if any; says what happened.

    Why on a GPU only: the mega-cache bundles Inductor, AOTAutograd, PGO, autotune and Triton
    kernel artifacts, but on CPU it leaves out the built C++ kernels (PYTORCH_NOTES), so there
    the whole cache folder is what travels. A file that does not load is reported and
    ignored: the compile then runs cold, never fails.
    """
    path = folder / MEGA_CACHE_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable: {exc}"[:120]
    try:
        torch.compiler.load_cache_artifacts(data)
    except Exception as exc:  # a damaged artifact must cost a cold compile, not the job
        return f"skipped: {type(exc).__name__}: {exc}"[:120]
    return f"loaded {len(data)} bytes"


def save_mega_cache(folder: Path) -> int:
    """Write this process's compile artifacts as the mega-cache in ``folder`` (atomically:
    a rank reading it never sees half); returns its size (0: nothing to save)."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return 0
    data, _ = saved
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / MEGA_CACHE_FILE, data)
    return len(data)
