"""What a pull-request reviewer needs about each run besides its tests: a label from the
run itself, the environment in one line each, the signature status and which seed pairs
are disjoint.

Labels come from run.json, not from positions: the first archive of a configuration is
its "primary" (or "base" when a later archive changes the configuration), a later one
with the same protocol hash, mutant and non-seed overrides is a "replication", one with a
planted bug is "mutant NAME", one with the same protocol name and another configuration
is the "candidate". A run.json `label` field wins over all of these.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specconform.evidence.reader import read_archive
from specconform.evidence.sha256sums import ATTESTATION_NAME
from specconform.report.model import (
    ArchiveView,
    SeedRange,
    cross_archive_overlaps,
    format_range,
)
from specconform.report.readings import two_groups
from specconform.util.errors import EvidenceError

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class RunFacts:
    """One archive's PR-level facts (all strings, ready to print)."""

    letter: str  # "A", "B", ...: the column of this archive
    protocol: str
    label: str  # "primary", "replication", "mutant residual_from_p", "candidate", ...
    commit: str  # "50fb376612 (dirty)"
    device: str  # "cuda: 1x NVIDIA H200; torch 2.11.0+cu130, CUDA 13.0, triton 3.6.0"
    command: str
    signature: str  # "verified, key id 1a2b3c4d5e6f7a8b" (first 16 hex), "signed ..., NOT verified", "UNSIGNED"

    @property
    def title(self) -> str:
        return f"{self.letter}: {self.protocol} {self.label}"


def _config_key(run: dict) -> tuple:
    overrides = run.get("overrides") or {}
    fixed = tuple(sorted((k, str(v)) for k, v in overrides.items() if not k.startswith("seeds.")))
    return (run.get("protocol_name"), run.get("protocol_hash"), run.get("mutant"), fixed)


def run_labels(views: Sequence[ArchiveView]) -> list[str]:
    """A label per archive from what the runs are (see the module docstring)."""
    labels: list[str] = []
    keys = [_config_key(v.run) for v in views]
    replications: dict[tuple, int] = {}
    for i, view in enumerate(views):
        run = view.run
        if run.get("label"):
            labels.append(str(run["label"]))
            continue
        if keys[i] in keys[:i]:
            replications[keys[i]] = replications.get(keys[i], 0) + 1
            count = replications[keys[i]]
            labels.append("replication" if count == 1 else f"replication {count}")
        elif run.get("mutant"):
            labels.append(f"mutant {run['mutant']}")
        elif any(
            v.run.get("protocol_name") == run.get("protocol_name") and not v.run.get("mutant")
            for v in views[:i]
        ):
            labels.append("candidate")
        else:
            labels.append("primary")
    # The first run of a configuration that a candidate changes is the base.
    for i, label in enumerate(labels):
        if label != "primary":
            continue
        name = views[i].run.get("protocol_name")
        if any(
            labels[j] == "candidate" and views[j].run.get("protocol_name") == name
            for j in range(i + 1, len(views))
        ):
            labels[i] = "base"
    return labels


def relabel(views: Sequence[ArchiveView]) -> list[ArchiveView]:
    """The views with their labels from the runs (see `run_labels`)."""
    protocols = {v.run.get("protocol_name") for v in views}
    out = []
    for view, label in zip(views, run_labels(views), strict=True):
        if len(protocols) > 1:
            label = f"{view.run.get('protocol_name', '?')} {label}"
        out.append(replace(view, label=label))
    return out


def run_facts(views: Sequence[ArchiveView], pubkey: Path | None = None) -> list[RunFacts]:
    """Facts per archive; with `pubkey`, each archive is verified in full (digests,
    signature, recomputation) and an invalid one raises EvidenceError."""
    facts = []
    for index, view in enumerate(views):
        contents = read_archive(view.path)
        env = _json_or_empty(contents, "environment.json")
        facts.append(
            RunFacts(
                letter=LETTERS[index % len(LETTERS)],
                protocol=str(view.run.get("protocol_name", "?")),
                label=view.label,
                commit=commit_line(env),
                device=device_line(view.run, env),
                command=command_line(view.run),
                signature=_signature(view, contents.files.get(ATTESTATION_NAME), pubkey),
            )
        )
    return facts


def _json_or_empty(contents, name: str) -> dict:
    try:
        value = contents.json(name)
    except EvidenceError:
        return {}
    return value if isinstance(value, dict) else {}


def commit_line(env: dict) -> str:
    raw = env.get("git")
    git: dict = raw if isinstance(raw, dict) else {}
    commit = git.get("commit")
    if not commit:
        return "not recorded"
    dirty = git.get("dirty")
    state = " (dirty)" if dirty else (" (clean)" if dirty is False else "")
    return f"{str(commit)[:12]}{state}"


def engine_line(run: dict) -> str:
    """The engine the run drove (run.json engine_adapter.engine, issue 36): package,
    version and commit of its checkout; "not recorded" for older archives."""
    adapter = run.get("engine_adapter")
    engine = adapter.get("engine") if isinstance(adapter, dict) else None
    if not isinstance(engine, dict) or not engine.get("package"):
        return "not recorded"
    text = f"{engine['package']} {engine.get('version') or '(no version)'}"
    if engine.get("commit"):
        text += f" @ {commit_line({'git': engine})}"
    return text


def device_line(run: dict, env: dict) -> str:
    device = str(run.get("device", "?"))
    raw = env.get("torch")
    torch: dict | None = raw if isinstance(raw, dict) else None
    if torch is None:
        return f"{device}; torch not recorded"
    parts = [f"torch {torch.get('version', '?')}"]
    if torch.get("cuda"):
        parts.append(f"CUDA {torch['cuda']}")
    if torch.get("triton"):
        parts.append(f"triton {torch['triton']}")
    gpus = torch.get("gpus") or []
    names = sorted({str(g.get("name", "?")) for g in gpus if isinstance(g, dict)})
    hardware = f"{len(gpus)}x {', '.join(names)}" if gpus and device == "cuda" else "CPU"
    return f"{device}: {hardware}; {', '.join(parts)}"


def command_line(run: dict) -> str:
    command = run.get("command")
    if isinstance(command, list) and command:
        return shlex.join(str(c) for c in command)
    return "not recorded"


def _signature(view: ArchiveView, envelope: bytes | None, pubkey: Path | None) -> str:
    if envelope is None:
        return "UNSIGNED"
    if pubkey is not None:
        from specconform.verification import verify_archive

        report = verify_archive(view.path, pubkey)
        return f"verified, key id {str(report.keyid)[:16]}"
    from specconform.evidence.signing import open_envelope

    try:
        _, _, signatures = open_envelope(envelope, ATTESTATION_NAME)
        keyids = ", ".join(str(s.get("keyid"))[:16] for s in signatures if isinstance(s, dict))
    except EvidenceError:
        keyids = "unreadable"
    return f"signed (key id {keyids}), NOT verified: pass --pubkey"


def _overlap(a: SeedRange, b: SeedRange) -> bool:
    return max(a[0], b[0]) < min(a[1], b[1])


def seed_lines(views: Sequence[ArchiveView], facts: Sequence[RunFacts]) -> list[str]:
    """Disjointness of the seed pairs that matter, one line per archive or pair:
    inside an archive, the two groups of every two-sample test; across archives, a
    replication against the run it replicates, group by group. A mutant or candidate
    run is compared through its own tests, so its seeds may repeat the base's."""
    lines = []
    for view, fact in zip(views, facts, strict=True):
        disjoint, split, overlap = [], [], []
        for row in view.evaluation.tests:
            pair_of = two_groups(row.detail)
            if pair_of is None:
                continue
            ga, gb, seed_split = pair_of
            ra, rb = view.seed_ranges.get(ga), view.seed_ranges.get(gb)
            pair = f"{ga}/{gb}"
            if ra is None or rb is None:
                continue
            if not _overlap(ra, rb):
                disjoint.append(pair)
            elif "disjoint seeds" in seed_split:
                split.append(pair)  # shared range, split by the test (e.g. even/odd seeds)
            else:
                overlap.append(f"{pair} {format_range(ra)} and {format_range(rb)}")
        if disjoint or split or overlap:
            parts = []
            if disjoint:
                parts.append(f"disjoint ranges {', '.join(disjoint)}")
            if split:
                parts.append(f"one range split into disjoint seeds {', '.join(split)}")
            if overlap:
                parts.append(f"OVERLAPPING {'; '.join(overlap)}")
            lines.append(f"{fact.letter} two-sample pairs: {'; '.join(parts)}")
    labels = [f.label for f in facts]
    for i, (view, fact) in enumerate(zip(views, facts, strict=True)):
        if not labels[i].startswith("replication"):
            continue
        key = _config_key(view.run)
        earlier = [j for j in range(i) if _config_key(views[j].run) == key]
        for j in earlier:
            # Any shared seed matters, across groups too: the same seed in two groups can
            # share randomness, so the replication would not be independent evidence.
            other = views[j]
            if not view.seed_ranges or not other.seed_ranges:
                lines.append(f"{fact.letter} vs {facts[j].letter}: no seed ranges recorded")
                continue
            bad = [
                f"{o.first_group} {format_range(o.first_range)} and {o.second_group} "
                f"{format_range(o.second_range)}"
                for o in cross_archive_overlaps([other, view])
            ]
            if bad:
                lines.append(
                    f"{fact.letter} vs {facts[j].letter}: NOT independent, seeds "
                    f"overlap: {'; '.join(bad)}"
                )
            else:
                lines.append(
                    f"{fact.letter} vs {facts[j].letter}: disjoint seeds across all "
                    f"{len(view.seed_ranges)} groups"
                )
    return lines
