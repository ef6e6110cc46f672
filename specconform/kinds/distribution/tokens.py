"""Token-law tests of a distribution protocol: t1, t2 and t3 goodness of fit against the
serial reference, and t2 two-sample homogeneity between groups.

Dependence (issue 5): groups that share seeds can share randomness, so
- t1 over several groups tests each group and combines the p-values as the test states
  (``combine``): Bonferroni (the default, valid under any dependence, but it tests each
  group at alpha / m even when seed-sharing groups draw the very same t1) or Simes
  (``combine: simes``: no level wasted on identical or independent groups, valid under
  the positive dependence that shared seeds give; stats.aggregate.simes). The row
  states the combined p ("p_Bonf" / "p_Simes"), each group's own statistic and p in
  ``per_group``, and has no single statistic;
- two-sample tests compare only disjoint seeds: if the groups' seed sets intersect,
  the first group contributes its even seeds and the second its odd seeds;
- χ² statistics are summed only over strata of one group (disjoint samples).

Samples arrive as counts (:class:`.tally.Cells`): a token's count in a stratum is the sum
of its cells' counts, the same integers the per-seed columns gave.
"""

from __future__ import annotations

import numpy as np

from specconform.details.distribution import GroupsGofDetail, HomogeneityStratum
from specconform.evidence.jsonio import json_number
from specconform.results import TestRow
from specconform.stats import bonferroni, pearson_gof, pearson_homogeneity
from specconform.stats.aggregate import simes
from specconform.stats.cells import dense_on

from .context import Context
from .rows import Coverage, gof_stratum, stratified_row
from .tally import Cells

# A t1_gof test's ``combine`` -> (name, combining function, why it is valid and its
# formula), as the row's detail states them (archived: the words stay as they are).
_COMBINATIONS = {
    "bonferroni": (
        "Bonferroni",
        bonferroni,
        "(they share seeds): p_Bonf = min(1, m * min p_i)",
    ),
    "simes": (
        "Simes",
        simes,
        "(they share seeds: positively dependent): p_Simes = min(1, min_i m * p_(i) / i)",
    ),
}


def t1_gof(ctx: Context, spec: dict) -> tuple[TestRow, Coverage | None]:
    """Each group's t1 against p_t1; several (seed-sharing) groups combined by Bonferroni
    or, where the test says ``combine: simes``, by Simes."""
    results, per_group = [], []
    for name in spec["groups"]:
        cells = ctx.group(name).cells
        cells = cells.take(cells.t1 >= 0)
        tokens, probs, counts = align(*ctx.ref.p1, cells, cells.t1)
        res = pearson_gof(counts, probs, min_expected=ctx.min_expected)
        results.append(res)
        per_group.append(gof_stratum(res, tokens, counts, probs, group=name))
    n = sum(r.n for r in results)
    if len(results) == 1:
        res = results[0]
        detail = GroupsGofDetail(
            groups=tuple(spec["groups"]), per_group=tuple(per_group), combination="single group"
        )
        return ctx.row(spec, res.statistic, res.df, res.pvalue, n, detail, "chi2"), None
    name, combine, why = _COMBINATIONS[spec.get("combine") or "bonferroni"]
    comb = combine([r.pvalue for r in results])
    how = (
        f"{name} over the {comb.m} groups with evidence {why}; each group's statistic, "
        "df and p in per_group"
    )
    method = f"{name} over {comb.m} groups"
    detail = GroupsGofDetail(
        groups=tuple(spec["groups"]),
        per_group=tuple(per_group),
        combination=how,
        smallest_p_group=spec["groups"][comb.argmin] if comb.argmin >= 0 else None,
    )
    return ctx.row(spec, None, None, comb.pvalue, n, detail, method), None


def t2_gof(ctx: Context, spec: dict):
    """t2 against p_t2[t1] per t1 stratum; strata summed."""
    return _stratified_gof(ctx, spec, depth=2)


def t3_gof(ctx: Context, spec: dict):
    """t3 against p_t3[t1, t2] per (t1, t2) stratum; strata summed."""
    return _stratified_gof(ctx, spec, depth=3)


def _stratified_gof(ctx: Context, spec: dict, depth: int):
    name = spec["groups"][0]
    results, per, skipped, eligible = gof_strata(ctx, name, depth)
    head = {"group": name, "skipped_impossible_strata": skipped}
    return stratified_row(ctx, spec, head, results, per, eligible)


def gof_strata(ctx, name: str, depth: int, gof=pearson_gof):
    """Goodness of fit of t2 (depth 2) or t3 (depth 3) per stratum of group ``name``:
    (results, per-stratum records, skipped impossible strata, eligible samples).
    ``gof`` is the per-stratum test (the schema-1 evaluator passes its own reading)."""
    g = ctx.group(name).cells
    ok = (g.t1 >= 0) & (g.t2 >= 0) & ((g.t3 >= 0) if depth == 3 else True)
    g = g.take(ok)
    # One int64 key per conditioning prefix: t1, or (t1, t2) coded as t1 * width + t2.
    key_of = g.t1 if depth == 2 else g.t1 * ctx.width + g.t2
    tested = g.t2 if depth == 2 else g.t3
    keys, _ = g.strata(key_of, ctx.min_samples)
    results, per, skipped = [], [], []
    for key in keys:
        if depth == 2:
            where, law = {"t1": int(key)}, ctx.ref.law(ctx.ref.p2, int(key), "p_t2")
        else:
            t1, t2 = divmod(int(key), ctx.width)
            where, law = {"t1": t1, "t2": t2}, ctx.ref.law(ctx.ref.p3, (t1, t2), "p_t3")
        if law is None:
            skipped.append(where)
            continue
        sel = key_of == key
        tokens, probs, counts = align(*law, g.take(sel), tested[sel])
        res = gof(counts, probs, min_expected=ctx.min_expected)
        results.append(res)
        per.append(gof_stratum(res, tokens, counts, probs, **where))
    return results, per, skipped, g.n


def t2_homogeneity(ctx: Context, spec: dict):
    name_a, name_b = spec["groups"]
    ga, gb = ctx.group(name_a), ctx.group(name_b)
    a = ga.cells.take((ga.cells.t1 >= 0) & (ga.cells.t2 >= 0))
    b = gb.cells.take((gb.cells.t1 >= 0) & (gb.cells.t2 >= 0))
    if ga.pair_seeds.intersects(gb.pair_seeds):
        # Shared seeds can mean shared randomness; two-sample tests need independent
        # samples, so split by seed parity: disjoint seed sets by construction.
        a, b = a.take(a.parity == 0), b.take(b.parity == 1)
        split = (
            f"seed sets overlap: {name_a} uses its even seeds, {name_b} its odd "
            "seeds (disjoint seeds, independent samples)"
        )
    else:
        split = "seed sets disjoint: all samples of both groups"
    keys = np.intersect1d(a.strata(a.t1, ctx.min_samples)[0], b.strata(b.t1, ctx.min_samples)[0])
    results, per = [], []
    for t1 in keys:
        sa, sb = a.take(a.t1 == t1), b.take(b.t1 == t1)
        tokens = np.union1d(sa.t2, sb.t2)
        ca, cb = sa.counts_on(tokens, sa.t2), sb.counts_on(tokens, sb.t2)
        res = pearson_homogeneity(ca, cb, min_expected=ctx.min_expected)
        results.append(res)
        # Key by key on purpose: the record's keys are the archive's, some converted.
        per.append(
            HomogeneityStratum(
                t1=int(t1),
                n=res.n,
                n_a=res.n_a,
                n_b=res.n_b,
                statistic=json_number(res.statistic),
                df=res.df,
                pvalue=json_number(res.pvalue),
                cells=res.cells,
                pooled=tuple(int(tokens[i]) for i in res.pooled),
                tokens=tuple(tokens.tolist()),
                observed_a=tuple(ca.tolist()),
                observed_b=tuple(cb.tolist()),
            )
        )
    head = {"groups": (name_a, name_b), "seed_split": split}
    return stratified_row(ctx, spec, head, results, per, a.n + b.n)


def align(law_tokens: np.ndarray, law_probs: np.ndarray, cells: Cells, values: np.ndarray):
    """`stats.cells.align` on counts: (tokens, probs, counts) over the union of the law's
    support and the tokens observed (``values``, one per cell of ``cells``)."""
    tokens = np.union1d(law_tokens, values)
    return tokens, dense_on(tokens, law_tokens, law_probs), cells.counts_on(tokens, values)
