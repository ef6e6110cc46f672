"""The Python API: run a protocol, verify and load evidence archives, from code.

Every name here is also reachable as ``specconform.<name>`` (lazily: importing
specconform imports nothing heavy). The CLI and this API share one implementation:
`specconform run` and :func:`run` both go through the run assembly
(``specconform.runner.assemble``: ledger, resume, sequential, base ref alike), and
`specconform verify` and :func:`verify` both call ``verification.verify_archive`` with
the same signature policy. Errors are typed, and public at the top
(``specconform.UsageError``, ...; defined in ``specconform.util``): ``UsageError`` (bad
input, exit code 2 on the command line), ``EvidenceError`` (invalid evidence, exit code
3) and ``MissingExtraError`` (an optional layer such as torch is not installed).

Typed results read through ``specconform.report.model`` (one seam for reports and API).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specconform.report.model import ArchiveView
from specconform.results import Evaluation, TestRow, Verdict
from specconform.util.errors import SpecconformError, UsageError
from specconform.util.progress import silent
from specconform.verification import VerifyReport

# What this package is the home of (specconform resolves these names from here). The
# error types are public at the top, from specconform.util (errors, extras).
__all__ = [
    "ArchiveView",
    "Run",
    "TestRow",
    "Verdict",
    "VerifyReport",
    "load_archive",
    "load_archives",
    "plan_protocol",
    "run",
    "verify",
]

DEFAULT_OUT = Path("reports")


@dataclass(frozen=True)
class Run:
    """What :func:`run` produced: the run id, its verdict and tests, and the archive."""

    run_id: str
    evaluation: Evaluation
    archive: Path
    run_dir: Path

    @property
    def verdict(self) -> str:
        """ "PASS", "FAIL" or "INCONCLUSIVE" (a deciding test without evidence, none
        failed)."""
        return self.evaluation.verdict.verdict

    @property
    def passed(self) -> bool:
        return self.verdict == "PASS"

    @property
    def tests(self) -> tuple[TestRow, ...]:
        return self.evaluation.tests

    @property
    def failed(self) -> tuple[str, ...]:
        """Names of the deciding tests that failed (empty on PASS)."""
        return self.evaluation.verdict.failed

    @property
    def inconclusive(self) -> tuple[str, ...]:
        """Names of the deciding tests without evidence (results schema 3)."""
        return self.evaluation.verdict.inconclusive


def run(
    protocol: str | os.PathLike[str],
    *,
    seeds: int | None = None,
    offset: int | None = None,
    batch_size: int | None = None,
    out: str | os.PathLike[str] = DEFAULT_OUT,
    mutant: str | None = None,
    device: str | None = None,
    sign: bool = True,
    key: str | os.PathLike[str] | None = None,
    progress: bool = False,
    ledger: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    sequential: bool = False,
    batch: int | None = None,
    base_ref: str | None = None,
    max_archive_size: int | None = None,
    caches: bool = False,
    allow_inconclusive: bool = False,
    adapter_timeout: float | None = None,
) -> Run:
    """Run a pre-registered protocol and seal its evidence archive, like `specconform run`.

    The same run assembly as the command line (``specconform.runner.assemble``): every
    option below is checked against the protocol kind's capabilities before any work
    (UsageError, nothing written), exactly as the CLI refuses it.

    Parameters
    ----------
    protocol : path-like
        The protocol file (YAML).
    seeds, offset, batch_size : int, optional
        Overrides, allowed only where the protocol marks the field overridable; they are
        recorded in the archive's run.json.
    out : path-like
        Output folder (created when the run succeeds); the archive is
        ``out/<run-id>.zip``.
    mutant : str, optional
        A planted bug (``specconform mutants`` lists them).
    device : {"cpu", "cuda"}, optional
        Override the protocol's device.
    sign : bool
        Sign the archive (Ed25519). ``False`` writes an archive marked unsigned.
    key : path-like, optional
        Signing key (PEM). Default: ``$SPECCONFORM_SIGNING_KEY``, else the user key in
        ``~/.config/specconform`` (created on first use), exactly as the CLI resolves it.
    progress : bool
        Show progress (a bar on a terminal, log lines otherwise) on standard error.
    ledger : path-like, optional
        The seed ledger (default ``out/seed-ledger.jsonl``); kinds that draw seeds from a
        plan (distribution, sequence, mcnemar) record their ranges there and refuse an
        overlap with an earlier run.
    resume : path-like, optional
        An ``out/<run-id>.inprogress`` checkpoint of an interrupted run of a resumable
        kind (distribution): the run continues it, keeping its id and folder.
    sequential, batch : optional
        Anytime-valid mode of a distribution protocol: batches of ``batch`` seeds per
        group (default budget / 20) until the e-process decides.
    base_ref : str, optional
        Equality and performance protocols: compare this tree with a git base.
    max_archive_size : int, optional
        Bytes; larger raw files are kept beside the archive.
    caches : bool
        Keep Triton's kernels, the engine's seeded weights and missing bytecode under
        ``out/.cache`` (what the CLI does; off by default here: it sets process-wide
        environment variables).

    allow_inconclusive : bool
        Run even when the seeds cannot give some deciding test evidence (the verdict may
        then be INCONCLUSIVE) or the power the protocol states (``power: {target, tv}``,
        specconform.planning.power); without it such a run is refused before any work
        (UsageError naming the test, its power and the seeds it needs).
    adapter_timeout : float, optional
        Seconds any one adapter call may take (default: the protocol's
        ``engine.call_timeout_s`` / ``sampler.call_timeout_s``, 3600). Past it the run
        raises ``AdapterTimeout`` (exit code 124); a distribution run keeps its checkpoint
        for ``resume``.

    Returns
    -------
    Run
        ``verdict`` ("PASS"/"FAIL"/"INCONCLUSIVE"), ``tests`` (typed rows), ``archive``, ``run_id``.
        A FAIL is a result, not an exception.

    Raises
    ------
    UsageError
        Bad protocol, override, mutant, key or option for the kind (nothing is written).
    MissingExtraError
        The run needs the bundled engine: ``pip install 'specconform[engine]'``.
    """
    from specconform.runner.assemble import RunRequest, run_protocol

    if device is not None and device not in ("cpu", "cuda"):
        raise UsageError(f"device {device!r}: expected 'cpu' or 'cuda'")
    # The request `specconform run` builds from its options (cli/__init__.py _execute):
    # each front end maps its own arguments (paths, argv, signing) into it; the run
    # itself is shared (runner.assemble.run_protocol).
    request = RunRequest(
        protocol=Path(protocol),
        out_dir=Path(out),
        argv=tuple(_argv()),
        seeds=seeds,
        offset=offset,
        batch_size=batch_size,
        device=device,
        base_ref=base_ref,
        mutant=mutant,
        key=None if key is None else Path(key),
        sign=sign,
        ledger=None if ledger is None else Path(ledger),
        resume=None if resume is None else Path(resume),
        sequential=sequential,
        batch=batch,
        max_archive_size=max_archive_size,
        persistent_caches=caches,
        allow_inconclusive=allow_inconclusive,
        adapter_timeout=adapter_timeout,
    )
    outcome = run_protocol(request, progress=_progress() if progress else silent)
    if outcome.archive is None or outcome.evaluation is None or outcome.run_dir is None:
        # execute seals every one-process run; a follower rank of a sharded run seals none
        raise SpecconformError(f"run {outcome.run_id}: no archive was written")
    return Run(outcome.run_id, outcome.evaluation, outcome.archive, outcome.run_dir)


def verify(
    archive: str | os.PathLike[str],
    pubkey: str | os.PathLike[str] | None = None,
    *,
    skip_signature: bool = False,
) -> VerifyReport:
    """Verify an evidence archive offline, like `specconform verify`.

    Parameters
    ----------
    archive : path-like
        The evidence zip.
    pubkey : path-like, optional
        Ed25519 public key (PEM) the archive must be signed with.
    skip_signature : bool
        Check digests and recomputation only. Exactly one of ``pubkey`` and
        ``skip_signature=True`` is required: a check against no key proves nothing
        about who produced the archive, so it is refused rather than passed quietly.

    Returns
    -------
    VerifyReport
        ``signature`` is "valid" (``trusted`` True) with a key, else "not checked" or
        "unsigned"; ``keyid``, ``tests_recomputed``, ``verdict``.

    Raises
    ------
    UsageError
        Neither or both of ``pubkey`` and ``skip_signature``; a missing file.
    EvidenceError
        The archive is invalid; the message names the first failing file or field.
    """
    from specconform.verification import require_signature_choice, verify_archive

    require_signature_choice(pubkey, skip_signature, "pubkey", "pubkey=PATH", "skip_signature=True")
    return verify_archive(Path(archive), None if pubkey is None else Path(pubkey))


def load_archive(path: str | os.PathLike[str]) -> ArchiveView:
    """Read an archive's run, tests and verdict without verifying it.

    Returns
    -------
    ArchiveView
        ``run_id``, ``sha256``, ``run`` (run.json), ``evaluation`` (typed ``tests`` and
        ``verdict``), ``signed``, ``seed_ranges``; ``row(name)`` finds one test.

    Raises
    ------
    UsageError
        The file does not exist.
    EvidenceError
        The archive is unreadable. Use :func:`verify` before trusting its contents.
    """
    from specconform.report.model import load_views

    return load_views([Path(path)])[0]


def load_archives(paths: Sequence[str | os.PathLike[str]]) -> list[ArchiveView]:
    """Several archives at once, labelled as the report labels them."""
    from specconform.report.model import load_views

    return load_views([Path(p) for p in paths])


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _argv() -> list[str]:
    """What run.json records as the command: the calling program and its arguments."""
    return ["python", *sys.argv] if sys.argv and sys.argv[0] else ["python"]


def _progress():
    from specconform.util.progress import progress

    return progress


def plan_protocol(
    protocol: str | os.PathLike[str],
    *,
    seeds: int | None = None,
    tv: float | None = None,
    reference: str | os.PathLike[str] | None = None,
    power: float | None = None,
) -> list:
    """What a protocol can detect, as ``specconform plan`` prints it.

    Parameters
    ----------
    protocol : path of a distribution protocol file.
    seeds : seeds per group (default: the protocol's own count). Returns one
        ``specconform.planning.TestPlan`` per planned test: its detectable TV at ``power``
        at the level the verdict rule implies.
    tv : instead of ``seeds``: returns one ``specconform.planning.SeedsNeeded`` per test, the
        seeds per group needed to detect a bias of this total variation.
    reference : a reference.json or an evidence archive with the exact laws (no torch);
        without it the bundled engine replays them (needs the ``[engine]`` extra).
    power : default 0.99.

    Examples
    --------
    >>> plans = plan_protocol("protocols/fp32_t2.yaml", seeds=5000,
    ...                       reference="docs/evidence/fp32_t2-96c34d54-41ee4c6a.zip")
    >>> round(next(p for p in plans if p.test == "t2_async").detectable_tv, 3)
    0.058
    """
    from specconform.calibration import load_reference
    from specconform.kinds.registry import kind_of
    from specconform.planning import DEFAULT_POWER, plan_tests, seeds_needed
    from specconform.protocol.load import load_protocol
    from specconform.runner.replay import replay_laws

    if seeds is not None and tv is not None:
        raise UsageError("plan_protocol: give seeds or tv, not both")
    loaded = load_protocol(Path(protocol))
    if not kind_of(loaded.kind).capabilities.plan_command:
        raise UsageError(f"{protocol}: plan applies to distribution protocols, not {loaded.kind}")
    ref = (
        load_reference(Path(reference))
        if reference is not None
        else replay_laws(loaded, notify=_stderr)
    )
    power = DEFAULT_POWER if power is None else power
    if tv is not None:
        return seeds_needed(loaded.data, ref, tv, power=power)
    return plan_tests(loaded.data, ref, seeds or loaded.model.seeds.count, power=power)
