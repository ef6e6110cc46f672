"""Kernel adapters: the bundled engine's `speculative_accept`, or a user's accept function.

A user's factory (``sampler.adapter: package.module:factory``) is called with
``device=`` and ``mutant=`` and returns an object with a ``name`` (str) and
``accept(p, q, drafts, draft_lens, uniforms) -> KernelOutput`` (numpy arrays; shapes in
`specconform.adapters`). `load_kernel` wraps it in `CheckedKernel`, which validates every
answer: a factory that raises, an object without ``name``/``accept``, torch tensors,
wrong shapes or dtypes, tokens outside [-1, V) or num_accepted outside [0, draft_len]
become one `AdapterError` line (exit 2) instead of a traceback.

`ensure_uses_uniforms` is the quadrature runner's guard against black-box samplers:
quadrature integrates the output over the uniforms it passes in, which means nothing for
a sampler that draws its own randomness (Monte Carlo only).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import numpy as np

from specconform.adapters.types import AdapterError, one_line
from specconform.adapters.watchdog import timed_call, timeout_message
from specconform.util.errors import UsageError


@dataclass(frozen=True)
class KernelOutput:
    tokens: np.ndarray  # [B, K+1] int64, committed tokens, -1 padded
    num_accepted: np.ndarray  # [B] int64
    error: np.ndarray  # [B] bool


class BundledKernel:
    """engine_under_test's sampling core, optionally with a planted kernel bug."""

    def __init__(self, device: str = "cpu", mutant: str | None = None):
        import torch

        from engine_under_test.sampling import speculative_accept

        if device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available on this machine")
        self._torch = torch
        self._accept = speculative_accept
        self.device = torch.device(device)
        self.mutant = mutant
        self.name = "engine_under_test.speculative_accept" + (f"[{mutant}]" if mutant else "")

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        t = self._torch
        dev = self.device
        out = self._accept(
            t.as_tensor(p, device=dev),
            t.as_tensor(q, device=dev),
            t.as_tensor(drafts, dtype=t.int64, device=dev),
            t.as_tensor(draft_lens, dtype=t.int64, device=dev),
            t.as_tensor(uniforms, dtype=t.float64, device=dev),
            mutant=self.mutant,
        )
        return KernelOutput(
            out.tokens.cpu().numpy(),
            out.num_accepted.cpu().numpy(),
            out.error.cpu().numpy().astype(bool),
        )

    def staged(self, p, q, drafts, uniforms):
        """Kernel-only timing (bench/peer_accept_timing.py --kernel-only): the inputs
        copied to the device once, every row at the full draft length K; returns a
        zero-argument call that launches the accept and leaves its result on the device
        (no host copy, no synchronisation). Shapes as accept()'s."""
        t, dev = self._torch, self.device
        args = (
            t.as_tensor(p, device=dev),
            t.as_tensor(q, device=dev),
            t.as_tensor(drafts, dtype=t.int64, device=dev),
            t.full((p.shape[0],), p.shape[1] - 1, dtype=t.int64, device=dev),
            t.as_tensor(uniforms, dtype=t.float64, device=dev),
        )
        return lambda: self._accept(*args, mutant=self.mutant)


class CheckedKernel:
    """A kernel whose every answer is validated (structure only, never the law)."""

    def __init__(self, kernel, adapter: str, timeout: float | None = None):
        name = getattr(kernel, "name", None)
        if not isinstance(name, str) or not name:
            raise AdapterError(
                f"sampler.adapter {adapter}: the factory's object has no `name` string"
            )
        if not callable(getattr(kernel, "accept", None)):
            raise AdapterError(
                f"sampler.adapter {adapter}: the factory's object has no accept() method"
            )
        self._k = kernel
        self.name = name
        self._adapter = adapter
        self._timeout = timeout  # s per accept() call (sampler.call_timeout_s); None: untimed

    def describe(self) -> dict:
        """What run.json records: the adapter, the kernel's name and its code's digest."""
        from specconform.adapters.engine import source_digest

        source, digest = source_digest(self._k)
        return {
            "adapter": self._adapter,
            "name": self.name,
            "source": source,
            "source_sha256": digest,
        }

    def _fail(self, what: str) -> AdapterError:
        return AdapterError(f"sampler.adapter {self._adapter}: accept() {what}")

    def accept(self, p, q, drafts, draft_lens, uniforms) -> KernelOutput:
        # p: [B, K+1, V] float32; q: [B, K, V] float32; drafts: [B, K] int64;
        # draft_lens: [B] int64; uniforms: [B, 2K+1] float64
        out = timed_call(
            self._k.accept,
            (p, q, drafts, draft_lens, uniforms),
            seconds=self._timeout,
            message=timeout_message(f"sampler.adapter {self._adapter}", "accept()", self._timeout),
            failed=lambda exc: self._fail(f"raised {one_line(exc)}"),
        )
        B, K1 = drafts.shape[0], drafts.shape[1] + 1
        fields = {}
        for field, shape, kinds in (
            ("tokens", (B, K1), "iu"),
            ("num_accepted", (B,), "iu"),
            ("error", (B,), "b"),
        ):
            a = getattr(out, field, None)
            if a is None:
                raise self._fail(
                    f"returned {type(out).__name__} without `{field}` (return a KernelOutput)"
                )
            if not isinstance(a, np.ndarray):
                hint = (
                    " (convert with .cpu().numpy())"
                    if type(a).__module__.startswith("torch")
                    else ""
                )
                raise self._fail(
                    f"returned {field} as {type(a).__name__}, expected a numpy array{hint}"
                )
            if a.shape != shape:
                raise self._fail(f"returned {field} of shape {a.shape}, expected {shape}")
            if a.dtype.kind not in kinds:
                raise self._fail(f"returned {field} of dtype {a.dtype}")
            fields[field] = a
        tokens, n_acc = fields["tokens"].astype(np.int64), fields["num_accepted"].astype(np.int64)
        vocab = p.shape[-1]
        if tokens.size and (tokens.min() < -1 or tokens.max() >= vocab):
            raise self._fail(f"returned a token outside [-1, {vocab})")
        if np.any(n_acc < 0) or np.any(n_acc > np.asarray(draft_lens)):
            raise self._fail("returned num_accepted outside [0, draft_len]")
        return KernelOutput(tokens, n_acc, fields["error"].astype(bool))


def kernel_mutants() -> dict[str, object]:
    from engine_under_test.mutants import list_mutants

    return {m.name: m for m in list_mutants() if m.layer == "kernel"}


def load_kernel(
    adapter: str, device: str, mutant: str | None, timeout: float | None = None
) -> CheckedKernel:
    """Resolve a protocol's `sampler.adapter`: "bundled" or "package.module:factory"
    (a factory called with device= and mutant= returning an object with `accept`).
    `timeout`: seconds the factory and each accept() call may take (adapters.watchdog)."""
    if adapter == "bundled":
        if mutant is not None and mutant not in kernel_mutants():
            from engine_under_test.mutants import MUTANTS

            if mutant in MUTANTS:
                raise UsageError(
                    f"--mutant {mutant}: an engine mutant; kernel protocols test "
                    f"only kernel mutants ({', '.join(sorted(kernel_mutants()))})"
                )
            raise UsageError(f"--mutant {mutant}: unknown mutant; `specconform mutants` lists them")
        return CheckedKernel(BundledKernel(device, mutant), adapter, timeout)
    module_name, _, attr = adapter.partition(":")
    if not attr:
        raise UsageError(f"sampler.adapter {adapter!r}: expected 'bundled' or 'module:factory'")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"sampler.adapter {adapter!r}: cannot import: {exc}") from None
    kernel = timed_call(  # a factory's exit is its failure too
        factory,
        (),
        kwargs={"device": device, "mutant": mutant},
        seconds=timeout,
        message=timeout_message(f"sampler.adapter {adapter}", "factory", timeout),
        failed=lambda exc: AdapterError(
            f"sampler.adapter {adapter}: factory raised {one_line(exc)}"
        ),
    )
    return CheckedKernel(kernel, adapter, timeout)


# Rows of the white-box probe: enough that a sampler drawing its own randomness gives a
# different answer somewhere with overwhelming probability whenever its output is random.
PROBE_ROWS = 256


def ensure_uses_uniforms(kernel, p_rows, q_rows, drafts, vocab: int) -> None:
    """Refuse a black-box sampler for quadrature.

    p_rows [1, 2, V] float32, q_rows [1, 1, V] float32, drafts [n] int64 (q's support).
    A white-box kernel's row i depends only on row i's inputs and uniforms, so the same
    rows run in reverse order must give the reversed output exactly. A sampler that
    draws fresh randomness differs between the two calls; one that reseeds itself on
    every call (and so ignores the uniforms) gives row i the draw of row B-1-i."""
    rng = np.random.Generator(np.random.PCG64(0))
    n = PROBE_ROWS
    x = np.asarray(drafts, np.int64)[np.arange(n) % len(drafts)]
    lens = np.ones(n, np.int64)
    u = rng.random((n, 3))
    p = np.ascontiguousarray(np.broadcast_to(p_rows, (n,) + p_rows.shape[1:]))
    q = np.ascontiguousarray(np.broadcast_to(q_rows, (n,) + q_rows.shape[1:]))
    first = kernel.accept(p, q, x[:, None], lens, u)
    rev = kernel.accept(p, q, x[::-1, None].copy(), lens, u[::-1].copy())
    if not (
        np.array_equal(first.tokens, rev.tokens[::-1])
        and np.array_equal(first.num_accepted, rev.num_accepted[::-1])
    ):
        raise AdapterError(
            f"kernel {kernel.name}: output does not follow the uniforms it is "
            "given (a black-box sampler); quadrature needs a white-box kernel, "
            "use a montecarlo protocol"
        )
