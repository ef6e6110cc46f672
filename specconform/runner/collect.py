"""Which runner collects a protocol's raw data: one entry per kind.

Each runner module exposes ``collect(...) -> dict[str, bytes]`` (raw files by path);
runners are imported on use, so a kind's heavy dependencies (torch, transformers) load
only when a protocol of that kind runs. Adding a kind adds one line to ``_ENGINE_KINDS``
or ``_SOURCE_KINDS`` (or its own branch, as the kernel kinds have).
"""

from __future__ import annotations

import importlib

from specconform.errors import UsageError
from specconform.protocol.load import LoadedProtocol
from specconform.runner.context import RunContext

# Kinds that drive an engine adapter (planted bugs allowed: ``--mutant``).
_ENGINE_KINDS = ("distribution", "sequence", "mcnemar")
# Kinds that compare source trees or configurations (no planted bug).
_SOURCE_KINDS = ("equality", "performance")


def collect_raw(
    loaded: LoadedProtocol, *, mutant: str | None, progress, log, run_context: RunContext
) -> dict[str, bytes]:
    kind = loaded.kind
    model = loaded.model
    if kind in ("quadrature", "montecarlo"):
        from specconform.adapters.kernel import load_kernel

        kernel = load_kernel(model.sampler.adapter, model.device, mutant)
        log(f"kernel: {kernel.name} on {model.device}")
        run_context.outputs.add_run_fields(sampler_adapter=kernel.describe())
        return _runner(kind).collect(model, kernel, progress)
    if kind in _ENGINE_KINDS:
        return _runner(kind).collect(
            loaded, mutant=mutant, progress=progress, log=log, context=run_context
        )
    if kind in _SOURCE_KINDS:
        if mutant is not None:
            article = "an" if kind[0] in "aeiou" else "a"
            raise UsageError(
                f"--mutant {mutant}: {article} {kind} protocol compares source trees "
                "(--base-ref) or configurations; it plants no bug"
            )
        return _runner(kind).collect(loaded, progress=progress, log=log, context=run_context)
    raise UsageError(f"{loaded.path}: protocol kind {kind!r} has no runner")


def _runner(kind: str):
    return importlib.import_module(f"specconform.runner.{kind}")
