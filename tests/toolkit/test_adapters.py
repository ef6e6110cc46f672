"""The engine adapter interface: the worked example passes end to end, a planted bug
through an adapter fails, and every broken adapter is one line, exit 2, nothing in --out.

examples/my_adapter.yaml is pre-registered at alpha = 0.01 per test (fixed seeds, so the
clean PASS below is deterministic; a fresh seed range would falsely fail with probability
at most 5 x 0.01). The planted wrong_residual bug moves p(t2 | t1) by far more than the
t2 fit's detection threshold at 1,500 seeds (observed p ~ 1e-8): power ~1, no flake.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from specconform.adapters.checks import CheckedEngine
from specconform.adapters.engine import AdapterError, SeedRecord, TokenEvent, load_engine
from specconform.protocol.load import load_protocol
from tests.toolkit.cli_helpers import ROOT, run_cli

EXAMPLE = ROOT / "examples" / "my_adapter.yaml"
HERE = "tests.toolkit.test_adapters"


def _protocol(tmp_path: Path, name: str, **engine) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["name"] = name
    data["engine"].update(engine)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _spec(**engine):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["engine"].update(engine)
    return load_protocol_from(data).engine


def load_protocol_from(data):
    from specconform.protocol.load import validate

    return validate(data, "<test>")


# -- the worked example, end to end ---------------------------------------------------


def test_worked_example_passes_and_records_the_adapter(tmp_path):
    """The exact example docs/adapters.md walks through."""
    proc = run_cli("run", EXAMPLE, "--out", tmp_path, "--no-sign")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "result: PASS" in proc.stdout
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    run = json.loads((run_dir / "run.json").read_text())
    adapter = run["engine_adapter"]
    assert adapter["name"] == "toy-numpy-engine" and adapter["version"] == "1.0"
    assert adapter["source"] == "examples.my_adapter.ToyEngine"
    import hashlib

    digest = hashlib.sha256((ROOT / "examples" / "my_adapter.py").read_bytes()).hexdigest()
    assert adapter["source_sha256"] == digest
    assert adapter["capabilities"]["draft_law"] is True


def test_planted_bug_through_an_adapter_fails(tmp_path):
    """Negative control: corrections drawn from p instead of max(p - q, 0)."""
    path = _protocol(
        tmp_path,
        "my_adapter_planted",
        options={"vocab": 8, "draft_noise": 1.0, "plant": "wrong_residual"},
    )
    proc = run_cli("run", path, "--out", tmp_path / "out", "--no-sign")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    run_dir = next(p for p in (tmp_path / "out").iterdir() if p.is_dir())
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert {"t2_sync", "t2_sync_vs_nospec"} <= set(verdict["failed"])


# -- broken adapters ------------------------------------------------------------------


class _Broken:
    """The toy engine with one thing wrong (selected by `how`)."""

    def __init__(self, how: str):
        from examples.my_adapter import factory

        self.how = how
        # top-k 4 leaves zeros in every law, for the support-only difference
        self._inner = factory(_spec(top_k=4) if how == "batched_support" else _spec())
        self.vocab_size = self._inner.vocab_size
        self.prompt = self._inner.prompt

    def describe(self):
        d = self._inner.describe()
        if self.how.startswith("batched_"):
            d["capabilities"] = {
                **d["capabilities"],
                "batched_target_laws": True,
                "batched_draft_laws": True,
            }
        return d

    def target_laws(self, prefixes):
        laws = [self._inner.target_law(p) for p in prefixes]
        if self.how == "batched_differs":
            laws[-1] = np.roll(laws[-1], 1)
        if self.how == "batched_middle":
            laws[len(laws) // 2] = np.roll(laws[len(laws) // 2], 1)
        if self.how in ("batched_rounding", "batched_beyond_rounding"):
            # Mass moved between the two largest tokens: 3e-5 is float32 summation order
            # on CUDA (within BATCHED_TOLERANCE 1e-4), 3e-4 is not.
            shift = 3e-5 if self.how == "batched_rounding" else 3e-4
            law = laws[-1].astype(np.float64)
            top = np.argsort(law)[-2:]
            law[top[0]] += shift
            law[top[1]] -= shift
            laws[-1] = law
        if self.how == "batched_support":  # within 1e-6 everywhere, one token more
            law = laws[0].copy()
            law[np.flatnonzero(law == 0)[0]] = 1e-9
            law[np.argmax(law)] -= 1e-9
            laws[0] = law
        return laws

    def draft_laws(self, prefixes, depth):
        laws = [self._inner.draft_law(p, depth) for p in prefixes]
        if self.how == "batched_draft_differs":
            laws[-1] = np.roll(laws[-1], 1)
        return laws

    def run_group(self, group, seeds, progress=None):
        if self.how == "exits":  # an adapter that ends the process "successfully"
            raise SystemExit(0)
        recs = self._inner.run_group(group, seeds[:1] * len(seeds), progress)
        recs = [dataclasses.replace(r, seed=s) for r, s in zip(recs, seeds, strict=True)]
        r = recs[0]
        if self.how == "short":
            return recs[:-1]
        if self.how == "token_range":
            recs[0] = dataclasses.replace(r, tokens=(r.tokens[0], self.vocab_size, 0))
        if self.how == "accepted_gt_drafted" and r.rounds:
            recs[0] = dataclasses.replace(r, rounds=((1, 2),) + r.rounds[1:])
        if self.how == "two_closing" and r.rounds:
            ev = (
                TokenEvent(-1, -1, "target"),
                TokenEvent(0, 0, "correction"),
                TokenEvent(0, 1, "bonus"),
            )
            recs[0] = dataclasses.replace(r, events=ev)
        if self.how == "not_a_record":
            recs[0] = {"seed": r.seed, "tokens": r.tokens}
        return recs

    def target_law(self, prefix):
        law = self._inner.target_law(prefix)
        if self.how == "torch_law":
            import torch

            return torch.as_tensor(law)
        if self.how == "wrong_shape":
            return law[:-1] / law[:-1].sum()
        if self.how == "unnormalised":
            return law * 2
        return law

    def draft_law(self, prefix, depth):
        return self._inner.draft_law(prefix, depth)


def broken(spec, *, mutant=None, log=print):
    """Factory for the CLI tests: engine.options.how selects the defect."""
    return _Broken(spec.options["how"])


def raising(spec, *, mutant=None, log=print):
    raise RuntimeError("cannot reach the server\nsecond line")


def exiting(spec, *, mutant=None, log=print):
    raise SystemExit(0)


def _checked(how: str) -> CheckedEngine:
    return CheckedEngine(_Broken(how), "test:broken", _spec())


def _group(mode="sync"):
    from specconform.protocol.schema import Group

    return Group(name=mode, mode=mode, draft_loops=None if mode == "nospec" else 1)


# (how the adapter is broken, message) by the method that meets it.
BROKEN_RUN = [
    ("short", "returned 2 records for 3 seeds"),
    ("token_range", "token 8 outside [0, 8)"),
    ("accepted_gt_drafted", "breaks 0 <= accepted <= drafted"),
    ("two_closing", "do not fit"),
    ("not_a_record", "expected a SeedRecord"),
]
BROKEN_LAW = [
    ("torch_law", "returned Tensor, expected a numpy array (convert with"),
    ("wrong_shape", "has shape (7,), expected (8,)"),
    ("unnormalised", "sums to 2, not 1"),
]
BROKEN_BATCHED = [
    ("batched_differs", "batched must equal serial"),
    ("batched_middle", "target_laws()[2] differs from the one-prefix law"),
    ("batched_support", "support differs; batched must equal serial"),
    ("batched_beyond_rounding", "target_laws()[3] differs from the one-prefix law by 0.0003"),
]


@pytest.mark.parametrize(
    "how, method, message",
    [
        *((how, "run", message) for how, message in BROKEN_RUN),
        *((how, "law", message) for how, message in BROKEN_LAW),
        *((how, "batched", message) for how, message in BROKEN_BATCHED),
        ("batched_draft_differs", "draft_batched", "draft_laws()[4] differs"),
    ],
)
def test_each_broken_answer_is_one_named_line(how, method, message):
    engine = _checked(how)
    with pytest.raises(AdapterError) as info:
        if method == "run":
            engine.run_group(_group(), [10, 11, 12])
        elif method == "law":
            engine.target_law(engine.prompt)
        elif method == "draft_batched":
            engine.draft_laws([engine.prompt + [t] for t in range(5)], 1)
        else:
            engine.target_laws([engine.prompt + [t] for t in range(4)])
    text = str(info.value)
    assert text.startswith("engine adapter test:broken: ") and message in text, text
    assert "\n" not in text


def test_batched_laws_equal_to_serial_are_used():
    engine = _checked("batched_equal")
    prefixes = [engine.prompt + [t] for t in range(5)]
    batched = engine.target_laws(prefixes)
    assert all(
        np.array_equal(b, engine.target_law(p)) for b, p in zip(batched, prefixes, strict=True)
    )
    drafts = engine.draft_laws(prefixes, 1)
    assert all(
        np.array_equal(b, engine.draft_law(p, 1)) for b, p in zip(drafts, prefixes, strict=True)
    )


def test_batched_laws_within_float_rounding_are_used():
    # The positive side of the batched_beyond_rounding control: 3e-5 of mass moved
    # between two tokens is what another summation order does, and is accepted.
    engine = _checked("batched_rounding")
    prefixes = [engine.prompt + [t] for t in range(4)]
    batched = engine.target_laws(prefixes)
    diff = float(np.max(np.abs(batched[-1] - engine.target_law(prefixes[-1]))))
    assert 2e-5 < diff < 1e-4, diff


def test_nospec_records_without_rounds_and_events_pass_the_checks():
    engine = _checked("none")
    recs = engine.run_group(_group("nospec"), [1, 2, 3])
    assert all(isinstance(r, SeedRecord) and r.rounds == () for r in recs)


def test_adapter_options_are_validated_naming_the_field(tmp_path):
    from specconform.util.errors import UsageError

    with pytest.raises(UsageError, match=r"^engine.options.vocab: "):
        load_engine(_spec(options={"vocab": "eight"}), mutant=None)
    with pytest.raises(UsageError, match=r"^engine.options.colour: Extra inputs"):
        load_engine(_spec(options={"colour": 1}), mutant=None)
    with pytest.raises(UsageError, match="planted bugs belong to the bundled engine"):
        load_engine(_spec(), mutant="greedy_draft")


@pytest.mark.parametrize(
    "engine, message",
    [
        ({"adapter": f"{HERE}:raising"}, "factory raised RuntimeError: cannot reach the server"),
        ({"adapter": f"{HERE}:broken", "options": {"how": "token_range"}}, "outside [0, 8)"),
        ({"adapter": f"{HERE}:missing"}, "has no callable 'missing'"),
        ({"adapter": "no_such_module_xyz:factory"}, "cannot import no_such_module_xyz"),
        # SystemExit(0) from an adapter ended the run with exit 0, leaving .inprogress and
        # its ledger reservation behind (issue 37): an adapter's exit is its failure.
        ({"adapter": f"{HERE}:exiting"}, "factory raised SystemExit: 0"),
        ({"adapter": f"{HERE}:broken", "options": {"how": "exits"}}, "raised SystemExit: 0"),
    ],
)
def test_broken_adapter_exits_2_with_one_line_and_leaves_out_untouched(tmp_path, engine, message):
    path = _protocol(tmp_path, "broken_adapter", **engine)
    out = tmp_path / "out"
    # 20 seeds cannot give a stratum of 150 evidence: allowed, the adapter is under test
    proc = run_cli("run", path, "--out", out, "--no-sign", "--seeds", "20", "--allow-inconclusive")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not out.exists()  # no checkpoint, no ledger, no archive


def test_a_broken_adapter_restores_an_existing_ledger(tmp_path):
    out = tmp_path / "out"
    ok = run_cli(
        "run", _protocol(tmp_path, "ledger_ok"), "--out", out, "--no-sign", "--seeds", "300"
    )
    assert ok.returncode in (0, 1, 7), ok.stderr[-2000:]
    before = sorted(p.name for p in out.iterdir())
    ledger = (out / "seed-ledger.jsonl").read_bytes()
    bad = _protocol(
        tmp_path, "ledger_bad", adapter=f"{HERE}:broken", options={"how": "token_range"}
    )
    proc = run_cli("run", bad, "--out", out, "--no-sign", "--seeds", "20", "--allow-inconclusive")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == before
    assert (out / "seed-ledger.jsonl").read_bytes() == ledger


def test_the_bundled_engine_is_still_the_default():
    protocol = load_protocol(ROOT / "protocols" / "ci_gate.yaml").model
    assert protocol.engine.adapter == "bundled" and protocol.engine.options == {}
    with pytest.raises(Exception, match="exactly one of engine.preset or engine.model"):
        data = yaml.safe_load((ROOT / "protocols" / "ci_gate.yaml").read_text())
        del data["engine"]["preset"]
        load_protocol_from(data)


def test_peer_import_failure_of_any_kind_is_one_line_and_repeats_its_cause(tmp_path, monkeypatch):
    """A peer whose import raises a RuntimeError (vLLM 0.33 on torch 2.11: a compiled
    extension missing, then a re-registration error on the second try) gives one
    UsageError line naming the first cause, on every attempt."""
    from specconform.adapters import peers
    from specconform.util.errors import UsageError

    (tmp_path / "broken_peer_xyz.py").write_text("raise RuntimeError('built for torch 2.14')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(peers, "_IMPORT_FAILURES", {})
    for _ in range(2):
        with pytest.raises(UsageError, match=r"RuntimeError: built for torch 2\.14") as info:
            peers.import_module("broken_peer_xyz", "broken", "broken==1")
        assert "\n" not in str(info.value) and "pip install broken==1" in str(info.value)
