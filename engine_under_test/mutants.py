"""The registry of planted bugs ("mutants") specconform must be able to kill.

Each mutant reproduces a real bug class seen in speculative-decoding engines. They are
off by default and reachable only by name: a kernel mutant through the explicit
`mutant=` argument of `engine_under_test.sampling.speculative_accept`, an engine
mutant through `LLM(..., mutant=name)`. Nothing here switches a mutant on; this module
only names and describes them, so protocols and the CLI can list and validate names.

layer "kernel": a bug inside the accept kernel, killable by the kernel protocols
(quadrature, montecarlo) with p, q and the uniforms given.
layer "tree": a bug in a tree-verification sampler (issue 34), planted in specconform's
reference tree sampler (specconform/adapters/tree_reference.py, which reads only the
names) and killed by the tree protocols (protocols/tree*.yaml).
layer "engine": a bug in how the engine builds p, q, drafts, uniforms or inputs around
a correct kernel, killable only end to end (distribution, acceptance, equality). One
group of engine mutants acts only past the first draft position (deep positions,
later rounds, reused slots, mixed batches): tests of t1 and t2 alone cannot kill them.
One engine mutant is a fault rather than a bias: `nan_target_once` makes one round fail
(contract 3), so a run under it must report engine errors instead of a smaller sample.
"""

from __future__ import annotations

from dataclasses import dataclass

LAYERS = ("kernel", "engine", "tree")


@dataclass(frozen=True)
class Mutant:
    """One planted bug."""

    name: str  # the selector: `mutant=name`
    layer: str  # "kernel" or "engine"
    description: str  # one line: what the mutant changes
    bug_class: str  # the real bug class it reproduces
    # True for a fault (rounds fail, requests end in "error") rather than a biased law:
    # killed by a protocol's engine-error rule, not by a distribution test.
    fault: bool = False

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise ValueError(f"layer must be one of {LAYERS}, got {self.layer!r}")


_ALL = (
    # --- kernel: engine_under_test.sampling.accept ---------------------------------------
    Mutant(
        "residual_from_p",
        "kernel",
        "the correction token is drawn from p at the stop point instead of max(p - q, 0)",
        "rejection resampling from the target p instead of the residual (p - q)+",
    ),
    Mutant(
        "bonus_off_by_one",
        "kernel",
        "the bonus token is drawn from p at position draft_len - 1 (clamped at 0) "
        "instead of draft_len",
        "bonus token sampled from the target at position K instead of K+1",
    ),
    Mutant(
        "shared_uniform",
        "kernel",
        "the correction draw reuses the accept coin u[stop] instead of u[K + stop]",
        "acceptance coin reused as the resampling uniform (correlated randomness)",
    ),
    # --- engine: implemented by the engine's runners --------------------------------------
    Mutant(
        "greedy_draft",
        "engine",
        "drafts are the argmax of the draft logits while q is their softmax",
        "greedy draft scored with softmax q",
    ),
    Mutant(
        "target_default_params",
        "engine",
        "p is built with temperature 1 and no top-k/top-p while q uses the request's",
        "target probabilities built with default temperature/top-p",
    ),
    Mutant(
        "draft_raw_q",
        "engine",
        "q comes from the raw draft logits while drafts are sampled from filtered ones",
        "draft probabilities from unfiltered logits (q is not the law drafts came from)",
    ),
    Mutant(
        "residual_inplace",
        "engine",
        "q is modified in place before the residual max(p - q, 0) is formed",
        "in-place edit corrupting q before the residual",
    ),
    Mutant(
        "no_draft_probs",
        "engine",
        "q is treated as one-hot at the draft token; the law stays exact, acceptance drops",
        "draft probabilities not passed to the verifier (q assumed one-hot)",
    ),
    Mutant(
        "bonus_params",
        "engine",
        "the bonus token is sampled without the request's temperature/top-k/top-p",
        "bonus token sampled outside the sampling core with default params",
    ),
    Mutant(
        "bf16_q",
        "engine",
        "q is rounded to bfloat16 while p stays float32",
        "bf16 q against fp32 p",
    ),
    Mutant(
        "shared_rng",
        "engine",
        "uniforms are not request-owned: all rows of a round share one block",
        "per-request seeded generator ignored (batch rows share randomness)",
    ),
    Mutant(
        "async_stale_input",
        "engine",
        "the next round's device input is the last draft, not the last committed token",
        "async scheduling feeds a stale token to the next round",
    ),
    # --- engine, past the first draft position (runners/deep_mutants.py): t1 and the
    # first draft position of the first decode round stay exact, so a t1/t2 test alone
    # cannot see these ---------------------------------------------------------------
    Mutant(
        "deep_position_temp",
        "engine",
        "the target law at draft positions j >= 1 is built at temperature 1 "
        "(top-k/top-p kept) instead of the request's temperature",
        "per-position sampling parameters lost past the first verified position",
    ),
    Mutant(
        "late_round_residual",
        "engine",
        "from a request's third decode round on, the correction is drawn from p "
        "instead of max(p - q, 0)",
        "rejection resampling from the target p once a round-dependent fast path kicks in",
    ),
    Mutant(
        "bonus_after_accepts",
        "engine",
        "when all L >= 2 drafts are accepted, the bonus is drawn from p at position L - 1 "
        "instead of L",
        "bonus token read from the last verified draft position after multi-token accepts",
    ),
    Mutant(
        "next_input_partial",
        "engine",
        "after a partial accept (0 < s < L) the next round's device input is the last "
        "accepted draft instead of the correction (host output stays right)",
        "committed sequence and next device input diverge after a partial accept",
    ),
    Mutant(
        "rng_reused_rounds",
        "engine",
        "uniforms keyed by the seed only: every decode round of a request reuses the "
        "first decode round's block",
        "RNG stream not advanced per round (randomness repeats across rounds)",
    ),
    Mutant(
        "rng_shared_requests",
        "engine",
        "from a request's second decode round on, uniforms are keyed by the round only: "
        "requests at the same round share one block",
        "per-request seed dropped after the first round (batch rows share randomness)",
    ),
    Mutant(
        "filter_order_temp",
        "engine",
        "the target law at draft positions j >= 1 chooses its top-k/top-p support "
        "before dividing by the temperature",
        "top-k/top-p applied before temperature scaling",
    ),
    Mutant(
        "top_p_drop_crossing",
        "engine",
        "the target law at draft positions j >= 1 drops the top-p crossing token (the "
        "one whose cumulative mass first reaches top_p) when more than one token survives",
        "top-p off by one: the token that crosses the threshold is excluded",
    ),
    Mutant(
        "slot_stale_params",
        "engine",
        "a random request admitted into a slot that held another request decodes its "
        "first round with that occupant's temperature/top-k/top-p",
        "continuous batching reuses a slot without resetting its sampling parameters",
    ),
    Mutant(
        "greedy_row_sampled",
        "engine",
        "in a batch with random rows, greedy rows at draft positions j >= 1 are scored "
        "with their softmax law and zero coins, so drafts there are accepted unchecked",
        "greedy rows of a mixed batch verified by the random rule instead of argmax",
    ),
    Mutant(
        "nan_target_once",
        "engine",
        "the target logits of one random row (position 0) are NaN in the engine's "
        "first decode round: that round fails and its live requests end in 'error'",
        "a numerical fault that silently drops the requests of one batch from the sample",
        fault=True,
    ),
    # --- engine, configuration / stop / random-stream bugs (issue 35,
    # runners/scope_mutants.py): each acts only in the configuration, at the stop or in
    # the stream it names, so a protocol that never reaches it passes it -------------
    Mutant(
        "filter_order_top_p_first",
        "engine",
        "the target law of rows with both top-k and top-p on applies top-p to the full "
        "softmax first and top-k to its survivors (contract: top-k, then top-p)",
        "top-k and top-p filters applied in the wrong order",
    ),
    Mutant(
        "stop_commits_next",
        "engine",
        "when a stop token is not the last token a round committed, the host also "
        "commits the round's next token (the stop index checked one position late)",
        "off-by-one at a stop: a token committed after the stop token",
    ),
    Mutant(
        "rng_draft_overlaps_coins",
        "engine",
        "the draft uniforms are keyed by (seed, round) without the draft domain's "
        "offset, so draft j is sampled with the counter of acceptance coin j",
        "overlapping random streams: draft sampling reuses the acceptance coins",
    ),
    Mutant(
        "rng_bonus_overlaps_next_round",
        "engine",
        "the bonus uniform u[2K] of round r is read from the counter of round r + 1's "
        "first coin, so a bonus and the next round's first accept share one uniform",
        "overlapping random streams: a block stride shorter than the block",
    ),
)

# --- tree: specconform's reference tree sampler (issue 34) ---------------------------------
_TREE = (
    Mutant(
        "tree_residual_stale",
        "tree",
        "after every child is refused the last token is drawn from p, the refused "
        "siblings' mass not removed",
        "residual not updated after a rejected sibling",
    ),
    Mutant(
        "tree_sibling_for_child",
        "tree",
        "after accepting a child the walk continues from its next sibling's node",
        "sibling taken instead of the child after an accept",
    ),
    Mutant(
        "tree_coin_reused",
        "tree",
        "the root's coin decides at every level of the tree",
        "one coin reused across levels",
    ),
    Mutant(
        "tree_final_wrong_node",
        "tree",
        "the last token is drawn from the parent of the last accepted node",
        "final draw from the wrong node",
    ),
    Mutant(
        "tree_sibling_order_ignored",
        "tree",
        "children are tried in reverse order (with duplicate tokens the later node gets the path)",
        "sibling order ignored",
    ),
    Mutant(
        "tree_coin_le",
        "tree",
        "a child is accepted when coin <= cumulative mass: a coin of 0 accepts a first "
        "child of zero target mass",
        "coin <= ratio accepting zero-mass candidates",
    ),
    Mutant(
        "tree_duplicate_counted",
        "tree",
        "a duplicate sibling token adds its target mass again and can be accepted",
        "duplicate sibling tokens double-counted",
    ),
    Mutant(
        "tree_final_node_coin",
        "tree",
        "the last token is drawn with the last node's coin instead of the final uniform",
        "acceptance coin reused as the final draw's uniform",
    ),
)

MUTANTS: dict[str, Mutant] = {m.name: m for m in _ALL + _TREE}


def list_mutants(layer: str | None = None) -> list[Mutant]:
    """Every registered mutant, or those of one layer ("kernel", "engine" or "tree")."""
    if layer is not None and layer not in LAYERS:
        raise ValueError(f"layer must be None or one of {LAYERS}, got {layer!r}")
    return [m for m in MUTANTS.values() if layer is None or m.layer == layer]


def get_mutant(name: str) -> Mutant:
    """The mutant called `name`; ValueError listing the valid names otherwise."""
    try:
        return MUTANTS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown mutant {name!r}; valid names: {', '.join(sorted(MUTANTS))}"
        ) from None
