"""One run assembly for every entry point: `specconform run`/`gate` and ``specconform.run``.

A :class:`RunRequest` says what the caller asks (protocol file, overrides, mutant,
output folder, key, ledger, resume, sequential batches, base ref, archive cap);
:func:`prepare` turns it into a :class:`PreparedRun` -- protocol loaded once, overrides
applied and recorded, the kind's capabilities checked (one line, exit 2, nothing
written), signing key resolved, a resumed run's id and attempt read back from its
checkpoint -- and :meth:`PreparedRun.execute` runs it (`runner.execute`). The CLI is
argument parsing plus printing around these two calls; the Python API is the same two
calls around typed results. Nothing here prints: a note for the user (a signing key
created on first use) goes to the caller's ``notify``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

from specconform.kinds.registry import kind_of, kinds_with
from specconform.planning.evidence import check_evidence_plan
from specconform.planning.power import check_power_plan
from specconform.protocol.load import LoadedProtocol, apply_overrides, load_protocol
from specconform.runner.archive_floor import check_archive_floor  # noqa: F401 (re-exported)
from specconform.runner.context import RunOptions
from specconform.runner.execute import PreparedRun, RunOutcome, make_run_id
from specconform.util.errors import UsageError
from specconform.util.progress import notice


@dataclass(frozen=True)
class RunRequest:
    """What a caller asks of one run; None leaves the protocol's own value."""

    protocol: Path
    out_dir: Path
    argv: tuple[str, ...]  # recorded in run.json (path options as placeholders)
    seeds: int | None = None
    offset: int | None = None
    batch_size: int | None = None
    device: str | None = None
    base_ref: str | None = None
    mutant: str | None = None
    key: Path | None = None
    sign: bool = True
    ledger: Path | None = None  # None: OUT/seed-ledger.jsonl
    resume: Path | None = None  # an OUT/<run-id>.inprogress checkpoint
    sequential: bool = False
    batch: int | None = None  # seeds per group per sequential batch
    max_archive_size: int | None = None
    persistent_caches: bool = False  # Triton/weights/bytecode caches under OUT/.cache
    adapter_timeout: float | None = None  # s per adapter call; None: engine.call_timeout_s
    # run even when the seeds cannot give some deciding test evidence (planning.evidence)
    allow_inconclusive: bool = False


def run_protocol(
    request: RunRequest, *, progress, notify: Callable[[str], None] = notice
) -> RunOutcome:
    """prepare + execute, inside the run's persistent caches when asked (set before the
    engine imports torch and Triton; a failed run takes the caches it created)."""
    with _caches(request):
        return prepare(request, notify=notify).execute(progress)


@contextmanager
def _caches(request: RunRequest) -> Iterator[None]:
    if not request.persistent_caches:
        with nullcontext():
            yield
        return
    from specconform.runner.caches import persistent_caches

    with persistent_caches(request.out_dir):
        yield


def prepare(request: RunRequest, *, notify: Callable[[str], None] = notice) -> PreparedRun:
    """Load, override and check a run; UsageError (exit 2) at the first problem."""
    protocol = request.protocol
    loaded = load_protocol(protocol)
    loaded = apply_overrides(
        loaded,
        {
            "--seeds": request.seeds,
            "--offset": request.offset,
            "--batch-size": request.batch_size,
            "--device": request.device,
            "--base-ref": request.base_ref,
        },
    )
    loaded = sequential_override(loaded, request)
    if request.adapter_timeout is not None:
        loaded = with_call_timeout(loaded, request.adapter_timeout)
    # Before any model is read: seeds too few for a deciding test's evidence (exit 2).
    check_evidence_plan(loaded.kind, loaded.data, allow_inconclusive=request.allow_inconclusive)
    # ... and seeds too few for the protocol's stated power target (exit 2), same flag.
    check_power_plan(loaded, allow_inconclusive=request.allow_inconclusive, notify=notify)
    capabilities = kind_of(loaded.kind).capabilities
    if request.ledger and not capabilities.ledgered:
        raise UsageError(
            f"{protocol}: --ledger applies to {_names(lambda c: c.ledgered)} "
            f"protocols, not {loaded.kind}"
        )
    if request.resume and not capabilities.resumable:
        raise UsageError(
            f"{protocol}: --resume applies to {_names(lambda c: c.resumable)} protocols, "
            f"not {loaded.kind}"
        )
    options = RunOptions(
        ledger=request.ledger, resume=request.resume, max_archive_size=request.max_archive_size
    )
    out_dir = request.out_dir
    if request.resume is not None:
        from specconform.runner.checkpoint import read_checkpoint

        # The resumed run keeps its id and folder; protocol, overrides and mutant are
        # checked against the checkpoint before anything runs.
        saved = read_checkpoint(request.resume)
        options = replace(options, run_id=saved["run_id"], attempt=saved["attempt"])
        out_dir = request.resume.parent
    if request.max_archive_size is not None:  # a cap no archive can meet: refused now
        check_archive_floor(
            loaded,
            request.max_archive_size,
            run_id=options.run_id or make_run_id(loaded, request.mutant),
            signed=request.sign,
        )
    signing_key = resolve_key(request.key, request.sign, notify)  # may create the user key
    return PreparedRun(
        loaded, Path(out_dir), request.argv, request.mutant, signing_key, request.sign, options
    )


def with_call_timeout(loaded: LoadedProtocol, seconds: float) -> LoadedProtocol:
    """`--adapter-timeout`: the protocol's ``engine.call_timeout_s`` (or
    ``sampler.call_timeout_s``) for this run. Not an
    override in the record: the field is outside protocol.json and the hash (a limit on
    waiting, not part of the claim), so the run id and the evidence do not change."""
    from specconform.protocol.schema_base import CALL_TIMEOUT_MAX_S

    if not 0 < seconds <= CALL_TIMEOUT_MAX_S:  # the API's value (the CLI checks its own)
        raise UsageError(
            f"--adapter-timeout {seconds!r}: must be a number of seconds in "
            f"(0, {CALL_TIMEOUT_MAX_S:g}]"
        )
    for section in ("engine", "sampler"):  # the engine's or the accept kernel's adapter
        spec = getattr(loaded.model, section, None)
        if spec is not None and "call_timeout_s" in type(spec).model_fields:
            timed = spec.model_copy(update={"call_timeout_s": float(seconds)})
            return replace(loaded, model=loaded.model.model_copy(update={section: timed}))
    raise UsageError(
        "--adapter-timeout: applies to protocols run through an adapter "
        f"(engine.adapter or sampler.adapter), not {loaded.kind}"
    )


def _names(predicate) -> str:
    names = kinds_with(predicate)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def sequential_override(loaded: LoadedProtocol, request: RunRequest) -> LoadedProtocol:
    """`--sequential [--batch N]`, checked before any work (one line, exit 2) and applied
    as an override of the protocol's `sequential` field: recorded in run.json's
    overrides, in protocol.json and in the run id, like --seeds. A protocol that
    pre-registers `sequential` runs sequentially without the flag (--batch overrides)."""
    batch = request.batch
    if not (request.sequential or pre_registers_sequential(loaded)):
        if batch is not None:
            raise UsageError("--batch: applies only with --sequential")
        return loaded
    if not kind_of(loaded.kind).capabilities.sequential:
        raise UsageError(
            f"{request.protocol}: --sequential applies to "
            f"{_names(lambda c: c.sequential)} protocols, not {loaded.kind}"
        )
    if request.resume is not None:
        raise UsageError("--sequential: a sequential run does not resume; drop --resume")
    budget = loaded.model.seeds.count
    if batch is None:
        if pre_registers_sequential(loaded):
            return loaded
        batch = -(-budget // 20)
    if not 1 <= batch <= budget:
        raise UsageError(
            f"--batch {batch}: must be between 1 and the budget of {budget} seeds per group"
        )
    return apply_overrides(loaded, {"--sequential": {"batch": batch}})


def pre_registers_sequential(loaded: LoadedProtocol) -> bool:
    """Whether the protocol file itself says `sequential:`."""
    return getattr(loaded.model, "sequential", None) is not None


# --- the signing key -------------------------------------------------------------------


def resolve_key(key: Path | None, sign: bool, notify: Callable[[str], None]) -> Path | None:
    """The key, else $SPECCONFORM_SIGNING_KEY, else the user's own key (created on first
    use, so that a run signs out of the box); None for an unsigned run."""
    from specconform.evidence.signing import SIGNING_KEY_ENV, resolve_signing_key

    if not sign or key is not None or os.environ.get(SIGNING_KEY_ENV):
        return resolve_signing_key(key, sign=sign)
    return default_user_key(notify)


def default_user_key(notify: Callable[[str], None]) -> Path:
    """The user's own signing key, created (0600) on first use; reviewers verify with the
    matching .pub next to it."""
    from specconform.evidence.signing import generate_key_pem

    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "specconform"
    key = home / "signing.key"
    if not key.exists():
        home.mkdir(parents=True, exist_ok=True)
        private_pem, public_pem = generate_key_pem()
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(private_pem)
        (home / "signing.pub").write_bytes(public_pem)
        notify(f"note: created signing key {key} (public key {home / 'signing.pub'})")
    return key
