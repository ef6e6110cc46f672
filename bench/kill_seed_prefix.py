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

    .venv/bin/python bench/kill_seed_prefix.py /tmp/km-NAME/*.zip

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


def prefix_verdicts(archive: Path, sizes: list[int]) -> list[tuple[int, str, list[str]]]:
    z = zipfile.ZipFile(archive)
    protocol = json.loads(_member(z, "/protocol.json"))
    requests = pd.read_csv(
        io.BytesIO(_member(z, "raw/sequence/requests.csv")), keep_default_na=False
    )
    tokens = pd.read_csv(io.BytesIO(_member(z, "raw/sequence/tokens.csv")))
    checks = json.loads(_member(z, "raw/sequence/checks.json"))
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
        out.append((n, ev.verdict.verdict, failing))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("archives", nargs="+", type=Path)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32])
    args = ap.parse_args(argv)
    for archive in args.archives:
        print(f"## {archive.name}")
        for n, verdict, failing in prefix_verdicts(archive, args.sizes):
            print(f"first {n:>3} requests per group: {verdict:<12} {', '.join(failing) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
