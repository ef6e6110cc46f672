"""A complete engine adapter for specconform: a small pure-numpy speculative engine.

This is the worked example of docs/adapters.md. The "model" is a deterministic function
from a prefix to logits over a vocabulary of `vocab` tokens; the draft model is the
same logits plus prefix-dependent noise (so q differs from p, more at shallow depth).
Speculative decoding is the standard rule: draft K tokens from q, accept draft j iff
u * q(x_j) < p(x_j), draw the correction from max(p - q, 0) at the first rejection or
the bonus from p when all K were accepted. Every request draws from its own numpy
generator seeded by the request's seed, so a run is reproducible.

Protocol file:

    engine:
      adapter: examples.my_adapter:factory
      options: {vocab: 8, draft_noise: 1.0}
      num_speculative_tokens: 3
      temperature: 1.0
      max_tokens: 3

Set ``options.plant: wrong_residual`` to draw corrections from p instead of
max(p - q, 0): a real bug class (the committed law is then wrong) that the protocol
must FAIL.
"""

from __future__ import annotations

import zlib

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specconform.adapters.engine import SeedRecord, TokenEvent
from specconform.util.errors import UsageError


class Options(BaseModel):
    """engine.options of this adapter (unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    vocab: int = Field(8, ge=2, le=4096)
    draft_noise: float = Field(1.0, ge=0.0)
    plant: str | None = None  # "wrong_residual": the negative control


def factory(spec, *, mutant=None, log=print):
    """specconform calls this with the protocol's `engine` block (an EngineSpec)."""
    try:
        options = Options(**spec.options)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"])
        raise UsageError(f"engine.options.{field}: {err['msg']}") from None
    if options.plant not in (None, "wrong_residual"):
        raise UsageError(f"engine.options.plant: unknown bug {options.plant!r}")
    if spec.top_p != 1.0:
        raise UsageError("engine.top_p: this toy engine supports temperature and top_k only")
    return ToyEngine(
        options,
        temperature=spec.temperature,
        top_k=spec.top_k,
        K=spec.num_speculative_tokens,
        max_tokens=spec.max_tokens,
    )


def _prefix_rng(prefix, salt: int) -> np.random.Generator:
    key = zlib.crc32(np.asarray(list(prefix) + [salt], np.int64).tobytes())
    return np.random.Generator(np.random.PCG64(key))


class ToyEngine:
    def __init__(
        self, options: Options, *, temperature: float, top_k: int, K: int, max_tokens: int
    ):
        self.options = options
        self.vocab_size = options.vocab
        self.prompt = [1, 2, 3]
        self.T, self.top_k, self.K, self.max_tokens = temperature, top_k, K, max_tokens

    def describe(self) -> dict:
        return {
            "name": "toy-numpy-engine",
            "version": "1.0",
            "packages": {"numpy": np.__version__},
            "capabilities": {
                "draft_law": True,
                "round_telemetry": True,
                "token_events": True,
                "black_box": True,
            },
        }

    # -- the model -------------------------------------------------------------------
    def _law(self, logits: np.ndarray) -> np.ndarray:
        z = logits.astype(np.float64) / self.T
        if 0 < self.top_k < z.size:
            kth = np.sort(z)[-self.top_k]
            z = np.where(z >= kth, z, -np.inf)  # ties at the k-th value survive
        w = np.exp(z - z.max())
        return w / w.sum()

    def _logits(self, prefix) -> np.ndarray:
        return _prefix_rng(prefix, 0).normal(0.0, 1.5, self.vocab_size)

    def target_law(self, prefix) -> np.ndarray:  # [V] float64, the serial reference p
        return self._law(self._logits(prefix))

    def draft_law(self, prefix, depth: int) -> np.ndarray:  # [V] float64, q at depth
        noise = _prefix_rng(prefix, depth).normal(
            0.0, self.options.draft_noise / depth, self.vocab_size
        )
        return self._law(self._logits(prefix) + noise)

    # -- generation ------------------------------------------------------------------
    def run_group(self, group, seeds, progress=None) -> list[SeedRecord]:
        if group.mode == "async":
            raise UsageError(f"group {group.name}: this toy engine has no async mode")
        records = []
        for i, seed in enumerate(seeds):
            records.append(self._generate(seed, group.mode, group.draft_loops))
            if progress is not None:
                progress(i + 1, len(seeds))
        return records

    def _generate(self, seed: int, mode: str, depth: int | None) -> SeedRecord:
        rng = np.random.Generator(np.random.PCG64(seed))
        seq = list(self.prompt)
        # The first token is a plain target sample (the prefill), in every mode.
        seq.append(int(rng.choice(self.vocab_size, p=self.target_law(seq))))
        events, rounds = [TokenEvent(-1, -1, "target")], []
        while len(seq) - len(self.prompt) < self.max_tokens:
            if mode == "nospec":
                seq.append(int(rng.choice(self.vocab_size, p=self.target_law(seq))))
                events.append(TokenEvent(-1, -1, "target"))
                continue
            r = len(rounds)
            committed, accepted = self._round(rng, seq, depth)
            rounds.append((self.K, accepted))
            for j, tok in enumerate(committed):
                kind = (
                    "accepted"
                    if j < accepted
                    else ("bonus" if accepted == self.K else "correction")
                )
                events.append(TokenEvent(r, j, kind))
                seq.append(tok)
        n = self.max_tokens
        tokens = tuple(seq[len(self.prompt) : len(self.prompt) + n])
        first = int(rounds[0][1] >= 1) if rounds else -1
        return SeedRecord(seed, tokens, first, tuple(rounds), "length", tuple(events[:n]))

    def _round(self, rng, seq, depth) -> tuple[list[int], int]:
        """One round: K drafts from q, then verification; returns (committed, accepted)."""
        ctx, drafts, qs = list(seq), [], []
        for _ in range(self.K):
            q = self.draft_law(ctx, depth)
            x = int(rng.choice(self.vocab_size, p=q))
            drafts.append(x)
            qs.append(q)
            ctx.append(x)
        committed = []
        for j, x in enumerate(drafts):
            p = self.target_law(seq + committed)
            if rng.random() * qs[j][x] < p[x]:
                committed.append(x)
                continue
            residual = p if self.options.plant == "wrong_residual" else np.maximum(p - qs[j], 0)
            committed.append(int(rng.choice(self.vocab_size, p=residual / residual.sum())))
            return committed, j
        p = self.target_law(seq + committed)
        committed.append(int(rng.choice(self.vocab_size, p=p)))  # the bonus
        return committed, self.K

    def close(self) -> None:
        pass
