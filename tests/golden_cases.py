"""The golden cases of test_golden.py: what each one runs, and how its pinned record is computed.

Everything here goes through the public surface only: `unmask.load`, `Model.resolve_config`,
`Model.generate`, `unmask.decode`, `unmask.export.export_model`, the checkpoint makers of
`unmask.export.testing`, and the package's graph run directly with ONNX Runtime (the graph
contract: input_ids, position_ids, past_key.l/past_value.l, logits_index -> logits, presents).

A case is a package, a prompt (ids, text or messages) and the GenerationConfig fields it
overrides; its record is the prompt ids, the resolved settings, the whole generated region,
the answer text and the number of forward passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

import unmask
from unmask.export import export_model
from unmask.export.testing import make_dream_checkpoint, make_llada_checkpoint

FAMILIES = ("llada", "dream")
PACKAGES = ("llada-fp32", "llada-int8", "dream-fp32", "dream-int8")
ALGORITHMS = ("low_confidence", "random", "origin", "maskgit_plus", "topk_margin", "entropy")
CACHES = ("none", "prefix", "dual")
BASE = dict(gen_length=32, block_length=8, steps=16)  # 4 blocks of 4 steps: caches refresh per block
SHORT = dict(gen_length=16, block_length=8, steps=8)  # chat prompts fill much of the tiny models' 64 positions
PROMPT = [17, 45, 77, 120, 203, 33, 5, 260]  # ordinary BPE ids of both tiny vocabularies (320)
IDS = dict(prompt_ids=tuple(PROMPT))
PARALLEL = {"threshold": 0.02, "factor": 6.0}  # tiny models: confidences ~0.02-0.05; these commit several per step
EMBEDDED_PROMPTS = {
    "tool": "Switch the fan in the garage on.",
    "sum": "What is 242 + 474?",
    "reverse": "Reverse this list: 20, 98, 51, 2, 81, 94",
    "units": "Convert 60 in to ft.",
}


@dataclass(frozen=True)
class Case:
    """One pinned generation. kind: generate (Model.generate) or decode (unmask.decode on the graph)."""

    id: str
    package: str  # one of PACKAGES, or "embedded" (unmask.load())
    settings: dict[str, Any]  # GenerationConfig field overrides
    prompt_ids: tuple[int, ...] | None = None
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    kind: str = "generate"
    template: tuple[int, ...] | None = None  # decode: fixed tokens (-1 = a hole, the mask id at run time)
    infill: bool = False  # decode: the prompt's -1 entries become holes


def _grid() -> list[Case]:
    """Every algorithm under every cache mode, fp32, both layouts."""
    return [Case(f"{fam}-{alg}-{cache}", f"{fam}-fp32", BASE | dict(algorithm=alg, cache=cache), **IDS)
            for fam in FAMILIES for alg in ALGORITHMS for cache in CACHES]


def _parallel() -> list[Case]:
    """Threshold and factor decoding: low_confidence under each cache, the other two rules on dual."""
    cases = []
    for fam in FAMILIES:
        for rule, value in PARALLEL.items():
            runs = [("low_confidence", c) for c in CACHES] + [("maskgit_plus", "dual"), ("topk_margin", "dual")]
            cases += [Case(f"{fam}-{alg}-{cache}-{rule}{value}", f"{fam}-fp32",
                           BASE | dict(algorithm=alg, cache=cache, **{rule: value}), **IDS) for alg, cache in runs]
    return cases


def _sampling_and_flags() -> list[Case]:
    """CFG, seeded sampling, the EOS flags, int8 packages, package defaults and chat prompts."""
    c = [Case(f"llada-low_confidence-{cache}-cfg1.5", "llada-fp32", BASE | dict(cfg_scale=1.5, cache=cache), **IDS)
         for cache in CACHES]
    c += [Case(f"dream-entropy-{cache}-cfg1.5", "dream-fp32", BASE | dict(cfg_scale=1.5, cache=cache,
                                                                          algorithm="entropy"), **IDS)
          for cache in ("none", "dual")]
    c += [
        Case("llada-low_confidence-dual-temp0.7-seed3", "llada-fp32",
             BASE | dict(temperature=0.7, seed=3, cache="dual"), **IDS),
        Case("llada-random-none-temp1.0-seed5", "llada-fp32",
             BASE | dict(algorithm="random", temperature=1.0, seed=5, cache="none"), **IDS),
        Case("dream-entropy-dual-temp0.8-topp0.9-topk20-seed7", "dream-fp32",
             BASE | dict(algorithm="entropy", temperature=0.8, top_p=0.9, top_k=20, seed=7, cache="dual"), **IDS),
        Case("dream-maskgit_plus-prefix-algtemp0.5-seed1", "dream-fp32",
             BASE | dict(algorithm="maskgit_plus", alg_temp=0.5, seed=1, cache="prefix"), **IDS),
        Case("dream-origin-none-temp0.5-seed2-eps0.01", "dream-fp32",
             BASE | dict(algorithm="origin", temperature=0.5, seed=2, eps=0.01, cache="none"), **IDS),
        Case("llada-low_confidence-dual-eosflags-nostop", "llada-fp32",
             BASE | dict(logits_eos_inf=True, confidence_eos_eot_inf=True, early_stop=False, cache="dual"), **IDS),
        Case("llada-low_confidence-none-oneblock-steps8", "llada-fp32",
             dict(gen_length=16, block_length=None, steps=8, cache="none"), **IDS),
        Case("dream-entropy-dual-oneblock", "dream-fp32", dict(gen_length=32, steps=16, cache="dual"), **IDS),
        Case("llada-package-defaults", "llada-fp32", dict(gen_length=32), **IDS),
        Case("dream-package-defaults", "dream-fp32", dict(gen_length=32), **IDS),
        Case("llada-chat-prompt", "llada-fp32", SHORT, prompt="What is 12 + 30?"),
        Case("dream-chat-messages", "dream-fp32", SHORT | dict(algorithm="entropy"),
             messages=(("system", "Be brief."), ("user", "Copy the word apple."))),
    ]
    for fam, alg in (("llada", "low_confidence"), ("dream", "entropy")):
        c += [Case(f"{fam}-int8-{alg}-{cache}", f"{fam}-int8", BASE | dict(algorithm=alg, cache=cache), **IDS)
              for cache in ("none", "dual")]
    c.append(Case("llada-int8-low_confidence-dual-threshold0.02", "llada-int8",
                  BASE | dict(threshold=0.02, cache="dual"), **IDS))
    return c


def _decode_cases() -> list[Case]:
    """unmask.decode driven by the fp32 graphs: fixed-token templates and infill."""
    holes = [-1] * 16
    template = tuple(holes[:2] + [40, 41] + holes[:5] + [42] + holes[:2] + [43, 44, 45, 46])
    return [
        Case("llada-decode-template", "llada-fp32", SHORT, kind="decode", template=template, **IDS),
        Case("llada-decode-template-threshold0.02", "llada-fp32", SHORT | dict(threshold=0.02), kind="decode",
             template=template, **IDS),
        Case("dream-decode-template", "dream-fp32", dict(gen_length=16, steps=8, algorithm="entropy"),
             kind="decode", template=template, **IDS),
        Case("llada-decode-infill", "llada-fp32", dict(gen_length=8, block_length=8, steps=8), kind="decode",
             infill=True, prompt_ids=tuple(PROMPT[:3] + [-1, -1] + PROMPT[5:])),
        Case("llada-decode-plain", "llada-fp32", BASE, kind="decode", **IDS),
    ]


def _embedded_cases() -> list[Case]:
    """The embedded default model on real task prompts: its defaults, threshold + dual, and more."""
    c = [Case(f"embedded-{name}-defaults", "embedded", {}, prompt=text) for name, text in EMBEDDED_PROMPTS.items()]
    c += [Case(f"embedded-{name}-dual-threshold0.9", "embedded", dict(threshold=0.9, cache="dual"), prompt=text)
          for name, text in EMBEDDED_PROMPTS.items()]
    c += [
        Case("embedded-sum-none-steps16", "embedded", dict(cache="none", steps=16), prompt=EMBEDDED_PROMPTS["sum"]),
        Case("embedded-reverse-prefix-blocks8-steps16", "embedded", dict(cache="prefix", block_length=8, steps=16),
             prompt=EMBEDDED_PROMPTS["reverse"]),
        Case("embedded-tool-dual-factor0.001", "embedded", dict(factor=0.001), prompt=EMBEDDED_PROMPTS["tool"]),
        Case("embedded-reverse-dual-threshold0.9999", "embedded", dict(threshold=0.9999),
             prompt=EMBEDDED_PROMPTS["reverse"]),
        Case("embedded-units-dual-temp0.8-seed11", "embedded", dict(temperature=0.8, seed=11),
             prompt=EMBEDDED_PROMPTS["units"]),
    ]
    return c


def generation_cases() -> list[Case]:
    cases = _grid() + _parallel() + _sampling_and_flags() + _decode_cases() + _embedded_cases()
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    return cases


# ---------------------------------------------------------------------- packages


def build_packages(root: Path) -> dict[str, Path]:
    """The four tiny packages (seeded checkpoints, exported by the project's exporter)."""
    folders = {}
    for fam, make in (("llada", make_llada_checkpoint), ("dream", make_dream_checkpoint)):
        hf = make(root / fam / "hf", seed=0)
        for precision in ("fp32", "int8"):
            folders[f"{fam}-{precision}"] = root / fam / precision
            export_model(hf, root / fam / precision, precision=precision, quiet=True, validate=False)
    return folders


class Models:
    """Loaded models and raw graph sessions, each opened once (single-threaded, CPU)."""

    def __init__(self, folders: dict[str, Path]):
        self.folders = folders
        self._models: dict[str, Any] = {}
        self._sessions: dict[str, ort.InferenceSession] = {}

    def model(self, package: str):
        if package not in self._models:
            path = None if package == "embedded" else self.folders[package]
            self._models[package] = unmask.load(path, device="cpu", threads=1)
        return self._models[package]

    def session(self, package: str) -> ort.InferenceSession:
        if package not in self._sessions:
            self._sessions[package] = graph_session(self.folders[package] / "model.onnx")
        return self._sessions[package]


def graph_session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------- running a case


def run_case(case: Case, models: Models) -> dict[str, Any]:
    """The record a case is pinned by."""
    model = models.model(case.package)
    if case.kind == "decode":
        return _run_decode(case, model, models.session(case.package))
    messages = None if case.messages is None else [{"role": r, "content": t} for r, t in case.messages]
    prompt_ids = None if case.prompt_ids is None else list(case.prompt_ids)
    result = model.generate(case.prompt, messages=messages, prompt_ids=prompt_ids, **case.settings)
    return _record(case, result.prompt_ids, result.config, model.facts, result.token_ids, result.stats.nfe,
                   result.text)


def _run_decode(case: Case, model, session: ort.InferenceSession) -> dict[str, Any]:
    cfg = model.resolve_config(cache="none", **case.settings)
    mask = model.facts.mask_id
    prompt = np.array([mask if t < 0 else t for t in case.prompt_ids], dtype=np.int64)
    template = None
    if case.template is not None:
        template = np.array([mask if t < 0 else t for t in case.template], dtype=np.int64)
    result = unmask.decode(lambda ids: full_logits(session, ids), prompt, cfg, template=template,
                           infill=case.infill, threads=1, facts=model.facts)
    return _record(case, prompt, cfg, model.facts, result.generated, result.stats.nfe, None)


def _record(case: Case, prompt_ids, cfg, facts, token_ids, nfe: int, text: str | None) -> dict[str, Any]:
    # the settings and the model facts they ran with, in one record (facts were config fields when pinned)
    record = {"id": case.id, "package": case.package, "kind": case.kind, "settings": dict(case.settings),
              "prompt_ids": [int(t) for t in prompt_ids], "config": {**cfg.to_dict(), **facts.to_dict()},
              "token_ids": [int(t) for t in token_ids], "nfe": int(nfe)}
    if text is not None:
        record["text"] = text
    if case.template is not None:
        record["template"] = list(case.template)
    return record


# ---------------------------------------------------------------------- the graph itself


def full_logits(session: ort.InferenceSession, ids: np.ndarray) -> np.ndarray:
    """One forward over the whole sequence, empty past, logits for every row."""
    return run_graph(session, ids)["logits"]


def run_graph(session: ort.InferenceSession, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Run the graph contract with a full window and an empty past; every output by name."""
    batch, length = ids.shape
    feeds = {"input_ids": ids.astype(np.int64),
             "position_ids": np.broadcast_to(np.arange(length, dtype=np.int64), (batch, length)).copy(),
             "logits_index": np.arange(length, dtype=np.int64)}
    for inp in session.get_inputs():
        if inp.name.startswith("past_"):
            _, heads, _, head_dim = inp.shape
            feeds[inp.name] = np.zeros((batch, heads, 0, head_dim), dtype=np.float32)
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


GRAPH_IDS = np.array([PROMPT + [-1] * 16, PROMPT[::-1] + [-1] * 8 + PROMPT], dtype=np.int64)  # -1: mask id
PROBE_VOCAB = (0, 1, 7, 63, 128, 255, 300, 319)  # logit columns pinned exactly (plus every row's argmax)


def graph_contract(session: ort.InferenceSession) -> dict[str, Any]:
    """The declared inputs and outputs: name, element type and shape (symbolic dims by name)."""
    def describe(args):
        return [{"name": a.name, "type": a.type, "shape": list(a.shape)} for a in args]

    return {"inputs": describe(session.get_inputs()), "outputs": describe(session.get_outputs())}


def graph_fingerprint(session: ort.InferenceSession, mask_id: int) -> dict[str, Any]:
    """Logits of two fixed sequences (batch 2): probe columns, argmax and sum of squares per row;
    the presents' sum of squares per layer (they are the key/value cache)."""
    ids = np.where(GRAPH_IDS < 0, mask_id, GRAPH_IDS)
    out = run_graph(session, ids)
    logits = out["logits"].astype(np.float64)
    presents = {name: float(np.square(v.astype(np.float64)).sum()) for name, v in out.items()
                if name.startswith("present_")}
    return {"input_ids": ids.tolist(), "probe_vocab": list(PROBE_VOCAB),
            "probes": logits[:, :, list(PROBE_VOCAB)].tolist(), "argmax": logits.argmax(-1).tolist(),
            "sumsq": np.square(logits).sum(-1).tolist(), "present_sumsq": presents,
            "output_shapes": {name: list(v.shape) for name, v in out.items()}}
