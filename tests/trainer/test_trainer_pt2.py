"""Inductor's CPU vector-ISA verdict kept in the compile cache (trainer.pt2.settle_cpu_vec_isa).

The real probe builds libraries with g++ and loads them in child processes (seconds); these
tests stand fake ISAs in for Inductor's list, so they check the bookkeeping: probe once, keep
the verdict with its fingerprint, trust it only when it matches and every ISA passed.
"""

from __future__ import annotations

import json
import platform
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from torch._inductor import config, cpu_vec_isa

from trainer.compile_store import VEC_ISA_FILE, has_artifacts
from trainer.pt2 import settle_cpu_vec_isa

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="the verdict is kept for x86 ISAs only")


@dataclass
class FakeIsa:
    """An ISA the CPU claims (its name is one of the CPU's flags), passing its probe or not."""

    name: str
    passes: bool
    probes: int = 0

    def __str__(self) -> str:
        return self.name

    def __bool__(self) -> bool:
        self.probes += 1
        return self.passes


@pytest.fixture
def isas(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[FakeIsa]]:
    monkeypatch.setattr(cpu_vec_isa, "x86_isa_checker", lambda: ["avx2", "avx512"])
    fakes = [FakeIsa("avx512", True), FakeIsa("avx2", True), FakeIsa("not-on-this-cpu", False)]
    monkeypatch.setattr(cpu_vec_isa, "supported_vec_isa_list", fakes)
    with config.patch({"cpp.vec_isa_ok": None}):  # Inductor's own save-and-restore
        yield fakes


def test_the_probe_runs_once_and_its_verdict_is_kept(isas: list[FakeIsa],
                                                     tmp_path: Path) -> None:
    assert settle_cpu_vec_isa(str(tmp_path)) == "probed: avx512 avx2"
    assert config.cpp.vec_isa_ok is True
    assert [isa.probes for isa in isas] == [1, 1, 0]  # only the ISAs the CPU claims
    kept = json.loads((tmp_path / VEC_ISA_FILE).read_text())
    assert kept["all_ok"] is True and kept["fingerprint"]["candidates"] == ["avx512", "avx2"]
    config.cpp.vec_isa_ok = None  # the next process starts with Inductor's default
    assert settle_cpu_vec_isa(str(tmp_path)) == "recorded: avx512 avx2"
    assert config.cpp.vec_isa_ok is True and [isa.probes for isa in isas] == [1, 1, 0]
    assert not has_artifacts(tmp_path)  # the verdict alone does not make a cache warm


def test_a_failed_isa_leaves_inductor_to_probe(isas: list[FakeIsa], tmp_path: Path) -> None:
    isas[1].passes = False
    assert settle_cpu_vec_isa(str(tmp_path)) == "probed: an ISA failed, left to inductor"
    assert config.cpp.vec_isa_ok is None
    assert settle_cpu_vec_isa(str(tmp_path)) == "recorded: an ISA failed, left to inductor"
    assert config.cpp.vec_isa_ok is None


@pytest.mark.parametrize("recorded", [
    "{not json",
    json.dumps({"fingerprint": {"torch": "0.0.1", "flags": [], "candidates": []},
                "all_ok": True}),
])
def test_a_verdict_of_another_machine_or_torch_is_probed_again(
        isas: list[FakeIsa], tmp_path: Path, recorded: str) -> None:
    (tmp_path / VEC_ISA_FILE).write_text(recorded)
    assert settle_cpu_vec_isa(str(tmp_path)) == "probed: avx512 avx2"
    assert [isa.probes for isa in isas] == [1, 1, 0]


def test_no_cache_folder_or_an_operator_setting_is_left_alone(
        isas: list[FakeIsa], tmp_path: Path) -> None:
    assert settle_cpu_vec_isa(None) == "left to inductor"
    config.cpp.vec_isa_ok = False  # TORCHINDUCTOR_VEC_ISA_OK=0
    assert settle_cpu_vec_isa(str(tmp_path)) == "left to inductor"
    assert config.cpp.vec_isa_ok is False and not (tmp_path / VEC_ISA_FILE).exists()
    assert [isa.probes for isa in isas] == [0, 0, 0]
