"""Scope parsing and matching (ETT_SPEC §6): fields AND, values OR, empty fields refused."""

from __future__ import annotations

import pytest

from ettweb.rollouts.scope import Scope, ScopeError, parse_scope


def matches(raw: dict[str, object], job: str = "ads-ctr-42", model: str = "dlrm",
            team: str = "ads", cluster: str = "east") -> bool:
    return parse_scope(raw).matches(job, model, team, cluster)


def test_fleet_scope_matches_everything() -> None:
    assert parse_scope({}).is_fleet and parse_scope(None).is_fleet
    assert matches({}) and matches({}, team="", model="", cluster="")
    assert parse_scope({}).describe() == "whole fleet"


def test_fields_and_values_or() -> None:
    assert matches({"teams": ["feed", "ads"]})
    assert not matches({"teams": ["feed"]})
    assert matches({"teams": ["ads"], "clusters": ["east", "west"]})
    assert not matches({"teams": ["ads"], "clusters": ["west"]})  # AND across fields
    assert not matches({"models": ["dlrm"]}, model="")  # a job without the label is out


def test_job_pattern_is_a_case_sensitive_glob() -> None:
    assert matches({"job_pattern": "ads-*"})
    assert matches({"job_pattern": "ads-ctr-4?"})
    assert matches({"job_pattern": "ads-[a-c]tr-*"})
    assert not matches({"job_pattern": "ADS-*"})
    assert not matches({"job_pattern": "ads-"})  # the whole id, not a prefix
    assert not matches({"job_pattern": "*feed*"})


@pytest.mark.parametrize(("raw", "message"), [
    ({"teams": []}, "scope.teams: given with no values"),
    ({"models": ["a", ""]}, "scope.models: values must not be empty strings"),
    ({"clusters": "east"}, "scope.clusters: must be a list of strings, not str"),
    ({"teams": [3]}, "scope.teams: values must be strings, not int"),
    ({"job_pattern": ""}, "scope.job_pattern: values must not be empty strings"),
    ({"job_pattern": ["a*"]}, "scope.job_pattern: values must be strings, not list"),
    ({"owner": ["x"]}, "scope.owner: unknown field"),
    (["ads"], "must be an object, not list"),
])
def test_bad_scopes_name_the_field(raw: object, message: str) -> None:
    with pytest.raises(ScopeError, match="^" + message.replace("(", r"\(").replace(")", r"\)")
                       if message.startswith("scope.") else message):
        parse_scope(raw)


def test_round_trip_and_description_keep_what_was_given() -> None:
    scope = parse_scope({"teams": ["ads", "ads", "feed"], "job_pattern": "x*"})
    assert scope == Scope(teams=("ads", "feed"), job_pattern="x*")
    assert scope.as_dict() == {"teams": ["ads", "feed"], "job_pattern": "x*"}
    assert parse_scope(scope.as_dict()) == scope
    assert scope.describe() == "teams ads, feed · job_pattern x*"
