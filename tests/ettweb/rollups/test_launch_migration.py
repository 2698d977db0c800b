"""Sites seeded before ``launch`` existed get it mapped; an owner's own mapping is kept."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from ettweb.rollups.models import PhaseComponent

migration = importlib.import_module("ettweb.rollups.migrations.0012_map_launch_phase")
pytestmark = pytest.mark.django_db


def test_a_site_seeded_before_launch_maps_it_to_cluster_runtime() -> None:
    PhaseComponent.objects.filter(phase="launch").delete()
    migration.add(apps, None)
    assert PhaseComponent.objects.get(phase="launch").component == "cluster_runtime"


def test_an_owners_mapping_of_launch_is_kept() -> None:
    PhaseComponent.objects.update_or_create(phase="launch", defaults={"component": "scheduler"})
    migration.add(apps, None)
    assert PhaseComponent.objects.get(phase="launch").component == "scheduler"
