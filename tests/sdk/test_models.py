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
