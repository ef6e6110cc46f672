"""The pre-run power check (issue 32, part 3; specconform.planning.power): a protocol that
states ``power: {target, tv}`` is refused before any work when its seeds give some
deciding test less than that power, unless --allow-inconclusive.

No statistical threshold is asserted: every figure is the planner's deterministic
arithmetic on fixed exact laws (bench/reference/ci_gate-tiny.json), or a law-free bound
checked against it. The negative controls: enough seeds pass the same check, and a
protocol without a target is never checked.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from specconform.calibration import load_reference
from specconform.planning import law_cache, plan_tests
from specconform.planning.power import law_free_bound, power_check
from specconform.protocol.load import apply_overrides, load_protocol
from specconform.runner.assemble import RunRequest, prepare
from specconform.util.errors import UsageError
from tests.toolkit.cli_helpers import ROOT, assert_cli_refused, run_cli

LAWS = ROOT / "bench/reference/ci_gate-tiny.json"
TARGET = "power: {target: 0.8, tv: 0.05}\n"


def _with_target(tmp_path: Path, block: str = TARGET, src: str = "protocols/ci_gate.yaml") -> Path:
    text = (ROOT / src).read_text()
    path = tmp_path / "with_power.yaml"
    path.write_text(text.rstrip("\n") + "\n" + block)
    return path


def _prepare(path: Path, seeds: int, tmp_path: Path, *, allow: bool = False) -> list[str]:
    lines: list[str] = []
    req = RunRequest(protocol=path, out_dir=tmp_path / "out", argv=(), seeds=seeds, sign=False,
                     allow_inconclusive=allow)  # fmt: skip
    prepare(req, notify=lines.append)
    return lines


def _cache_laws(path: Path, monkeypatch, tmp_path: Path) -> None:
    """Put ci_gate's exact laws where `specconform plan` would have cached them."""
    monkeypatch.setenv(law_cache.CACHE_ENV, str(tmp_path / "laws"))
    loaded = load_protocol(path)
    depths = sorted({g.draft_loops for g in loaded.model.groups if g.draft_loops})
    engine = loaded.model.engine.model_dump(mode="json")
    key = law_cache.law_key(loaded.hash, engine, depths, version("torch"))
    assert law_cache.store(key, load_reference(LAWS), pytest.fail) is not None


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(law_cache.CACHE_ENV, str(tmp_path / "empty-cache"))


def test_no_target_no_check_and_hash_unchanged(tmp_path):
    # ci_gate states no target: nothing is said, and the field is out of its hash
    assert _prepare(ROOT / "protocols/ci_gate.yaml", 500, tmp_path, allow=True) == []
    plain = load_protocol(ROOT / "protocols/ci_gate.yaml")
    assert "power" not in plain.data
    assert load_protocol(_with_target(tmp_path)).hash != plain.hash


def test_law_free_refusal_before_any_model(tmp_path):
    path = _with_target(tmp_path)
    with pytest.raises(UsageError) as err:
        _prepare(path, 500, tmp_path)
    line = str(err.value)
    assert "\n" not in line and "law-free bound" in line and "--allow-inconclusive" in line
    # the two-sample test on disjoint seed sets (lambda <= 2 N x^2) needs the most seeds
    assert line.startswith("deciding test t2_async_vs_nospec has power at most 0.029 ")
    assert "needs at least 3,737 seeds per group (and 5 more)" in line
    assert not (tmp_path / "out").exists()


def test_cli_refuses_exit_2_one_line_and_allows_with_flag(tmp_path):
    path = _with_target(tmp_path)
    env = {law_cache.CACHE_ENV: str(tmp_path / "empty")}
    refused = run_cli("run", path, "--seeds", "500", "--out", tmp_path / "o", "--no-sign", env=env)
    assert_cli_refused(refused, 2, "below the protocol's target 0.8")
    # --allow-inconclusive: the same finding as a note, and the run goes on (here it
    # stops at the next check, an unknown mutant: one line, exit 2, no model built)
    allowed = run_cli("run", path, "--seeds", "500", "--out", tmp_path / "o", "--no-sign",
                      "--allow-inconclusive", "--mutant", "no_such_bug", env=env)  # fmt: skip
    assert "note: deciding test t2_async_vs_nospec has power at most" in allowed.stderr
    assert "running anyway (--allow-inconclusive)" in allowed.stderr


def test_cached_laws_give_the_planners_figures(tmp_path, monkeypatch):
    path = _with_target(tmp_path)
    _cache_laws(path, monkeypatch, tmp_path)
    with pytest.raises(UsageError) as err:
        _prepare(path, 2000, tmp_path)
    line = str(err.value)
    # the planner's figures on the exact laws: the two-sample test on disjoint seed sets
    # needs the most seeds (`specconform plan --tv 0.05 --power 0.8` states the same)
    assert line.startswith("deciding test t2_async_vs_nospec has power 0.019 against TV 0.05")
    assert "cached reference laws" in line and "needs 13,613 seeds per group" in line
    assert "(and 7 more)" in line
    # the negative control: at the seeds it asked for, every deciding test reaches 0.8
    lines = _prepare(path, 13_613, tmp_path)
    assert len(lines) == 1 and lines[0].startswith("power: 10 deciding test(s) reach power 0.8")
    assert "not checked" not in lines[0]


def test_unchecked_tests_are_said_not_claimed(tmp_path):
    # no cached laws, seeds above every law-free bound: nothing is refused, and the tests
    # without a law-free bound (or whose bound clears the target) are "not checked"
    lines = _prepare(_with_target(tmp_path), 20_000, tmp_path)
    assert len(lines) == 1 and lines[0].startswith("power: not checked for t1_nospec,")
    assert "acceptance_async" in lines[0] and "score_async" in lines[0]
    assert "specconform plan PROTOCOL" in lines[0]


@pytest.mark.parametrize("seeds", [300, 1000, 2000, 5000, 20000])
def test_law_free_bound_bounds_the_planned_power(seeds, tmp_path):
    """The bound is a theorem about the planner (df >= 1, lambda <= c N x^2): checked
    against the planner on real laws, where it must never fall below the planned power."""
    data = apply_overrides(load_protocol(_with_target(tmp_path)), {"--seeds": seeds}).data
    ref = load_reference(LAWS)
    from specconform.planning import planning_level
    from specconform.stats.power import chi2_power, required_noncentrality

    level, _ = planning_level(data)
    specs = {t["name"]: t for t in data["tests"]}
    checked = 0
    for p in plan_tests(data, ref, seeds, 0.8):
        bound = law_free_bound(specs[p.test], data, seeds, 0.05, level, 0.8)
        if bound is None or p.df < 1 or p.detectable_tv == float("inf"):
            continue
        lam = required_noncentrality(p.df, p.level, 0.8) * (0.05 / p.detectable_tv) ** 2
        assert chi2_power(p.df, lam, p.level).power <= bound[0] + 1e-12, p.test
        checked += 1
    assert checked >= (2 if seeds < 408 else 8)  # only the t1 tests below the strata floor


def test_power_check_api_without_laws_is_law_free(tmp_path):
    data = apply_overrides(load_protocol(_with_target(tmp_path)), {"--seeds": 500}).data
    check = power_check(data, 0.05, 0.8)
    assert {s.test for s in check.shortfalls} == {
        "t1_nospec", "t1_speculative", "t2_async", "t2_async_vs_nospec", "joint_async",
        "joint_async_d1"}  # fmt: skip
    assert all(s.law_free for s in check.shortfalls)
    assert set(check.unchecked) == {
        "score_async",
        "score_async_d1",
        "acceptance_async",
        "acceptance_async_d1",
    }


@pytest.mark.parametrize(
    "block, fragment",
    [
        ("power: {target: 1.5, tv: 0.05}\n", "power.target"),
        ("power: {target: 0.3, tv: 0.05}\n", "power.target"),
        ("power: {target: 0.8}\n", "power.tv"),
        ("power: {target: 0.8, tv: 0.05, alpha: 0.1}\n", "power.alpha"),
    ],
)
def test_bad_power_field_is_one_line_exit_2(tmp_path, block, fragment):
    path = _with_target(tmp_path, block)
    done = run_cli("run", path, "--out", tmp_path / "o", "--no-sign")
    assert_cli_refused(done, 2, fragment)


def test_power_on_another_kind_is_refused(tmp_path):
    path = _with_target(tmp_path, src="protocols/ci_sequence.yaml")
    done = run_cli("run", path, "--out", tmp_path / "o", "--no-sign")
    assert_cli_refused(done, 2, "power")


def test_refusal_imports_no_torch(tmp_path):
    path = _with_target(tmp_path)
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from specconform.util.errors import UsageError\n"
        "from specconform.runner.assemble import RunRequest, prepare\n"
        f"req = RunRequest(protocol=Path({str(path)!r}), out_dir=Path({str(tmp_path)!r}) / 'o', "
        "argv=(), seeds=500, sign=False)\n"
        "try:\n    prepare(req)\nexcept UsageError as e:\n    print('refused:', e)\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: deciding test t2_async_vs_nospec has power"), done.stderr
    assert lines[1] == "False"
