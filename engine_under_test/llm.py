"""The public engine API, in the spirit of vLLM's ``LLM``.

    llm = LLM(ModelConfig.preset("tiny", seed=0),
              speculative_config=SpeculativeConfig(num_speculative_tokens=3,
                                                   mode="block", draft_loops=2),
              async_scheduling=True, device="cpu", dtype=torch.float32)
    outs = llm.generate(prompts, SamplingParams(temperature=1.0, top_k=20, seed=7))

Modes: no ``speculative_config`` -> nospec; ``mode="block"`` -> sync block speculation,
or async with ``async_scheduling=True``; ``mode="pipeline"`` -> greedy only. Random
sampling (temperature > 0) is rejected with a ValueError by ``pipeline`` and by async
scheduling without speculation (unsupported combinations).

``generate`` batches its requests continuously (at most ``max_num_seqs`` at once) and
returns the outputs with a ``report`` (``GenerateReport``): the rounds run and every
failed round (contract 3) with the requests it finished with "error", their round and
what was invalid, so an engine error is never only a finish reason in a long list;
``add_request`` / ``abort_request`` / ``step`` expose the same engine loop, with request
ids reusable once a request has finished or been aborted.

``generate(..., trace=True)`` also returns, per decode round of each request, the drafts
and the p and q the accept kernel received (``RequestOutput.trace``, a list of
``RoundTrace``): white-box evidence to replay against the serial references below.

``target_probabilities`` and ``draft_probabilities`` are the serial references: one
fresh full forward of one prefix (no batch, no shared cache), then
``Sampler.probabilities`` -- never the batched path the engine decodes with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from .config import PRESET_NAMES, ModelConfig, SpeculativeConfig
from .model import LoopedLM, build_model
from .model.reference import batched_last_logits
from .model.serial_replay import SerialReplay
from .params import SamplingParams
from .runners.base import RunnerBase
from .runners.block_async import AsyncBlockRunner
from .runners.block_sync import SyncBlockRunner
from .runners.mutant_hooks import MutantHooks
from .runners.nospec import NospecRunner
from .runners.outputs import GenerateOutputs, GenerateReport, RequestOutput
from .runners.state import Request
from .sampling import Sampler


class LLM:
    def __init__(
        self,
        model_config: ModelConfig | str | None = None,
        speculative_config: SpeculativeConfig | None = None,
        async_scheduling: bool = False,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        mutant: str | None = None,
        max_num_seqs: int = 1024,
        max_model_len: int | None = None,
        use_cuda_graphs: bool = True,
        seed: int = 0,
        model: LoopedLM | None = None,
    ):
        """
        model_config: a ModelConfig, a preset name ("tiny", "small", "ouro-1.4b") or a
            checkpoint directory in Ouro's HF layout; default "tiny".
        mutant: a planted bug from ``engine_under_test.mutants`` (tests/protocols only).
        seed: seeds the host generator that picks seeds for random requests without one.
        model: an already built LoopedLM to share (its config wins).
        """
        if model_config is None:
            model_config = ModelConfig.preset("tiny")
        elif isinstance(model_config, str):
            model_config = (
                ModelConfig.preset(model_config)
                if model_config in PRESET_NAMES
                else ModelConfig.from_pretrained(Path(model_config))
            )
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = model if model is not None else build_model(model_config, self.device, dtype)
        self.model_config = self.model.cfg
        self.speculative_config = speculative_config
        self.async_scheduling = bool(async_scheduling)
        self.mutant = mutant
        self.hooks = MutantHooks(mutant, device=self.device)
        R = self.model.num_stages  # loops of a looped model, stages of a Llama one
        if speculative_config is not None and not 1 <= speculative_config.draft_loops < R:
            raise ValueError(
                f"draft_loops must be in [1, S={R}), got {speculative_config.draft_loops}"
            )
        limit = max_model_len or self.model_config.max_position_embeddings
        kw = dict(
            device=self.device, max_num_seqs=max_num_seqs, max_model_len=limit, hooks=self.hooks
        )
        spec = speculative_config
        if spec is None:
            self.runner: RunnerBase = NospecRunner(
                self.model, **kw, use_cuda_graphs=use_cuda_graphs
            )
        elif spec.mode == "block" and self.async_scheduling:
            self.runner = AsyncBlockRunner(
                self.model,
                **kw,
                num_speculative_tokens=spec.num_speculative_tokens,
                draft_loops=spec.draft_loops,
                use_cuda_graphs=use_cuda_graphs,
            )
        else:  # sync block, and pipeline (greedy only, checked per request)
            self.runner = SyncBlockRunner(
                self.model,
                **kw,
                num_speculative_tokens=spec.num_speculative_tokens,
                draft_loops=spec.draft_loops,
                use_cuda_graphs=use_cuda_graphs,
            )
        self._seed_rng = np.random.default_rng(seed)
        self._serial_replay = SerialReplay(self.model)
        self._requests: dict[object, Request] = {}
        self._next_id = 0

    # ------------------------------------------------------------------ modes
    @property
    def mode(self) -> str:
        spec = self.speculative_config
        if spec is None:
            return "nospec"
        if spec.mode == "pipeline":
            return "pipeline"
        return "async" if self.async_scheduling else "sync"

    def _check_supported(self, params: SamplingParams) -> None:
        if params.greedy:
            return
        spec = self.speculative_config
        if spec is not None and spec.mode == "pipeline":
            raise ValueError(
                "mode='pipeline' supports greedy decoding only (temperature=0); "
                "use mode='block' for random sampling"
            )
        if spec is None and self.async_scheduling:
            raise ValueError(
                "async_scheduling without speculation supports greedy decoding "
                "only (temperature=0); use a SpeculativeConfig with mode='block' "
                "or async_scheduling=False for random sampling"
            )

    # ------------------------------------------------------------------ requests
    def add_request(self, request_id, prompt: Sequence[int], params: SamplingParams) -> object:
        """Queue a request; ``request_id`` None picks a fresh one. Returns the id."""
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        self._check_supported(params)
        if request_id is None:
            while self._next_id in self._requests:
                self._next_id += 1
            request_id = self._next_id
            self._next_id += 1
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is still running")
        seed = None
        if not params.greedy:
            seed = (
                params.seed
                if params.seed is not None
                else int(self._seed_rng.integers(0, 2**63 - 1))
            )
        eos = self.model_config.eos_token_id
        stops = tuple(
            dict.fromkeys(([] if params.ignore_eos else [eos]) + list(params.stop_token_ids))
        )
        req = Request(request_id, [int(t) for t in prompt], params, seed, stops)
        self.runner.add(req)
        self._requests[request_id] = req
        return request_id

    def abort_request(self, request_id) -> None:
        req = self._requests.get(request_id)
        if req is not None and not req.finished:
            self.runner.abort(req)

    def has_unfinished_requests(self) -> bool:
        return any(not r.finished for r in self._requests.values())

    def step(self) -> list[RequestOutput]:
        """One engine iteration; returns the outputs of requests that finished (ids freed)."""
        if any(not r.finished for r in self._requests.values()):
            self.runner.step()
        if not self.has_unfinished_requests():
            self.runner.drain()
        done = [rid for rid, r in self._requests.items() if r.finished]
        return [self._requests.pop(rid).output for rid in done]

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        progress: Callable[[int, int], None] | None = None,
        trace: bool = False,
    ) -> GenerateOutputs:
        """Run every prompt to completion (continuous batching); outputs in input order.

        The result is a list of RequestOutput with ``.report``, a GenerateReport of this
        call: ``report.failed`` lists each failed prefill batch or decode round (which
        requests, their round, what was invalid); ``report.num_failed_rounds`` counts
        them. The engine keeps serving after a failed round.

        trace=True: each output also has ``.trace``, one ``RoundTrace`` per decode round
        (the drafts and the p and q the accept kernel received; [] under nospec). It
        changes no token and no draw; it costs a device copy of the traced laws per round
        and their transfer at collection. Off (the default), nothing is copied."""
        if params is None:
            params = SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} SamplingParams")
        for p in params:
            self._check_supported(p)
        ids = [self.add_request(None, list(pr), p) for pr, p in zip(prompts, params, strict=True)]
        if trace:  # before any round runs: add_request only queues
            for rid in ids:
                self._requests[rid].output.trace = []
        rounds0, failed0 = self.runner.rounds_run, len(self.runner.failures)
        wanted = set(ids)
        results: dict[object, RequestOutput] = {}
        total = len(ids)
        self.runner.law_trace = trace
        try:
            while len(results) < total:
                for out in self.step():
                    if out.request_id in wanted:
                        results[out.request_id] = out
                if progress is not None:
                    progress(len(results), total)
        finally:
            self.runner.law_trace = False
        report = GenerateReport(
            self.runner.rounds_run - rounds0, tuple(self.runner.failures[failed0:])
        )
        return GenerateOutputs([results[i] for i in ids], report)

    # ------------------------------------------------------------------ references
    def close(self) -> None:
        """Free the KV cache and captured CUDA Graphs now (the weights stay: they may be
        shared). Rounds still in flight for finished or aborted requests are collected
        first. The engine can still serve requests afterwards; it reallocates."""
        if self.has_unfinished_requests():
            raise RuntimeError(
                "close() with unfinished requests: abort them or run them to the end first"
            )
        self.runner.drain()
        self.runner.release()
        self._serial_replay.clear()

    def _serial_logits(self, prefix: Sequence[int], loops: int) -> torch.Tensor:
        """[V] float32: ``model.reference_logits(prefix, loops)[-1]``, bit for bit; the
        last prefix's forward is kept (model/serial_replay.py), so its p, q and
        unfiltered laws asked in a row cost one forward. Refuses an empty prefix."""
        return self._serial_replay.last_logits(prefix, loops)

    @torch.no_grad()
    def target_probabilities(self, prefix: Sequence[int], params: SamplingParams) -> torch.Tensor:
        """p(. | prefix): full-depth serial forward, then Sampler.probabilities. [V] f32."""
        return Sampler.probabilities(self._serial_logits(prefix, self.model.num_loops), params)

    @torch.no_grad()
    def draft_probabilities(
        self, prefix: Sequence[int], params: SamplingParams, draft_loops: int | None = None
    ) -> torch.Tensor:
        """q(. | prefix) at depth ``draft_loops`` (the configured d by default). [V] f32."""
        if draft_loops is None:
            if self.speculative_config is None:
                raise ValueError("draft_loops is required without a speculative_config")
            draft_loops = self.speculative_config.draft_loops
        if not 1 <= draft_loops <= self.model.num_loops:
            raise ValueError(f"draft_loops must be in [1, {self.model.num_loops}]")
        return Sampler.probabilities(self._serial_logits(prefix, draft_loops), params)

    @torch.no_grad()
    def reference_probabilities_batch(
        self, prefixes: Sequence[Sequence[int]], params: SamplingParams, loops: int | None = None
    ) -> torch.Tensor:
        """The laws of many prefixes at exit depth ``loops`` (full depth when None): the
        reference forward batched over equal-length prefixes (model/reference.py), then
        ``Sampler.probabilities_of_rows``. [N, V] f32; equal to ``target_probabilities``
        / ``draft_probabilities`` prefix by prefix within float rounding (not bitwise:
        tests/engine/test_reference_batched.py)."""
        depth = self.model.num_loops if loops is None else loops
        if not 1 <= depth <= self.model.num_loops:
            raise ValueError(f"loops must be in [1, {self.model.num_loops}]")
        logits = batched_last_logits(self.model, prefixes, depth)
        return Sampler.probabilities_of_rows(logits, params)

    @torch.no_grad()
    def teacher_forced_probabilities(
        self,
        prompt: Sequence[int],
        tokens: Sequence[int],
        params: SamplingParams,
        loops: int | None = None,
    ) -> torch.Tensor:
        """The laws of every prefix of one generation from ONE serial forward.

        Row t is the law of the token after prompt + tokens[:t] (t = 0..T-1): the model's
        reference forward of prompt + tokens[:-1] has logits at every position, causally
        masked, so row len(prompt) - 1 + t sees exactly that prefix; then
        the serial reference's steps on every row at once (``Sampler.probabilities_of_rows``,
        not the engine's batched path).
        ``loops``: exit depth (full depth when None, the draft law q at d < R).
        Returns [T, V] float32 (T = len(tokens)); tests/engine/test_teacher_forcing.py
        compares it with ``target_probabilities`` prefix by prefix."""
        if len(prompt) == 0:
            raise ValueError("prompt must hold at least one token")
        depth = self.model.num_loops if loops is None else loops
        if not 1 <= depth <= self.model.num_loops:
            raise ValueError(f"loops must be in [1, {self.model.num_loops}]")
        T = len(tokens)
        if T == 0:
            return torch.empty((0, self.model_config.vocab_size), dtype=torch.float32)
        seq = [int(t) for t in prompt] + [int(t) for t in tokens[:-1]]
        # the serial forward of seq, kept: the q of the same generation (the first d
        # stages of this forward) costs no second one (model/serial_replay.py)
        logits = self._serial_replay.logits(seq, depth)  # [len(seq), V] float32
        return Sampler.probabilities_of_rows(logits[len(prompt) - 1 :], params)
