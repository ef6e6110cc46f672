"""The bundled engine (`engine_under_test.LLM`) behind the engine adapter interface.

White-box in the sense that matters for distribution protocols: it gives q at every
draft depth, per-round telemetry and per-token events (derived from the rounds: prefill
commits t1 as a target sample; each round commits its accepted drafts, then a correction
when a draft was rejected or a bonus when all were accepted).

For sequence protocols (specconform.adapters.sequence) it also runs requests with their
own parameters under continuous batching (`run_requests`, with the engine's per-round
laws when its ``generate`` takes ``trace=``), gives the teacher-forced laws of every
prefix of a generation (`sequence_laws`), the serial laws of one prefix under one
request's parameters and the raw logits the independent oracle reads.
"""

from __future__ import annotations

import functools
import gc
import inspect
import time

import numpy as np

from specconform.adapters.bundled_draws import draws as _draws
from specconform.adapters.bundled_draws import engine_streams as _engine_streams
from specconform.adapters.sequence import RequestSpec, RoundTrace, RoundUniforms, SequenceRecord
from specconform.adapters.types import SeedRecord, TokenEvent, _timing
from specconform.util.errors import UsageError


def factory(spec, *, mutant: str | None = None, log=print) -> BundledEngine:
    if spec.options:
        raise UsageError(
            f"engine.options: the bundled engine takes no options "
            f"(got {', '.join(sorted(spec.options))})"
        )
    if spec.preset is None and spec.checkpoint is None and spec.model is None:
        raise UsageError(
            "engine.preset: the bundled engine needs a preset, a packaged model or a checkpoint"
        )
    return BundledEngine(spec, mutant=mutant, log=log)


def _engine_traces(llm_class) -> bool:
    """Whether this engine_under_test's ``LLM.generate`` takes ``trace=`` (the per-round
    laws the engine used); an older engine has no traces: the trace check is then not
    applicable."""
    return "trace" in inspect.signature(llm_class.generate).parameters


@functools.lru_cache(maxsize=1 << 14)
def token_events(mode: str, n_tokens: int, rounds) -> tuple[TokenEvent, ...]:
    """Events of the committed tokens from the round telemetry, truncated at n_tokens.

    ``rounds``: a tuple of (drafted, accepted) pairs. Memoised: a distribution batch of
    5,000 requests has a handful of distinct round patterns, and building the events
    anew took 0.14 s a batch on the 2-core CPU (the events are frozen, so sharing them
    between records is safe)."""
    events = [TokenEvent(-1, -1, "target")]
    if mode == "nospec":
        events += [TokenEvent(-1, -1, "target")] * (n_tokens - 1)
    else:
        for r, (drafted, accepted) in enumerate(rounds):
            events += [TokenEvent(r, j, "accepted") for j in range(accepted)]
            events.append(TokenEvent(r, accepted, "bonus" if accepted == drafted else "correction"))
    return tuple(events[:n_tokens])


class BundledEngine:
    """engine_under_test behind the adapter interface; one LLM per group configuration."""

    def __init__(self, spec, *, mutant: str | None, log=print):
        t0 = time.perf_counter()
        import torch

        t1 = time.perf_counter()
        import engine_under_test as eut

        _timing(f"imports: torch {t1 - t0:.1f}s, engine_under_test {time.perf_counter() - t1:.1f}s")
        if spec.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available on this machine")
        if mutant is not None:
            from engine_under_test.mutants import MUTANTS

            if mutant not in MUTANTS:
                raise UsageError(
                    f"--mutant {mutant}: unknown mutant; `specconform mutants` lists them"
                )
        self._eut = eut
        self._torch = torch
        self.spec = spec
        self.mutant = mutant
        self.dtype = getattr(torch, spec.dtype)
        self._base_params = None  # params(): the spec's SamplingParams, built once
        # A packaged real model, a checkpoint directory (Ouro's HF layout) or a preset
        # with seeded weights.
        if spec.model is not None:  # a packaged real model: a missing package is bad input
            from engine_under_test.models_pkg import ModelPackageError

            try:
                self.model_config = eut.ModelConfig.packaged(
                    spec.model,
                    stage_layers=tuple(spec.stage_layers or ()) or None,
                    draft_head=spec.draft_head,
                )
            except (ModelPackageError, ValueError) as e:
                raise UsageError(str(e)) from None
        else:
            self.model_config = (
                spec.checkpoint
                if spec.checkpoint
                else eut.ModelConfig.preset(spec.preset, seed=spec.model_seed)
            )
        self.prompt = list(eut.DEFAULT_PROMPT if spec.prompt == "default" else spec.prompt)
        self._engines: dict[tuple, object] = {}
        self._model = None  # weights built once, shared by every group's engine
        self._reference = None
        self._log = log

    # -- engines ------------------------------------------------------------------------
    def _new_llm(self, mode: str, draft_loops: int | None, *, mutant, max_num_seqs: int):
        eut = self._eut
        spec_cfg = None
        if mode != "nospec":
            spec_cfg = eut.SpeculativeConfig(
                num_speculative_tokens=self.spec.num_speculative_tokens,
                mode="block",
                draft_loops=draft_loops,
            )
        llm = eut.LLM(
            self.model_config,
            speculative_config=spec_cfg,
            async_scheduling=(mode == "async"),
            device=self.spec.device,
            dtype=self.dtype,
            mutant=mutant,
            max_num_seqs=max_num_seqs,
            model=self._model,
        )
        self._model = llm.model
        return llm

    def _engine(self, mode: str, draft_loops: int | None, max_num_seqs: int | None = None):
        """The generation engine of one group configuration.

        Only one is alive at a time: at batch_size concurrent requests each engine's
        per-depth KV cache and captured graphs take tens of GiB (small preset, 5,000
        seeds: about 40 GiB), so five groups' engines side by side would not fit one
        GPU. Switching configuration frees the previous one (weights are shared and
        kept); the distribution runner works through one group at a time, so each
        engine is built once per group."""
        slots = self.spec.batch_size if max_num_seqs is None else max_num_seqs
        key = (mode, draft_loops, slots)
        if key not in self._engines:
            t0 = time.perf_counter()
            freed = bool(self._engines)
            self._free_engines()
            t1 = time.perf_counter()
            self._engines[key] = self._new_llm(
                mode, draft_loops, mutant=self.mutant, max_num_seqs=slots
            )
            _timing(
                f"engine {mode} d={draft_loops} built in {time.perf_counter() - t1:.1f}s"
                + (f" (the previous one freed in {t1 - t0:.2f}s)" if freed else "")
            )
        return self._engines[key]

    def _free_engines(self) -> None:
        for llm in self._engines.values():
            llm.close()
        self._engines.clear()
        if self.spec.device == "cuda":
            gc.collect()
            self._torch.cuda.empty_cache()

    def close(self) -> None:
        """Free every engine and the weights (GPU memory goes back to the allocator's
        pool and the pool to the device), so that runs in one process do not pile up."""
        t0 = time.perf_counter()
        self._free_engines()
        self._reference = None
        self._model = None
        if self.spec.device == "cuda":
            gc.collect()
            self._torch.cuda.empty_cache()
        _timing(f"engines and weights freed in {time.perf_counter() - t0:.2f}s")

    def params(self, seed: int | None):
        s = self.spec
        if self._base_params is None:  # validated once; each request differs in its seed
            self._base_params = self._eut.SamplingParams(
                temperature=s.temperature,
                top_k=s.top_k,
                top_p=s.top_p,
                seed=None,
                max_tokens=s.max_tokens,
                ignore_eos=True,
            )
        return self._base_params.with_seed(seed)

    @property
    def vocab_size(self) -> int:
        return int(self._reference_llm().model_config.vocab_size)

    def describe(self) -> dict:
        import torch

        from specconform import __version__ as specconform_version  # also uninstalled

        return {
            "name": "bundled",
            "version": specconform_version,
            "engine_package": "engine_under_test",  # the engine this adapter drives
            "packages": {"torch": torch.__version__},
            "capabilities": {
                "draft_law": True,
                "round_telemetry": True,
                "token_events": True,
                "black_box": False,
                # model/reference.py: one prefill per group of equal-length prefixes;
                # CheckedEngine compares it with the one-prefix path on every call.
                "batched_target_laws": True,
                "batched_draft_laws": True,
                "sequence": True,
                "sequence_laws": True,
                "trace": _engine_traces(self._eut.LLM),
                "logits": True,
            },
        }

    def run_group(self, group, seeds: list[int], progress=None) -> list[SeedRecord]:
        llm = self._engine(group.mode, group.draft_loops)
        t0 = time.perf_counter()
        outs = llm.generate(
            [self.prompt] * len(seeds), [self.params(s) for s in seeds], progress=progress
        )
        t1 = time.perf_counter()
        records = []
        for seed, out in zip(seeds, outs, strict=False):
            rounds = tuple((int(r.drafted), int(r.accepted)) for r in out.rounds)
            # The first speculative round follows t1 (prefill commits t1); its draft
            # position 0 was accepted iff that round accepted at least one draft.
            first = -1
            if group.mode != "nospec" and rounds and rounds[0][0] > 0:
                first = int(rounds[0][1] >= 1)
            tokens = tuple(int(t) for t in out.token_ids)
            records.append(
                SeedRecord(
                    int(seed),
                    tokens,
                    first,
                    rounds,
                    str(out.finish_reason),
                    token_events(group.mode, len(tokens), rounds),
                )
            )
        _timing(
            f"group {group.name}: {len(seeds)} seeds in {t1 - t0:.1f}s "
            f"(records {time.perf_counter() - t1:.2f}s)"
        )
        return records

    # -- serial reference ----------------------------------------------------------------
    def _reference_llm(self):
        """A one-slot nospec engine for serial replays (``LLM.target_probabilities`` and
        ``draft_probabilities`` run the model's reference forward, not the runner), built
        without the mutant: the reference is the clean law whatever is under test."""
        if self._reference is None:
            t0 = time.perf_counter()
            self._reference = self._new_llm("nospec", None, mutant=None, max_num_seqs=1)
            # The first engine builds (or loads) the weights every later engine shares.
            _timing(f"model and reference engine built in {time.perf_counter() - t0:.1f}s")
        return self._reference

    def target_law(self, prefix: list[int]) -> np.ndarray:
        p = self._reference_llm().target_probabilities(list(prefix), self.params(None))
        return p.detach().float().cpu().numpy()

    def draft_law(self, prefix: list[int], draft_loops: int) -> np.ndarray:
        q = self._reference_llm().draft_probabilities(list(prefix), self.params(None), draft_loops)
        return q.detach().float().cpu().numpy()

    def target_laws(self, prefixes: list[list[int]]) -> list[np.ndarray]:
        """p for many prefixes: the reference forward batched over equal-length prefixes
        (``LLM.reference_probabilities_batch``); CheckedEngine compares it with
        ``target_law`` before the run trusts it."""
        return self._batched_laws(prefixes, None)

    def draft_laws(self, prefixes: list[list[int]], draft_loops: int) -> list[np.ndarray]:
        """q at ``draft_loops`` for many prefixes (batched as ``target_laws``)."""
        return self._batched_laws(prefixes, draft_loops)

    def _batched_laws(self, prefixes, loops) -> list[np.ndarray]:
        if not prefixes:
            return []
        laws = self._reference_llm().reference_probabilities_batch(
            [list(p) for p in prefixes], self.params(None), loops
        )
        return list(laws.detach().float().cpu().numpy())

    # -- sequence protocols (specconform.adapters.sequence) ------------------------------
    def request_params(self, request: RequestSpec):
        """The engine's SamplingParams of one sequence request."""
        # Field by field on purpose: the engine's SamplingParams is not ours to copy into.
        return self._eut.SamplingParams(
            temperature=request.temperature,
            top_k=request.top_k,
            top_p=request.top_p,
            seed=request.seed,
            max_tokens=request.max_tokens,
            stop_token_ids=tuple(request.stop_token_ids),
            ignore_eos=request.ignore_eos,
        )

    def run_requests(
        self, group, requests, max_num_seqs, trace: bool = False, progress=None
    ) -> list[SequenceRecord]:
        """One ``LLM.generate`` call over every request, at most ``max_num_seqs`` running
        at once (continuous batching: later requests are admitted as earlier ones finish)."""
        slots = len(requests) if max_num_seqs is None else int(max_num_seqs)
        llm = self._engine(group.mode, group.draft_loops, max_num_seqs=slots)
        params = [self.request_params(r) for r in requests]
        kwargs = {"progress": progress}
        traced = trace and _engine_traces(self._eut.LLM)
        streams = traced and _engine_streams(self._eut)  # traces carry their draws
        if traced:
            kwargs["trace"] = True
        t0 = time.perf_counter()
        outs = llm.generate([list(r.prompt) for r in requests], params, **kwargs)
        _timing(
            f"group {group.name}: {len(requests)} requests ({slots} slots"
            f"{', traced' if traced else ''}) in {time.perf_counter() - t0:.1f}s"
        )
        records = []
        for out in outs:
            rounds = tuple((int(r.drafted), int(r.accepted)) for r in out.rounds)
            tokens = tuple(int(t) for t in out.token_ids)
            raw = getattr(out, "trace", None) if traced else None
            traces = None
            if raw is not None:
                traces = tuple(
                    RoundTrace(
                        int(t.round),
                        int(t.prefix_len),
                        tuple(int(x) for x in t.drafts),
                        np.asarray(t.p, dtype=np.float32),
                        np.asarray(t.q, dtype=np.float32),
                        _draws(self._eut, t) if streams else None,
                    )
                    for t in raw
                )
            records.append(
                SequenceRecord(
                    tokens,
                    str(out.finish_reason),
                    token_events(group.mode, len(tokens), rounds) if tokens else (),
                    rounds,
                    traces,
                )
            )
        return records

    def sequence_laws(self, request: RequestSpec, tokens, draft_depth: int | None):
        """Teacher forcing (`LLM.teacher_forced_probabilities`): one serial forward of
        prompt + tokens[:-1] gives p_t for every prefix prompt + tokens[:t], and one at
        the draft depth q_t; tests/engine/test_teacher_forcing.py proves them equal to
        the incremental replay (same support; max |dp| in docs/sequence-runner.md)."""
        llm = self._reference_llm()
        params = self.request_params(request)
        p = llm.teacher_forced_probabilities(request.prompt, list(tokens), params)
        q = None
        if draft_depth is not None:
            q = llm.teacher_forced_probabilities(request.prompt, list(tokens), params, draft_depth)
            q = q.float().cpu().numpy()
        return p.float().cpu().numpy(), q

    def target_law_for(self, prefix, request: RequestSpec) -> np.ndarray:
        p = self._reference_llm().target_probabilities(list(prefix), self.request_params(request))
        return p.detach().float().cpu().numpy()

    def draft_law_for(self, prefix, request: RequestSpec, draft_depth: int) -> np.ndarray:
        q = self._reference_llm().draft_probabilities(
            list(prefix), self.request_params(request), draft_depth
        )
        return q.detach().float().cpu().numpy()

    def round_uniforms(self, request: RequestSpec, round: int, step: int) -> RoundUniforms | None:
        """The engine's own uniforms for one decision point of a random request (None for
        a greedy one), recomputed from its Philox streams (engine_under_test.sampling.rng,
        runners/spec_round.py): prefill draws the accept block of counter 0 (t1 at index
        0), so round r of the events uses counter r + 1 -- coins u[0:K], corrections
        u[K:2K], bonus u[2K] -- and its drafts the draft domain at r + 1 +
        DRAFT_ROUND_OFFSET; a nospec step t draws counter t, index 0. A planted RNG
        mutant draws others: its near-ties are then misjudged toward FAIL, never toward
        excuse (a wrong uniform rarely lies within the error of a boundary)."""
        if request.seed is None or request.greedy:
            return None
        torch = self._torch
        from engine_under_test.runners.spec_round import DRAFT_ROUND_OFFSET
        from engine_under_test.sampling import philox_uniforms

        seeds = torch.tensor([int(request.seed)], dtype=torch.int64)

        def draw(counter: int, n: int) -> list[float]:
            rounds = torch.tensor([counter], dtype=torch.int64)
            return [float(x) for x in philox_uniforms(seeds, rounds, n)[0]]

        if round < 0:
            return RoundUniforms(target=draw(step, 1)[0])
        K = int(self.spec.num_speculative_tokens)
        block = draw(round + 1, 2 * K + 1)
        return RoundUniforms(
            draft=tuple(draw(round + 1 + DRAFT_ROUND_OFFSET, K)),
            coin=tuple(block[:K]),
            correction=tuple(block[K : 2 * K]),
            bonus=block[2 * K],
        )

    def target_logits(self, prefix) -> np.ndarray:
        """Raw full-depth logits [V] float32 at the last position of prefix (the logits
        `target_law_for` applies the sampling semantics to)."""
        model = self._reference_llm().model
        with self._torch.no_grad():
            logits = model.reference_logits(list(prefix), loops=model.num_loops)
        return logits[-1].float().cpu().numpy()
