"""The two interpolants of profile tables, in plain numpy and Python floats.

- `Pchip`: piecewise cubic Hermite with Fritsch-Carlson derivatives (Fritsch & Carlson 1980;
  end slopes by Moler's one-sided three-point rule, Numerical Computing with MATLAB, ch. 3.6),
  evaluated inside the nodes only (NaN outside).
- `Multilinear`: linear along each axis of a rectilinear grid, inside the grid.

Both follow scipy.interpolate's PchipInterpolator(extrapolate=False) and
RegularGridInterpolator(method="linear") operation for operation, so they give the same floats
(tests/test_speed.py checks them against scipy bit for bit); they live here because importing
scipy.interpolate costs a CLI command most of its start-up.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right

import numpy as np


def _sign(x: float) -> float:
    return (x > 0) - (x < 0)


def _edge_slope(h0: float, h1: float, m0: float, m1: float) -> float:
    """One-sided three-point end slope, kept shape-preserving (Moler, pchiptx.m)."""
    d = ((2 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
    if _sign(d) != _sign(m0):
        return 0.0
    if _sign(m0) != _sign(m1) and abs(d) > 3.0 * abs(m0):
        return 3.0 * m0
    return d


class Pchip:
    """PCHIP through (x, y), x strictly increasing; NaN outside [x[0], x[-1]].

    Args:
        x: (n,) nodes, n >= 2. y: (n,) values.
    """

    def __init__(self, x, y):
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        if x.ndim != 1 or len(x) < 2 or y.shape != x.shape:
            raise ValueError("Pchip needs 1-D x and y of the same length >= 2")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise ValueError("Pchip needs finite x and y")
        hk = np.diff(x)
        if np.any(hk <= 0):
            raise ValueError("`x` must be strictly increasing sequence.")
        mk = (y[1:] - y[:-1]) / hk
        d = np.zeros_like(y)
        if len(x) == 2:
            d[0] = d[1] = mk[0]
        else:
            smk = np.sign(mk)
            flat = (smk[1:] != smk[:-1]) | (mk[1:] == 0) | (mk[:-1] == 0)
            w1 = 2 * hk[1:] + hk[:-1]
            w2 = hk[1:] + 2 * hk[:-1]
            with np.errstate(divide="ignore", invalid="ignore"):
                whmean = (w1 / mk[:-1] + w2 / mk[1:]) / (w1 + w2)
            inner = d[1:-1]
            inner[~flat] = 1.0 / whmean[~flat]
            h, m = [float(v) for v in hk], [float(v) for v in mk]
            d[0] = _edge_slope(h[0], h[1], m[0], m[1])
            d[-1] = _edge_slope(h[-1], h[-2], m[-1], m[-2])
        # cubic Hermite -> power basis per interval (scipy CubicHermiteSpline), highest first
        slope = np.diff(y) / hk
        t = (d[:-1] + d[1:] - 2 * slope) / hk
        self._coef = [tuple(float(v) for v in row) for row in
                      zip(t / hk, (slope - d[:-1]) / hk - t, d[:-1], y[:-1])]
        self._x = [float(v) for v in x]

    def __call__(self, xv: float) -> float:
        """The interpolant at xv (a float); NaN outside the nodes."""
        xs = self._x
        xv = float(xv)
        if not xs[0] <= xv <= xs[-1]:
            return float("nan")
        i = min(bisect_right(xs, xv) - 1, len(xs) - 2)
        s = xv - xs[i]
        c3, c2, c1, c0 = self._coef[i]
        # scipy's PPoly evaluation: the sum of c_k z_k, z_k = s**k built by repeated products
        res = 0.0
        z = 1.0
        res = res + c0 * z * 1.0
        z *= s
        res = res + c1 * z * 1.0
        z *= s
        res = res + c2 * z * 1.0
        z *= s
        return res + c3 * z * 1.0


class Multilinear:
    """Linear interpolation on a rectilinear grid, for points inside it.

    Args:
        grid: one strictly increasing (n_i,) array per axis. values: shape (n_0, n_1, ...).
    """

    def __init__(self, grid, values):
        self._grid = [np.asarray(g, dtype=float) for g in grid]
        self._lists = [[float(v) for v in g] for g in self._grid]
        self._values = np.asarray(values, dtype=float)
        if self._values.shape != tuple(len(g) for g in self._grid):
            raise ValueError("Multilinear: values do not match the grid")

    def _locate(self, axis: int, xv: float) -> tuple[int, float]:
        g = self._lists[axis]
        if not g[0] <= xv <= g[-1]:
            raise ValueError(f"One of the requested xi is out of bounds in dimension {axis}")
        i = min(bisect_right(g, xv) - 1, len(g) - 2)
        return i, (xv - g[i]) / (g[i + 1] - g[i])

    def __call__(self, point) -> float:
        """The interpolant at `point` (one coordinate per axis)."""
        loc = [self._locate(a, float(x)) for a, x in enumerate(point)]
        v = self._values
        if len(loc) == 2:  # scipy's 2-D fast path (evaluate_linear_2d)
            (i0, y0), (i1, y1) = loc
            return float(v[i0, i1] * (1 - y0) * (1 - y1) + v[i0, i1 + 1] * (1 - y0) * y1
                         + v[i0 + 1, i1] * y0 * (1 - y1) + v[i0 + 1, i1 + 1] * y0 * y1)
        value = 0.0
        for corner in itertools.product(*(((i, 1 - y), (i + 1, y)) for i, y in loc)):
            index, weights = zip(*corner)
            weight = 1.0
            for w in weights:
                weight = weight * w
            value = value + float(v[index]) * weight
        return value
