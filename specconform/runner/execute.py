"""Execute one protocol run end to end: collect raw data, evaluate, write the run
directory (docs/contracts.md section 3) and seal it into an evidence archive.

Nothing is left behind on failure: the run is written into a hidden staging folder and
renamed into place only when complete.
"""
from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from specconform import __version__
from specconform.errors import UsageError
from specconform.evidence.jsonio import canonical_json_bytes
from specconform.evidence.results_io import tests_csv_bytes
from specconform.kinds import reevaluate
from specconform.protocol.load import LoadedProtocol, canonical_json
from specconform.results import Evaluation, RawData


@dataclass(frozen=True)
class RunOutcome:
    run_id: str
    run_dir: Path
    archive: Path | None
    evaluation: Evaluation


class RunLog:
    """Collects log lines for log.txt (and echoes nothing: the CLI prints)."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(line)


def make_run_id(loaded: LoadedProtocol, mutant: str | None) -> str:
    """Content-addressed: protocol name, pre-registration hash and a digest of the
    effective inputs (protocol after overrides, mutant). Two runs with the same inputs
    get the same id, so their archives differ only in volatile.json (and the digests of
    it in SHA256SUMS and the attestation)."""
    import hashlib

    inputs = canonical_json({"protocol": loaded.data, "mutant": mutant})
    digest = hashlib.sha256(inputs.encode()).hexdigest()[:8]
    suffix = f"-{mutant}" if mutant else ""
    return f"{loaded.name}-{loaded.hash[:8]}-{digest}{suffix}"


def free_destination(out_dir: Path, run_id: str) -> Path:
    """OUT/<run-id>, or OUT/<run-id>-2, -3 ... when an earlier run of the same inputs is
    there: evidence is never overwritten; only the outer name differs."""
    candidate, n = out_dir / run_id, 1
    while candidate.exists() or candidate.with_suffix(".zip").exists():
        n += 1
        candidate = out_dir / f"{run_id}-{n}"
    return candidate


def collect_raw(loaded: LoadedProtocol, *, mutant: str | None, progress, log,
                run_context: dict) -> dict[str, bytes]:
    kind = loaded.kind
    model = loaded.model
    if kind in ("quadrature", "montecarlo"):
        from specconform.adapters.kernel import load_kernel

        kernel = load_kernel(model.sampler.adapter, model.device, mutant)
        log(f"kernel: {kernel.name} on {model.device}")
        run_context.setdefault("extra_run_fields", {})["sampler_adapter"] = kernel.describe()
        if kind == "quadrature":
            from specconform.runner import quadrature as runner
        else:
            from specconform.runner import montecarlo as runner
        return runner.collect(model, kernel, progress)
    if kind == "distribution":
        from specconform.runner import distribution as runner

        return runner.collect(loaded, mutant=mutant, progress=progress, log=log,
                              context=run_context)
    raise UsageError(f"{loaded.path}: protocol kind {kind!r} has no runner")


def _dump(obj) -> bytes:
    return (json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode()


def execute(loaded: LoadedProtocol, *, out_dir: Path, argv: list[str], mutant: str | None,
            key: Path | None, sign: bool, progress, extra_run_fields: dict | None = None,
            run_context: dict | None = None) -> RunOutcome:
    from specconform import evidence

    started = datetime.now(timezone.utc)
    run_context = dict(run_context or {})
    run_id = run_context.get("run_id") or make_run_id(loaded, mutant)
    run_context["run_id"] = run_id
    run_context.setdefault("attempt", f"{run_id}@{started:%Y%m%dT%H%M%SZ}")
    log = RunLog()
    log(f"specconform {__version__} run {run_id}")
    log(f"protocol {loaded.path} sha256 {loaded.hash}")
    if loaded.overrides:
        log(f"overrides {json.dumps(loaded.overrides, sort_keys=True)}")
    raw = collect_raw(loaded, mutant=mutant, progress=progress, log=log,
                      run_context=run_context)
    evaluation = reevaluate(loaded.data, RawData(raw))
    finished = datetime.now(timezone.utc)
    log(f"verdict {evaluation.verdict.verdict}")

    run_json = {
        "run_id": run_id, "protocol_name": loaded.name, "protocol_hash": loaded.hash,
        "kind": loaded.kind, "command": list(argv), "overrides": loaded.overrides,
        "mutant": mutant, "device": _device(loaded), "specconform_version": __version__,
    }
    run_json.update(extra_run_fields or {})
    run_json.update(run_context.get("extra_run_fields", {}))
    files: dict[str, bytes] = {
        "protocol.yaml": loaded.source,
        "protocol.json": (canonical_json(loaded.data) + "\n").encode(),
        "run.json": _dump(run_json),
        "results/tests.json": canonical_json_bytes([t.to_json() for t in evaluation.tests]),
        "results/tests.csv": tests_csv_bytes(evaluation.tests),
        "verdict.json": canonical_json_bytes(evaluation.verdict.to_json()),
        "environment.json": _dump(evidence.environment_manifest()),
        "volatile.json": _dump(evidence.volatile_facts(started, finished)),
        "log.txt": ("\n".join(log.lines) + "\n").encode(),
    }
    files.update(raw)
    out_dir.mkdir(parents=True, exist_ok=True)  # only now: bad input writes nothing
    final = free_destination(out_dir, run_id)
    staging = out_dir / f".partial-{final.name}"
    if staging.exists():
        shutil.rmtree(staging)
    try:
        for name, data in files.items():
            path = staging / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        archive = evidence.seal(staging, key=key, sign=sign)
        staging.rename(final)
        archive_final = final.with_suffix(".zip")
        archive.rename(archive_final)
        for callback in run_context.get("on_success", []):
            callback()
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        staged_zip = staging.with_suffix(".zip")
        if staged_zip.exists():
            staged_zip.unlink()
        raise
    return RunOutcome(run_id, final, archive_final, evaluation)


def _device(loaded: LoadedProtocol) -> str:
    model = loaded.model
    engine = getattr(model, "engine", None)
    return getattr(engine, "device", None) or getattr(model, "device", "cpu")


def print_table(evaluation: Evaluation, file=None) -> None:
    """The table reviewers know: a row per check, its p-value, PASS/FAIL."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, highlight=False, width=120)
    table = Table(show_lines=False)
    for col in ("check", "role", "statistic", "df", "p-value", "n", "result"):
        table.add_column(col, justify="left" if col in ("check", "role") else "right")
    for t in evaluation.tests:
        result = "—" if t.passed is None else ("PASS" if t.passed else "FAIL")
        table.add_row(t.test, t.role, _fmt(t.statistic), _fmt(t.df), _fmt_p(t.pvalue),
                      str(t.n), result)
    console.print(table)


def _fmt(x) -> str:
    if x is None:
        return "—"
    return f"{x:.4g}"


def _fmt_p(p) -> str:
    if p is None:
        return "—"
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.2e}"
