"""Batch invariance of the bundled engine: every request of protocols/ci_sequence.yaml's
async_mixed and sync_d1 groups rerun solo against the batched run (CPU float32, tiny).

    OMP_NUM_THREADS=1 .venv/bin/python bench/sequence_isolation.py
"""

from specconform.adapters.engine import load_engine
from specconform.protocol.load import load_protocol
from specconform.runner.sequence_checks import first_divergence
from specconform.runner.sequence_requests import build_requests, resolve_prompts

loaded = load_protocol("protocols/ci_sequence.yaml")
proto = loaded.model
engine = load_engine(proto.engine, mutant=None, log=print)
prompts = resolve_prompts(proto, engine)
for g in proto.groups[:2]:
    specs = build_requests(proto, g, prompts)
    batched = engine.run_requests(g, specs, g.max_num_seqs)
    same = 0
    for i, s in enumerate(specs):
        solo = engine.run_requests(g, [s], 1)[0]
        d = first_divergence(batched[i].tokens, solo.tokens)
        same += d is None
        if d is not None:
            print(g.name, i, "diverges at", d)
    print(
        f"{g.name}: {same}/{len(specs)} identical solo vs batched ({g.max_num_seqs} slots)",
        flush=True,
    )
engine.close()
