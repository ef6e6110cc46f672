"""The sequence runner (specconform/runner/sequence.py) and its deterministic checks.

End to end on CPU with a reduced copy of protocols/ci_sequence.yaml (a few requests of
a few tokens: seconds): the raw files' columns and order follow
specconform/kinds/sequence/raw.py and two runs give identical bytes. The comparison
logic of the trace, isolation and greedy checks is driven with synthetic inputs here:
each check is deterministic (no α), and each has a negative control that FAILs it
(a bf16-rounded q, as the planted bf16_q does; a divergent solo run; an unpaired
greedy request).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from specconform.adapters.sequence import RequestSpec, RoundTrace, SequenceRecord
from specconform.kinds.sequence import raw as seq_raw
from specconform.protocol.load import load_protocol
from specconform.runner import sequence as runner
from specconform.runner import sequence_checks as sc
from specconform.runner import sequence_requests as requests_plan
from specconform.runner.context import RunContext
from specconform.util.errors import UsageError
from specconform.util.progress import silent
from tests.toolkit.cli_helpers import ROOT, run_cli
from tests.toolkit.fixtures.sequence_run import TINY_CPU_ENGINE
from tests.toolkit.plain_adapter import PlainAdapter

SMALL = {
    "kind": "sequence",
    "name": "seq_small",
    "alpha": 0.01,
    "engine": {**TINY_CPU_ENGINE, "max_tokens": 16},
    "prompts": ["default", [7, 3, 101, 45, 9, 250, 12, 5]],
    "seeds": {"count": 4, "offset": 0},
    "pit_seed": 7,
    "groups": [
        {
            "name": "async_mixed",
            "mode": "async",
            "draft_loops": 2,
            "requests": 4,
            "max_num_seqs": 2,
            "prompts": [0, 1],
            "max_tokens": [16, 10],
            "sampling": [
                {"temperature": 1.4, "top_p": 0.9},
                {"temperature": 0.6, "top_k": 20},
                {"temperature": 0.0},
                {"temperature": 1.0},
            ],
            "stop_token_ids": [3, 17],
            "ignore_eos": False,
        },
        {
            "name": "nospec_greedy",
            "mode": "nospec",
            "requests": 2,
            "prompts": [0, 1],
            "max_tokens": [12],
            "sampling": [{"temperature": 0.0}],
        },
        {
            "name": "async_greedy",
            "mode": "async",
            "draft_loops": 2,
            "requests": 2,
            "prompts": [0, 1],
            "max_tokens": [12],
            "sampling": [{"temperature": 0.0}],
        },
    ],
    "verdict": {"combine": "holm", "alpha": 0.01},
    "tests": [
        {"name": "pit_async", "type": "pit_uniformity", "role": "primary"},
        {"name": "oracle", "type": "oracle", "role": "conformance", "sample": 4},
        {"name": "tf", "type": "teacher_forcing", "role": "conformance", "sample": 6},
        {"name": "trace_async", "type": "trace", "role": "conformance", "sample": 1},
        {
            "name": "iso",
            "type": "isolation",
            "role": "conformance",
            "groups": ["async_mixed"],
            "sample": 1,
        },
        {
            "name": "greedy",
            "type": "greedy_equality",
            "role": "conformance",
            "groups": ["async_greedy"],
            "against": "nospec_greedy",
        },
    ],
}


def _write(tmp_path: Path, data: dict, name="p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _collect(path: Path, mutant: str | None = None) -> dict[str, bytes]:
    """The raw files of the protocol at ``path`` on its engine, quietly, standalone."""
    return runner.collect(
        load_protocol(path),
        mutant=mutant,
        progress=silent,
        log=lambda line: None,
        context=RunContext.standalone(),
    )


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    path = _write(tmp_path_factory.mktemp("seq"), SMALL)
    return path, _collect(path)


def test_raw_files_follow_the_contract(small_run):
    _, raw = small_run
    assert sorted(raw) == sorted([seq_raw.REQUESTS, seq_raw.TOKENS, seq_raw.CHECKS])
    req = pd.read_csv(io.BytesIO(raw[seq_raw.REQUESTS]), keep_default_na=False)
    tok = pd.read_csv(io.BytesIO(raw[seq_raw.TOKENS]))
    assert tuple(req.columns) == seq_raw.REQUEST_COLUMNS
    assert (
        tuple(tok.columns)
        == seq_raw.TOKEN_COLUMNS
        + seq_raw.MECH_COLUMNS
        + seq_raw.CROSS_COLUMNS
        + seq_raw.FILTER_COLUMNS
    )
    # filter_margin only at zero-probability tokens (none here: no numerics block)
    assert tok["filter_margin"].isna().all()
    # Sorted by (group, request[, step]); one token row per committed token.
    assert list(req["group"]) == sorted(req["group"])
    assert tok.equals(tok.sort_values(["group", "request", "step"], kind="stable"))
    assert req["n_tokens"].sum() == len(tok)
    mixed = req[req["group"] == "async_mixed"]
    assert list(mixed["seed"]) == [0, 1, -1, 3]  # greedy request 2 has no seed
    assert list(mixed["stop_token_ids"]) == ["3 17"] * 4
    assert (req["n_tokens"] <= req["max_tokens"]).all()
    # PIT columns: probabilities, cdf_below + p_token <= 1; the committed token has mass.
    assert ((tok["p_token"] > 0) & (tok["cdf_below"] + tok["p_token"] <= 1 + 1e-6)).all()
    drafted = tok["kind"].isin(["accepted", "correction"])
    assert tok.loc[drafted, "tv"].between(0, 1).all() and tok.loc[~drafted, "tv"].isna().all()
    # Mechanism columns: only at drafted positions; there a clean engine's token has
    # positive conditional mass (a boundary case, both empty, is possible but has
    # probability ~1e-4 per token: none at these seeds).
    assert tok.loc[~drafted, list(seq_raw.MECH_COLUMNS)].isna().all().all()
    mech = tok.loc[drafted]
    assert (mech["mech_p_token"] > 0).all()
    assert (mech["mech_cdf_below"] + mech["mech_p_token"] <= 1 + 1e-9).all()
    assert set(tok.loc[tok["group"] == "nospec_greedy", "kind"]) == {"target"}
    # Crossing columns: exactly at the tokens of the top-p request (async_mixed request 0,
    # T 1.4, top-p 0.9) whose law keeps >= 2 tokens; a probability and a 0/1 hit there.
    top_p = (tok["group"] == "async_mixed") & (tok["request"] == 0)
    assert tok.loc[~top_p, list(seq_raw.CROSS_COLUMNS)].isna().all().all()
    cross = tok.loc[top_p].dropna(subset=["cross_p"])
    assert len(cross) > 0 and cross["cross_p"].between(0, 1).all()
    assert cross["cross_hit"].isin([0.0, 1.0]).all() and cross["cross_hit"].notna().all()
    # Greedy rows: the committed token is the argmax, p_token 1.
    greedy = tok.merge(req[req["temperature"] == 0][["group", "request"]])
    assert (greedy["p_token"] == 1.0).all()


def test_checks_json(small_run):
    _, raw = small_run
    checks = json.loads(raw[seq_raw.CHECKS])
    assert sorted(checks) == ["greedy", "iso", "oracle", "tf", "trace_async"]
    for name in ("oracle", "tf", "iso", "greedy"):
        c = checks[name]
        assert c["applicable"] and c["checked"] > 0 and c["mismatches"] == 0, (name, c)
    # 4 prefixes x the 4 distinct sampling configurations of the protocol.
    assert checks["oracle"]["checked"] == 16
    assert checks["oracle"]["max_abs_diff"] <= checks["oracle"]["tolerance"]
    trace = checks["trace_async"]
    if not trace["applicable"]:  # until the engine exports traces
        assert "trace" in trace["why"] and trace["checked"] == 0


def test_two_runs_give_identical_bytes(small_run):
    path, raw = small_run
    assert _collect(path) == raw


@pytest.mark.parametrize("workers", [1, 3])
def test_law_pass_threads_change_no_byte(small_run, monkeypatch, workers):
    """The law pass reduces requests in a thread pool (runner/sequence_lawpass.py) and
    takes their rows in request order: one thread or three, the same raw files as the
    module's run (which used this machine's cores)."""
    from specconform.runner import sequence_lawpass

    path, raw = small_run
    monkeypatch.setattr(sequence_lawpass, "reduction_workers", lambda: workers)
    assert _collect(path) == raw


def test_teacher_forcing_mismatch_falls_back_to_the_serial_replay(tmp_path, small_run, capsys):
    """A wrong sequence_laws (q as p): the check records mismatches and every row comes
    from the incremental replay, so tokens.csv equals the correct run's up to float32
    rounding (the teacher-forced and incremental forwards differ by a few ulps; the
    wrong laws would differ by ~0.1). The slow fallback is announced on stderr with the
    comparison's numbers, whatever the verbosity."""
    _, raw = small_run
    data = json.loads(json.dumps(SMALL))
    data["engine"]["adapter"] = "tests.toolkit.test_sequence_run:wrong_teacher_factory"
    got = _collect(_write(tmp_path, data))
    a = pd.read_csv(io.BytesIO(got[seq_raw.TOKENS]))
    b = pd.read_csv(io.BytesIO(raw[seq_raw.TOKENS]))
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=0, atol=1e-5)
    tf = json.loads(got[seq_raw.CHECKS])["tf"]
    assert tf["applicable"] and tf["mismatches"] > 0 and tf["examples"]
    warning = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1, warning
    assert f"tf: {tf['checked']} comparisons, {tf['mismatches']} mismatches" in warning[0]
    assert f"recomputed serially, {len(a)} prefixes" in warning[0]


def wrong_teacher_factory(spec, *, mutant=None, log=print):
    from specconform.adapters.bundled import BundledEngine

    engine = BundledEngine(spec, mutant=None, log=log)
    right = engine.sequence_laws

    def swapped(request, tokens, depth):
        p, q = right(request, tokens, depth if depth is not None else 1)
        return q, q if depth is not None else None

    engine.sequence_laws = swapped  # type: ignore[method-assign]
    return engine


# --- synthetic traces -----------------------------------------------------------------

V = 64


def _law(prefix, scale=3.0) -> np.ndarray:
    rng = np.random.default_rng(abs(hash(tuple(prefix))) % 2**32)
    x = rng.standard_normal(V) * scale
    e = np.exp(x - x.max())
    return (e / e.sum()).astype(np.float32)


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 (nearest even), back in float32."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def _traced(q_transform=lambda q: q):
    req = RequestSpec((5, 6), 1, 1.0, 0, 1.0, 8)
    tokens = (1, 2, 3, 4, 5, 6)
    traces = []
    # Round 0 after t1 drafts (9, 2, 7): 2 rejected -> correction 2; round 1 drafts
    # (3, 4, 5), all accepted.
    for r, (plen, drafts) in enumerate([(1, (9, 2, 7)), (2, (3, 4, 5))]):
        base = list(req.prompt) + list(tokens[:plen])
        p = np.stack([_law(base + list(drafts[:j])) for j in range(4)])
        q = np.stack([q_transform(_law(base + list(drafts[:j]), 1.0)) for j in range(3)])
        traces.append(RoundTrace(r, plen, drafts, p, q))
    rec = SequenceRecord(tokens, "length", None, None, tuple(traces))
    tally = sc.CheckTally("trace", 1e-5)
    return sc.trace_check(
        tally,
        [req],
        [rec],
        [{"group": "g", "request": 0}],
        2,
        lambda prefix, r: _law(prefix),
        lambda prefix, r, d: _law(prefix, 1.0),
    )


def test_trace_check_passes_exact_laws():
    tally = _traced()
    assert tally.checked == 2 * (4 + 3) and tally.mismatches == 0 and tally.max_abs_diff == 0


def test_trace_check_fails_bf16_q():
    tally = _traced(_bf16)
    rec = tally.record()
    # bf16 keeps 8 mantissa bits: |Δq| up to ~2**-9 of q, far above 1e-5 on these laws.
    assert rec["mismatches"] == 6 and rec["max_abs_diff"] > 1e-4
    assert {e["law"] for e in rec["examples"]} == {"q"}


def test_isolation_and_greedy_comparisons():
    tally = sc.CheckTally("isolation", None)
    sc.add_token_comparison(tally, (1, 2, 3), (1, 2, 3), {"request": 0})
    sc.add_token_comparison(tally, (1, 2, 3), (1, 5, 3), {"request": 1})
    sc.add_token_comparison(tally, (1, 2), (1, 2, 3), {"request": 2})
    rec = tally.record()
    assert (rec["checked"], rec["mismatches"]) == (3, 2)
    assert [e["first_divergent_step"] for e in rec["examples"]] == [1, 2]
    greedy = RequestSpec((1,), None, 0.0, 0, 1.0, 8)
    rand = RequestSpec((1,), 3, 1.0, 0, 1.0, 8)
    other = RequestSpec((2,), None, 0.0, 0, 1.0, 8)
    assert sc.greedy_pairs([greedy, rand, greedy], [greedy, greedy]) == [(0, 0), (2, 0)]
    assert sc.greedy_pairs([other], [greedy]) == [(0, None)]


def test_unpaired_greedy_request_is_refused_before_running(tmp_path):
    data = json.loads(json.dumps(SMALL))
    data["groups"][2]["max_tokens"] = [13]  # no nospec request of 13 tokens
    loaded = load_protocol(_write(tmp_path, data))
    specs = {
        g.name: requests_plan.build_requests(loaded.model, g, [(1, 2), (3, 4)])
        for g in loaded.model.groups
    }
    with pytest.raises(UsageError, match="no greedy request with the same prompt"):
        requests_plan.greedy_plan(loaded.model, specs)


def test_sample_is_pre_registered():
    class T:
        name, type, sample = "oracle", "oracle", 5

    a = sc.sample_of(T, 100, 7)
    assert a == sc.sample_of(T, 100, 7) and len(set(a)) == 5 and a != sc.sample_of(T, 100, 8)
    assert sc.spread(10, 3) == [0, 4, 9] or sc.spread(10, 3) == [0, 5, 9]


# --- protocols and bad input ----------------------------------------------------------


@pytest.mark.parametrize("name", ["ci_sequence.yaml", "sequence.yaml"])
def test_shipped_protocols_validate(name):
    loaded = load_protocol(ROOT / "protocols" / name)
    assert loaded.kind == "sequence"
    specs = {
        g.name: requests_plan.build_requests(
            loaded.model, g, [(i,) for i in range(len(loaded.model.prompts))]
        )
        for g in loaded.model.groups
    }
    requests_plan.greedy_plan(loaded.model, specs)  # every greedy request has its partner


def no_sequence_factory(spec, *, mutant=None, log=print):
    return PlainAdapter(16, "plain")  # no run_requests(): not a sequence engine


@pytest.mark.parametrize(
    ("adapter", "mutant", "message"),
    [
        ("tests.toolkit.test_sequence_run:no_sequence_factory", None, "has no run_requests()"),
        ("tests.toolkit.test_sequence_run:no_sequence_factory", "bf16_q", "planted bugs belong"),
        ("bundled", "no_such_bug", "unknown mutant"),
        ("bundled", None, "prompts[1]: token 600 outside the engine's vocabulary [0, 512)"),
    ],
)
def test_bad_input_exits_2_in_one_line(tmp_path, adapter, mutant, message):
    data = json.loads(json.dumps(SMALL))
    data["engine"]["adapter"] = adapter
    if adapter == "bundled" and mutant is None:
        data["prompts"][1] = [7, 600]
    args = ["run", _write(tmp_path, data), "--out", tmp_path / "out", "--no-sign"]
    done = run_cli(*args, *(["--mutant", mutant] if mutant else []), timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --- the bundled adapter's trace plumbing, against the engine's trace API -------------


def _simulated_trace(llm, out, q_transform):
    """Per-round traces in the shape of engine_under_test.runners.outputs.RoundTrace
    (round, prefix_len, drafts, p [L+1, V], q [L, V]), built from the serial laws: what
    a correct engine reports. Drafts: the round's accepted tokens, then the committed
    correction in place of the rejected draft (any token would do: the check replays
    the laws at whatever drafts the trace names)."""
    from types import SimpleNamespace

    import torch

    params = out._params
    toks, prompt, traces, plen = list(out.token_ids), list(out.prompt_token_ids), [], 1
    for r, stat in enumerate(out.rounds):
        drafts = (toks[plen : plen + stat.drafted] + [1] * stat.drafted)[: stat.drafted]
        base = prompt + toks[:plen]
        p = torch.stack(
            [llm.target_probabilities(base + drafts[:j], params) for j in range(len(drafts) + 1)]
        )
        q = [llm.draft_probabilities(base + drafts[:j], params, 2) for j in range(len(drafts))]
        q = torch.stack(q) if q else torch.zeros((0, p.shape[1]))
        traces.append(
            SimpleNamespace(
                round=r,
                prefix_len=plen,
                drafts=drafts,
                p=p.numpy(),
                q=q_transform(q.numpy()),
            )
        )
        plen += stat.accepted + 1
    return traces


@pytest.mark.parametrize(("q_transform", "fails"), [(lambda q: q, False), (_bf16, True)])
def test_bundled_trace_plumbing(tmp_path, monkeypatch, q_transform, fails):
    import engine_under_test as eut

    plain = eut.LLM.generate

    def generate(self, prompts, params=None, progress=None, trace=False):
        outs = plain(self, prompts, params, progress)
        if trace:
            for out, prm in zip(outs, params, strict=True):
                out._params = prm
                out.trace = _simulated_trace(self, out, q_transform)
        return outs

    monkeypatch.setattr(eut.LLM, "generate", generate)
    data = json.loads(json.dumps(SMALL))
    data["groups"] = [dict(data["groups"][0], requests=2, max_tokens=[8])]
    data["tests"] = [
        {"name": "pit", "type": "pit_uniformity", "role": "primary"},
        {"name": "trace_async", "type": "trace", "role": "conformance", "sample": 1},
    ]
    trace = json.loads(_collect(_write(tmp_path, data))[seq_raw.CHECKS])["trace_async"]
    assert trace["applicable"] and trace["checked"] > 0
    if fails:  # bf16 q: far past the 1e-5 tolerance on q rows
        assert trace["mismatches"] > 0 and trace["max_abs_diff"] > 1e-4
    else:  # the same serial laws: exactly equal
        assert trace["mismatches"] == 0 and trace["max_abs_diff"] == 0


def shared_rng_isolation(**fields) -> dict:
    """The isolation check (raw/checks.json's entry) of SMALL's first group on the real
    engine under the planted shared_rng: 6 requests through 3 slots, the solo reruns of
    2 of them; ``fields``: more top-level protocol fields (a numerics block, ...)."""
    import tempfile

    data = {**json.loads(json.dumps(SMALL)), **fields}
    data["groups"] = [dict(data["groups"][0], requests=6, max_num_seqs=3)]
    data["tests"] = [
        {"name": "pit", "type": "pit_uniformity", "role": "primary"},
        {"name": "iso", "type": "isolation", "role": "conformance", "sample": 2},
    ]
    with tempfile.TemporaryDirectory() as tmp:
        raw = _collect(_write(Path(tmp), data), mutant="shared_rng")
    return json.loads(raw[seq_raw.CHECKS])["iso"]


def test_isolation_fails_shared_rng():
    """Negative control on the real engine: with the planted shared_rng (every row of a
    round draws the same uniforms) a request's tokens depend on its batch, and its solo
    rerun diverges."""
    iso = shared_rng_isolation()
    assert iso["checked"] == 2 and iso["mismatches"] >= 1
    assert iso["examples"][0]["first_divergent_step"] is not None
