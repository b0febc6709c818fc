"""The shipped engine defaults: the engine fit (simulator.evidence.engine_fit) on the published figures
marked `role: fit` in data/cases/public.yaml.

    python -m simulator.evidence.engine_defaults [CASES]    # prints each engine's fit and ENGINE_HOST_DEFAULTS

simulator/engines/models.py holds the printed dict as ENGINE_HOST_DEFAULTS; tests/test_engine_fit.py checks
the two agree.
"""

from __future__ import annotations

from pathlib import Path

from simulator.evidence.cases import build_case_scenario, load_case_file
from simulator.evidence.engine_fit import FIT_PARAMS, FitResult, Observation, fit_engine


def case_observations(path: Path, kind: str) -> list[Observation]:
    """The figures marked `role: fit` of the cases of one engine kind in a case file."""
    cf = load_case_file(path)
    out = []
    for case in cf.cases:
        if case.engine.get("kind") != kind or not case.replayable:
            continue
        b = case.scenario.batch_size

        def tok_s(fig) -> float:
            return fig.tok_s if fig.tok_s is not None else 1000.0 * b / fig.tpot_ms

        if case.baseline is not None and case.baseline.role == "fit":
            out.append(Observation(f"{case.id}: baseline",
                                   lambda f, c=case: build_case_scenario(cf, c, None, path.parent, f),
                                   False, tok_s(case.baseline)))
        for run in case.runs:
            if run.role == "fit" and run.replayable:
                out.append(Observation(f"{case.id}: {run.label or f'{run.num_steps} steps'}",
                                       lambda f, c=case, r=run: build_case_scenario(cf, c, r, path.parent, f),
                                       True, tok_s(run)))
    return out


def fit_from_cases(path: Path, kind: str) -> FitResult:
    """Fit FIT_PARAMS[kind] on the `role: fit` figures of `path` (see the module docstring)."""
    return fit_engine(kind, case_observations(path, kind))


def main() -> None:
    """`python -m simulator.evidence.engine_defaults [CASES]`: print each engine's fit on the shipped cases."""
    import sys
    from simulator.profile import data_dir
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else data_dir() / "cases" / "public.yaml"
    for kind in FIT_PARAMS:
        print(fit_from_cases(path, kind).table())
    print("ENGINE_HOST_DEFAULTS = {")
    for kind in FIT_PARAMS:
        r = fit_from_cases(path, kind)
        print(f"    {kind!r}: {{{', '.join(f'{k!r}: {v:.1f}' for k, v in r.params.items())}}},")
    print("}")


if __name__ == "__main__":
    main()
