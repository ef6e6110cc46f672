"""Validate before work: everything that can be checked before generating is checked
first, so that bad input exits 2 with one line and leaves nothing behind (no OUT folder,
no `.inprogress`, no ledger entry, no lock file).

`preflight(...)` checks, in order:

1. names: the mutant name (a safe file-name fragment; for the bundled engine or kernel a
   registered mutant of a layer that reaches the protocol) and a kernel protocol's
   `sampler.adapter` ("bundled" or "package.module:factory");
2. seeds: every group's range `offset + seed_offset + [0, count)` inside the engine's
   seed domain [0, 2**63) (seeds live in an int64 device tensor and key Philox);
3. the model, read without building weights: a preset's shape from
   `engine_under_test.config`, or a checkpoint's `config.json` and safetensors headers
   (`safe_open` reads the header and checks the file covers it; no tensor is loaded);
   every group's draft depth d < R; the prompt non-empty, its ids < the vocabulary, and
   prompt + max_tokens within the model's positions;
4. folders: `--out` and the ledger's folder are (or can be created as) writable
   directories, shown by creating and deleting a probe file in the nearest existing
   folder, with at least `min_free_bytes()` free;
5. the signing key loads now (not at sealing, minutes later);
6. the run folder: an `OUT/<run-id>.inprogress` of the same inputs is refused as live
   (its run lock is held: pid and host named) or as resumable (`--resume` it);
7. the ledger (distribution and sequence runs) is readable and the new ranges overlap no
   earlier clean run (checked again atomically at reservation).

The run lock that tells a live run from an interrupted one is in `runner.runlock`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specconform.kinds.registry import kind_of, kinds_with
from specconform.runner.context import RunContext
from specconform.runner.runlock import lock_holder
from specconform.util.errors import UsageError

SEED_LIMIT = 2**63  # engine_under_test.params.SEED_LIMIT: seeds are int64 Philox keys
MIN_FREE_ENV = "SPECCONFORM_MIN_FREE_MB"
DEFAULT_MIN_FREE_MB = 64  # archives and checkpoint batches of CPU runs: a few MiB
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
_FACTORY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ModelFacts:
    """What the checks need from a model, read without building it."""

    source: str  # "preset tiny" or the checkpoint directory
    vocab_size: int
    depth: int  # R: stages (loops) of the full-depth forward
    max_positions: int


def engine_module(name: str):
    """`engine_under_test.<name>` for the torch-free modules `config` and `mutants`.

    Importing them normally runs the package's __init__, which imports torch (seconds):
    refusals must come before that cost. So, unless the package is already imported,
    the file is loaded on its own (both modules import only the standard library)."""
    full = f"engine_under_test.{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.find_spec("engine_under_test")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the bundled engine is not installed: pip install 'specconform[engine]'")
    path = Path(next(iter(spec.submodule_search_locations))) / f"{name}.py"
    private = f"_specconform_preflight_{name}"
    if private not in sys.modules:
        loader = importlib.util.spec_from_file_location(private, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[private] = module  # dataclasses look their module up by name
        try:
            loader.loader.exec_module(module)
        except ImportError:  # the module grew a package-relative import: the slow way
            del sys.modules[private]
            return importlib.import_module(full)
    return sys.modules[private]


def min_free_bytes() -> int:
    raw = os.environ.get(MIN_FREE_ENV, str(DEFAULT_MIN_FREE_MB))
    try:
        return int(raw) << 20
    except ValueError:
        raise UsageError(f"${MIN_FREE_ENV}: {raw!r} is not a whole number of MiB") from None


# --- 1. names -------------------------------------------------------------------------


def check_mutant(loaded, mutant: str | None) -> None:
    if mutant is None:
        return
    if not _NAME.match(mutant):
        raise UsageError(
            f"--mutant {mutant!r}: a name of letters, digits, '_', '.', '-' "
            "(at most 64, starting with a letter or digit)"
        )
    adapter = _kernel_adapter(loaded)
    if adapter is not None and adapter != "bundled":
        return  # a user's kernel factory defines its own mutants
    MUTANTS = engine_module("mutants").MUTANTS  # noqa: N806 (the engine's name)

    found = MUTANTS.get(mutant)
    if found is None:
        raise UsageError(f"--mutant {mutant}: unknown mutant; `specconform mutants` lists them")
    if found.layer not in ("kernel", "engine"):  # planted in a kind's own sampler (tree)
        owners = kinds_with(lambda c: found.layer in c.mutant_layers)
        if loaded.kind not in owners:
            raise UsageError(
                f"--mutant {mutant}: a {found.layer} mutant; it applies to "
                f"{', '.join(owners)} protocols only"
            )
    if adapter is not None and found.layer != "kernel":
        kernel = sorted(n for n, m in MUTANTS.items() if m.layer == "kernel")
        raise UsageError(
            f"--mutant {mutant}: an engine mutant; kernel protocols test only "
            f"kernel mutants ({', '.join(kernel)})"
        )
    # Kernel mutants on a distribution protocol are allowed: the engine's rounds call the
    # same sampling core, so the bug reaches the committed tokens (docs/kill-matrix-*).


def check_adapter(loaded) -> None:
    adapter = _kernel_adapter(loaded)
    if adapter is not None and adapter != "bundled" and not _FACTORY.match(adapter):
        raise UsageError(
            f"sampler.adapter {adapter!r}: expected 'bundled' or 'package.module:factory'"
        )


def _kernel_adapter(loaded) -> str | None:
    sampler = getattr(loaded.model, "sampler", None)
    return None if sampler is None else sampler.adapter


# --- 2. seeds -------------------------------------------------------------------------


def check_seed_domain(loaded) -> None:
    model = loaded.model
    if not kind_of(loaded.kind).capabilities.preflight_model:
        return
    highest = SEED_LIMIT - model.seeds.count - max(g.seed_offset for g in model.groups)
    for group in model.groups:
        start = model.seeds.offset + group.seed_offset
        stop = start + model.seeds.count
        if stop > SEED_LIMIT:
            limit = f"at most {highest}" if highest >= 0 else "no offset fits these groups"
            raise UsageError(
                f"seeds [{start}, {stop}) of group {group.name!r} leave the "
                f"engine's seed domain [0, 2**63): lower --offset ({limit})"
            )


# --- 3. model -------------------------------------------------------------------------


def _bundled_preset_or_checkpoint(engine) -> bool:
    """Whether the model's facts can be read here without building it: the bundled
    engine on a preset or a checkpoint. Other adapters validate their groups themselves
    (`EngineAdapter.check_groups`), and a packaged model checks its package when the
    engine is built; both before any file is written."""
    return (
        getattr(engine, "adapter", "bundled") == "bundled"
        and getattr(engine, "model", None) is None
    )


def model_facts(engine) -> ModelFacts:
    """The preset's or checkpoint's shape; UsageError if a checkpoint is unreadable."""
    if engine.checkpoint:
        return checkpoint_facts(Path(engine.checkpoint))
    cfg = engine_module("config").ModelConfig.preset(engine.preset, seed=engine.model_seed)
    return ModelFacts(
        f"preset {engine.preset}", cfg.vocab_size, cfg.total_ut_steps, cfg.max_position_embeddings
    )


def checkpoint_facts(path: Path) -> ModelFacts:
    """config.json parsed the engine's way, every safetensors header readable and the
    embedding's shape consistent with the config; no tensor is loaded."""
    ModelConfig = engine_module("config").ModelConfig  # noqa: N806

    where = f"checkpoint {path}"
    if not path.is_dir():
        raise UsageError(f"{where}: not a directory")
    try:
        cfg = ModelConfig.from_pretrained(path)
    except FileNotFoundError:
        raise UsageError(f"{where}: config.json is missing") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{where}: config.json is not a valid model config ({type(exc).__name__}: {exc})"
        ) from None
    shapes = _safetensors_shapes(path, where)
    embed = shapes.get("model.embed_tokens.weight")
    if embed is None:
        raise UsageError(f"{where}: no model.embed_tokens.weight in its safetensors")
    if list(embed) != [cfg.vocab_size, cfg.hidden_size]:
        raise UsageError(
            f"{where}: model.embed_tokens.weight is {list(embed)}, config.json "
            f"says [{cfg.vocab_size}, {cfg.hidden_size}]"
        )
    return ModelFacts(str(path), cfg.vocab_size, cfg.total_ut_steps, cfg.max_position_embeddings)


def _safetensors_shapes(path: Path, where: str) -> dict[str, list[int]]:
    from safetensors import SafetensorError, safe_open

    index = path / "model.safetensors.index.json"
    try:
        if index.exists():
            files = sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()})
        else:
            files = sorted(path.glob("*.safetensors"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{where}: unreadable {index.name} ({exc})") from None
    if not files:
        raise UsageError(f"{where}: no safetensors file")
    shapes: dict[str, list[int]] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="numpy") as f:
                for key in f.keys():
                    shapes[key] = list(f.get_slice(key).get_shape())
        except (OSError, SafetensorError) as exc:
            raise UsageError(
                f"{where}: {file.name} is not a readable safetensors file "
                f"({' '.join(str(exc).split())})"
            ) from None
    return shapes


def check_model(loaded, facts: ModelFacts) -> None:
    engine = loaded.model.engine
    for group in loaded.model.groups:
        d = group.draft_loops
        if d is not None and not d < facts.depth:
            raise UsageError(
                f"group {group.name!r}: draft_loops {d} must be below the "
                f"model's depth R = {facts.depth} ({facts.source})"
            )
    if engine.prompt == "default":
        prompt = list(engine_module("config").DEFAULT_PROMPT)
    else:
        prompt = list(engine.prompt)
    if not prompt:
        raise UsageError("engine.prompt: empty; a prompt needs at least one token")
    bad = [t for t in prompt if not 0 <= t < facts.vocab_size]
    if bad:
        raise UsageError(
            f"engine.prompt: token id {bad[0]} is outside the vocabulary "
            f"[0, {facts.vocab_size}) of {facts.source}"
        )
    if len(prompt) + engine.max_tokens > facts.max_positions:
        raise UsageError(
            f"engine.prompt: {len(prompt)} tokens + max_tokens "
            f"{engine.max_tokens} exceed the model's {facts.max_positions} "
            "positions"
        )


# --- 4. folders -----------------------------------------------------------------------


def check_writable_folder(folder: Path, what: str) -> None:
    """`folder` is, or can be created as, a writable directory with space: probed by
    creating a file in the nearest existing folder. Creates nothing that stays. `what`
    names it in messages ("--out DIR")."""
    folder = Path(folder)
    existing = folder
    while not existing.exists():
        if existing.is_symlink():
            raise UsageError(f"{what}: {existing} is a broken symlink")
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"{what}: {existing} is not a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".specconform-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"{what}: {existing} is not writable ({reason})") from None
    free, needed = shutil.disk_usage(existing).free, min_free_bytes()
    if free < needed:
        raise UsageError(
            f"{what}: {free >> 20} MiB free in {existing}, a run needs at least "
            f"{needed >> 20} MiB (${MIN_FREE_ENV})"
        )


def check_ledger_file(ledger: Path) -> None:
    if ledger.exists() and not ledger.is_file():
        raise UsageError(f"--ledger {ledger}: not a file")
    check_writable_folder(ledger.parent, f"--ledger {ledger}")
    if ledger.exists() and not os.access(ledger, os.R_OK | os.W_OK):
        raise UsageError(f"--ledger {ledger}: not readable and writable")


# --- 5. key ---------------------------------------------------------------------------


def check_key(key: Path | None, sign: bool) -> None:
    if not sign:
        return
    from specconform.evidence.signing import load_private_key, resolve_signing_key

    load_private_key(resolve_signing_key(key, sign=True))


# --- 6. run folder -------------------------------------------------------------


def check_run_folder(out_dir: Path, run_id: str, resume: Path | None) -> None:
    holder = lock_holder(out_dir, run_id)
    if holder is not None:
        raise UsageError(
            f"run {run_id} is live ({holder}) in {out_dir}; wait for it to "
            "finish or choose another --out"
        )
    folder = Path(out_dir) / f"{run_id}.inprogress"
    if resume is None and folder.exists():
        raise UsageError(
            f"{folder}: an interrupted run with the same inputs (no live "
            f"process holds it); continue it with --resume {folder} (or "
            "remove that folder)"
        )


# --- all of it ------------------------------------------------------------------------


def preflight(
    loaded,
    *,
    mutant: str | None,
    out_dir: Path,
    run_id: str,
    context: RunContext,
    key: Path | None,
    sign: bool,
) -> None:
    """Every check above for one run; raises UsageError (exit 2) at the first problem."""
    check_mutant(loaded, mutant)
    check_adapter(loaded)
    check_seed_domain(loaded)
    capabilities = kind_of(loaded.kind).capabilities
    if capabilities.preflight_model and _bundled_preset_or_checkpoint(loaded.model.engine):
        check_model(loaded, model_facts(loaded.model.engine))
    check_writable_folder(out_dir, f"--out {out_dir}")
    ledger = context.ledger_path
    ledgered = capabilities.ledgered
    if ledgered:
        check_ledger_file(ledger)
    check_key(key, sign)
    if capabilities.resumable:
        check_run_folder(out_dir, run_id, context.resume)
    if ledgered:
        from specconform.runner.ledger import check_overlaps

        check_overlaps(
            ledger,
            ledger_entries(loaded, context.attempt, mutant),
            getattr(loaded.model, "expansion", None),
            loaded.model.seeds.offset,
            resumable=capabilities.resumable,
        )


def ledger_entries(loaded, attempt: str, mutant: str | None) -> list:
    """The entries the run will reserve: one per group, its seed range as the kind
    states it (``Kind.seed_ranges``: a distribution group's offset + seed_offset +
    [0, count), a sequence group's requests, a McNemar run's questions x count)."""
    from specconform.runner.ledger import LedgerEntry

    seed_ranges = kind_of(loaded.kind).seed_ranges
    if seed_ranges is None:
        return []
    return [
        LedgerEntry(loaded.name, loaded.hash, attempt, group, start, stop, mutant)
        for group, start, stop in seed_ranges(loaded.model)
    ]
