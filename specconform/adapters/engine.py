"""Engine adapters for distribution protocols.

An engine adapter does three things (DESIGN.md, "Dependency rules"):

- ``run_group(group, seeds, progress)``: generate from the protocol's prompt for every
  seed under one configuration, returning each seed's committed tokens and per-round
  acceptance telemetry (`SeedRecord`);
- ``target_law(prefix)``: the serial reference law p for a prefix, full depth, through
  `Sampler.probabilities` one prefix at a time (never the batched or speculative path);
- ``draft_law(prefix, draft_loops)``: the draft law q at depth d, replayed the same way.

`BundledEngine` adapts `engine_under_test.LLM`; a user's engine plugs in with the same
three methods.
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import numpy as np

from specconform.errors import UsageError


def _timing(line: str) -> None:
    """Wall times go to stderr, next to the progress bars, and never into the archive's
    log.txt: two runs with the same inputs must give byte-identical evidence."""
    from specconform.progress import timing

    timing(line)


@dataclass(frozen=True)
class SeedRecord:
    seed: int
    tokens: tuple[int, ...]            # committed tokens t1, t2, t3, ...
    first_accepted: int                # 1/0: draft position 0 of the round after t1; -1: none
    rounds: tuple[tuple[int, int], ...]  # per speculative round: (drafted, accepted)
    finish_reason: str


class BundledEngine:
    """engine_under_test behind the adapter interface; one LLM per group configuration."""

    def __init__(self, spec, *, mutant: str | None, log=print):
        import torch

        import engine_under_test as eut

        if spec.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available on this machine")
        if mutant is not None:
            from engine_under_test.mutants import MUTANTS

            if mutant not in MUTANTS:
                raise UsageError(f"--mutant {mutant}: unknown mutant; `specconform mutants` "
                                 "lists them")
        self._eut = eut
        self._torch = torch
        self.spec = spec
        self.mutant = mutant
        self.dtype = getattr(torch, spec.dtype)
        # A checkpoint directory (Ouro's HF layout) or a preset with seeded weights.
        if spec.model is not None:   # a packaged real model: a missing package is bad input
            from engine_under_test.models_pkg import ModelPackageError
            try:
                self.model_config = eut.ModelConfig.packaged(
                    spec.model, stage_layers=tuple(spec.stage_layers or ()) or None,
                    draft_head=spec.draft_head)
            except (ModelPackageError, ValueError) as e:
                raise UsageError(str(e)) from None
        else:
            self.model_config = (spec.checkpoint if spec.checkpoint else
                                 eut.ModelConfig.preset(spec.preset, seed=spec.model_seed))
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
                num_speculative_tokens=self.spec.num_speculative_tokens, mode="block",
                draft_loops=draft_loops)
        llm = eut.LLM(self.model_config, speculative_config=spec_cfg,
                      async_scheduling=(mode == "async"), device=self.spec.device,
                      dtype=self.dtype, mutant=mutant, max_num_seqs=max_num_seqs,
                      model=self._model)
        self._model = llm.model
        return llm

    def _engine(self, mode: str, draft_loops: int | None):
        """The generation engine of one group configuration.

        Only one is alive at a time: at batch_size concurrent requests each engine's
        per-depth KV cache and captured graphs take tens of GiB (small preset, 5,000
        seeds: about 40 GiB), so five groups' engines side by side would not fit one
        GPU. Switching configuration frees the previous one (weights are shared and
        kept); the distribution runner works through one group at a time, so each
        engine is built once per group."""
        key = (mode, draft_loops)
        if key not in self._engines:
            self._free_engines()
            t0 = time.perf_counter()
            self._engines[key] = self._new_llm(mode, draft_loops, mutant=self.mutant,
                                               max_num_seqs=self.spec.batch_size)
            _timing(f"engine {mode} d={draft_loops} built in {time.perf_counter() - t0:.1f}s")
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
        self._free_engines()
        self._reference = None
        self._model = None
        if self.spec.device == "cuda":
            gc.collect()
            self._torch.cuda.empty_cache()

    def params(self, seed: int | None):
        s = self.spec
        return self._eut.SamplingParams(temperature=s.temperature, top_k=s.top_k,
                                        top_p=s.top_p, seed=seed, max_tokens=s.max_tokens,
                                        ignore_eos=True)

    @property
    def vocab_size(self) -> int:
        return int(self._reference_llm().model_config.vocab_size)

    def run_group(self, group, seeds: list[int], progress=None) -> list[SeedRecord]:
        llm = self._engine(group.mode, group.draft_loops)
        t0 = time.perf_counter()
        outs = llm.generate([self.prompt] * len(seeds), [self.params(s) for s in seeds],
                            progress=progress)
        _timing(f"group {group.name}: {len(seeds)} seeds in {time.perf_counter() - t0:.1f}s")
        records = []
        for seed, out in zip(seeds, outs, strict=False):
            rounds = tuple((int(r.drafted), int(r.accepted)) for r in out.rounds)
            # The first speculative round follows t1 (prefill commits t1); its draft
            # position 0 was accepted iff that round accepted at least one draft.
            first = -1
            if group.mode != "nospec" and rounds and rounds[0][0] > 0:
                first = int(rounds[0][1] >= 1)
            records.append(SeedRecord(int(seed), tuple(int(t) for t in out.token_ids), first,
                                      rounds, str(out.finish_reason)))
        return records

    # -- serial reference ----------------------------------------------------------------
    def _reference_llm(self):
        """A one-slot nospec engine for serial replays (``LLM.target_probabilities`` and
        ``draft_probabilities`` run the model's reference forward, not the runner), built
        without the mutant: the reference is the clean law whatever is under test."""
        if self._reference is None:
            self._reference = self._new_llm("nospec", None, mutant=None, max_num_seqs=1)
        return self._reference

    def target_law(self, prefix: list[int]) -> np.ndarray:
        p = self._reference_llm().target_probabilities(list(prefix), self.params(None))
        return p.detach().float().cpu().numpy()

    def draft_law(self, prefix: list[int], draft_loops: int) -> np.ndarray:
        q = self._reference_llm().draft_probabilities(list(prefix), self.params(None),
                                                      draft_loops)
        return q.detach().float().cpu().numpy()
