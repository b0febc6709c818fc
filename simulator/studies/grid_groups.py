"""Grouped grids: a sweep's acceptance fields apart from the rest, for the closed-form sweep of a
large grid (simulator.studies.sweep_grouped).

A group is a combination of the swept fields outside `acceptance` (everything a cost model depends
on); an acceptance is a combination of the swept acceptance fields. `group_grid` checks every point
as `simulator.studies.grid.expand` does, without validating each point whole: a point's checks
across sections read of its acceptance section only its signature (`acceptance_signature`).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config import Scenario
from simulator.studies.grid import MAX_GRID_POINTS, GridAxis, GridPoints, PointError, check_grid_points


def is_acceptance_field(field: str) -> bool:
    """Whether a swept field lies in the scenario's `acceptance` section (or is the section)."""
    return field == "acceptance" or field.startswith("acceptance.")


def acceptance_signature(acceptance: Any) -> tuple:
    """What the Scenario checks across sections read of a point's acceptance section: its kind and
    the lengths of its lists (`simulator.config.Scenario._check`, `_check_policy_entry`). Two points
    that differ only in acceptance values of one signature pass or fail those checks together.

    Args:
        acceptance: the acceptance section as written (a dict), before validation.
    """
    if not isinstance(acceptance, dict):
        return ("not a mapping",)
    lengths = tuple(len(v) if isinstance(v, list) else None
                    for v in (acceptance.get("acceptance_rates"), acceptance.get("accept_length_probs")))
    return (acceptance.get("kind"), *lengths)


@dataclass
class GroupedGrid:
    """A grid whose points are (group, acceptance) pairs: a group is a combination of the swept
    fields outside `acceptance` (everything a cost model depends on), an acceptance is a
    combination of the swept acceptance fields. Point p of the row-major grid is the group and
    acceptance of its axis indices (`locate`).

    Attributes:
        groups: per group (row-major over group_axes), its validated Scenario; its acceptance
            section is one of its points' (every other field is every point's).
        acceptances: per acceptance combination (row-major over acceptance_axes), the validated
            acceptance section the points with it have.
    """

    axes: list[GridAxis]
    group_axes: list[int]
    acceptance_axes: list[int]
    groups: list[Scenario]
    acceptances: list[Any]
    points: GridPoints

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def num_points(self) -> int:
        return math.prod(self.shape)

    def locate(self, point_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(group index, acceptance index) of each point index (int64 arrays of point_idx's shape)."""
        point_idx = np.asarray(point_idx, dtype=np.int64)
        idx = np.unravel_index(point_idx, self.shape)

        def ravel(which: list[int]) -> np.ndarray:
            if not which:
                return np.zeros(point_idx.shape, dtype=np.int64)
            return np.ravel_multi_index(tuple(idx[i] for i in which), tuple(self.shape[i] for i in which))
        return ravel(self.group_axes), ravel(self.acceptance_axes)

    def first_points(self) -> np.ndarray:
        """(groups,) the index of each group's first point in row-major order (acceptance 0)."""
        g = np.arange(len(self.groups))
        multi = [np.zeros(len(g), dtype=np.int64) for _ in self.axes]
        if self.group_axes:
            for i, m in zip(self.group_axes, np.unravel_index(g, tuple(self.shape[i] for i in self.group_axes))):
                multi[i] = m
        return np.ravel_multi_index(tuple(multi), self.shape)

    def combo(self, point_idx: int) -> tuple:
        """The grid values of a point, in axis order."""
        return tuple(a.values[int(i)] for a, i in zip(self.axes, np.unravel_index(point_idx, self.shape)))

    def point(self, point_idx: int) -> tuple[dict, Scenario]:
        """(grid values by field, validated Scenario) of one point, made as `expand` makes it."""
        return self.points.point(self.combo(point_idx))


def group_grid(base: dict, axes: list[GridAxis], source: str, base_dir: Path) -> GroupedGrid | None:
    """The grid grouped (see GroupedGrid), every point checked as `expand` checks it, without
    validating each point: the points (first group, each acceptance) and (each group, one
    acceptance per acceptance signature) are validated whole. A point's checks are those of its
    sections, each alone, and Scenario's checks across sections, which read of the acceptance
    section only its signature (`acceptance_signature`); so a point passes when its acceptance
    passed beside the first group and its group passed beside an acceptance of its signature.
    Where one of those fails, the points in doubt are validated whole in row-major order, and
    the first that fails is the error `expand` raises.

    Returns:
        None for a grid with fields inside other swept fields (expand it point by point).

    Raises:
        UserInputError: as `expand`; more than MAX_GRID_POINTS groups.
    """
    points = GridPoints(base, axes, source, base_dir)
    if points.nested:
        return None
    acc_axes = [i for i, a in enumerate(axes) if is_acceptance_field(a.field)]
    group_axes = [i for i in range(len(axes)) if i not in acc_axes]
    check_grid_points([axes[i] for i in group_axes], MAX_GRID_POINTS,
                      "points before the acceptance fields, each its own scenario and cost model; a sweep")
    acc_combos = list(itertools.product(*(axes[i].values for i in acc_axes)))
    group_combos = list(itertools.product(*(axes[i].values for i in group_axes)))

    def combo(g: int, a: int) -> tuple:
        out: list[Any] = [None] * len(axes)
        for i, v in zip(group_axes, group_combos[g]):
            out[i] = v
        for i, v in zip(acc_axes, acc_combos[a]):
            out[i] = v
        return tuple(out)

    acceptances: list[Any] = []
    signatures: list[tuple] = []
    for a in range(len(acc_combos)):  # each acceptance beside the first group
        data = points.data(combo(0, a))
        signatures.append(acceptance_signature(data.get("acceptance")))
        try:
            acceptances.append(points.point(combo(0, a), data)[1].acceptance)
        except PointError:
            acceptances.append(None)
    rep: dict[tuple, int] = {}
    for a, sig in enumerate(signatures):
        if acceptances[a] is not None:
            rep.setdefault(sig, a)
    groups: list[Scenario | None] = []
    group_ok: set[tuple[int, tuple]] = set()
    for g in range(len(group_combos)):  # each group beside one acceptance of each signature
        sc_g = None
        for sig, a in rep.items():
            try:
                sc = points.point(combo(g, a))[1]
            except PointError:
                continue
            group_ok.add((g, sig))
            sc_g = sc if sc_g is None else sc_g
        groups.append(sc_g)
    if all(acc is not None for acc in acceptances) and len(group_ok) == len(group_combos) * len(rep):
        return GroupedGrid(axes, group_axes, acc_axes, groups, acceptances, points)
    grid = GroupedGrid(axes, group_axes, acc_axes, [], [], points)
    g_idx, a_idx = grid.locate(np.arange(grid.num_points))
    sig_ids = {sig: i for i, sig in enumerate(dict.fromkeys(signatures))}
    passed = np.zeros((len(group_combos), len(sig_ids)), dtype=bool)
    for g, sig in group_ok:
        passed[g, sig_ids[sig]] = True
    acc_passed = np.array([acc is not None for acc in acceptances])
    acc_sig = np.array([sig_ids[sig] for sig in signatures])
    in_doubt = ~acc_passed[a_idx] | ~passed[g_idx, acc_sig[a_idx]]
    for p in np.flatnonzero(in_doubt):  # in row-major order: the first that fails is the error
        points.point(grid.combo(int(p)))
    return None  # none failed after all: expand it point by point
