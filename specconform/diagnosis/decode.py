"""Token ids with their text, when the protocol names a tokenizer a reviewer has locally.

A protocol names one through its engine's ``checkpoint`` folder (Hugging Face layout: a
``tokenizer.json`` beside the weights). The text is read with the `tokenizers` package
when it is installed; otherwise, or for a seeded model without a vocabulary, cells show
bare token ids. Never downloads anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

Decode = Callable[[object], str]


def decoder_for(protocol: Mapping) -> Decode:
    """``label -> "id 'text'"`` for int labels when a tokenizer is found, else ``str``."""
    engine = protocol.get("engine") or {}
    folder = engine.get("checkpoint") if isinstance(engine, Mapping) else None
    if not isinstance(folder, str) or not (Path(folder) / "tokenizer.json").is_file():
        return str
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(Path(folder) / "tokenizer.json"))
    except Exception:  # noqa: BLE001 (any failure: fall back to ids, the diagnosis stands)
        return str

    def decode(label: object) -> str:
        if isinstance(label, int) and not isinstance(label, bool):
            return f"{label} {tokenizer.decode([label])!r}"
        return str(label)

    return decode
