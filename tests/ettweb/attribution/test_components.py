"""The §4 ownership map: every category lands on exactly one component."""

from __future__ import annotations

from ettweb.attribution.components import (
    DEFAULT_PHASE_COMPONENTS,
    PRODUCTIVE,
    UNKNOWN_COMPONENT,
    component_of,
)


def test_default_map_follows_spec_table() -> None:
    expected = {
        "scheduling": "scheduler", "restart_gap": "scheduler",
        "container_start": "cluster_runtime", "shutdown": "cluster_runtime",
        "launch": "cluster_runtime",  # ETT's addition (collector.run)
        "rendezvous": "distributed_runtime", "process_group_init": "distributed_runtime",
        "model_init": "trainer_init", "sharding_plan": "trainer_init",
        "data_init": "data_ingestion", "compile": "pt2_compiler",
        "checkpoint_save": "checkpointing", "checkpoint_load": "checkpointing",
        "eval": "evaluation", "publish": "model_publishing",
        "failure": "reliability", "repeated_training": "reliability",
        "unattributed": "unknown",
    }
    assert expected == DEFAULT_PHASE_COMPONENTS


def test_unmapped_phase_is_unknown() -> None:
    assert component_of("warmup_cache") == UNKNOWN_COMPONENT


def test_owner_map_replaces_defaults() -> None:
    owners = {"compile": "compiler_team"}
    assert component_of("compile", owners) == "compiler_team"
    # The owner map is the whole map: a default it leaves out is unknown, not inherited.
    assert component_of("eval", owners) == UNKNOWN_COMPONENT


def test_productive_is_its_own_owner() -> None:
    assert component_of(PRODUCTIVE) == PRODUCTIVE
