"""Bad input fails before work (issue 13): every case exits 2 with exactly one line on
stderr, no traceback, and leaves nothing behind (no OUT folder, no `.inprogress`, no
ledger entry, no lock file; files that were there stay byte-identical).

The protocol is a two-group `tiny` run of 8 seeds; every refusal here happens in
`runner.preflight`, before the engine (or torch) is loaded, so each case takes about a
second. Deterministic: no statistics are involved.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import save_file

from specconform.protocol.load import load_protocol
from specconform.runner.execute import make_run_id
from specconform.runner.preflight import MIN_FREE_ENV, engine_module
from tests.toolkit.cli_helpers import ROOT, run_cli

CI_GATE = ROOT / "protocols" / "ci_gate.yaml"


def tiny_protocol(folder: Path, **engine) -> Path:
    """ci_gate cut down to nospec + async (d=2), 8 seeds, 2 tokens; `engine` overrides
    fields of its engine section (a `draft_loops` key sets the async group's)."""
    data = yaml.safe_load(CI_GATE.read_text())
    data["name"] = "tiny_battery"
    data["seeds"]["count"] = 8
    data["engine"].update(batch_size=8, max_tokens=2)
    data["strata"]["min_samples"] = 2
    # 8 seeds are enough for evidence only if 2 samples can be 2 cells (planning.evidence:
    # 2 x min_expected), so that the pre-run evidence check lets the run through
    data["strata"]["min_expected"] = 1.0
    data["groups"] = [
        {"name": "nospec", "mode": "nospec", "seed_offset": 1_000_000},
        {"name": "async", "mode": "async", "draft_loops": engine.pop("draft_loops", 2)},
    ]
    data["tests"] = [
        {"name": "t1_nospec", "type": "t1_gof", "role": "prerequisite", "groups": ["nospec"]},
        {"name": "t2_async", "type": "t2_gof", "role": "primary", "groups": ["async"]},
    ]
    data["decision_roles"] = ["prerequisite", "primary"]
    data["engine"].update(engine)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for folders)."""
    return {
        p.relative_to(root).as_posix(): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def _checkpoint(
    folder: Path, *, config=None, truncate: bool = False, vocab: int | None = None
) -> Path:
    """A checkpoint directory in Ouro's layout holding only the embedding (enough for
    every header check; a refusal must come before any weight is needed)."""
    cfg = engine_module("config").ModelConfig()
    folder.mkdir(parents=True)
    text = json.dumps(cfg.to_hf_dict()) if config is None else config
    (folder / "config.json").write_text(text)
    shape = (vocab or cfg.vocab_size, cfg.hidden_size)
    save_file(
        {"model.embed_tokens.weight": np.zeros(shape, np.float32)},
        str(folder / "model.safetensors"),
    )
    if truncate:
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    return folder


def _bad_key(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bad.key").write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n")
    return folder / "bad.key"


def _corrupt_ledger(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ledger.jsonl").write_text("not json\n")
    return folder / "ledger.jsonl"


# Each case: (protocol overrides, extra CLI args built from the test folder, env,
# a fragment of the one-line message).
CASES = {
    "offset near 2**63": ({}, lambda t: ["--offset", str(2**63 - 4)], {}, "seed domain [0, 2**63)"),
    "offset 1e30": ({}, lambda t: ["--offset", "1e30"], {}, "seed domain [0, 2**63)"),
    "draft depth = R": (
        {"draft_loops": 4},
        lambda t: [],
        {},
        "draft_loops 4 must be below the model's depth R = 4",
    ),
    "prompt id >= vocab": (
        {"prompt": [1, 512]},
        lambda t: [],
        {},
        "token id 512 is outside the vocabulary [0, 512)",
    ),
    "empty prompt": ({"prompt": []}, lambda t: [], {}, "engine.prompt: empty"),
    "missing checkpoint": (
        {"checkpoint": "/nonexistent/ckpt"},
        lambda t: [],
        {},
        "not a directory",
    ),
    "missing config.json": (
        {"checkpoint": "{ckpt_no_config}"},
        lambda t: [],
        {},
        "config.json is missing",
    ),
    "corrupt config.json": (
        {"checkpoint": "{ckpt_bad_config}"},
        lambda t: [],
        {},
        "config.json is not a valid model config",
    ),
    "truncated safetensors": (
        {"checkpoint": "{ckpt_truncated}"},
        lambda t: [],
        {},
        "model.safetensors is not a readable safetensors file",
    ),
    "checkpoint inconsistent": (
        {"checkpoint": "{ckpt_wrong_vocab}"},
        lambda t: [],
        {},
        "config.json says [512, 64]",
    ),
    "--out not writable": (
        {},
        lambda t: ["--out", "/proc/specconform-battery/out"],
        {},
        "not writable",
    ),
    "--out under a file": ({}, lambda t: ["--out", t / "a-file" / "out"], {}, "is not a directory"),
    "--out full": ({}, lambda t: [], {MIN_FREE_ENV: str(1 << 40)}, "a run needs at least"),
    "--ledger not writable": (
        {},
        lambda t: ["--ledger", "/proc/specconform-battery/l.jsonl"],
        {},
        "not writable",
    ),
    "corrupt ledger": (
        {},
        lambda t: ["--ledger", _corrupt_ledger(t / "ledger")],
        {},
        "line 1 is not a ledger entry",
    ),
    "malformed --key": (
        {},
        lambda t: ["--key", _bad_key(t / "keys")],
        {},
        "not an unencrypted PEM private key",
    ),
    "missing --key": ({}, lambda t: ["--key", t / "nokey.pem"], {}, "nokey.pem"),
    "unknown mutant": ({}, lambda t: ["--mutant", "no_such_bug"], {}, "unknown mutant"),
    "mutant name with a path": (
        {},
        lambda t: ["--mutant", "../../x"],
        {},
        "a name of letters, digits",
    ),
    "resume of a non-run": ({}, lambda t: ["--resume", t], {}, "no checkpoint.json"),
}
SIGNED = {"malformed --key", "missing --key"}


def _prepare(tmp_path: Path) -> dict[str, str]:
    cfg = json.dumps(engine_module("config").ModelConfig().to_hf_dict())
    no_config = _checkpoint(tmp_path / "ckpt_no_config")
    (no_config / "config.json").unlink()
    (tmp_path / "a-file").write_text("x")
    return {
        "ckpt_no_config": str(no_config),
        "ckpt_bad_config": str(_checkpoint(tmp_path / "ckpt_bad_config", config="{")),
        "ckpt_truncated": str(_checkpoint(tmp_path / "ckpt_truncated", config=cfg, truncate=True)),
        "ckpt_wrong_vocab": str(_checkpoint(tmp_path / "ckpt_wrong_vocab", vocab=100)),
    }


def _assert_one_line_refusal(proc, fragment: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert fragment in lines[0], lines[0]
    assert proc.stdout == ""


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_exits_2_in_one_line_and_leaves_nothing(tmp_path, case):
    overrides, extra, env, fragment = CASES[case]
    paths = _prepare(tmp_path)
    overrides = {k: (v.format(**paths) if isinstance(v, str) else v) for k, v in overrides.items()}
    protocol = tiny_protocol(tmp_path / "protocol", **overrides)
    args = [str(a) for a in extra(tmp_path)]
    sign = [] if case in SIGNED else ["--no-sign"]
    if "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    before = _tree(tmp_path)
    proc = run_cli("run", protocol, *args, *sign, env=env, timeout=120)
    _assert_one_line_refusal(proc, fragment)
    assert _tree(tmp_path) == before  # nothing created, nothing changed


# --- refusals that depend on earlier runs ------------------------------------------------


def _run_id(protocol: Path) -> str:
    return make_run_id(load_protocol(protocol), None)


def test_rerun_into_the_same_out_explains_the_ledger(tmp_path):
    """The ledger and archive of a finished run are there: the refusal names that
    run as finished and the --offset that continues with fresh seeds."""
    protocol = tiny_protocol(tmp_path / "protocol")
    out = tmp_path / "out"
    out.mkdir()
    run_id = _run_id(protocol)
    (out / f"{run_id}.zip").write_bytes(b"archive")
    entries = [
        {"group": "nospec", "start": 1_000_000, "stop": 1_000_008},
        {"group": "async", "start": 0, "stop": 8},
    ]
    (out / "seed-ledger.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "protocol_name": "tiny_battery",
                    "protocol_hash": "h",
                    "run_id": f"{run_id}@elsewhere:1:abcd",
                    "mutant": None,
                    **e,
                }
            )
            + "\n"
            for e in entries
        )
    )
    before = _tree(tmp_path)
    proc = run_cli("run", protocol, "--out", out, "--no-sign", timeout=120)
    _assert_one_line_refusal(proc, f"earlier run {run_id} (finished: ")
    assert "use --offset 8 (the next free seeds)" in proc.stderr
    assert _tree(tmp_path) == before


def test_interrupted_run_is_described_as_resumable(tmp_path):
    protocol = tiny_protocol(tmp_path / "protocol")
    folder = tmp_path / "out" / f"{_run_id(protocol)}.inprogress"
    (folder / "batches").mkdir(parents=True)
    (folder / "checkpoint.json").write_text("{}")
    before = _tree(tmp_path)
    proc = run_cli("run", protocol, "--out", tmp_path / "out", "--no-sign", timeout=120)
    _assert_one_line_refusal(proc, f"continue it with --resume {folder}")
    assert "interrupted" in proc.stderr
    assert _tree(tmp_path) == before


def test_live_run_is_described_as_live(tmp_path):
    """A process holds the run's lock (as a running `specconform run` does): a second
    run of the same inputs is refused naming its pid, whether or not the first has
    written its checkpoint folder yet."""
    protocol = tiny_protocol(tmp_path / "protocol")
    out = tmp_path / "out"
    out.mkdir()
    lock = out / f".{_run_id(protocol)}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"pid {os.getpid()} on host testhost\n".encode())
        before = _tree(tmp_path)
        proc = run_cli("run", protocol, "--out", out, "--no-sign", timeout=120)
        _assert_one_line_refusal(proc, f"is live (pid {os.getpid()} on host testhost)")
        assert _tree(tmp_path) == before
    finally:
        os.close(fd)
