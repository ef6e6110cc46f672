"""A synthetic distribution protocol for the evaluator's unit tests: the fp32_t2 layout
with every secondary pair (sync/async at both depths) so that each test type appears
for each group. Not a shipped protocol: calibration measures the files in protocols/
(bench/calibration_reference.py); this fixture only exercises the evaluator."""

from specconform.calibration import STANDARD_GROUPS

GROUPS = [dict(g) for g in STANDARD_GROUPS]
_SPEC = ["sync", "async", "sync_d1", "async_d1"]
TESTS = (
    [
        {"name": "t1_nospec", "type": "t1_gof", "role": "prerequisite", "groups": ["nospec"]},
        {"name": "t1_speculative", "type": "t1_gof", "role": "prerequisite", "groups": _SPEC},
        {"name": "t2_async", "type": "t2_gof", "role": "primary", "groups": ["async"]},
        {
            "name": "t2_async_vs_nospec",
            "type": "t2_homogeneity",
            "role": "primary",
            "groups": ["async", "nospec"],
        },
    ]
    + [
        {"name": f"t2_{g}", "type": "t2_gof", "role": "secondary", "groups": [g]}
        for g in ("sync", "sync_d1", "async_d1")
    ]
    + [
        {
            "name": f"t2_{g}_vs_nospec",
            "type": "t2_homogeneity",
            "role": "secondary",
            "groups": [g, "nospec"],
        }
        for g in ("sync", "sync_d1", "async_d1")
    ]
    + [
        {
            "name": "t2_async_vs_sync",
            "type": "t2_homogeneity",
            "role": "secondary",
            "groups": ["async", "sync"],
        },
        {
            "name": "t2_async_d1_vs_sync_d1",
            "type": "t2_homogeneity",
            "role": "secondary",
            "groups": ["async_d1", "sync_d1"],
        },
        {"name": "t3_async", "type": "t3_gof", "role": "exploratory", "groups": ["async"]},
    ]
    + [
        {"name": f"acceptance_{g}", "type": "acceptance", "role": "mechanism", "groups": [g]}
        for g in _SPEC
    ]
    + [{"name": f"joint_{g}", "type": "joint", "role": "secondary", "groups": [g]} for g in _SPEC]
)
PROTOCOL = {
    "kind": "distribution",
    "name": "synthetic_fp32_t2",
    "alpha": 0.01,
    "strata": {"min_samples": 200, "min_expected": 5.0},
    "seeds": {"count": 5000, "offset": 0},
    "groups": GROUPS,
    "tests": TESTS,
}
