"""Loading scenarios: YAML, `--set` overrides, model `config.json` files, the profile.

Every failure becomes a `UserInputError` whose message names the file, the field and what is
allowed, so the CLI prints one clear line instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from simulator.config import Scenario, legacy_keys
from simulator.inputs import (UserInputError, format_validation_error, load_yaml_scalar, quote, read_json,
                              read_yaml, refuse_nulls)
from simulator.model_config import shape_fields_from_hf_config
from simulator.profile import CalibrationProfile, load_profile, resolve_profile_path

__all__ = ["UserInputError", "format_validation_error", "apply_overrides", "scenario_from_dict",
           "read_scenario_dict", "resolve_scenario_path", "load_scenario", "load_profile_for"]


def apply_overrides(data: dict, overrides: list[str], source: str) -> dict:
    """Merge `key.path=value` strings into the scenario dict; values are parsed as YAML scalars.

    Chain rule (as `sweep` does for a swept num_steps): overrides that set `spec.num_steps` but not
    `spec.num_draft_tokens`, on a chain (`spec.topk` 1 after them), also set num_draft_tokens = num_steps + 1,
    the only value a chain takes (`--set spec.num_steps=6` alone).

    Raises:
        UserInputError: an override without '=' or whose path crosses a non-mapping.
    """
    for item in overrides:
        if "=" not in item:
            raise UserInputError(f"--set {quote(item)}: expected key.path=value, e.g. spec.num_steps=5")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not key.strip() or any(not p.strip() or p != p.strip() for p in parts):
            raise UserInputError(f"--set {quote(item)}: key {quote(key)} has an empty part or spaces around a part; "
                                 "write key.path=value, e.g. spec.num_steps=5")
        value = load_yaml_scalar(raw, f"--set {quote(item)}")
        node = data
        for p in parts[:-1]:
            nxt = node.setdefault(_existing_key(node, p), {})
            if not isinstance(nxt, dict):
                raise UserInputError(f"--set {quote(item)}: {quote(p)} in {source} is not a mapping")
            node = nxt
        node[_existing_key(node, parts[-1])] = value
    _chain_rule(data, [item.split("=", 1)[0].strip() for item in overrides])
    return data


def _chain_rule(data: dict, keys: list[str]) -> None:
    """num_draft_tokens = num_steps + 1 where the overrides set num_steps alone on a chain (apply_overrides)."""
    spec = data.get("spec")
    if "spec.num_steps" not in keys or "spec.num_draft_tokens" in keys or not isinstance(spec, dict):
        return
    steps, topk = spec.get("num_steps"), spec.get("topk", 1)
    if type(steps) is int and topk == 1 and type(topk) is int and 1 <= steps <= 4095:
        spec["num_draft_tokens"] = steps + 1


def _existing_key(node: dict, part: str) -> str | int:
    """The key of `node` a `--set` path part names: the integer key YAML read from `8:` for the
    part '8' (serving_engine.moe_layer_latency_us.8=90 replaces that entry), else the part."""
    if part not in node and part.isascii() and part.isdigit() and int(part) in node:
        return int(part)
    return part


def model_config_path(ref: str, base_dir: Path) -> Path:
    """The file a `config_path` names: a path (relative to the scenario's folder), or, for a bare name that
    is no file there, a shipped model config: `<data_dir()>/models/<name>.json` or
    `<data_dir()>/models/engine/<name>.config.json` (`config_path: qwen3-30b-a3b`)."""
    path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
    if path.exists() or "/" in ref or ref.endswith(".json"):
        return path
    from simulator.profile import data_dir
    models = data_dir() / "models"
    return next((p for p in (models / f"{ref}.json", models / "engine" / f"{ref}.config.json") if p.is_file()), path)


def _merge_model_config(model: dict, base_dir: Path, source: str, role: str) -> dict:
    """Fill a model section from its HF config.json (fields written in the scenario win)."""
    if "config_path" not in model:
        return model
    ref = model["config_path"]
    if not isinstance(ref, str) or not ref.strip():
        raise UserInputError(f"{source}: {role}.config_path: expected the path of a model config.json, "
                             f"got {quote(ref)}")
    path = model_config_path(ref, base_dir)
    try:
        cfg = read_json(path, "model config.json")
    except UserInputError as e:
        raise UserInputError(f"{source}: {role}.config_path: {e}") from None
    if not isinstance(cfg, dict):
        raise UserInputError(f"{source}: {role}.config_path: {path} must hold a JSON object, "
                             f"got {type(cfg).__name__}")
    if "text_config" in cfg:  # multimodal configs nest the language model
        cfg = cfg["text_config"]
        if not isinstance(cfg, dict):
            raise UserInputError(f"{source}: {role}.config_path: {path}: text_config must be a JSON object, "
                                 f"got {type(cfg).__name__}")
    try:
        merged, notes = shape_fields_from_hf_config(cfg)
    except ValueError as e:
        raise UserInputError(f"{source}: {role}.config_path: {path}: {e}") from None
    if "precision" in model or "weight_dtype_bytes" in model:  # the scenario gives the weight formats
        notes = [n for n in notes if not n.startswith("quantization_config")]
    if notes:
        merged["config_notes"] = [f"{role} {path.name}: {n}" for n in notes]
    merged.update(model)
    return merged


def scenario_from_dict(data: dict, source: str, base_dir: Path) -> Scenario:
    """Validate a scenario dict (after overrides), reading model config.json files it names.

    What a user wrote is used as written or refused: an explicit null is refused (`refuse_nulls`)
    and fields are validated strictly (no string for a number, no float for an integer).

    Raises:
        UserInputError: naming the source and the field.
    """
    if not isinstance(data, dict):
        raise UserInputError(f"{source}: top level must be a mapping of scenario fields")
    refuse_nulls(data, source)
    renames = legacy_keys(data)
    if renames:
        moves = "; ".join(f"{old} -> {new}" for old, new in renames)
        raise UserInputError(f"{source}: these keys moved (the serving engine and the simulation's fidelity have "
                             f"sections of their own): {moves}")
    _check_engine_spec_keys(data, source)
    data = dict(data)
    for role in ("target", "draft"):
        if isinstance(data.get(role), dict):
            data[role] = _merge_model_config(data[role], base_dir, source, role)
    if isinstance(data.get("serving"), dict):
        data["serving"] = _serving_paths(data["serving"], base_dir)
    engine = data.get("serving_engine")
    if isinstance(engine, dict) and isinstance(engine.get("engine_profile"), str):
        ref = engine["engine_profile"]
        if ("/" in ref or ref.endswith(".json")) and not Path(ref).is_absolute() and (base_dir / ref).is_file():
            data["serving_engine"] = {**engine, "engine_profile": str(base_dir / ref)}
    try:
        sc = Scenario.model_validate(data, strict=True)
    except ValidationError as e:
        raise UserInputError(format_validation_error(source, e)) from None
    _check_engine_profile(sc, source)
    return sc


def _check_engine_spec_keys(data: dict, source: str) -> None:
    """A spec key written in an engine's word (vLLM's num_speculative_tokens, SGLang's speculative_num_steps)
    is refused with the field it is here (simulator.engines.spec_words).

    Raises:
        UserInputError: naming the key and the field.
    """
    spec = data.get("spec")
    if not isinstance(spec, dict):
        return
    from simulator.engines.spec_words import spec_key_hint
    for key in spec:
        if isinstance(key, str) and (hint := spec_key_hint(key)):
            raise UserInputError(f"{source}: spec.{key}: {hint}")


def _check_engine_profile(sc: Scenario, source: str) -> None:
    """The engine profile a scenario names exists and is one (read once; cached for the cost model).

    Raises:
        UserInputError: naming the source, the field and what is wrong.
    """
    ref = getattr(sc.serving_engine, "engine_profile", None)
    if not ref:
        return
    from simulator.engines.profile import load_engine_profile
    try:
        load_engine_profile(ref)
    except FileNotFoundError as e:
        raise UserInputError(f"{source}: serving_engine.engine_profile: {e}") from None
    except ValidationError as e:
        raise UserInputError(f"{source}: serving_engine.engine_profile: "
                             f"{format_validation_error(ref, e)}") from None
    except ValueError as e:
        raise UserInputError(f"{source}: serving_engine.engine_profile: {e}") from None


def _serving_paths(serving: dict, base_dir: Path) -> dict:
    """The serving section with the files it names (a trace, length files) made relative to the
    scenario file's folder, as model config_path files are; other values untouched."""
    out = dict(serving)
    for key in ("arrivals", "input_len", "output_len"):
        section = out.get(key)
        if isinstance(section, dict) and isinstance(section.get("path"), str) and section["path"].strip():
            p = Path(section["path"])
            out[key] = {**section, "path": str(p if p.is_absolute() else base_dir / p)}
    return out


def read_scenario_dict(path: Path) -> dict:
    """Parse a scenario YAML file into a dict (no validation; `simulator.inputs` rules).

    Raises:
        UserInputError: unreadable, not UTF-8, invalid or unbounded YAML, or not a mapping.
    """
    path = Path(path)
    data = read_yaml(path, "scenario YAML file")
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise UserInputError(f"{path}: top level must be a mapping of scenario fields, got {got}")
    return data


def resolve_scenario_path(ref: Path) -> Path:
    """A scenario file as given, or, for a bare name that is no file here, the shipped scenario of that
    name (`vllm_llama8b_h200` -> `<scenarios_dir()>/vllm_llama8b_h200.yaml`; an installed wheel carries them).

    Raises:
        UserInputError: a bare name (no folder, no suffix) that is neither a file nor a shipped scenario.
    """
    ref = Path(ref)
    if ref.exists() or len(ref.parts) != 1 or ref.suffix not in ("", ".yaml", ".yml"):
        return ref
    from simulator.profile import scenarios_dir
    shipped = scenarios_dir() / f"{ref.stem}.yaml"
    if shipped.is_file():
        return shipped
    if ref.suffix:
        return ref  # a file name: the reader says it is missing
    names = sorted(p.stem for p in scenarios_dir().glob("*.yaml"))
    raise UserInputError(f"scenario {quote(str(ref))}: no such file, and no shipped scenario of that name "
                         f"(shipped: {', '.join(names) or 'none'})")


def load_scenario(path: Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override and validate a scenario YAML file.

    Raises:
        UserInputError: unreadable file, bad YAML, bad override, or a field out of range.
    """
    path = Path(path)
    overrides = list(overrides or [])
    data = apply_overrides(read_scenario_dict(path), overrides, str(path))
    def shown(o: str, limit: int = 80) -> str:  # the override as typed, a long one cut (no repr quotes)
        o = o.encode("unicode_escape").decode("ascii")
        return o if len(o) <= limit else f"{o[:limit]}... ({len(o):,} characters)"
    source = f"{path} (with --set {' '.join(shown(o) for o in overrides)})" if overrides else str(path)
    return scenario_from_dict(data, source, path.parent)


def load_profile_for(scenario: Scenario, override: str | None = None,
                     base_dir: Path | None = None, source: str | None = None) -> tuple[CalibrationProfile, Path]:
    """Resolve and load the scenario's profile (or `override`), carried to the scenario's
    `hardware` GPU where that is another (simulator.hardware.apply_hardware).

    Raises:
        UserInputError: the profile is missing, not JSON, or fails validation; bad hardware.
    """
    if override is not None and not override.strip():
        raise UserInputError(f"--profile {override!r}: a profile name (data/profiles/<name>.json) or a JSON path")
    ref = scenario.profile if override is None else override
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
    if scenario.hardware.gpu is None and scenario.hardware.box is None:
        return profile, path  # the profile's own GPU: the catalog (simulator.hardware) is not imported
    from simulator.hardware import apply_hardware
    return apply_hardware(scenario, profile, source=source or scenario.name), path
