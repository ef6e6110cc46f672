"""The CI examples (examples/ci/, shown in docs/ci.md) parse and call only what exists.

Each file is YAML that parses; every `specconform ...` command in it names an existing
subcommand, only options that subcommand has (with a value where the option takes one),
and, for `gate`, a protocol file of this repository. The GitHub workflow uploads the
archive and publishes the JUnit file; the GitLab job declares the JUnit report and keeps
the archive. Negative control: the same checker refuses a misspelt option, an unknown
subcommand and a missing protocol.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click
import pytest
import yaml

from specconform.cli import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "ci"
GITHUB = EXAMPLES / "github-actions.yml"
GITLAB = EXAMPLES / "gitlab-ci.yml"


def _scripts(node) -> list[str]:
    """Every shell text under a `run:` (GitHub) or `script:`/`after_script:` key."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "run" and isinstance(value, str):
                found.append(value)
            elif key in ("script", "after_script", "before_script") and isinstance(value, list):
                found += [v for v in value if isinstance(v, str)]
            else:
                found += _scripts(value)
    elif isinstance(node, list):
        for value in node:
            found += _scripts(value)
    return found


def _commands(scripts: list[str]) -> list[list[str]]:
    """The argv of every `specconform` command line (shell lines split with shlex)."""
    out = []
    for script in scripts:
        for line in script.splitlines():
            words = shlex.split(line, comments=True)
            if "specconform" in words:
                words = words[words.index("specconform") + 1 :]
                cut = [i for i, w in enumerate(words) if w in (">", ">>", "|", "||", "&&", ";")]
                out.append(words[: cut[0]] if cut else words)
    return out


def check_command(argv: list[str]) -> None:
    """ValueError unless argv is an existing subcommand with options it has."""
    name, *rest = argv
    command = cli.commands.get(name) if isinstance(cli, click.Group) else None
    if command is None:
        raise ValueError(f"no subcommand {name!r}")
    options = {opt: p for p in command.params if isinstance(p, click.Option) for opt in p.opts}
    arguments = []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word.startswith("--"):
            param = options.get(word.split("=", 1)[0])
            if param is None:
                raise ValueError(f"{name}: no option {word}")
            if not param.is_flag and "=" not in word:
                if i + 1 >= len(rest) or rest[i + 1].startswith("--"):
                    raise ValueError(f"{name}: {word} needs a value")
                i += 1
        else:
            arguments.append(word)
        i += 1
    if name == "gate":
        protocol = arguments[0] if arguments else ""
        if not (ROOT / protocol).is_file():
            raise ValueError(f"gate: no protocol file {protocol!r}")


@pytest.mark.parametrize("path", [GITHUB, GITLAB], ids=["github", "gitlab"])
def test_example_parses_and_calls_existing_commands(path):
    data = yaml.safe_load(path.read_text())
    commands = _commands(_scripts(data))
    names = [c[0] for c in commands]
    assert "gate" in names and "report" in names
    for argv in commands:
        check_command(argv)
    gates = [c for c in commands if c[0] == "gate"]
    assert all("--junit" in c and "--out" in c for c in gates)


def test_github_workflow_uploads_the_archive_and_publishes_junit():
    data = yaml.safe_load(GITHUB.read_text())
    (job,) = data["jobs"].values()
    uses = {s.get("uses", "").split("@")[0]: s for s in job["steps"]}
    upload = uses["actions/upload-artifact"]
    assert "reports/*.zip" in upload["with"]["path"] and upload["if"] == "always()"
    assert uses["mikepenz/action-junit-report"]["with"]["report_paths"] == "reports/junit.xml"
    summary = "\n".join(_scripts(data))
    assert "GITHUB_STEP_SUMMARY" in summary


def test_gitlab_job_declares_junit_and_keeps_the_archive():
    data = yaml.safe_load(GITLAB.read_text())
    job = data["specconform-gate"]
    assert job["artifacts"]["reports"]["junit"] == "reports/junit.xml"
    assert job["artifacts"]["when"] == "always" and "reports/*.zip" in job["artifacts"]["paths"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["gate", "protocols/ci_gate.yaml", "--junitt", "x.xml"], "no option --junitt"),
        (["gates", "protocols/ci_gate.yaml"], "no subcommand"),
        (["gate", "protocols/no_such.yaml", "--junit", "x.xml"], "no protocol file"),
        (["report", "a.zip", "--out"], "needs a value"),
    ],
)
def test_checker_refuses_what_does_not_exist(argv, words):
    with pytest.raises(ValueError, match=words):
        check_command(argv)


def test_docs_ci_shows_both_examples_verbatim():
    doc = (ROOT / "docs" / "ci.md").read_text()
    for path in (GITHUB, GITLAB):
        assert path.read_text().strip() in doc, f"docs/ci.md does not show {path.name}"
