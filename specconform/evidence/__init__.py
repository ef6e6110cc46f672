"""Evidence archives: environment manifest, digests, signing, sealing and verification.

Imports no torch and no engine: a reviewer verifies evidence with numpy, scipy and
pandas alone (`environment_manifest` imports torch lazily, only to describe a run).

Run directory layout: docs/contracts.md section 3. Public entry points:

- `environment_manifest()`, `volatile_facts(started_at, finished_at)`: environment.json
  and volatile.json contents;
- `write_results(run_dir, evaluation)`: results/tests.json, results/tests.csv, verdict.json;
- `write_sha256sums(run_dir)`, `seal(run_dir, key=..., sign=...)`, `resolve_signing_key`;
- `compare_archives(a, b)`, `read_archive(zip_path)` (verification, which recomputes
  every test through the kinds, is `specconform.verification.verify_archive`);
- `generate_key_pem()` for `keygen`.
"""

from specconform.evidence.archive import seal, write_reproducible_zip
from specconform.evidence.jsonio import canonical_json_bytes, write_json
from specconform.evidence.manifest import environment_manifest, volatile_facts
from specconform.evidence.reader import ArchiveContents, read_archive
from specconform.evidence.reproducibility import compare_archives
from specconform.evidence.results_io import write_results
from specconform.evidence.sha256sums import write_sha256sums
from specconform.evidence.signing import generate_key_pem, resolve_signing_key

__all__ = [
    "ArchiveContents",
    "canonical_json_bytes",
    "compare_archives",
    "environment_manifest",
    "generate_key_pem",
    "read_archive",
    "resolve_signing_key",
    "seal",
    "volatile_facts",
    "write_json",
    "write_reproducible_zip",
    "write_results",
    "write_sha256sums",
]
