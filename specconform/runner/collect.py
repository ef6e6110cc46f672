"""Which collector gathers a protocol's raw data: the kind table's ``collect``.

Each collector ``collect(...) -> dict[str, bytes]`` (raw files by path) is named in the
table (:mod:`specconform.kinds.registry`) and imported on use, so a kind's heavy
dependencies (torch, transformers) load only when a protocol of that kind runs. Its
signature follows what the kind drives (``Capabilities.drives``).
"""

from __future__ import annotations

from specconform.kinds.registry import kind_of
from specconform.protocol.load import LoadedProtocol
from specconform.runner.context import RunContext
from specconform.util.errors import UsageError


def collect_raw(
    loaded: LoadedProtocol, *, mutant: str | None, progress, log, run_context: RunContext
) -> dict[str, bytes]:
    kind = kind_of(loaded.kind)
    model = loaded.model
    collect = kind.collect.load()
    drives = kind.capabilities.drives
    if drives == "sampler":
        from specconform.adapters.kernel import load_kernel

        sampler = model.sampler
        kernel = load_kernel(sampler.adapter, model.device, mutant, sampler.call_timeout_s)
        log(f"kernel: {kernel.name} on {model.device}")
        run_context.outputs.add_run_fields(sampler_adapter=kernel.describe())
        return collect(model, kernel, progress)
    if drives == "engine":
        return collect(loaded, mutant=mutant, progress=progress, log=log, context=run_context)
    if mutant is not None:  # "source": compares trees or configurations
        article = "an" if kind.name[0] in "aeiou" else "a"
        raise UsageError(
            f"--mutant {mutant}: {article} {kind.name} protocol compares source trees "
            "(--base-ref) or configurations; it plants no bug"
        )
    return collect(loaded, progress=progress, log=log, context=run_context)
