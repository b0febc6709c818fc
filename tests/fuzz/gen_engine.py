"""Generators of bad inputs, kind 13: what the engine side reads and is asked (issue 47's families).

- engine profiles (`serving_engine.engine_profile`): a shipped profile with one field given text,
  a bool as a word, a cost of 0 or 1e-30 us, fits all 0, max_num_seqs out of range, a model shape
  that is none, NaN / Infinity / 1e400 / 5,000 digits, a key twice, a bad byte, deep nesting;
- points files (`--from-points`): a fake engine's steady and request-level lines with one field
  replaced the same ways, a header at TP 9, `--draft-tp 2` over draft-TP-1 points;
- options of `calibrate engine`: lists written with an empty item, other scripts' digits or '1_0',
  empty names, outputs that are folders, standard output or the points file itself;
- queue plans (`engine-queue-run`): a ProcessPlan with a key twice, capture sizes out of range, a
  vLLM plan whose target config is empty, a negative prompt seed, numbers past the float range;
- engine outputs the importers read: a profiler trace whose `args.correlation` is a list, a vLLM log
  of 65+ per-position rates, an engine-moe record nested deep or of 5,000 digits, and
  `--trace-cycles` of 5,000 digits.

Every case expects a clean error naming the file or option (tests/fuzz/running.py: `classify`).
The fixtures (a fake engine's points files, a shipped engine profile) are made by
tests/fuzz/running.py `prepare_fixtures`.
"""

from __future__ import annotations

import json
import random

from tests.fuzz.cases import ENGINE_RUNS, ROOT, Case, Special, base_scenario, dump_json, dump_yaml, scenario_files
from tests.fuzz.gen_values import set_indexed

ENGINE_PROFILE = ROOT / "data" / "engine_profiles" / "vllm-0.26.0-h200-llama-3.1-8b-eagle3-few.json"
ENGINE_SCENARIO = ROOT / "scenarios" / "vllm_llama8b_h200.yaml"
FIVE_K = "9" * 5000
RAW_VALUES = ("NaN", "Infinity", "-Infinity", "1e400", FIVE_K, "-" + FIVE_K)  # written into the JSON text as is
BAD_VALUES = (-1, "12", "yes", True, [], {}, 1e30, 0, 1e-30)  # JSON values a strict schema refuses at these fields
PROFILE_FIELDS = ("points.0.step_us", "points.1.target_forward_us", "points.2.sample_us", "points.3.batch_size",
                  "points.0.context_len", "points.1.mean_accept_length", "points.2.host_busy_us", "tp_size",
                  "async_scheduling", "topk", "points.3.propose_us")  # max_num_seqs 0 is 'not said': the "seqs" case
STEADY_FIELDS = ("point.batch_size", "point.prompt_len", "point.repeats.0.elapsed_us", "point.repeats.0.num_cycles",
                 "point.repeats.0.context_len", "point.repeats.0.num_tokens", "point.num_steps", "wall_s")
REQUEST_FIELDS = ("point.max_tokens", "point.repeats.0.elapsed_us", "point.batch_size",
                  "point.repeats.0.steps.0.t_us", "point.repeats.0.num_requests", "point.repeats.0.num_tokens")
OPTION_TEXTS = ("3,", ",3", "1,,2", "", " ", "\uff13", "\u0663", "1_0", "+3", "-1", "0x3", "3.0", "1e1", "3 4",
                FIVE_K[:30])


def _mutated_json(data, dotted: str, rng: random.Random, indent: int | None = None) -> str:
    """`data` as JSON text with the field at `dotted` replaced by a bad value (raw text or JSON)."""
    if rng.random() < 0.5:
        raw = rng.choice(RAW_VALUES)
        text = json.dumps(set_indexed(json.loads(json.dumps(data)), dotted, "__X__"), indent=indent)
        return text.replace('"__X__"', raw, 1)
    copy = json.loads(json.dumps(data))
    old = _get(copy, dotted)
    value = rng.choice([v for v in BAD_VALUES if json.dumps(v) != json.dumps(old)])  # a change, not the value again
    return json.dumps(set_indexed(copy, dotted, value), indent=indent)


def _get(data, dotted: str):
    node = data
    for p in dotted.split("."):
        if isinstance(node, list):
            node = node[int(p)]
        elif isinstance(node, dict) and p in node:
            node = node[p]
        else:
            return None
    return node


def _text_damage(text: str, rng: random.Random, how: str) -> str | bytes:
    if how == "dup_key":
        return text.replace("{", '{"name": "x", ', 1) if '"name"' in text[:2000] else text.replace("{", '{"kind": "x", ', 1)
    if how == "bad_byte":
        raw = text.encode()
        i = rng.randrange(len(raw))
        return raw[:i] + rng.choice([b"\xff", b"\xc3(", b"\xed\xa0\x80"]) + raw[i:]
    return "[" * 5000 + "]" * 5000  # deep


def gen_engine_profile(rng: random.Random) -> Case:
    prof = json.loads(ENGINE_PROFILE.read_text())
    how = rng.choice(["field"] * 6 + ["target", "fits_zero", "dup_key", "bad_byte", "deep", "seqs"])
    if how == "field":
        f = rng.choice(PROFILE_FIELDS)
        text = _mutated_json(prof, f, rng)
        how = f"{f}"
    elif how == "target":
        text = dump_json({**prof, rng.choice(["target", "draft"]): rng.choice([{}, {"name": "x"}, {"hidden_size": -1}])})
    elif how == "fits_zero":
        part = rng.choice(["target_forward_us", "sample_us", "draft_us", "host_busy_us", "host_busy_us_baseline"])
        prof["fits"][part]["params"] = {k: rng.choice([0.0, 1e-30]) for k in prof["fits"][part]["params"]}
        text = dump_json(prof)
    elif how == "seqs":
        text = dump_json({**prof, "max_num_seqs": rng.choice([10**12, 4097, -1, 2, "64"])})
    else:
        text = _text_damage(dump_json(prof), rng, how)
    argv = ["simulate", "s.yaml", "--set", "serving_engine.engine_profile=e.json", "--json", "out.json"]
    return Case(13, f"engine profile {how}", argv, {"s.yaml": ENGINE_SCENARIO.read_text(), "e.json": text},
                outputs=("out.json",), mention=("e.json",))


def gen_points(rng: random.Random) -> Case:
    request = rng.random() < 0.4
    name = "req.jsonl" if request else "pts.jsonl"
    how = rng.choice(["field"] * 6 + ["tp9", "dup_key", "bad_byte", "deep", "draft_tp"])
    argv = (["live", "--from-points", name, "--out", "recs"] if request else
            ["calibrate", "engine", "--from-points", name, "--out", "prof.json"])
    extra: list[str] = []
    if how == "draft_tp":  # draft TP 2 over draft-TP-1 points (a target TP of 1): no such group
        extra = ["--draft-tp", "2"]
    edit = {"field": rng.choice(REQUEST_FIELDS if request else STEADY_FIELDS), "how": how}
    return Case(13, f"points {name} {how} {edit['field'] if how == 'field' else ''}".strip(), argv + extra,
                {}, outputs=("prof.json", "recs"), mention=(name, "--draft-tp"),
                needs=(f"points:{name}:{json.dumps(edit)}",))


def damage_points(text: str, edit: dict, rng: random.Random) -> str | bytes:
    """A fixture points file with one line damaged as `edit` says (gen_points; laid out by running.lay_out)."""
    lines = text.splitlines()
    how = edit["how"]
    if how == "draft_tp":
        return text
    idx = [i for i, ln in enumerate(lines) if json.loads(ln)["kind"] == ("engine" if how == "tp9" else "point")]
    i = rng.choice(idx)
    rec = json.loads(lines[i])
    if how == "field":
        lines[i] = _mutated_json(rec, edit["field"], rng)
    elif how == "tp9":
        rec["tensor_parallel_size"] = rng.choice([9, 16, 0, 1025])
        lines[i] = json.dumps(rec)
    elif how == "dup_key":
        lines[i] = lines[i].replace("{", '{"label": "x", ', 1)
    elif how == "bad_byte":
        return ("\n".join(lines[:i]) + "\n").encode() + lines[i].encode()[:20] + b"\xff" + \
            (lines[i].encode()[20:] + b"\n" + "\n".join(lines[i + 1:]).encode() + b"\n")
    else:
        lines[i] = "[" * 5000 + "]" * 5000
    return "\n".join(lines) + "\n"


def gen_options(rng: random.Random) -> Case:
    opt = rng.choice(["--num-steps", "--batches", "--context-lens", "--catalog-gpu", "--name", "--out", "--points"])
    argv = ["calibrate", "engine", "--engine", "fake", "--few"]
    if opt in ("--num-steps", "--batches", "--context-lens"):
        value = rng.choice(OPTION_TEXTS + (("2048", "65") if opt == "--batches" else ()))
        argv += ["--out", "p.json", opt, value]
    elif opt == "--catalog-gpu":
        argv += ["--out", "p.json", opt, rng.choice(["", " ", "h200", "[bold]"])]
    elif opt == "--name":
        argv += ["--out", "p.json", opt, rng.choice(["", " ", "\t"])]
    elif opt == "--out":
        argv += [opt, rng.choice(["out/", "", " ", "-", "d"])]  # d: a folder
    else:
        argv += ["--out", "p.json", "--points", rng.choice(["p.json", "./p.json"])]
    return Case(13, f"calibrate engine {opt} {argv[-1][:20]!r}", argv, {"d": Special("dir")}, outputs=(),
                mention=(opt, "--out"))


def gen_plans(rng: random.Random) -> Case:
    plan = dict(engine="fake", session="calibrate", label="calibrate_s1", num_steps=1, target_config={},
                points=[dict(batch_size=1, prompt_len=64, acceptance_rate=0.7, timed_steps=8, warmup_steps=2,
                             repeats=1)])
    how = rng.choice(["dup_key", "capture_sizes", "vllm_config", "prompt_seed", "raw", "deep", "bad_byte", "types"])
    if how == "capture_sizes":
        plan["capture_sizes"] = rng.choice([[-1], [0], [8, 4], [1, 1], [2**40]])
    elif how == "vllm_config":
        plan.update(engine="vllm", target_config=rng.choice([{}, {"hidden_size": 64}, {"x": 1}]))
    elif how == "prompt_seed":
        plan["prompt_seed"] = rng.choice([-1, 2**40, "1", 1.5])
    elif how == "types":
        set_indexed(plan, rng.choice(["num_steps", "points.0.batch_size", "max_num_seqs"]), rng.choice(["1", True, 1.0]))
    text = dump_json(plan)
    if how == "raw":
        text = _mutated_json(plan, rng.choice(["num_steps", "points.0.batch_size", "points.0.acceptance_rate"]),
                             rng, indent=1)
    elif how in ("dup_key", "deep", "bad_byte"):
        text = _text_damage(text, rng, how)
    return Case(13, f"plan {how}", ["calibrate", "engine-queue-run", "q", "pts.jsonl"],
                {"q/000_calibrate_s1.json": text}, outputs=("pts.jsonl",), mention=("000_calibrate_s1.json",))


def gen_engine_outputs(rng: random.Random) -> Case:
    how = rng.choice(["correlation", "rates", "moe", "trace_cycles", "live_out"])
    sc = base_scenario()
    if how == "correlation":
        data = json.loads((ENGINE_RUNS / "eagle3_trace.json").read_text())
        bad = rng.choice([[1, 2], {"a": 1}, "7", 1.5, True])
        for ev in data["traceEvents"]:
            if isinstance(ev.get("args"), dict) and "correlation" in ev["args"]:
                ev["args"]["correlation"] = bad
        sc["serving_engine"] = {"kind": "vllm"}
        return Case(13, "trace correlation", ["calibrate", "from-runs", "s.yaml", "run.json", "--out", "f.yaml"],
                    scenario_files(sc, **{"run.json": dump_json(data)}), outputs=("f.yaml",), mention=("run.json",))
    if how == "rates":
        n = rng.choice([65, 70, 500])
        text = (ENGINE_RUNS / "vllm_server.log").read_text()
        import re
        text = re.sub(r"Per-position acceptance rate: [0-9., ]+?, Avg",
                      "Per-position acceptance rate: " + ", ".join(["0.500"] * n) + ", Avg", text)
        sc["serving_engine"] = {"kind": "vllm"}
        return Case(13, f"vllm log {n} rates", ["calibrate", "from-runs", "s.yaml", "run.log", "--out", "f.yaml"],
                    scenario_files(sc, **{"run.log": text}), outputs=("f.yaml",), mention=("run.log",))
    if how == "moe":
        rec = dict(shape="kimi-k2-tp8", tokens=8, routing="rotating", kernels_us=40.0, E=384, K=7168, N=512,
                   top_k=8, quant="fp8", gpu="x")
        line = rng.choice([json.dumps(rec).replace('"kimi-k2-tp8"', "[" * 5000 + "]" * 5000),
                           json.dumps(rec).replace("40.0", FIVE_K),
                           json.dumps({**rec, "shape": ["a"]}), json.dumps(rec).replace("40.0", "NaN"),
                           json.dumps(rec).replace("{", '{"tokens": 4, ', 1)])
        import yaml
        sc = yaml.safe_load((ROOT / "scenarios" / "kimi_k2_tp8_draft_live_loop.yaml").read_text())  # a MoE target
        sc["serving_engine"] = {"kind": "sglang"}
        return Case(13, "engine-moe record", ["calibrate", "moe-kernel-times", "s.yaml", "moe.jsonl", "--out",
                                              "m.yaml"], {"s.yaml": dump_yaml(sc), "moe.jsonl": line + "\n"},
                    outputs=("m.yaml",), mention=("moe.jsonl",))
    if how == "trace_cycles":
        value = rng.choice([f"0:{FIVE_K}", f"{FIVE_K}:", "0:\u0663", "0:1_0", "0:\uff15"])
        return Case(13, "trace cycles", ["simulate", "s.yaml", "--set", "fidelity.granularity=forward", "--trace",
                                         "t.json", "--trace-cycles", value], scenario_files(), outputs=("t.json",),
                    mention=("--trace-cycles",))
    return Case(13, "live --out ''", ["live", "--from-points", "pts.jsonl", "--out", rng.choice(["", " "])], {},
                outputs=(), mention=("--out",), needs=('points:pts.jsonl:{"how": "draft_tp", "field": ""}',))


def gen_engine_inputs(rng: random.Random) -> Case:
    """Kind 13: engine profiles, points files, `calibrate engine` options, queue plans, engine outputs."""
    return rng.choice([gen_engine_profile] * 3 + [gen_points] * 3 + [gen_options] * 2 + [gen_plans] * 2
                      + [gen_engine_outputs] * 2)(rng)


__all__ = ["damage_points", "dump_yaml", "gen_engine_inputs"]
