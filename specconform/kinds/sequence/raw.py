"""The raw files of a sequence run: the contract between its runner and its evaluator.

The runner (specconform/runner/sequence.py, the only part that touches an engine)
writes them; the evaluator (torch-free) and ``verify`` read them. Every number the
verdict needs is here, so a reviewer recomputes the verdict with numpy/scipy/pandas.

``raw/sequence/requests.csv`` -- one row per request, sorted by (group, request):
    group           str   the group's name
    request         int   index of the request within its group (0..n-1)
    prompt_index    int   index into the protocol's prompts
    seed            int   the request's seed; -1 for a greedy request
    temperature     float the request's parameters (temperature 0: greedy)
    top_k           int
    top_p           float
    max_tokens      int
    stop_token_ids  str   space-separated token ids ("" for none)
    n_tokens        int   committed tokens returned
    finish_reason   str   "length" | "stop" | "error" | "abort"

``raw/sequence/tokens.csv`` -- one row per committed token, sorted by (group, request,
step); p_t below is the serial reference law of the request's parameters at the prefix
prompt + tokens[:step]:
    group, request  as above
    step            int   0-based index of the token in the generation (0: t1)
    token           int   the committed token x_t
    round           int   the request's round index (0, 1, ...); -1 for a plain target
                          sample (prefill, nospec); -2 when the engine gives no events
    position        int   draft position j within the round (0..L); -1 as for round
    kind            str   accepted | correction | bonus | target | unknown
    drafted         int   the round's draft length L (the bonus sits at j == L); -1
    cdf_below       float F_t(x_t - 1) = sum of p_t(v) over token ids v < x_t (float64)
    p_token         float p_t(x_t) (float64); 0 is an out-of-support token
    tv              float TV(p_t, q_t) when the token sits at a drafted position
                          (kind accepted or correction) and q is available; empty else
    mech_cdf_below  float F(x_t - 1) under the token's conditional law given the accept
                          decision (float64): r = (p_t - q_t)+ / TV for a correction,
                          a = min(p_t, q_t) / (1 - TV) for an accepted draft
                          (specconform/stats/mechanism.py); empty where tv is empty,
                          off drafted positions, and at a *boundary* correction (r(x_t)
                          = 0 only within rounding: 0 <= q - p <= 1e-4 q at x_t)
    mech_p_token    float f(x_t) under that law (float64); 0 is a mechanism-out-of-
                          support token (fatal); empty as mech_cdf_below

    cross_p         float p_t(c_t) of the top-p crossing token c_t of p_t (the kept
                          token of smallest mass, highest index among equals), float64;
                          empty unless 0 < top_p < 1, T > 0 and p_t keeps >= 2 tokens
    cross_hit       1 if x_t = c_t, else 0; empty as cross_p
    filter_margin   float only at a token of reference probability 0 (p_token 0, or
                          mech_p_token 0) and under the protocol's numerics block: how
                          far the filter decision that dropped it lies from flipping, in
                          units of the model's error at the request's temperature
                          (runner/filter_ties.py; <= 1: a near-tie, a top-k/top-p
                          threshold or a greedy argmax that float rounding can move; inf:
                          no filter decides it); empty elsewhere

The two mech_* columns, the two cross_* columns and filter_margin are optional for the evaluator: archives written before they
existed verify unchanged (their protocols have no mechanism_pit test; a mechanism_pit
test run on such an archive reads NO_EVIDENCE "archive predates the column").

``raw/sequence/checks.json`` -- the deterministic checks, one entry per check type that
the protocol's tests use (``oracle``, ``teacher_forcing``, ``trace``, ``isolation``,
``greedy_equality``, ``stops``, ``streams``), keyed by test name::

    {"<test name>": {"type": str, "applicable": bool, "why": str,
                     "checked": int, "mismatches": int,
                     "max_abs_diff": float | null, "tolerance": float | null,
                     "examples": [ {...}, ... up to 5 first mismatches ]}}

Under the protocol's ``numerics`` block (issue 32; kinds/sequence/numerics.py) a law
check with ``tolerance: model`` and every token check (isolation, greedy_equality) also
records ``"numerics"`` (the model it was held to: dtype, reduction_length, kernels,
scale, growth, logit_bound, law_bound, ratio_bound; ``verify`` recomputes it and the
tolerance from the protocol), and a token check ``"near_ties"`` (divergences inside the
model's error, counted in ``checked`` but not in ``mismatches``), ``"decisions"``
(tokens compared, for the near-tie limit) and ``"near_tie_examples"`` (up to 5: where,
the deciding decision, its margin and the model's bound there).

The randomisation V_t of the PIT is not raw data: the evaluator draws it from
``numpy.random.default_rng(protocol["pit_seed"]).random(len(tokens))`` in the file's
row order, so the U_t = cdf_below + V_t * p_token are reproducible by ``verify``. The
mechanism PIT draws its own W_t from a second stream,
``numpy.random.default_rng([protocol["pit_seed"], MECH_STREAM]).random(len(tokens))``
(MECH_STREAM below), and forms M_t = mech_cdf_below + W_t * mech_p_token: the V_t
stream, and so every marginal verdict, is unchanged by the new columns.
"""

from __future__ import annotations

REQUESTS = "raw/sequence/requests.csv"
TOKENS = "raw/sequence/tokens.csv"
CHECKS = "raw/sequence/checks.json"

REQUEST_COLUMNS: tuple[str, ...] = (
    "group",
    "request",
    "prompt_index",
    "seed",
    "temperature",
    "top_k",
    "top_p",
    "max_tokens",
    "stop_token_ids",
    "n_tokens",
    "finish_reason",
)
TOKEN_COLUMNS: tuple[str, ...] = (
    "group",
    "request",
    "step",
    "token",
    "round",
    "position",
    "kind",
    "drafted",
    "cdf_below",
    "p_token",
    "tv",
)
# Optional columns (written by runners since the mechanism PIT; absent in older archives).
MECH_COLUMNS: tuple[str, ...] = ("mech_cdf_below", "mech_p_token")
# Optional, since the crossing_count test (specconform/stats/crossing.py): p_t(c_t) of
# the top-p crossing token c_t of the reference law, and 1/0 whether x_t = c_t; empty
# unless the request has 0 < top_p < 1, temperature > 0 and its law keeps >= 2 tokens.
CROSS_COLUMNS: tuple[str, ...] = ("cross_p", "cross_hit")
# Optional, since out_of_support counts filter near-ties (issue 32): the margin of a
# zero-probability token's filter decision (empty elsewhere, and without numerics).
FILTER_COLUMNS: tuple[str, ...] = ("filter_margin",)
MECH_STREAM = 0x6D656368  # "mech": the second SeedSequence word of the W_t stream
TOKEN_KINDS: tuple[str, ...] = ("accepted", "correction", "bonus", "target", "unknown")
NO_EVENTS = -2  # round/position of a token whose engine gives no events
