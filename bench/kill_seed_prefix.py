"""Seeds a sequence protocol needs to kill a planted bug, measured on one mutant run.

Reads the evidence archive of one `specconform run PROTOCOL --mutant NAME` and
re-evaluates it on prefixes of every group's requests (the first n of each, n = 1, 2,
4, ...: their seeds are `offset + i`, so a prefix is what a run with fewer requests
would have drawn -- requests are isolated, the isolation check's contract), with the
protocol's own tests, strata and Holm rule. Printed per n: the verdict and the deciding
tests that fail. Deterministic checks computed from the committed tokens (``stops``,
``out_of_support``) follow the prefix; the sampled ones (oracle, teacher_forcing,
trace, isolation, greedy_equality) keep the full run's record, so a kill by them is
reported as the full run's (their sample is fixed by the protocol, not by n).

    .venv/bin/python bench/kill_seed_prefix.py /tmp/km-NAME/*.zip [--show TEST ...]
    .venv/bin/python bench/kill_seed_prefix.py /tmp/km-NAME/*.zip --blocks 4

``--blocks n`` re-evaluates disjoint blocks of n requests per group instead (block b:
requests [b n, (b + 1) n) renumbered from 0): replications at size n within one run.

Used for docs/kill-matrix.md, "Configuration, stop and stream bugs" (issue 35).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import zipfile
from pathlib import Path

import pandas as pd

from specconform.adapters.sequence import RequestSpec, SequenceRecord
from specconform.kinds.sequence.evaluate import evaluate_frames
from specconform.results import FAIL
from specconform.runner.sequence_checks import CheckTally
from specconform.runner.sequence_stops import stop_check


def _member(z: zipfile.ZipFile, suffix: str) -> bytes:
    (name,) = [n for n in z.namelist() if n.endswith(suffix)]
    return z.read(name)


def _read_run(archive: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame, dict]:
    """(protocol, requests, tokens, checks) of a sequence archive."""
    z = zipfile.ZipFile(archive)
    protocol = json.loads(_member(z, "/protocol.json"))
    requests = pd.read_csv(
        io.BytesIO(_member(z, "raw/sequence/requests.csv")), keep_default_na=False
    )
    tokens = pd.read_csv(io.BytesIO(_member(z, "raw/sequence/tokens.csv")))
    checks = json.loads(_member(z, "raw/sequence/checks.json"))
    return protocol, requests, tokens, checks


def _stops_record(protocol, requests, tokens) -> dict:
    """checks.json's stops record recomputed from the (prefix's) committed tokens."""
    by_group = {g["name"]: g for g in protocol["groups"]}
    seqs = tokens.sort_values(["group", "request", "step"]).groupby(["group", "request"])
    items = []
    for r in requests.itertuples():
        toks = tuple(int(t) for t in seqs.get_group((r.group, r.request))["token"])
        stops = (
            tuple(int(t) for t in str(r.stop_token_ids).split())
            if r.stop_token_ids == r.stop_token_ids
            else ()
        )
        spec = RequestSpec((), None, float(r.temperature), int(r.top_k), float(r.top_p),
                           int(r.max_tokens), stops, bool(by_group[r.group]["ignore_eos"]))  # fmt: skip
        items.append(
            ({"group": r.group, "request": r.request}, spec, SequenceRecord(toks, r.finish_reason))
        )
    return stop_check(CheckTally("stops", None), items).record()


def _renumbered(frame: pd.DataFrame, lo: pd.Series, hi: pd.Series) -> pd.DataFrame:
    """Rows of requests [lo, hi) of each group, requests renumbered from 0."""
    keep = (frame["request"] >= frame["group"].map(lo)) & (
        frame["request"] < frame["group"].map(hi)
    )
    out = frame[keep].copy()
    out["request"] = out["request"] - out["group"].map(lo)
    return out.reset_index(drop=True)


def block_verdicts(
    archive: Path, size: int, show: list[str] = ()
) -> list[tuple[int, str, list[str]]]:
    """Disjoint blocks of `size` requests per group (block b: requests [b size, (b + 1)
    size) of each group holding them; a group with fewer, e.g. the small greedy groups,
    gives its first `size` to every block), each evaluated as a run of `size` requests
    per group: independent replications at that size for the groups that hold every
    block (their seeds are disjoint). As many blocks as the smallest random group holds."""
    protocol, requests, tokens, checks = _read_run(archive)
    count = {g["name"]: g["requests"] or protocol["seeds"]["count"] for g in protocol["groups"]}
    random = requests[requests["seed"] >= 0]["group"].unique()
    blocks = min(count[g] // size for g in random)
    out = []
    for b in range(blocks):
        proto = json.loads(json.dumps(protocol))
        for g in proto["groups"]:
            g["requests"] = min(size, count[g["name"]])
        lo = pd.Series({g: b * size if count[g] >= (b + 1) * size else 0 for g in count})
        hi = lo + pd.Series({g: min(size, count[g]) for g in count})
        req, tok = _renumbered(requests, lo, hi), _renumbered(tokens, lo, hi)
        chk = dict(checks)
        for t in proto["tests"]:
            if t["type"] == "stops":
                chk[t["name"]] = _stops_record(proto, req, tok)
        ev = evaluate_frames(proto, req, tok, chk)
        failing = [r.test for r in ev.tests if r.deciding and r.status == FAIL]
        for r in ev.tests:
            if r.test in show:
                failing.append(f"[{r.test}: n {r.n}, p {r.pvalue}, p_Holm {r.adjusted_pvalue}]")
        out.append((b, ev.verdict.verdict, failing))
    return out


def prefix_verdicts(
    archive: Path, sizes: list[int], show: list[str] = ()
) -> list[tuple[int, str, list[str]]]:
    protocol, requests, tokens, checks = _read_run(archive)
    out = []
    for n in sizes:
        proto = json.loads(json.dumps(protocol))
        for g in proto["groups"]:
            g["requests"] = min(n, g["requests"] or proto["seeds"]["count"])
        keep = {g["name"]: g["requests"] for g in proto["groups"]}
        req = requests[requests["request"] < requests["group"].map(keep)]
        tok = tokens[tokens["request"] < tokens["group"].map(keep)]
        chk = dict(checks)
        for t in proto["tests"]:
            if t["type"] == "stops":
                chk[t["name"]] = _stops_record(proto, req, tok)
        ev = evaluate_frames(proto, req.reset_index(drop=True), tok.reset_index(drop=True), chk)
        failing = [r.test for r in ev.tests if r.deciding and r.status == FAIL]
        for r in ev.tests:  # --show: the named tests' n, p and Holm-adjusted p at this n
            if r.test in show:
                failing.append(f"[{r.test}: n {r.n}, p {r.pvalue}, p_Holm {r.adjusted_pvalue}]")
        out.append((n, ev.verdict.verdict, failing))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archives", nargs="+", type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    ap.add_argument("--show", nargs="*", default=[], help="tests whose n and p to print")
    ap.add_argument("--blocks", type=int, default=None, help="disjoint blocks of this size")
    args = ap.parse_args(argv)
    for archive in args.archives:
        print(f"## {archive.name}")
        if args.blocks:
            for b, verdict, failing in block_verdicts(archive, args.blocks, args.show):
                print(f"block {b} of {args.blocks} requests per group: {verdict:<12} "
                      f"{', '.join(failing) or '-'}")  # fmt: skip
            continue
        for n, verdict, failing in prefix_verdicts(archive, args.sizes, args.show):
            print(f"first {n:>3} requests per group: {verdict:<12} {', '.join(failing) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
