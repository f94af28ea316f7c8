"""bench/learning.py without training: the floor's arithmetic, its README table against README.md's
"Expected results" (so that the two cannot drift apart), and its command line."""

import math
import os
import re
import statistics
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import learning  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "learning.py")
# A README figure: "3,117", "−3.91", or with its spread "3,117 ± 173 (3 seeds)".
NUMBER = r"[−-]?[\d,]+(?:\.\d+)?"
FIGURE = re.compile(rf"^({NUMBER})(?: ± ({NUMBER}) \((\d+) seeds\))?$")
BALANCED_AT = re.compile(r"^balanced at (\d+) s and (\d+) s \(5-minute runs\)$")


def number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def decimals(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


def readme_cpu_rows() -> list[dict[str, str]]:
    """README.md's "Expected results" rows of the CPU machine, as {column: cell}."""
    with open(os.path.join(ROOT, "README.md")) as f:
        section = f.read().split("## Expected results", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    split = lambda line: [cell.strip() for cell in line.strip().strip("|").split("|")]
    header = split(lines[0])
    rows = [dict(zip(header, split(line))) for line in lines[2:]]
    return [row for row in rows if row["machine"] == "CPU"]


def test_the_floor_is_the_baseline_plus_the_square_root_share_of_the_gain_less_two_sds():
    # README's Ant: V = 3,117, standing still B = 996, per-seed sd 300.
    assert learning.floor(3_117, 996, 300, 1.0) == pytest.approx(3_117 - 600)
    assert learning.floor(3_117, 996, 300, 0.5) == pytest.approx(996 + 2_121 * math.sqrt(0.5) - 600)
    assert learning.floor(3_117, 996, 300, 2.0) == learning.floor(3_117, 996, 300, 1.0)  # no credit above 1
    assert learning.floor(-3.91, -13.5, 0.45, 0.25) == pytest.approx(-13.5 + 9.59 * 0.5 - 0.9)  # negative returns


def test_the_spread_is_readmes_seeds_or_a_tenth_of_the_gain_for_one_seed():
    several = learning.Reported(3_117, (3_445, 2_858, 3_048), (1, 1, 1))
    assert learning.per_seed_sd(several, b=996) == pytest.approx(299.5, abs=0.1)
    assert learning.per_seed_sd(learning.Reported(8_879, (8_879,), (1,)), b=-21) == pytest.approx(890)


def test_a_pendulum_may_balance_twice_as_late_and_later_still_on_a_slower_machine():
    assert learning.seconds_limit(52, 1.0) == 104
    assert learning.seconds_limit(52, 3.0) == 104
    assert learning.seconds_limit(52, 0.5) == 208


def test_overrides_keep_one_value_per_key_the_last_given():
    assert learning.merged(["task=Ant", "runtime.max_time_s=170", "a=1"], ["runtime.max_time_s=900", "b=2"]) == [
        "task=Ant",
        "runtime.max_time_s=900",
        "a=1",
        "b=2",
    ]


def test_the_scripts_table_holds_readmes_cpu_figures():
    rows = readme_cpu_rows()
    seen = []
    for row in rows:
        tasks = row["task"].split(", ")
        seen += tasks
        balanced = BALANCED_AT.match(row["pql"])
        for i, task in enumerate(tasks):
            reported = learning.README_RESULTS[task]
            command = learning.shlex.join(["python", "train.py", *learning.CHECKS[task].overrides])
            assert command.startswith(row["command"].strip("`").replace("<Task>", task)), (task, command)
            if balanced:
                assert reported.value == float(balanced.group(i + 1)), task
                continue
            figure = FIGURE.match(row["pql"])
            assert figure, row["pql"]
            value, se, seeds = figure.groups()
            assert reported.value == number(value), task
            if seeds is None:
                assert reported.seeds == (reported.value,), task
            else:
                # The per-seed figures and their env steps (docs/benchmarks.md) give README's mean ± s.e.
                assert len(reported.seeds) == len(reported.env_steps) == int(seeds), task
                mean = statistics.mean(reported.seeds)
                sem = statistics.stdev(reported.seeds) / math.sqrt(len(reported.seeds))
                assert abs(mean - number(value)) <= 0.5 * 10 ** -decimals(value) + 1e-9, (task, mean)
                assert abs(sem - number(se)) <= 0.5 * 10 ** -decimals(se) + 1e-9, (task, sem)
    assert sorted(seen) == sorted(learning.README_RESULTS), "README's CPU rows and the script's table differ"


def test_an_unknown_check_is_refused_in_one_line_naming_it_and_the_allowed_ones():
    done = subprocess.run(
        [sys.executable, SCRIPT, "--tasks", "Ant", "Nope"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert "'Nope'" in done.stderr and all(name in done.stderr for name in learning.CHECKS), done.stderr


def test_list_names_every_check():
    done = subprocess.run([sys.executable, SCRIPT, "--list"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done
    assert [line.split()[0] for line in done.stdout.splitlines()] == list(learning.CHECKS)
