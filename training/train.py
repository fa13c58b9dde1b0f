"""Train the embedded diffusion LM: LLaDA layout, masked-diffusion SFT on `unmask.tasks`.

    python -m training.train --out DIR [--minutes N] [--overwrite] [--max-steps N] ...

Writes an HF LLaDA folder (config.json, model.safetensors, tokenizer files) that the
standard `unmask export` converts. Objective (LLaDA SFT): per example t ~ U(eps, 1),
each answer-region token (answer, <|eot_id|>, EOS padding to gen_length) is masked
with probability t, the prompt never; loss = sum over masked of CE / t, divided by
the region length. Every file is written to a temporary name and moved into place.

Throughput on a 2-core CPU decides what the hour buys, so: families are drawn by
weight, examples are packed several to a row with block-diagonal attention (little
padding, and every batch mixes the families; `--pack-width 0` batches one example per
row, grouped by length), the t of a batch are stratified over [eps, 1) (less loss
variance), and only the masked positions go through the LM head.
`--trim-rate` ends a share of the answer regions a few EOS after <|eot_id|>, as LLaDA's
SFT pads only to the longest answer of a batch: about 30% fewer tokens per example, and
masked positions read the prompt past fewer mask keys; the rest keep the full region
that inference decodes, so the model still learns to fill it with EOS.
`--loose-rate` types a share of the prompts as people do in a chat (no final mark,
lowercase start), so those are understood too (off by default: within the hour it
costs accuracy on the templates' own phrasing). `--history-rate` puts a share of the
prompts after earlier chat turns, so follow-up questions in `unmask chat` are answered
(off by default: within the hour it costs first-question accuracy). `--family-weights`
may also draw training-only drills: "copy" (repeat the prompt's items), which every
task family builds on, "arith_short" (the arithmetic questions with 1-, 2- and 3-digit
terms in equal shares), "sums" (sums of two 2- or 3-digit terms), "products" and
"differences" (the arithmetic questions of that one operation), train-split prompts
only; `--late-family-weights` replaces the weights from `--late-at` of the budget on.
`--data people` trains on unmask.people instead of the tasks' templates: many wordings per
intent, large and made-up slot values, 0-3 earlier turns, and the out-of-domain family
answered by people.REFUSAL; left at their defaults, the family weights then add ood and the
generation length grows to people.GEN_LENGTH, and the end of training also scores the
people sets (phrasing, values, followup, ood). Off by default: the shipped model's recipe.
With --data people, a family weight "tasks.FAMILY=W" also draws unmask.tasks' own templates of
FAMILY, so a second stage on people data keeps what the first learned on them.
`--init-from DIR` starts from a checkpoint this script wrote (its weights, tokenizer and
architecture) instead of random weights: a second stage of training with a schedule of its own.
`--compile` runs the forward through torch.compile (same numbers, about 25% faster steps
here once compiled).
`--ema-decay` checkpoints an exponential moving average of the weights (torch's
AveragedModel) and scores the raw weights beside it at the end.
`--precision bf16` runs forward/backward under bf16 autocast (1.6x faster steps on one
AVX512-BF16 CPU, slower on another with AMX); the shipped recipe is fp32.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from unmask import people, tasks
from unmask.manifest import write_text_atomic
from unmask.export.reference import LladaModel, llada_config, parameter_count, read_safetensors
from .batches import Batch, Batcher, data_families, parse_family_weights
from .tokenizer import save_tokenizer, special_ids, train_tokenizer


@dataclass
class TrainConfig:
    out: str = ""  # output folder (HF layout); refused if it exists unless overwrite
    overwrite: bool = False  # reuse an existing output folder
    minutes: float = 55.0  # wall-clock budget for the optimisation loop (the LR schedule spans it)
    max_steps: int | None = None  # stop earlier after this many steps (smoke tests)
    seed: int = 0  # data order, masking and init
    threads: int = 2  # torch intra-op threads
    # model (LLaDA keys); head_dim = d_model / n_heads
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    mlp_hidden_size: int = 384
    init_std: float = 0.02  # std of the normal init of every linear and embedding weight (LLaDA's init_std 0.02);
    # d_model^-0.5 (0.0884) leaves the early loss plateau sooner but ended at 83.0% in its one full run (training/README.md)
    weight_tying: bool = False  # LM head = embedding^T (LLaDA's weight_tying): copying a prompt token is then
    # attention passing its embedding through, not an embedding-to-head map learned from scratch
    vocab_size: int = 1024  # BPE target; the model uses the tokenizer's real size
    tokenizer_examples: int = 20000  # generator examples the BPE is trained on
    # data: how often each family is drawn (relative): tool calls and extraction, learned first, least; arithmetic
    # from the task itself, the arith_short drill (1-3 digit terms) and the sums drill (two 2-3 digit terms)
    family_weights: str = "tool_call=0.7,arithmetic=0.4,list=1.6,units=1.1,extract=0.6,arith_short=0.6,sums=0.3"
    # from late_at of the budget on ("" = keep family_weights): by then tool calls, conversion and extraction are
    # mostly learned and arithmetic is not (0% on the 16-minute check), so it is drawn twice as often. The shipped
    # model (late_at 0.4, weight_decay 0.1, ema_decay 0.999): 96.0% on 500 held-out; the previous one (late_at 0.6,
    # weight_decay 0.01) 94.4%, and that recipe without the switch (and without the average) 89.0%, arithmetic 52%
    late_family_weights: str = "tool_call=0.5,arithmetic=0.8,list=1.6,units=0.8,extract=0.4,arith_short=0.6,sums=0.4"
    late_at: float = 0.4  # share of the wall-clock budget after which late_family_weights apply; 0.6 with
    # weight_decay 0.1 on the same machine: 93.2% (arithmetic 71%, against 86% at 0.4)
    pack_width: int = 144  # > 0: pack each batch's examples into rows of this many tokens (a token attends only
    # within its own example), so batches mix families with little padding; 0: one example per row, rows
    # grouped by length_buckets (as little padding, but a batch then holds mostly one family)
    length_buckets: int = 16  # without packing: batches drawn at once and grouped by length (1 = no grouping)
    history_rate: float = 0.0  # share of examples asked after 1-2 earlier chat turns (follow-ups in `unmask chat`)
    trim_rate: float = 0.75  # share of examples whose answer region ends TRIM_EOS_MAX or fewer EOS after <|eot_id|>
    # instead of padding to gen_length (LLaDA pads only to the batch's longest answer): fewer tokens per example,
    # and fewer mask keys diluting what a masked position reads from the prompt; the rest keep the full region
    # inference decodes. At batch 64, 0.75 made a step 0.36 s instead of 0.45 (71.8% after the hour, against 71.6%
    # untrimmed); with batch 32 (0.19 s/step on an AVX2 EPYC, 17,120 steps) it reached 78.0%
    loose_rate: float = 0.0  # share of prompts typed loosely (tasks.loosen: no final mark, lowercase start). The
    # previous shipped model (0) answered 17.5% of held-out questions typed loosely; 0.3 (batch 64) gave 56% but 60% (not 72%)
    # in the templates' phrasing after the same hour
    # optimisation
    compile: bool = False  # torch.compile the forward: ~25% faster steps on the 2-core CPU after ~40 s compiling
    # (the previous shipped model: 48,707 steps of 0.07 s on a Xeon with AMX); off by default as it needs a C++ compiler
    precision: str = "fp32"  # fp32 | bf16 (autocast: 1.6x faster steps on one AVX512-BF16 CPU, 0.11 s against
    # 0.09 s fp32 on an AMX Xeon) | auto (bf16 where the CPU has it)
    batch_size: int = 32  # 32 (with trimming): 78.0% after the hour on the EPYC; 64: 71.8% (half the steps, same
    # examples/s); 16: still on the loss plateau (0.28) after 7,000 steps, where 32 had left it by 5,000
    lr: float = 2e-3  # 1.5e-3: 91.0% after the hour (2e-3: 91.2%, 500 held-out, the previous recipe); 3e-3: 23% after 16 minutes (63%)
    min_lr_ratio: float = 0.1  # cosine decay to lr * this at the end of the budget
    warmup_steps: int = 50
    weight_decay: float = 0.1  # every parameter, norm gains included. 0.01 (the previous recipe, with late_at 0.4,
    # on a machine at 0.2 s/step): 63.6% on 500 held-out after 16,062 steps against 89.2% with 0.1 (17,807 steps),
    # the loss higher all hour (training/README.md)
    ema_decay: float = 0.999  # > 0: checkpoints hold an exponential moving average of the weights (this decay per
    # step; 0 = off), and the end of training scores the raw weights beside it. The shipped model: 96.0% on 500
    # held-out against 93.8% raw (arithmetic 86% against 77%); the previous one 94.4% against 93.6%; in another
    # run 81.8% against 79.2% (0.9995: 81.2%)
    mask_eps: float = 0.1  # t ~ U(eps, 1); 0.1 caps the 1/t loss weight at 10 (at 1e-3 one token can weigh 1000x)
    gen_length: int = tasks.GEN_LENGTH  # with --data people and this default: people.GEN_LENGTH
    data: str = "tasks"  # tasks: unmask.tasks' templates (the shipped recipe) | people: unmask.people (module doc)
    init_from: str = ""  # a folder this script wrote: start from its weights and tokenizer (a second stage of
    # training); its architecture (d_model, n_layers, n_heads, mlp_hidden_size, weight_tying) replaces those flags
    # logging / evaluation
    log_every: int = 25  # steps between loss lines
    eval_every_minutes: float = 8.0  # quick held-out exact match + checkpoint
    eval_per_family: int = 20  # quick evaluation size
    final_eval_per_family: int = 100  # written at the end


def add_noise(batch: Batch, mask_id: int, eps: float, gen: torch.Generator):
    """Forward process: t ~ U(eps, 1) per example; each token of its answer region becomes
    mask_id with probability t. The prompt is never masked. Returns (noisy ids, masked, t [examples]).

    The examples' t are stratified (one per slice [i/N, (i+1)/N) of [0, 1), shared offset,
    shuffled): each t is still uniform, but a batch always spans light and heavy masking."""
    n = batch.examples
    u = (torch.arange(n, dtype=torch.float32) + torch.rand(1, generator=gen)) / n
    t = eps + (1 - eps) * u[torch.randperm(n, generator=gen)]
    token_t = t[batch.example.clamp(min=0)]
    masked = batch.region & (torch.rand(batch.ids.shape, generator=gen) < token_t)
    return torch.where(masked, torch.full_like(batch.ids, mask_id), batch.ids), masked, t


def diffusion_loss(model, batch: Batch, gen_length: int, mask_id: int, eps: float, gen: torch.Generator):
    """LLaDA SFT loss: sum over masked positions of CE / t, divided by examples * region length.
    Only the masked positions go through the LM head (about a fifth of the tokens)."""
    noisy, masked, t = add_noise(batch, mask_id, eps, gen)
    logits = model.logits(model.hidden_states(noisy, batch.positions, batch.attention)[masked])
    ce = F.cross_entropy(logits, batch.ids[masked], reduction="none")
    weight = 1.0 / t[batch.example[masked]]
    return (ce * weight).sum() / (t.numel() * gen_length)


# ---------------------------------------------------------------------- evaluation


@torch.no_grad()
def generate_low_confidence(model, ids, positions, attention, gen_length: int, mask_id: int) -> torch.Tensor:
    """LLaDA low_confidence at temperature 0, steps = gen_length, one block: each step commits
    the single most confident masked position (ties: lowest position). Returns the region [B, G]."""
    x = ids.clone()
    region = slice(x.shape[1] - gen_length, x.shape[1])
    for _ in range(gen_length):
        logits = model.logits(model.hidden_states(x, positions, attention)[:, region])
        probs = logits.softmax(-1)
        confidence, token = probs.max(-1)
        still_masked = x[:, region] == mask_id
        confidence = torch.where(still_masked, confidence, torch.full_like(confidence, -1.0))
        pick = confidence.argmax(-1)
        rows = torch.arange(x.shape[0])
        active = still_masked[rows, pick]
        x[rows[active], region.start + pick[active]] = token[rows[active], pick[active]]
    return x[:, region]


def evaluate(model, batcher: Batcher, examples, batch_size: int = 128) -> dict[str, float]:
    """Held-out exact match per family (and overall) with generate_low_confidence."""
    was_training = model.training
    model.eval()
    predictions = []
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        ids, positions, attention = batcher.prompts(chunk)
        out = generate_low_confidence(model, ids, positions, attention, batcher.cfg.gen_length, batcher.ids["mask"])
        predictions += [batcher.tok.decode(row.tolist(), skip_special_tokens=False) for row in out]
    model.train(was_training)
    return tasks.score(examples, predictions)


# ---------------------------------------------------------------------- driver


def prepare_out_dir(cfg: TrainConfig) -> Path:
    out = Path(cfg.out)
    if out.exists() and not cfg.overwrite:
        raise FileExistsError(f"output folder {out} exists; pass --overwrite to reuse it")
    out.mkdir(parents=True, exist_ok=True)
    return out


def resolve_precision(precision: str) -> str:
    """'auto' -> 'bf16' where the CPU has bf16 instructions (AVX512-BF16, AMX), else 'fp32'."""
    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"unknown precision {precision!r}; choose auto, bf16 or fp32")
    if precision != "auto":
        return precision
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return "fp32"
    return "bf16" if {"avx512_bf16", "amx_bf16"} & set(flags) else "fp32"


def autocast(precision: str):
    """Matmuls in bf16 with fp32 master weights, or nothing."""
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def learning_rate(cfg: TrainConfig, step: int, progress: float) -> float:
    warm = min(1.0, (step + 1) / cfg.warmup_steps)
    cosine = cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * warm * cosine


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


PEOPLE_WEIGHTS = ("tool_call=0.8,arithmetic=0.5,list=1.4,units=1.0,extract=0.7,ood=0.4,arith_short=0.5,sums=0.3",
                  "tool_call=0.6,arithmetic=0.8,list=1.4,units=0.8,extract=0.5,ood=0.3,arith_short=0.5,sums=0.4")


def resolve_data(cfg: TrainConfig) -> TrainConfig:
    """cfg with the --data source's defaults: for people, weights that draw the ood family and
    the longer generation length, where the tasks' defaults were left in place."""
    data_families(cfg.data)  # an unknown source fails here
    if cfg.data != "people":
        return cfg
    defaults = TrainConfig()
    weights, late = PEOPLE_WEIGHTS
    return replace(
        cfg,
        family_weights=weights if cfg.family_weights == defaults.family_weights else cfg.family_weights,
        late_family_weights=late if cfg.late_family_weights == defaults.late_family_weights else cfg.late_family_weights,
        gen_length=max(cfg.gen_length, people.GEN_LENGTH) if cfg.gen_length == defaults.gen_length else cfg.gen_length,
    )


def people_scores(model, batcher: Batcher, per_family: int) -> dict[str, dict[str, float]]:
    """Exact match on each people held-out set (the trainer's greedy decoding)."""
    return {name: evaluate(model, batcher, people.make_set(name, per_family * len(people.SET_FAMILIES[name])))
            for name in people.SETS}


def heldout_set(per_family: int, seed: int, flag: str) -> list[tasks.Example]:
    """`per_family` distinct held-out examples of each family, or an error naming the flag to lower
    (unit conversions have the fewest distinct held-out prompts: 100 each fit, 150 do not)."""
    if per_family < 1:
        raise ValueError(f"{flag} must be at least 1, got {per_family}")
    try:
        return tasks.make_examples("heldout", per_family * len(tasks.FAMILIES), seed)
    except ValueError as exc:
        raise ValueError(f"{flag} {per_family} asks for more held-out examples than the split has ({exc}); "
                         f"use a smaller {flag}") from None


class Start(NamedTuple):
    dims: dict  # the TrainConfig fields of the checkpoint's architecture
    tokenizer: Tokenizer
    rope_theta: float  # config keys a fresh model takes from ROPE_THETA / MAX_SEQUENCE_LENGTH
    max_sequence_length: int


START_DIMS = ("d_model", "n_layers", "n_heads", "mlp_hidden_size", "weight_tying")  # TrainConfig fields = config keys
ROPE_THETA, MAX_SEQUENCE_LENGTH = 10000.0, 512  # of a model trained from scratch


def read_start(folder: str, out: str) -> Start:
    """The architecture and tokenizer of a checkpoint this script wrote, to train further from."""
    path = Path(folder)
    if path.resolve() == Path(out).resolve():
        raise ValueError(f"--init-from {folder} is the output folder; write the next stage somewhere else")
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    except Exception as exc:  # OSError, bad JSON, and the tokenizers library's own Exception
        raise ValueError(f"--init-from {folder}: not a checkpoint of this script ({exc})") from None
    missing = [key for key in START_DIMS if key not in config]
    if config.get("model_type") != "llada" or missing:
        raise ValueError(f"--init-from {folder}: not a LLaDA checkpoint of this script (config.json lacks "
                         f"{', '.join(missing) or 'model_type llada'})")
    return Start({key: config[key] for key in START_DIMS}, tokenizer, float(config.get("rope_theta", ROPE_THETA)),
                 int(config.get("max_sequence_length", MAX_SEQUENCE_LENGTH)))


def train(cfg: TrainConfig) -> dict:
    precision = resolve_precision(cfg.precision)  # bad settings fail before the output folder exists
    cfg = resolve_data(cfg)
    parse_family_weights(cfg.family_weights, cfg.data)
    if cfg.late_family_weights:
        parse_family_weights(cfg.late_family_weights, cfg.data)
    for name in ("history_rate", "loose_rate", "trim_rate", "late_at"):
        if not 0 <= getattr(cfg, name) <= 1:
            raise ValueError(f"{name} is a probability in [0, 1], got {getattr(cfg, name)}")
    if not cfg.init_std > 0 or math.isinf(cfg.init_std):
        raise ValueError(f"init_std is a standard deviation > 0, got {cfg.init_std}")
    if not 0 <= cfg.ema_decay < 1:
        raise ValueError(f"ema_decay is the share of the average kept per step, in [0, 1) (0 = off), got {cfg.ema_decay}")
    if cfg.pack_width < 0:
        raise ValueError(f"pack_width is a row length in tokens (0 = no packing), got {cfg.pack_width}")
    # both evaluation sets are drawn now, so a size the held-out split cannot fill fails before the hour, not after
    quick = heldout_set(cfg.eval_per_family, cfg.seed, "--eval-per-family")
    final = heldout_set(cfg.final_eval_per_family, cfg.seed, "--final-eval-per-family")
    init = read_start(cfg.init_from, cfg.out) if cfg.init_from else None
    if init is not None:
        cfg = replace(cfg, **init.dims)
    out = prepare_out_dir(cfg)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    random.seed(cfg.seed)

    if init is not None:
        tokenizer = init.tokenizer
    else:
        stream = (people.iter_train(cfg.seed) if cfg.data == "people" else tasks.iter_examples("train", cfg.seed))
        corpus = [tasks.chat_prompt(ex.prompt, ex.history) + ex.answer + tasks.EOT
                  for ex in itertools.islice(stream, cfg.tokenizer_examples)]
        tokenizer = train_tokenizer(corpus, cfg.vocab_size)
    save_tokenizer(tokenizer, out)
    ids = special_ids(tokenizer)
    model = LladaModel(llada_config(
        vocab_size=tokenizer.get_vocab_size(), d_model=cfg.d_model, n_layers=cfg.n_layers, n_heads=cfg.n_heads,
        mlp_hidden_size=cfg.mlp_hidden_size,
        max_sequence_length=init.max_sequence_length if init else MAX_SEQUENCE_LENGTH,
        rope_theta=init.rope_theta if init else ROPE_THETA,
        mask_token_id=ids["mask"], eos_token_id=ids["eos"], weight_tying=cfg.weight_tying, init_std=cfg.init_std,
    ))
    model.hf_config["bos_token_id"] = ids["bos"]
    if init is not None:
        model.load_hf_state(read_safetensors(cfg.init_from))
    # the averaged copy is taken before compiling, so it runs (and evaluates) eagerly
    average = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.ema_decay)) if cfg.ema_decay > 0 else None
    saved = average.module if average is not None else model  # what checkpoints hold and evaluations score
    if cfg.compile:  # the instance attribute shadows the method; weights and save_pretrained are untouched
        model.hidden_states = torch.compile(model.hidden_states, dynamic=True)
    log(f"model: {parameter_count(model):,} parameters, vocab {tokenizer.get_vocab_size()}, "
        f"{precision} training, config {json.dumps(asdict(cfg))}")

    batcher = Batcher(tokenizer, cfg)
    # fused: one kernel for the whole update (1.4 ms a step here against 4.9 for the default foreach)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98), weight_decay=cfg.weight_decay,
                                  fused=True)
    gen = torch.Generator().manual_seed(cfg.seed)
    budget = cfg.minutes * 60.0
    start = last_eval = time.monotonic()
    step, running, late = 0, 0.0, False
    model.train()
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= budget or (cfg.max_steps is not None and step >= cfg.max_steps):
            break
        lr = learning_rate(cfg, step, elapsed / budget)
        if cfg.late_family_weights and not late and elapsed >= cfg.late_at * budget:
            batcher.reweigh(cfg.late_family_weights)
            late = True
            log(f"step {step}: family weights from now on {cfg.late_family_weights}")
        for group in optimizer.param_groups:
            group["lr"] = lr
        with autocast(precision):
            loss = diffusion_loss(model, batcher.next(cfg.batch_size), cfg.gen_length, ids["mask"], cfg.mask_eps, gen)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if average is not None:
            average.update_parameters(model)
        step += 1
        running += loss.item()
        if step % cfg.log_every == 0:
            log(f"step {step} loss {running / cfg.log_every:.4f} lr {lr:.2e} "
                f"{(time.monotonic() - start) / step:.2f}s/step")
            running = 0.0
        if time.monotonic() - last_eval >= cfg.eval_every_minutes * 60:
            saved.save_pretrained(out)
            log(f"step {step} checkpoint saved; held-out exact match {_fmt(evaluate(saved, batcher, quick))}")
            if cfg.data == "people":  # a few of each people set, to watch generalisation during the run
                sets = people_scores(saved, batcher, max(1, cfg.eval_per_family // 4))
                log(f"step {step} people sets: " + "; ".join(f"{name} {_fmt(acc)}" for name, acc in sets.items()))
            last_eval = time.monotonic()

    saved.save_pretrained(out)
    accuracy = evaluate(saved, batcher, final)
    loose = evaluate(saved, batcher, [replace(ex, prompt=tasks.loosen(ex.prompt)) for ex in final])
    summary = {"steps": step, "last_loss": loss.item() if step else None, "parameters": parameter_count(model),
               "heldout_exact_match": accuracy, "heldout_exact_match_loose": loose, "heldout_examples": len(final),
               "decoding": "low_confidence, steps = gen_length, temperature 0, cache none",
               "gen_length": cfg.gen_length, "precision": precision, "train_config": asdict(cfg)}
    if cfg.data == "people":
        summary["people_sets"] = sets = people_scores(saved, batcher, cfg.final_eval_per_family)
        log("people sets: " + "; ".join(f"{name} {_fmt(acc)}" for name, acc in sets.items()))
    if average is not None:  # the same examples with the weights the average was taken of
        summary["heldout_exact_match_raw_weights"] = raw = evaluate(model, batcher, final)
        log(f"raw (not averaged) weights: held-out exact match {_fmt(raw)}")
    write_text_atomic(out / "training_summary.json", json.dumps(summary, indent=2) + "\n")
    log(f"done: {step} steps, final held-out exact match {_fmt(accuracy)}; typed loosely {_fmt(loose)}")
    return summary


def _fmt(accuracy: dict[str, float]) -> str:
    return " ".join(f"{k}={100 * v:.1f}%" for k, v in accuracy.items())


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    parser = argparse.ArgumentParser(prog="python -m training.train", description=__doc__.split("\n")[0])
    defaults = TrainConfig()
    for f in fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.type == "bool" or isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true")
        elif f.name == "out":
            parser.add_argument(flag, required=True)
        elif isinstance(f.default, str):
            parser.add_argument(flag, default=f.default)
        else:
            kind = float if isinstance(f.default, float) else int  # max_steps: int or None
            parser.add_argument(flag, type=kind, default=getattr(defaults, f.name))
    return TrainConfig(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    try:
        train(cfg)
    except (FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
