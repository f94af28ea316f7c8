"""docs/configuration.md is the reference `python -m pql.config.reference` renders from the dataclasses."""

import dataclasses
import os
import subprocess
import sys

from pql.config import ALGORITHMS, Config
from pql.config.reference import reference_markdown
from tasks import TASK_NAMES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"


def page_reference() -> str:
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        text = f.read()
    assert text.count(START) == 1 and text.count(END) == 1
    return text.split(START)[1].split(END)[0]


def keys(cls, prefix: str):
    """Every dotted key of cls, nested groups flattened."""
    for f in dataclasses.fields(cls):
        value = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(value):
            yield from keys(type(value), f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def test_the_reference_page_is_generated():
    # On failure: python -m pql.config.reference docs/configuration.md
    assert page_reference() == f"\n\n{reference_markdown()}\n\n"


def test_every_key_is_in_the_reference():
    reference = reference_markdown()
    every = [
        *keys(Config, ""),
        *(key for algorithm in ALGORITHMS.values() for key in keys(algorithm.config_class(), "algo.")),
    ]
    assert "runtime.policy_publish_every" in every and "algo.num_atoms" in every
    assert [key for key in every if f"`{key}`" not in reference] == []


def test_the_reference_names_every_task():
    assert [name for name in TASK_NAMES if name not in reference_markdown()] == []


def test_python_m_pql_config_reference_prints_it():
    out = subprocess.run(
        [sys.executable, "-m", "pql.config.reference"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout == reference_markdown() + "\n"
