"""The simulated fleet's organisation: who owns its components, and their owner teams.

Why: on a fresh install every component page says "owner team: not set" and "owners: none",
and the weekly report has no owner to subscribe by default, so none of the ownership the
pages are built around can be seen. This gives most components an owner team label and some
of them owners: users with the owner role (``ettweb.access.roles.set_role``), an e-mail
address and no password — nobody logs in as them; ``manage.py ett_login NAME --role owner
--component ...`` gives one a password.

It only adds: a component whose owner team someone set keeps it, and an existing user of the
same name is left exactly as it is (role, components, address), so running it again, or on
a database people already use, changes nobody's access.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from django.contrib.auth.models import User
from django.db import transaction

from ettweb.access.roles import OWNER, set_role
from ettweb.components.known import known_components
from ettweb.components.models import Component

#: The team each component belongs to (``unknown`` belongs to nobody: it is where unmapped
#: time lands).
OWNER_TEAMS: Final[Mapping[str, str]] = {
    "checkpointing": "checkpoint-storage",
    "cluster_runtime": "cluster-runtime",
    "data_ingestion": "data-loading",
    "distributed_runtime": "distributed-training",
    "evaluation": "model-quality",
    "model_publishing": "model-serving",
    "pt2_compiler": "pytorch-compiler",
    "reliability": "training-reliability",
    "scheduler": "cluster-scheduling",
    "trainer_init": "training-platform",
}


@dataclass(frozen=True)
class SimulatedOwner:
    username: str
    first_name: str
    last_name: str
    components: tuple[str, ...]

    @property
    def email(self) -> str:
        return f"{self.username}@example.com"  # RFC 2606: a domain that delivers nowhere


#: Owners of some components; the rest (data_ingestion, evaluation, trainer_init) have a
#: team but no owner yet, as a real fleet does.
OWNERS: Final[tuple[SimulatedOwner, ...]] = (
    SimulatedOwner("ada", "Ada", "Lovelace", ("checkpointing", "model_publishing")),
    SimulatedOwner("grace", "Grace", "Hopper", ("pt2_compiler",)),
    SimulatedOwner("ken", "Ken", "Thompson", ("cluster_runtime", "scheduler")),
    SimulatedOwner("barbara", "Barbara", "Liskov", ("distributed_runtime", "reliability")),
)


@dataclass(frozen=True)
class Staffed:
    """What :func:`staff_components` added."""

    teams: int
    owners: tuple[str, ...]

    def line(self) -> str:
        created = ", ".join(self.owners) or "none (they exist already)"
        return f"owner teams set on {self.teams} component(s); owners created: {created}"


@transaction.atomic
def staff_components() -> Staffed:
    """Label the known components that have no owner team, and create the owners that do
    not exist yet (owning only components the phase map or the Component table knows)."""
    known = set(known_components())
    teams = 0
    for name, team in OWNER_TEAMS.items():
        if name not in known:
            continue
        component, _ = Component.objects.get_or_create(name=name)
        if not component.owner_team:
            component.owner_team = team
            component.save(update_fields=["owner_team"])
            teams += 1
    created: list[str] = []
    for owner in OWNERS:
        user, made = User.objects.get_or_create(username=owner.username, defaults={
            "first_name": owner.first_name, "last_name": owner.last_name,
            "email": owner.email})
        if not made:
            continue
        user.set_unusable_password()
        user.save(update_fields=["password"])
        set_role(user, OWNER, [name for name in owner.components if name in known])
        created.append(owner.username)
    return Staffed(teams, tuple(created))
