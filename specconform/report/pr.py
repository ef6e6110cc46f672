"""One Markdown page for a pull request: every archive of the PR on one page, in the shape
of a PR's "Test Result" section.

Sections, each present only when an archive feeds it:

- **Functional checks**: kernel kinds (quadrature, montecarlo: one row per archive),
  equality (one row per comparison, first divergence named), and every other deciding
  row without a p-value (a deterministic rule: oracle, trace, support, ...);
- **Distribution**: per distribution protocol, its deciding tests with the primary run
  and the replications side by side;
- **Quality**: mcnemar archives (paired correctness), rows with their detail facts;
- **Performance**: per performance archive, tokens/s, TPOT and peak memory of each side
  as mean ± SD [min, max], the ratio and the rule's outcome; then the profiler's
  attribution per phase (:mod:`specconform.report.pr_performance`);
- one section per other kind (sequence, and kinds added later), its rows in the generic
  table, so a new kind renders before it has a section of its own;
- **Evidence**: every archive with its verdict, signature, size and SHA-256.

Failing archives come first, and right after the headline a **Failing tests** section
gives every failing or inconclusive test its card with its diagnosis (where it differs:
:mod:`specconform.report.failing`).

Within one protocol the first archive given is the primary run, the next ones its
replications. Reads archives without verifying them unless a public key is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specconform.details.runs import EqualityDetail
from specconform.evidence.external import MANIFEST_NAME
from specconform.evidence.reader import read_archive
from specconform.kinds.registry import KINDS, Kind
from specconform.report.context import RunFacts, run_facts, run_labels
from specconform.report.failing import failing_cards, failing_markdown
from specconform.report.markdown import VERIFIED_NOTE, VERIFY_NOTE, table
from specconform.report.model import (
    ArchiveView,
    check_cell,
    format_number,
    load_views,
    outcome,
    pvalue_text,
    verdict_statement,
)
from specconform.report.pr_performance import performance_section
from specconform.report.readings import scalar_facts
from specconform.results import TestRow

KERNEL_SECTIONS = ("kernel-grid", "kernel-sampled")


def _kind(name: str) -> Kind | None:
    """The kind table's entry of an archive's kind (None: a kind this build lacks, which
    gets a generic section titled by its name)."""
    return KINDS.get(name)


def _section(name: str) -> str:
    kind = _kind(name)
    return "generic" if kind is None else kind.report_section


@dataclass(frozen=True)
class PrArchive:
    view: ArchiveView
    facts: RunFacts
    kind: str
    protocol: str
    label: str  # context.run_labels: "primary", "replication", "mutant NAME", ...
    size: int  # bytes of the zip
    external: int  # files kept beside it (--max-archive-size)

    @property
    def name(self) -> str:
        return f"{self.protocol} ({self.label})"


def pr_markdown(archives: Sequence[Path], *, pubkey: Path | None = None) -> str:
    views = load_views(archives)
    return render_pr(views, run_facts(views, pubkey), verified=pubkey is not None)


def collect_items(views: Sequence[ArchiveView], facts: Sequence[RunFacts]) -> list[PrArchive]:
    items = []
    # The label says what the run is (context.run_labels: primary, replication, "mutant
    # NAME", candidate, base), never its position: a mutant run of the same protocol was
    # labelled "replication 2" (issue 37).
    labels = run_labels(views)
    for view, fact, label in zip(views, facts, labels, strict=True):
        protocol = str(view.run.get("protocol_name", "?"))
        contents = read_archive(view.path)
        external = 0
        if MANIFEST_NAME in contents.files:
            files = contents.json_object(MANIFEST_NAME).get("files")
            external = len(files) if isinstance(files, list) else 0
        items.append(
            PrArchive(
                view, fact, str(view.run.get("kind", "?")), protocol, label,
                view.path.stat().st_size, external,
            )
        )  # fmt: skip
    return items


def render_pr(
    views: Sequence[ArchiveView],
    facts: Sequence[RunFacts],
    *,
    verified: bool = False,
    cards: bool = True,
) -> str:
    """The page; ``cards`` False leaves out the Failing tests section (the HTML page
    draws its own cards, with plots)."""
    items = failing_items_first(collect_items(views, facts))
    failed = [i for i in items if i.view.evaluation.verdict.verdict != "PASS"]
    commits = sorted({i.facts.commit for i in items})
    out = ["## Test Result", ""]
    out.append(
        f"{len(items)} evidence archives, {len({i.protocol for i in items})} protocols: "
        + (
            "**every verdict PASS**."
            if not failed
            else f"**{len(failed)} FAIL**: {', '.join(i.name for i in failed)}."
        )
    )
    out.append(f"Commit: {', '.join(f'`{c}`' for c in commits)}; device: {_devices(items)}.")
    if cards:
        out += failing_markdown(failing_cards([i.view for i in items], [i.name for i in items]))
    out += functional_section(items)
    out += distribution_section(items)
    for kind in _other_kinds(items):
        out += generic_section(kind, [i for i in items if i.kind == kind])
    out += performance_section([i for i in items if _section(i.kind) == "throughput"], table)
    out += evidence_section(items)
    out += ["", VERIFIED_NOTE if verified else VERIFY_NOTE, ""]
    return "\n".join(out)


def failing_items_first(items: Sequence[PrArchive]) -> list[PrArchive]:
    """Archives whose verdict is not PASS first, the order given kept inside each part
    (labels were given before: they say what a run is, not where it is listed)."""
    return sorted(items, key=lambda i: i.view.evaluation.verdict.verdict == "PASS")


def _devices(items: Sequence[PrArchive]) -> str:
    return "; ".join(sorted({i.facts.device for i in items}))


def _other_kinds(items: Sequence[PrArchive]) -> list[str]:
    """Kinds without a section of their own, mcnemar first (the PR's quality table)."""
    kinds = {i.kind for i in items if _section(i.kind) == "generic"}
    return sorted(kinds, key=lambda k: (not getattr(_kind(k), "report_first", False), k))


# --- functional checks ------------------------------------------------------------------


def functional_section(items: Sequence[PrArchive]) -> list[str]:
    rows: list[list[str]] = []
    for item in items:
        section = _section(item.kind)
        if section in KERNEL_SECTIONS:
            rows.append(_kernel_row(item))
        elif section == "greedy-equality":
            rows += [_equality_row(item, r) for r in item.view.evaluation.tests]
        elif section != "throughput":
            rows += [
                [f"{r.test}", item.name, _facts(r), outcome(r)]
                for r in item.view.evaluation.tests
                if r.deciding and r.pvalue is None and r.status in ("PASS", "FAIL")
            ]
    if not rows:
        return []
    return ["", "### Functional checks", "", *table(["check", "run", "what", "result"], rows)]


def _kernel_row(item: PrArchive) -> list[str]:
    tests = item.view.evaluation.tests
    verdict = item.view.evaluation.verdict
    if _section(item.kind) == "kernel-grid":
        worst = max((r.statistic for r in tests if r.statistic is not None), default=None)
        what = f"{len(tests)} cases, exact output law within the grid bound; max err/bound {_num(worst)}"
    else:
        ps = [r.adjusted_pvalue for r in tests if r.adjusted_pvalue is not None]
        what = (
            f"{len(tests)} tests against analytic laws; smallest p_{verdict.combine or 'adj'} "
            f"{_num(min(ps) if ps else None)}"
        )
    failed = f" (failed: {', '.join(verdict.failed)})" if verdict.failed else ""
    return [f"kernel {item.kind}", item.name, what + failed, f"**{verdict.verdict}**"]


def _equality_row(item: PrArchive, row: TestRow) -> list[str]:
    d = row.detail
    if not isinstance(d, EqualityDetail):
        return [f"greedy equality {row.test}", item.name, _facts(row), outcome(row)]
    what = (
        f"{d.candidate} vs {d.base}: {d.prompts} prompts, "
        f"{d.tokens_compared} tokens, {len(d.divergences)} divergences"
    )
    if d.first:
        what += f"; first: {d.first}"
    return [f"greedy equality {row.test}", item.name, what, outcome(row)]


# --- distribution: primary and replications side by side --------------------------------


def distribution_section(items: Sequence[PrArchive]) -> list[str]:
    dist = [i for i in items if _section(i.kind) == "replications"]
    if not dist:
        return []
    out = ["", "### Distribution", ""]
    for protocol in dict.fromkeys(i.protocol for i in dist):
        runs = [i for i in dist if i.protocol == protocol]
        names = list(
            dict.fromkeys(
                r.test
                for i in runs
                for r in i.view.evaluation.tests
                if r.deciding or r.pvalue is not None
            )
        )
        header = ["test", "role", *[f"{i.label} ({i.view.run.get('device', '?')})" for i in runs]]
        rows = [
            [name, _role(runs, name), *[check_cell(i.view.row(name)) for i in runs]]
            for name in names
        ]
        rows.append(["verdict", "", *[f"**{i.view.evaluation.verdict.verdict}**" for i in runs]])
        seeds = [_seed_text(i) for i in runs]
        out += [f"`{protocol}`: {verdict_statement(runs[0].view.evaluation.verdict)}", ""]
        out += table(header, rows)
        if any(seeds):
            out += [
                "",
                "Seeds: "
                + "; ".join(f"{i.label} {s}" for i, s in zip(runs, seeds, strict=True) if s),
            ]
        out.append("")
    return out[:-1]


def _role(runs: Sequence[PrArchive], name: str) -> str:
    row = next((r for i in runs if (r := i.view.row(name)) is not None), None)
    return "" if row is None else row.role + (" *" if row.deciding else "")


def _seed_text(item: PrArchive) -> str:
    ranges = item.view.seed_ranges
    return ", ".join(f"{g} [{a}, {b})" for g, (a, b) in sorted(ranges.items()))


# --- generic sections (mcnemar, sequence, kinds added later) -----------------------------


def generic_section(kind: str, items: Sequence[PrArchive]) -> list[str]:
    title = getattr(_kind(kind), "report_title", None)
    out = ["", f"### {title or f'Kind `{kind}`'}", ""]
    for item in items:
        verdict = item.view.evaluation.verdict
        out += [f"`{item.name}`: **{verdict.verdict}**; {verdict_statement(verdict)}", ""]
        out += table(
            ["test", "role", "statistic", "p-values", "n", "facts", "result"],
            [
                [
                    r.test, r.role + (" *" if r.deciding else ""), _num(r.statistic),
                    "—" if r.pvalue is None and r.adjusted_pvalue is None else pvalue_text(r),
                    str(r.n), _facts(r), outcome(r),
                ]
                for r in item.view.evaluation.tests
            ],
        )  # fmt: skip
        out.append("")
    return out[:-1]


def _facts(row: TestRow, limit: int = 5) -> str:
    """The first scalar entries of a row's detail (wins, losses, accuracy, ...): what a
    kind without its own section still says about each row."""
    parts = []
    for key, value in scalar_facts(row.detail):
        if value == "":  # an empty text field (a check's `why` when it applies) says nothing
            continue
        if len(str(value)) <= 40:
            parts.append(f"{key} {_num(value) if isinstance(value, float) else value}")
        if len(parts) == limit:
            break
    return ", ".join(parts) or (row.reason or "—")


# --- evidence ------------------------------------------------------------------------------


def evidence_section(items: Sequence[PrArchive]) -> list[str]:
    rows = [
        [
            f"`{i.view.path.name}`", i.protocol, i.kind, i.label,
            f"**{i.view.evaluation.verdict.verdict}**", i.facts.signature,
            human_size(i.size) + (f" (+{i.external} files beside it)" if i.external else ""),
            f"`{i.view.sha256}`",
        ]
        for i in items
    ]  # fmt: skip
    header = ["archive", "protocol", "kind", "run", "verdict", "signature", "size", "SHA-256"]
    return ["", "### Evidence", "", *table(header, rows)]


def human_size(n: int) -> str:
    for unit, scale in (("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _num(x) -> str:
    if isinstance(x, float) and math.isfinite(x):
        return f"{x:.4g}"
    return format_number(x) if not isinstance(x, int) else str(x)
