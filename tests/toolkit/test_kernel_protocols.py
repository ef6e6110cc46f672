"""The kernel protocols end to end through the CLI: PASS on the clean kernel, FAIL
(exit 1) on every planted kernel bug, exit 2 with one line and nothing written on bad
input.

The protocols are deterministic (quadrature: a grid; montecarlo: fixed PCG64 seeds), so
these assertions never flake. Montecarlo: alpha = 0.01 with Bonferroni over its tests;
each kernel mutant moves a cell family by >= 0.05 TV, detected by 200,000 rows with
power > 0.999 (and, being seeded, detected in every run of this suite).
"""

import json

import pytest

from tests.toolkit.cli_helpers import ROOT, run_cli

KERNEL_MUTANTS = ["residual_from_p", "bonus_off_by_one", "shared_uniform"]
PROTOCOLS = ["quadrature", "montecarlo"]


def _lines(proc):
    return [line for line in proc.stdout.splitlines() if line.strip()]


@pytest.mark.parametrize("name", PROTOCOLS)
def test_clean_kernel_passes(tmp_path, name):
    proc = run_cli("run", ROOT / "protocols" / f"{name}.yaml", "--out", tmp_path, "--no-sign")
    assert proc.returncode == 0, proc.stderr
    lines = _lines(proc)
    assert lines[-2] == "result: PASS"
    archive = lines[-1].removeprefix("archive: ")
    assert archive.endswith(".zip") and (tmp_path / archive.split("/")[-1]).exists()
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["verdict"] == "PASS"
    tests = json.loads((run_dir / "results" / "tests.json").read_text())
    assert tests and all(t["passed"] for t in tests)


@pytest.mark.parametrize("mutant", KERNEL_MUTANTS)
@pytest.mark.parametrize("name", PROTOCOLS)
def test_each_kernel_mutant_fails(tmp_path, name, mutant):
    proc = run_cli(
        "run",
        ROOT / "protocols" / f"{name}.yaml",
        "--mutant",
        mutant,
        "--out",
        tmp_path,
        "--no-sign",
    )
    assert proc.returncode == 1, proc.stderr
    assert _lines(proc)[-2] == "result: FAIL"


def test_malformed_protocol_exits_2_with_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (ROOT / "protocols" / "montecarlo.yaml").read_text().replace("alpha: 0.01", "alpha: 1.5")
    )
    out = tmp_path / "out"
    proc = run_cli("run", bad, "--out", out, "--no-sign")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "alpha" in proc.stderr and str(bad) in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--seeds", "10"], "--seeds cannot override"),
        (["--mutant", "no_such_bug"], "unknown mutant"),
        (["--mutant", "greedy_draft"], "engine mutant"),
        (["--device", "tpu"], "tpu"),
    ],
)
def test_bad_options_exit_2(tmp_path, args, needle):
    out = tmp_path / "out"
    proc = run_cli("run", ROOT / "protocols" / "quadrature.yaml", *args, "--out", out, "--no-sign")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and proc.stderr.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("value", ["2.5", "1e-3", "x"])
def test_non_integer_seeds_rejected(tmp_path, value):
    proc = run_cli(
        "run",
        ROOT / "protocols" / "montecarlo.yaml",
        "--seeds",
        value,
        "--out",
        tmp_path / "out",
        "--no-sign",
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1


def test_scientific_seed_options_are_recorded(tmp_path):
    proc = run_cli(
        "run",
        ROOT / "protocols" / "montecarlo.yaml",
        "--seeds",
        "2e4",
        "--offset",
        "2e6",
        "--out",
        tmp_path,
        "--no-sign",
    )
    # At 2e4 rows the rarest positions have no evidence: INCONCLUSIVE, exit 7 (never a
    # PASS without evidence); this test is about what the run records.
    assert proc.returncode in (0, 1, 7) and "result: " in proc.stdout, proc.stderr
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    run = json.loads((run_dir / "run.json").read_text())
    assert run["overrides"] == {"seeds.count": 20000, "seeds.offset": 2000000}
    assert run["command"][-7:-3] == ["--seeds", "2e4", "--offset", "2e6"]


def test_mutants_lists_every_planted_bug():
    proc = run_cli("mutants")
    assert proc.returncode == 0
    for name in KERNEL_MUTANTS + ["greedy_draft", "bf16_q", "async_stale_input"]:
        assert name in proc.stdout


def test_schema_prints_json_schema():
    proc = run_cli("schema")
    assert proc.returncode == 0
    assert "overridable" in json.loads(proc.stdout).__repr__()


def test_two_identical_runs_differ_only_in_the_volatile_file(tmp_path):
    """Same protocol, same seeds, same machine, same command: the archives' members are
    byte-identical except volatile.json and the digest lists that cover it."""
    import zipfile

    from specconform.evidence import compare_archives

    for _ in range(2):
        proc = run_cli(
            "run",
            ROOT / "protocols" / "montecarlo.yaml",
            "--seeds",
            "5000",
            "--out",
            tmp_path,
            "--no-sign",
        )
        # 5,000 rows leave the rarest positions without evidence: INCONCLUSIVE (exit 7),
        # reproducibly.
        assert proc.returncode in (0, 1, 7) and "result: " in proc.stdout, proc.stderr
    first, second = sorted(tmp_path.glob("*.zip"), key=lambda p: len(p.name))
    assert second.name == first.name.replace(".zip", "-2.zip")  # never overwritten
    assert compare_archives(first, second) == []
    a, b = zipfile.ZipFile(first), zipfile.ZipFile(second)
    assert a.namelist() == b.namelist()
    differing = {n.split("/", 1)[1] for n in a.namelist() if a.read(n) != b.read(n)}
    assert differing <= {"volatile.json", "SHA256SUMS", "attestation.dsse.json"}
    assert "volatile.json" in differing
