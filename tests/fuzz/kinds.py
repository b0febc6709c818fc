"""The kinds of bad input, each number's generator (the numbers of the bad-input issue; tests/fuzz/cases.py)."""

from __future__ import annotations

import random

from tests.fuzz.cases import Case
from tests.fuzz.gen_engine import gen_engine_inputs
from tests.fuzz.gen_commands import gen_importers, gen_markup, gen_messages, gen_outputs, gen_round_trip, gen_work
from tests.fuzz.gen_values import gen_ambiguity, gen_nesting, gen_numbers, gen_profiles, gen_types, gen_undecodable

GENERATORS = {1: gen_undecodable, 2: gen_nesting, 3: gen_numbers, 4: gen_types, 5: gen_profiles,
              6: gen_ambiguity, 7: gen_work, 8: gen_outputs, 9: gen_markup, 10: gen_round_trip, 11: gen_messages,
              12: gen_importers, 13: gen_engine_inputs}


def generate(kind: int, rng: random.Random) -> Case:
    return GENERATORS[kind](rng)
