"""Protocol files: strict validation with one-line errors, canonical hash, overrides."""

from pathlib import Path

import pytest
import yaml

from specconform.protocol.load import (
    apply_overrides,
    exact_int,
    json_schema,
    load_protocol,
    overridable_fields,
)
from specconform.util.errors import ProtocolError, UsageError

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = sorted((ROOT / "protocols").glob("*.yaml"))


@pytest.mark.parametrize("path", PROTOCOLS, ids=lambda p: p.name)
def test_bundled_protocols_validate(path):
    loaded = load_protocol(path)
    assert len(loaded.hash) == 64


def _write(tmp_path, data, name="p.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _montecarlo():
    return yaml.safe_load((ROOT / "protocols" / "montecarlo.yaml").read_text())


def test_hash_ignores_key_order_comments_and_formatting(tmp_path):
    data = _montecarlo()
    a = load_protocol(_write(tmp_path, data, "a.yaml"))
    reordered = dict(reversed(list(data.items())))
    text = "# a comment\n" + yaml.safe_dump(reordered, default_flow_style=True)
    (tmp_path / "b.yaml").write_text(text)
    b = load_protocol(tmp_path / "b.yaml")
    assert a.hash == b.hash


def test_hash_changes_with_any_criterion(tmp_path):
    data = _montecarlo()
    base = load_protocol(_write(tmp_path, data, "a.yaml")).hash
    data["alpha"] = 0.02
    assert load_protocol(_write(tmp_path, data, "b.yaml")).hash != base
    data = _montecarlo()
    data["min_expected"] = 10.0
    assert load_protocol(_write(tmp_path, data, "c.yaml")).hash != base


@pytest.mark.parametrize(
    "mutate, field, problem",
    [
        (lambda d: d.update(alpha=1.5), "alpha", "less than 1"),
        (lambda d: d.update(alpha=0), "alpha", "greater than 0"),
        (lambda d: d.update(alpha="0.01"), "alpha", "valid number"),
        (lambda d: d.update(surprise=1), "surprise", "unknown field"),
        (lambda d: d.pop("seeds"), "seeds", "required field is missing"),
        (lambda d: d["seeds"].update(offset=-1), "seeds.offset", "greater than or equal to 0"),
        (lambda d: d["cases"][0].update(K=0), "cases.0.K", "greater than or equal to 1"),
        (lambda d: d["cases"][0].update(draft_lens=[2]), "cases.0", "draft_lens"),
        (lambda d: d.update(kind="bogus"), "(top level)", "unknown kind"),
    ],
)
def test_malformed_protocol_is_one_line_naming_file_field_problem(tmp_path, mutate, field, problem):
    data = _montecarlo()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(ProtocolError) as info:
        load_protocol(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message and f"'{field}'" in message and problem in message
    assert info.value.exit_code == 2


def test_not_yaml_and_not_mapping(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [unclosed\n")
    with pytest.raises(ProtocolError, match="not valid YAML"):
        load_protocol(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ProtocolError, match="mapping"):
        load_protocol(bad)
    with pytest.raises(UsageError, match="cannot read"):
        load_protocol(tmp_path / "missing.yaml")


def test_overrides_are_limited_to_marked_fields_and_recorded(tmp_path):
    loaded = load_protocol(_write(tmp_path, _montecarlo()))
    assert overridable_fields(loaded.model) == {
        "--seeds": "seeds.count",
        "--offset": "seeds.offset",
        "--device": "device",
    }
    over = apply_overrides(loaded, {"--seeds": 5000, "--offset": 2_000_000, "--mutant": None})
    assert over.model.seeds.count == 5000 and over.model.seeds.offset == 2_000_000
    assert over.overrides == {"seeds.count": 5000, "seeds.offset": 2_000_000}
    assert over.hash == loaded.hash  # the hash names the pre-registration
    quad = load_protocol(ROOT / "protocols" / "quadrature.yaml")
    with pytest.raises(UsageError, match="--seeds cannot override a quadrature"):
        apply_overrides(quad, {"--seeds": 10})
    with pytest.raises(ProtocolError, match="seeds.count"):
        apply_overrides(loaded, {"--seeds": 0})


@pytest.mark.parametrize(
    "text, value",
    [("5000", 5000), ("5e3", 5000), ("2e6", 2_000_000), ("2.0E6", 2_000_000), ("1_000", 1000)],
)
def test_exact_int_accepts_scientific_integers(text, value):
    assert exact_int(text, "--seeds") == value


@pytest.mark.parametrize("text", ["2.5", "1e-3", "abc", "-5", "inf", "nan"])
def test_exact_int_rejects_non_integers(text):
    with pytest.raises(UsageError):
        exact_int(text, "--seeds")


def test_json_schema_marks_overridable_fields():
    text = str(json_schema())
    assert "'overridable': '--seeds'" in text and "'overridable': '--offset'" in text


def _distribution():
    return yaml.safe_load((ROOT / "protocols" / "ci_gate.yaml").read_text())


def test_shipped_distribution_protocols_state_a_family_wise_verdict():
    # ci_gate keeps half its alpha as the numerics reserve (issue 32): Holm at 0.005.
    stated = {
        "ci_gate": {"combine": "holm", "alpha": 0.01, "numerics_reserve": 0.005},
        "fp32_t2": {"combine": "holm", "alpha": 0.01},
    }
    for name, verdict in stated.items():
        data = load_protocol(ROOT / "protocols" / f"{name}.yaml").data
        assert data["verdict"] == verdict
        assert data["engine_errors"] == {"tolerance": 0}


def test_verdict_defaults_to_holm_at_alpha_and_changes_the_hash(tmp_path):
    data = _distribution()
    del data["verdict"]
    implicit = load_protocol(_write(tmp_path, data, "a.yaml"))
    assert implicit.data["verdict"] == {"combine": "holm", "alpha": data["alpha"]}
    data["verdict"] = {"combine": "bonferroni", "alpha": 0.01}
    assert load_protocol(_write(tmp_path, data, "b.yaml")).hash != implicit.hash


@pytest.mark.parametrize(
    "verdict, field",
    [
        ({"combine": "fisher", "alpha": 0.01}, "verdict.combine"),
        ({"combine": "holm", "alpha": 1.5}, "verdict.alpha"),
        ({"combine": "holm"}, "verdict.alpha"),
        ({"combine": "holm", "alpha": 0.01, "numerics_reserve": 0.01}, "verdict"),
        ({"combine": "holm", "alpha": 0.01, "numerics_reserve": 0.0}, "verdict.numerics_reserve"),
    ],
)
def test_bad_verdict_rule_is_refused(tmp_path, verdict, field):
    data = {**_distribution(), "verdict": verdict}
    with pytest.raises(ProtocolError, match=f"field '{field}'"):
        load_protocol(_write(tmp_path, data))


def test_numerics_reserve_lowers_the_family_level_and_keeps_old_hashes(tmp_path):
    """The family runs at alpha less the reserve; the stated rate stays alpha; a file
    without the field keeps its hash (the field is left out of the canonical JSON)."""
    from specconform.kinds.verdict import FamilyRule

    data = {**_distribution(), "verdict": {"combine": "holm", "alpha": 0.01}}
    plain = load_protocol(_write(tmp_path, data, "a.yaml"))
    assert "numerics_reserve" not in plain.data["verdict"]
    data["verdict"] = {"combine": "holm", "alpha": 0.01, "numerics_reserve": 0.004}
    reserved = load_protocol(_write(tmp_path, data, "b.yaml"))
    assert reserved.hash != plain.hash
    rule = FamilyRule.from_protocol(reserved.data, ("primary",))
    assert (rule.alpha, rule.level) == (0.01, pytest.approx(0.006))
    assert FamilyRule.from_protocol(plain.data, ("primary",)).level == 0.01


def test_engine_errors_tolerance_must_be_a_count(tmp_path):
    data = {**_distribution(), "engine_errors": {"tolerance": -1}}
    with pytest.raises(ProtocolError, match="engine_errors.tolerance"):
        load_protocol(_write(tmp_path, data))
