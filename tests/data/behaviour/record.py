"""Record (or check) the behaviour reference of every protocol (issue 31).

Each protocol of ``protocols/`` runs through the real CLI at a small, fixed size
(``RUNS`` below: the exact arguments) into a scratch folder, unsigned; its evidence
archive is reduced to one sha256 per member (``archive_digests``) and written to
``tests/data/behaviour/<protocol>.json``. ``tests/toolkit/test_behaviour_identical.py``
reruns the same arguments and asserts the same digests: a refactor that changes any
protocol's results or raw data for these fixed seeds fails it, naming the member.

What is compared (see ``VOLATILE_MEMBERS``, ``VOLATILE_KEYS`` and ``_normalise_log``):

- byte digests of every deterministic member: ``raw/**``, ``results/**``,
  ``verdict.json``, ``protocol.yaml``, ``protocol.json``, ``UNSIGNED``, ``plots/**``;
- canonical JSON (sorted keys, volatile keys removed) of ``run.json`` and
  ``environment.json``, and ``log.txt`` with the adapter's source digest masked;
- never: ``volatile.json``, ``SHA256SUMS``, ``attestation.dsse.json`` (times, host,
  pid, absolute argv; digests of those; signatures).
- performance protocols: timings are not deterministic, so only their deterministic
  members and fields are compared (``PERFORMANCE_*`` below).

Re-record deliberately, after an intended behaviour change only, from the repository
root (2 cores: one thread per process, as the test runs it)::

    OMP_NUM_THREADS=1 .venv/bin/python tests/data/behaviour/record.py            # all
    OMP_NUM_THREADS=1 .venv/bin/python tests/data/behaviour/record.py quadrature # some

It runs every protocol twice and refuses to write a reference whose two runs differ
(a member that is not deterministic must be listed as volatile first). ``--root DIR``
runs the code of another checkout (e.g. a ``git worktree`` of the commit before a
refactor: the reference was recorded that way, from b44dbd0); ``--check`` compares with
the stored references instead of writing them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

# The exact `specconform run` arguments per protocol (before `--out DIR --no-sign`),
# relative to the repository root: the smallest sizes that still exercise each kind's
# code on a 2-core CPU. Protocols whose sizes are not overridable on the command line
# run a reduced copy of the protocol file kept beside this script (protocols/), which
# changes only sizes and the device (each copy's header says what and why).
_REDUCED = "tests/data/behaviour/protocols"
RUNS: dict[str, list[str]] = {
    "quadrature": ["protocols/quadrature.yaml"],
    "montecarlo": ["protocols/montecarlo.yaml", "--seeds", "20000"],
    "ci_gate": ["protocols/ci_gate.yaml", "--seeds", "400"],
    # 3-4 seeds give no stratum evidence: --allow-inconclusive (the run is refused before
    # any work without it, issue 32); the code paths, not the verdict, are recorded
    "fp32_t2": [
        "protocols/fp32_t2.yaml",
        "--seeds",
        "3",
        "--device",
        "cpu",
        "--allow-inconclusive",
    ],
    "hf_smollm2": ["protocols/hf_smollm2.yaml", "--seeds", "4", "--allow-inconclusive"],
    "smollm2_t2": ["protocols/smollm2_t2.yaml", "--seeds", "4", "--allow-inconclusive"],
    "ci_sequence": ["protocols/ci_sequence.yaml"],
    "sequence": [f"{_REDUCED}/sequence.yaml", "--seeds", "3", "--device", "cpu"],
    "gsm8k_smoke": [f"{_REDUCED}/gsm8k_smoke.yaml", "--seeds", "1"],
    "gsm8k": [f"{_REDUCED}/gsm8k.yaml"],
    "equality": ["protocols/equality.yaml"],
    "ci_performance": ["protocols/ci_performance.yaml"],
    "performance": [f"{_REDUCED}/performance.yaml", "--device", "cpu"],
    "tree": ["protocols/tree.yaml"],
    "tree_sampled": ["protocols/tree_sampled.yaml", "--seeds", "2000"],
    "tree_lossy": ["protocols/tree_lossy.yaml", "--seeds", "2000"],
}

# Members never compared: their content is by design different on every run.
VOLATILE_MEMBERS = {
    "volatile.json": "start/finish times, duration, hostname, pid and the absolute argv",
    "SHA256SUMS": "lists the digests of volatile.json and environment.json, so it changes "
    "with them; every other member is compared directly",
    "attestation.dsse.json": "signature over SHA256SUMS (runs here are --no-sign anyway)",
}

# Keys (dotted paths) removed from a JSON member before its canonical form is hashed.
VOLATILE_KEYS: dict[str, dict[str, str]] = {
    "run.json": {
        "engine_adapter.source_sha256": "digest of the adapter's source code: changes "
        "with any edit of that code, whatever the behaviour",
        "engine_adapter.source": "module path of the adapter class: moves when modules "
        "are reorganised (architecture refactor), not a behaviour",
        "engine_adapter.packages": "installed package versions: host facts",
        "engine_adapter.engine": "the engine's package version and the commit and dirty "
        "flag of its checkout: facts of the checkout, like environment.json's git",
        "sampler_adapter.source_sha256": "as engine_adapter.source_sha256",
        "sampler_adapter.source": "as engine_adapter.source",
        "sampler_adapter.packages": "as engine_adapter.packages",
    },
    "raw/outputs.json": {  # equality: the tree each side's outputs came from
        "sides.candidate.commit": "the recorded commit",
        "sides.candidate.dirty": "the git state of the checkout",
        "sides.base.commit": "the --base-ref commit (runs here have none)",
        "sides.base.dirty": "as sides.candidate.dirty",
    },
    "environment.json": {
        "code": "digest and file count of the installed code: changes with any edit",
        "git": "the recorded commit and dirty flag",
        "cpu": "host facts",
        "platform": "host facts",
        "python": "interpreter path and version: host facts",
        "packages": "installed package versions: host facts",
        "torch": "torch/triton/CUDA versions and GPUs: host facts",
    },
}

# Performance protocols time things: tokens/s, TPOT, peak memory, the profile and the
# verdict they decide are not deterministic. Only these parts of their archives are
# compared (``_performance_projection``); results/tests.csv and plots/ (timings only) are
# left out, and the commit each side ran is masked.
PERFORMANCE_SKIPPED = {
    "results/tests.csv": "tokens/s, TPOT and peak memory per cell (timings)",
    "plots/": "timeline of the profiled steps (timings)",
}
# Fields of a performance results row kept besides the row's identity (the ABBA order
# row is deterministic and kept whole).
_PERF_ROW_KEYS = ("test", "role", "deciding", "n", "alpha", "df", "pvalue_method")
_PERF_DETAIL_KEYS = ("concurrency", "sampling", "rule", "max_slowdown", "statistic")
_PERF_VERDICT_DROP = ("verdict", "failed", "reasons")  # decided by timings
_PERF_PROFILE_KEEP = (
    "concurrency",
    "device",
    "sampling",
    "steps",
    "top",
    "phase_markers",
    "with_stack",
)  # ops/spans: times and source locations (file:line moves with any edit)


def _performance_projection(name: str, data: bytes) -> bytes | None:
    """The deterministic part of a performance archive member; None: not compared."""
    if name == "raw/performance.json":
        raw = json.loads(data)
        obj = {
            "order": raw["order"],
            "processes": [
                {
                    "device": proc["device"],
                    "process": proc["process"],
                    "side": proc["side"],
                    "cells": [
                        {
                            "concurrency": cell["concurrency"],
                            "sampling": cell["sampling"],
                            "runs": [
                                {k: run[k] for k in ("requests", "rounds", "tokens")}
                                for run in cell["runs"]
                            ],
                        }
                        for cell in proc["cells"]
                    ],
                }
                for proc in raw["processes"]
            ],
            "sides": {
                side: {k: v for k, v in facts.items() if k not in ("commit", "dirty")}
                for side, facts in raw["sides"].items()
            },
            "profile": {
                side: {k: v for k, v in prof.items() if k in _PERF_PROFILE_KEEP}
                for side, prof in (raw.get("profile") or {}).items()
            },
        }
    elif name == "results/tests.json":
        rows = json.loads(data)
        obj = []
        for row in rows:
            if row["test"] == "abba_order":
                obj.append(row)
                continue
            kept = {k: row.get(k) for k in _PERF_ROW_KEYS}
            detail = row.get("detail") or {}
            kept["detail"] = {k: detail.get(k) for k in _PERF_DETAIL_KEYS}
            obj.append(kept)
    elif name == "verdict.json":
        obj = {k: v for k, v in json.loads(data).items() if k not in _PERF_VERDICT_DROP}
    elif name in PERFORMANCE_SKIPPED or name.startswith("plots/"):
        return None
    elif name == "log.txt":  # its last line is the verdict, decided by timings
        return _PERF_LOG_VERDICT.sub("verdict <timings>", _normalise_log(data).decode()).encode()
    else:
        return member_bytes(name, data)
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


_PERF_LOG_VERDICT = re.compile(r"^verdict \w+$", re.MULTILINE)

# run.json of a performance run names each side's commit and git state
# ("nospec @ b44dbd0d0e30", "async d=2 @ cc42ea4e1d2f+dirty").
_COMMIT_IN_SIDE = re.compile(r" @ (?:[0-9a-f]{7,40}|no commit)(?:\+dirty)?$")

# log.txt lines carry the adapter's source digest (a code identity, as above), for
# mcnemar runs each group's wall time ("group nospec: 2 trials, 27 tokens in 16.9s"), for
# equality runs the commit and git state ("candidate: 6 configurations x 10 prompts
# (b44dbd0d0e30d7ee437e4910a8fb89a5789f59de dirty)").
_LOG_MASKS = [
    (re.compile(r"source sha256 [0-9a-f]+"), "source sha256 <code>"),
    (re.compile(r"\((?:[0-9a-f]{40}|no commit)(?: dirty)?\)"), "(<commit>)"),
    (re.compile(r" in \d+(?:\.\d+)?s\b"), " in <seconds>s"),
]


def _normalise_log(data: bytes) -> bytes:
    text = data.decode("utf-8")
    for pattern, replacement in _LOG_MASKS:
        text = pattern.sub(replacement, text)
    return text.encode("utf-8")


def _drop(obj: dict, dotted: str) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        obj = obj.get(key) if isinstance(obj, dict) else None
        if obj is None:
            return
    if isinstance(obj, dict):
        obj.pop(last, None)


def canonical_json(data: bytes, drop: list[str]) -> bytes:
    obj = json.loads(data)
    for dotted in drop:
        _drop(obj, dotted)
    sides = obj.get("performance_sides")
    if isinstance(sides, dict):
        obj["performance_sides"] = {
            k: _COMMIT_IN_SIDE.sub(" @ <commit>", v) for k, v in sides.items()
        }
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def member_bytes(name: str, data: bytes) -> bytes:
    """The bytes compared for one member (name relative to the archive's top folder)."""
    if name in VOLATILE_KEYS:
        return canonical_json(data, list(VOLATILE_KEYS[name]))
    if name == "log.txt":
        return _normalise_log(data)
    return data


def archive_digests(archive: Path) -> dict[str, str]:
    """sha256 per compared member of an evidence archive, keyed by the member's path
    inside the run folder (the run id is content-addressed, so it stays in the bytes)."""
    digests = {}
    with zipfile.ZipFile(archive) as zf:
        members = {}
        for info in zf.infolist():
            if not info.is_dir():
                members[info.filename.partition("/")[2]] = zf.read(info)
    performance = json.loads(members["run.json"]).get("kind") == "performance"
    for name, data in members.items():
        if name in VOLATILE_MEMBERS:
            continue
        compared = _performance_projection(name, data) if performance else member_bytes(name, data)
        if compared is not None:
            digests[name] = hashlib.sha256(compared).hexdigest()
    return dict(sorted(digests.items()))


def run_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CI="true",  # plain progress lines
        OMP_NUM_THREADS="1",  # one intra-op thread: the same float reductions every run
        PYTHONPATH=str(root),  # the code of `root`, not whatever is installed
        ENGINE_UNDER_TEST_WEIGHT_CACHE="",  # build weights from the seed, as the tests do
    )
    return env


def run_protocol(
    name: str, out: Path, root: Path = REPO, python: str = sys.executable, args=None
) -> tuple[dict[str, str], float, subprocess.CompletedProcess]:
    """Run one protocol's recorded arguments into ``out``; (digests, seconds, process)."""
    argv = [*(RUNS[name] if args is None else args), "--out", str(out), "--no-sign"]
    started = time.monotonic()
    proc = subprocess.run(
        [python, "-m", "specconform", "run", *argv],
        capture_output=True,
        text=True,
        cwd=root,
        env=run_env(root),
        timeout=900,
    )
    seconds = time.monotonic() - started
    archives = sorted(out.glob("*.zip"))
    if proc.returncode not in (0, 1, 7) or len(archives) != 1:  # 7: INCONCLUSIVE
        raise RuntimeError(
            f"{name}: exit {proc.returncode}, archives {archives}\n{proc.stdout}\n{proc.stderr}"
        )
    return archive_digests(archives[0]), seconds, proc


def reference_path(name: str) -> Path:
    return HERE / f"{name}.json"


def load_reference(name: str) -> dict:
    return json.loads(reference_path(name).read_text())


def differences(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """Human-readable differences between two digest maps; [] when identical."""
    out = []
    for member in sorted(set(expected) | set(actual)):
        if member not in actual:
            out.append(f"{member}: missing from the new archive")
        elif member not in expected:
            out.append(f"{member}: new member, not in the reference")
        elif expected[member] != actual[member]:
            out.append(
                f"{member}: digest {actual[member][:12]} != reference {expected[member][:12]}"
            )
    return out


def _commit(root: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("protocols", nargs="*", help="names (default: all of RUNS)")
    parser.add_argument("--root", type=Path, default=REPO, help="checkout whose code runs")
    parser.add_argument("--python", default=sys.executable, help="interpreter to run")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--once", action="store_true", help="one run (no determinism check)")
    opts = parser.parse_args(argv)
    names = opts.protocols or list(RUNS)
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"unknown protocol(s): {unknown}; known: {list(RUNS)}")
    root = opts.root.resolve()
    status = 0
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"behaviour-{name}-") as tmp:
            try:
                first, seconds, proc = run_protocol(name, Path(tmp) / "a", root, opts.python)
            except RuntimeError as error:
                print(f"{name}: FAILED TO RUN, nothing written\n{error}")
                status = 1
                continue
            if opts.check:
                diff = differences(load_reference(name)["members"], first)
                print(f"{name}: {'identical' if not diff else 'DIFFERS'} ({seconds:.1f} s)")
                for line in diff:
                    print(f"  {line}")
                status |= bool(diff)
                continue
            if not opts.once:
                second, seconds2, _ = run_protocol(name, Path(tmp) / "b", root, opts.python)
                diff = differences(first, second)
                if diff:
                    print(f"{name}: NOT DETERMINISTIC, nothing written:", *diff, sep="\n  ")
                    status = 1
                    continue
        record = {
            "protocol": name,
            "args": RUNS[name],
            "exit_code": proc.returncode,
            "recorded_from": _commit(root),
            "seconds": round(seconds, 1),
            "members": first,
        }
        reference_path(name).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"{name}: recorded {len(first)} members ({seconds:.1f} s, exit {proc.returncode})")
    return status


if __name__ == "__main__":
    sys.exit(main())
