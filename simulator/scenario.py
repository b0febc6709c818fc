"""Loading scenarios: YAML, `--set` overrides, model `config.json` files, the profile.

Every failure becomes a `UserInputError` whose message names the file, the field and what is
allowed, so the CLI prints one clear line instead of a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from pydantic import ValidationError

from simulator.config import Scenario, legacy_keys
from simulator.errors import UserInputError, format_validation_error  # noqa: F401 (the loaders' errors)
from simulator.model_config import shape_fields_from_hf_config
from simulator.profile import CalibrationProfile, load_profile, resolve_profile_path


def apply_overrides(data: dict, overrides: list[str], source: str) -> dict:
    """Merge `key.path=value` strings into the scenario dict; values are parsed as YAML scalars.

    Raises:
        UserInputError: an override without '=' or whose path crosses a non-mapping.
    """
    for item in overrides:
        if "=" not in item:
            raise UserInputError(f"--set {item!r}: expected key.path=value, e.g. spec.num_steps=5")
        key, raw = item.split("=", 1)
        parts = [p for p in key.strip().split(".") if p]
        if not parts:
            raise UserInputError(f"--set {item!r}: empty key")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise UserInputError(f"--set {item!r}: value is not valid YAML: {e}") from None
        node = data
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise UserInputError(f"--set {item!r}: {p!r} in {source} is not a mapping")
            node = nxt
        node[parts[-1]] = value
    return data


def _merge_model_config(model: dict, base_dir: Path, source: str, role: str) -> dict:
    """Fill a model section from its HF config.json (fields written in the scenario win)."""
    ref = model.get("config_path")
    if not ref:
        return model
    path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserInputError(f"{source}: {role}.config_path: file {path} not found") from None
    except json.JSONDecodeError as e:
        raise UserInputError(f"{source}: {role}.config_path: {path} is not valid JSON: {e}") from None
    if not isinstance(cfg, dict):
        raise UserInputError(f"{source}: {role}.config_path: {path} must hold a JSON object")
    cfg = cfg.get("text_config", cfg)  # multimodal configs nest the language model
    merged, notes = shape_fields_from_hf_config(cfg)
    if notes:
        merged["config_notes"] = [f"{role} {path.name}: {n}" for n in notes]
    merged.update(model)
    return merged


def scenario_from_dict(data: dict, source: str, base_dir: Path) -> Scenario:
    """Validate a scenario dict (after overrides), reading model config.json files it names."""
    if not isinstance(data, dict):
        raise UserInputError(f"{source}: top level must be a mapping of scenario fields")
    renames = legacy_keys(data)
    if renames:
        moves = "; ".join(f"{old} -> {new}" for old, new in renames)
        raise UserInputError(f"{source}: these keys moved (the serving engine and the simulation's fidelity have "
                             f"sections of their own): {moves}")
    data = dict(data)
    for role in ("target", "draft"):
        if isinstance(data.get(role), dict):
            data[role] = _merge_model_config(data[role], base_dir, source, role)
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise UserInputError(format_validation_error(source, e)) from None


def read_scenario_dict(path: Path) -> dict:
    """Parse a scenario YAML file into a dict (no validation)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UserInputError(f"{path}: scenario file not found") from None
    except IsADirectoryError:
        raise UserInputError(f"{path}: is a folder, expected a scenario YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise UserInputError(f"{path}{where}: invalid YAML: {what}") from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise UserInputError(f"{path}: top level must be a mapping of scenario fields, got {got}")
    return data


def load_scenario(path: Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario YAML file.

    Raises:
        UserInputError: unreadable file, bad YAML, bad override, or a field out of range.
    """
    path = Path(path)
    overrides = list(overrides or [])
    data = apply_overrides(read_scenario_dict(path), overrides, str(path))
    source = f"{path} (with --set {' '.join(overrides)})" if overrides else str(path)
    return scenario_from_dict(data, source, path.parent)


def load_profile_for(scenario: Scenario, override: str | None = None,
                     base_dir: Path | None = None, source: str | None = None) -> tuple[CalibrationProfile, Path]:
    """Resolve and load the scenario's profile (or `override`), carried to the scenario's
    `hardware` GPU where that is another (simulator.hardware.apply_hardware).

    Raises:
        UserInputError: the profile is missing, not JSON, or fails validation; bad hardware.
    """
    ref = override or scenario.profile
    try:
        path = resolve_profile_path(ref, base_dir)
    except FileNotFoundError as e:
        raise UserInputError(str(e)) from None
    try:
        profile = load_profile(path)
    except ValidationError as e:
        raise UserInputError(format_validation_error(str(path), e)) from None
    except ValueError as e:
        raise UserInputError(str(e)) from None
    from simulator.hardware import apply_hardware  # the catalog is read only when a scenario names hardware
    return apply_hardware(scenario, profile, source=source or scenario.name), path
