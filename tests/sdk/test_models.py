"""The SDK's typed models mirror the coordinator's IDL: a change to schema.py that they miss fails here."""

from __future__ import annotations

import dataclasses

import pytest

from cohort.sdk import models
from cohort.sdk.coordinator_core import load_idl

CONFIG_TYPES = (
    "RunConfig",
    "Checkpoint",
    "LrSchedule",
    "DistroConfig",
    "ModelConfig",
    "RunMetadata",
    "Progress",
)


def idl_fields(idl, name: str) -> list[str]:
    return [f["name"] for f in idl.types[name]["fields"] if not f["name"].startswith("_")]


@pytest.mark.parametrize("name", CONFIG_TYPES)
def test_config_models_have_exactly_the_idl_fields(name):
    model = getattr(models, name)
    assert {f.name for f in dataclasses.fields(model)} == set(idl_fields(load_idl(), name))


def test_run_state_enum_matches_the_idl():
    variants = [v["name"] for v in load_idl().types["RunState"]["variants"]]
    assert [s.value for s in models.RunState] == variants


def test_check_enums_and_the_check_failed_event_match_the_idl():
    idl = load_idl()
    variants = [v["name"] for v in idl.types["CheckFailure"]["variants"]]
    assert variants[0] == "Unspecified"  # never a valid report
    assert [r.value for r in models.CheckFailure] == variants[1:]
    assert [r.value for r in models.ConvictionReason] == [
        v["name"] for v in idl.types["ConvictionReason"]["variants"]
    ]
    assert {f.name for f in dataclasses.fields(models.CheckFailed)} == set(
        idl_fields(idl, "CheckFailed")
    )
