"""The documents a newcomer follows: every relative link in the repository's Markdown resolves
(file and #anchor), and every command of README's code blocks is one pql accepts."""

import os
import re
import shlex
import subprocess
import sys
import unicodedata

import pytest

from pql.checkpoint import save_checkpoint
from pql.cli import preflight
from pql.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED_DIRS = {".git", "runs", "outputs", "multirun", "build", "node_modules"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_files() -> list[str]:
    found = []
    for directory, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        found += [os.path.join(directory, f) for f in files if f.endswith(".md")]
    return sorted(found)


def prose_lines(path: str) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, fenced = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced:
                lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, inline code marks and punctuation dropped
    (letters of any script, digits, '-' and '_' kept), spaces to '-'."""
    text = heading.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: str) -> set[str]:
    seen, out = {}, set()
    for line in prose_lines(path):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            base = slug(re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", match.group(1)))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(path: str) -> list[str]:
    broken = []
    for line in prose_lines(path):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(resolved):
                broken.append(f"{target} (no such file)")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
                broken.append(f"{target} (no such heading)")
    return broken


def test_every_relative_link_resolves():
    broken = {os.path.relpath(path, ROOT): links for path in markdown_files() if (links := broken_links(path))}
    assert broken == {}


def test_the_link_check_sees_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A heading, with `code`\n\n[ok](#a-heading-with-code) [bad](#nowhere) [gone](missing.md)\n"
        "```\n[in code](ignored.md)\n```\n"
    )
    assert broken_links(str(page)) == ["#nowhere (no such heading)", "missing.md (no such file)"]


def readme_commands() -> list[list[str]]:
    """Each command of README's bash blocks, as argv, comments and `&&` chains split off."""
    commands, fenced = [], None
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                fenced = None if fenced is not None else line.strip().strip("`~")
            elif fenced in ("bash", "sh"):
                for part in line.split("&&"):
                    argv = shlex.split(part, comments=True)
                    if argv:
                        commands.append(argv)
    return commands


@pytest.fixture
def ant_checkpoint(tmp_path):
    """A checkpoint file in pql's format, of the algorithm and task README's commands resume."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"algo": "pql", "task": "Ant", "replicas": 1})
    return str(path)


def train_args(argv: list[str]) -> list[str] | None:
    """The arguments after train.py of a `python train.py` or `torchrun ... train.py` command."""
    if "train.py" in argv and argv[0] in ("python", "torchrun"):
        return argv[argv.index("train.py") + 1 :]
    return None


def test_readme_has_the_install_train_and_test_commands():
    commands = [" ".join(argv) for argv in readme_commands()]
    assert "pip install torch==2.13.0" in commands
    assert "python train.py task=Ant" in commands
    assert "bash tests/run.sh" in commands and "bash tests/run.sh --all" in commands


def test_readme_train_commands_pass_pqls_checks(ant_checkpoint, tmp_path):
    checked = 0
    for argv in readme_commands():
        args = train_args(argv)
        if args is None:
            continue
        args = [re.sub(r"=runs/\S*checkpoint\.pt$", f"={ant_checkpoint}", a) for a in args]
        cuda = any("cuda" in a for a in args)
        try:
            preflight(args, os.path.join(ROOT, "cfg"))
        except ConfigError as e:
            # A command for a GPU machine must fail here only for want of CUDA.
            assert cuda and "no CUDA device is available" in str(e), (argv, str(e))
        checked += 1
    assert checked >= 5


def test_readme_tool_commands_exist():
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        setup_py = f.read()
    with open(os.path.join(ROOT, "tests", "run.sh"), encoding="utf-8") as f:
        run_sh = f.read()
    for argv in readme_commands():
        if argv[:2] == ["pip", "install"]:
            for extra in re.findall(r"\.\[([\w,]+)\]", " ".join(argv)):
                for name in extra.split(","):
                    assert f'"{name}":' in setup_py, (argv, name)
        elif argv[0] == "bash":
            assert os.path.isfile(os.path.join(ROOT, argv[1])), argv
            assert all(flag in run_sh for flag in argv[2:]), argv
        elif argv[0] == "python" and argv[1] == "-m" and argv[2].startswith("pql."):
            proc = subprocess.run([sys.executable, "-m", argv[2], "--help"], cwd=ROOT, capture_output=True, text=True)
            assert proc.returncode == 0, (argv, proc.stderr)
        elif argv[0] == "python" and argv[1].startswith("bench/"):
            assert os.path.isfile(os.path.join(ROOT, argv[1])), argv


def test_every_note_is_in_the_index_and_dated():
    notes = os.path.join(ROOT, "docs", "notes")
    with open(os.path.join(notes, "README.md"), encoding="utf-8") as f:
        index = f.read()
    for name in sorted(os.listdir(notes)):
        if name == "README.md":
            continue
        assert re.match(r"^\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", name), name
        assert f"]({name})" in index, name
        with open(os.path.join(notes, name), encoding="utf-8") as f:
            header = f.read().splitlines()[:3]
        assert header[0].startswith("# ") and re.match(r"^\*\d{4}-\d{2}-\d{2}.* · commits? \w+", header[2]), name


def test_readme_stays_a_three_minute_read():
    # The reference lives in docs/; results in docs/benchmarks.md; stories in docs/notes/.
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert len(text.splitlines()) <= 200 and len(text) <= 16_000
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a dated sentence belongs in a note"


def _checkpoint_holds_the_replay() -> bool:
    """A learner's replay state: every stored row and, prioritized, the trees (what a checkpoint
    writes when runtime.checkpoint_replay is on, its default)."""
    import torch

    from pql.config.schema import RuntimeConfig
    from pql.replay.buffer import ReplayBuffer
    from pql.replay.prioritized import PrioritizedSampler

    replay = ReplayBuffer(8, {"obs": ((3,), torch.float32)}, "cpu", PrioritizedSampler(8, impl="torch"))
    replay.add({"obs": torch.ones(5, 3)})
    _, bulk = replay.state()
    return RuntimeConfig().checkpoint_replay and bulk["storage.obs"].shape == (5, 3) and "sampler.priorities" in bulk


def _checkpoint_holds_the_envs() -> bool:
    from pql.config import TaskConfig
    from pql.envs import build_env

    env = build_env(TaskConfig(name="InvertedPendulum"), 2, "cpu", 0)
    env.reset()
    return bool(env.state_dict())


# What the reference pages say about the code, each beside a cheap check of the code that makes it
# true and the wording that would say the opposite. The dated notes and the CHANGELOG tell the
# past and are not read. (The README said a resume "refills its replay" and architecture.md that
# no replay is checkpointed for a week after checkpoints came to hold both.)
CLAIMS = [
    (
        "a checkpoint holds the replay and its priorities",
        _checkpoint_holds_the_replay,
        r"not the\s+replay|refills its\s+replay|(storage|priorities|replay) (is|are) not\s+checkpointed"
        r"|[Nn]either the storage nor the priorities",
    ),
    (
        "a checkpoint holds the envs' state",
        _checkpoint_holds_the_envs,
        r"envs? (restart|start new episodes) on a resume",
    ),
]


def reference_pages() -> list[str]:
    notes, changelog = os.path.join(ROOT, "docs", "notes"), os.path.join(ROOT, "CHANGELOG.md")
    return [p for p in markdown_files() if not p.startswith(notes) and p != changelog]


@pytest.mark.parametrize("claim,holds,contradiction", CLAIMS, ids=[c[0] for c in CLAIMS])
def test_no_reference_page_contradicts_what_the_code_does(claim, holds, contradiction):
    assert holds(), f"the code no longer does this: {claim}; fix CLAIMS and the pages that say it"
    said = {
        os.path.relpath(path, ROOT): found
        for path in reference_pages()
        if (found := re.findall(f"(?:{contradiction})", " ".join(line.strip() for line in prose_lines(path))))
    }
    assert said == {}, f"these pages say the opposite of: {claim}: {said}"


def test_the_claim_check_sees_a_contradiction(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("Resume restores the networks, but not the\nreplay.\n")
    monkeypatch.setattr(sys.modules[__name__], "reference_pages", lambda: [str(page)])
    with pytest.raises(AssertionError, match="say the opposite"):
        test_no_reference_page_contradicts_what_the_code_does(*CLAIMS[0])
