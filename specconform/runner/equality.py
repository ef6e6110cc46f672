"""Equality runner: greedy generations in each source tree, then the top-2 gaps at every
first divergence.

Sides. The *candidate* is the tree specconform runs from. With ``--base-ref REF`` the
*base* is the commit REF of the same repository, exported with ``git archive`` into
``<repo>/reports/.cache/base/<commit>/`` (created once, atomically, and reused; the
user's working tree, index and worktree list are never touched). Each side runs
``equality_worker.py`` in its own subprocess with ``PYTHONPATH`` naming its tree, so that
``engine_under_test`` comes from that tree; both use this environment's packages (a base
that needs other package versions is outside what this runner can build).

The worker uses only the engine's public API, so a base from any earlier release runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specconform.kinds.equality import comparisons, first_divergence
from specconform.kinds.equality.evaluate import RAW_FILE, gap_key
from specconform.util.errors import SpecconformError, UsageError

WORKER = Path(__file__).with_name("equality_worker.py")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the tree holding specconform/


class EngineRunError(SpecconformError):
    """A side's worker failed (engine error, import error in the base tree)."""

    exit_code = 2


@dataclass(frozen=True)
class SourceTree:
    side: str  # "candidate" | "base"
    root: Path  # put on PYTHONPATH (never written into the archive)
    ref: str | None  # the git ref asked for (base only)
    commit: str | None
    dirty: bool | None

    def provenance(self) -> dict:
        return {"ref": self.ref, "commit": self.commit, "dirty": self.dirty}


def _git(repo: Path, *args: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"git {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise UsageError(f"git {' '.join(args)}: {last}")
    return done.stdout.strip()


def repository_root() -> Path:
    """The git checkout this specconform was loaded from (--base-ref needs one)."""
    try:
        return Path(_git(PACKAGE_ROOT, "rev-parse", "--show-toplevel"))
    except UsageError:
        raise UsageError(
            f"--base-ref needs specconform to run from a git checkout; {PACKAGE_ROOT} is not one"
        ) from None


def candidate_tree() -> SourceTree:
    try:
        repo = Path(_git(PACKAGE_ROOT, "rev-parse", "--show-toplevel"))
        commit = _git(repo, "rev-parse", "HEAD")
        dirty = bool(_git(repo, "status", "--porcelain", "--untracked-files=no"))
    except UsageError:
        commit, dirty = None, None
    return SourceTree("candidate", PACKAGE_ROOT, None, commit, dirty)


def base_tree(ref: str) -> SourceTree:
    """The snapshot of `ref`, exported once into the cache (a bad ref: one line, exit 2)."""
    repo = repository_root()
    commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") if ref else ""
    if not commit:
        raise UsageError(f"--base-ref {ref!r}: not a commit of {repo}")
    cache = repo / "reports" / ".cache" / "base"
    target = cache / commit
    if not (target / "engine_under_test" / "__init__.py").exists():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}-", dir=cache))
        try:
            archive = staging / "tree.tar"
            with open(archive, "wb") as fh:
                done = subprocess.run(
                    ["git", "-C", str(repo), "archive", "--format=tar", commit],
                    stdout=fh,
                    stderr=subprocess.PIPE,
                    timeout=300,
                    check=False,
                )
            if done.returncode != 0:
                raise UsageError(
                    f"--base-ref {ref}: git archive failed: "
                    f"{done.stderr.decode(errors='replace').strip()}"
                )
            tree = staging / "tree"
            with tarfile.open(archive) as tar:
                tar.extractall(tree, filter="data")
            if not (tree / "engine_under_test" / "__init__.py").exists():
                raise UsageError(
                    f"--base-ref {ref}: commit {commit[:12]} has no engine_under_test package"
                )
            shutil.rmtree(target, ignore_errors=True)
            os.replace(tree, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return SourceTree("base", target, ref, commit, False)


def make_prompts(protocol) -> list[list[int]]:
    plan = protocol.prompts
    if isinstance(plan, list):
        return [list(p) for p in plan]
    import numpy as np

    vocab = _vocab_size(protocol.engine)
    rng = np.random.Generator(np.random.PCG64(plan.seed))
    return rng.integers(0, vocab, size=(plan.count, plan.length)).tolist()


def _vocab_size(engine) -> int:
    if engine.checkpoint:
        config = Path(engine.checkpoint) / "config.json"
        try:
            return int(json.loads(config.read_text())["vocab_size"])
        except (OSError, ValueError, KeyError) as exc:
            raise UsageError(f"{config}: cannot read vocab_size ({exc})") from None
    from engine_under_test import ModelConfig

    return ModelConfig.preset(engine.preset, seed=engine.model_seed).vocab_size


def run_worker(tree: SourceTree, request: dict, worker: Path = WORKER) -> dict:
    """Run `worker` (a script importing only the engine) on `tree`, `request` on stdin."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree.root)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    done = subprocess.run(
        [sys.executable, str(worker)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise EngineRunError(f"{tree.side} tree ({tree.commit or 'working tree'}): {last}")
    result = json.loads(done.stdout)
    ran = Path(result["engine_file"]).resolve()
    if not ran.is_relative_to(tree.root.resolve()):
        # The wrong engine was imported (an installed copy shadowing the tree).
        raise EngineRunError(
            f"{tree.side} tree: engine_under_test came from {ran}, not from {tree.root}"
        )
    return result


def collect(loaded, *, progress, log, context) -> dict[str, bytes]:
    protocol = loaded.model
    data = loaded.data
    trees = {"candidate": candidate_tree()}
    if protocol.base_ref:
        trees["base"] = base_tree(protocol.base_ref)
    specs = comparisons(data, sorted(trees))
    if not specs:
        raise UsageError(
            f"{loaded.path}: no comparison to make: declare `comparisons` or give --base-ref"
        )
    prompts = make_prompts(protocol)
    engine = protocol.engine.model_dump(mode="json")
    engine["num_speculative_tokens"] = protocol.engine.num_speculative_tokens
    configs = [
        dict(
            c.model_dump(mode="json"), num_speculative_tokens=protocol.engine.num_speculative_tokens
        )
        for c in protocol.configurations
    ]
    # The base side runs only the configurations a comparison reads from it.
    wanted = {
        side: sorted(
            {s.base[1] for s in specs if s.base[0] == side}
            | {s.candidate[1] for s in specs if s.candidate[0] == side}
        )
        for side in trees
    }
    outputs = {}
    with progress("generate", len(trees)) as bar:
        for side, tree in trees.items():
            request = {
                "engine": engine,
                "max_tokens": protocol.max_tokens,
                "prompts": prompts,
                "configurations": [c for c in configs if c["name"] in wanted[side]],
            }
            outputs[side] = run_worker(tree, request)["outputs"]
            log(
                f"{side}: {len(request['configurations'])} configurations x {len(prompts)} "
                f"prompts ({tree.commit or 'no commit'}{' dirty' if tree.dirty else ''})"
            )
            bar.advance(1)
    gaps = _divergence_gaps(specs, trees, configs, prompts, outputs, engine, protocol)
    raw = {
        "prompts": prompts,
        "max_tokens": protocol.max_tokens,
        "sides": {side: tree.provenance() for side, tree in trees.items()},
        "outputs": outputs,
        "gaps": gaps,
    }
    return {RAW_FILE: json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()}


def _divergence_gaps(specs, trees, configs, prompts, outputs, engine, protocol) -> dict:
    """The top-2 gap of each side's full-depth law at every first divergence."""
    dtype = {c["name"]: c["dtype"] for c in configs}
    asks: dict[str, list[dict]] = {side: [] for side in trees}
    for spec in specs:
        base = outputs[spec.base[0]][spec.base[1]]
        cand = outputs[spec.candidate[0]][spec.candidate[1]]
        for i, (a, b) in enumerate(zip(base, cand, strict=True)):
            d = first_divergence(i, a, b)
            if d is None:
                continue
            prefix = prompts[i] + list(a[: d.position])
            for role, (side, name) in (("base", spec.base), ("candidate", spec.candidate)):
                asks[side].append(
                    {
                        "key": f"{gap_key(spec.name, i)}|{role}",
                        "dtype": dtype[name],
                        "prefixes": [prefix],
                    }
                )
    gaps: dict[str, dict] = {}
    for side, tree in trees.items():
        if not asks[side]:
            continue
        measured = run_worker(
            tree,
            {
                "engine": engine,
                "max_tokens": protocol.max_tokens,
                "prompts": [],
                "configurations": [],
                "gap_requests": asks[side],
            },
        )["gaps"]
        for key, values in measured.items():
            where, role = key.rsplit("|", 1)
            gaps.setdefault(where, {})[role] = values[0]
    return gaps
