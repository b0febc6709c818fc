"""The base of every schema model (scenario, engines): strict, frozen, finite."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base for scenario models: unknown keys are errors and instances are immutable.

    Numbers are bounded to what a real model or machine can have (each field says its range), so
    a value the schema takes is one the cost models and the DES compute finitely. Files users
    write are validated with `strict=True` (`simulator.scenario`): a string is not a number.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
