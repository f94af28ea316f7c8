"""bench/suite.py without training: candidates and suites on its command line, a finished run's
row read from its metrics.csv, the side-by-side summary, and its refusals."""

import math
import os
import subprocess
import sys

import pytest

from pql.config import resolve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import suite  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "suite.py")


def test_a_candidate_is_a_known_name_or_made_on_the_command_line():
    assert suite.parse_candidate("defaults") == ("defaults", ())
    assert suite.parse_candidate("probe=algo=sac,algo.value=categorical") == (
        "probe",
        ("algo=sac", "algo.value=categorical"),
    )
    for bad in ("nonesuch", "defaults=algo=sac", "a/b=algo=sac", "=algo=sac"):
        with pytest.raises(ValueError, match="unknown candidate"):
            suite.parse_candidate(bad)


def test_suites_expand_in_place_without_duplicates():
    assert suite.expand_tasks(["hard", "dmc/dog-run", "Ant"]) == ["dmc/humanoid-run", "dmc/dog-run", "Ant"]
    assert len(suite.expand_tasks(["learner"])) == 7


def test_a_run_s_row_reads_its_evaluations(tmp_path):
    rows = [
        "env_steps,wall_time_s,eval/return,eval/length,eval/lin_vel_error,loss/critic",
        "1000,10,,,,0.5",
        "2000,20,5,100,0.9,0.4",
        *(f"{3000 + 1000 * i},{30 + 10 * i},{10 * (i + 1)},100,{0.8 - 0.1 * i:.1f},0.3" for i in range(6)),  # 10 .. 60
        "9000,90,,,,0.2",
    ]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    final, last5, best, evaluations, env_steps, metrics = suite.summarize(str(tmp_path))
    assert (final, best, evaluations, env_steps) == (60.0, 60.0, 7, 9000)
    assert last5 == pytest.approx((20 + 30 + 40 + 50 + 60) / 5)
    assert metrics == "lin_vel_error 0.3"  # the final evaluation's episode metric; eval/length is no metric


def test_the_summary_puts_candidates_side_by_side_with_seeds_averaged():
    def result(candidate, task, seed, last5, note=""):
        return suite.Result(candidate, task, seed, last5, last5, last5, 5, 1000, 10.0, "python train.py", note)

    results = [
        result("defaults", "Ant", 0, 100.0),
        result("defaults", "Ant", 1, 200.0),
        result("probe", "Ant", 0, math.nan, "train.py exited 1: boom"),
    ]
    table = suite.summary({"commit": "abc"}, ["defaults", "probe"], ["Ant", "dmc/dog-run"], results)
    assert "| defaults | 150 (2 seeds) |  |" in table
    assert "| probe | failed |  |" in table


def test_a_bad_argument_is_refused_in_one_line():
    out = subprocess.run([sys.executable, SCRIPT, "--candidates", "nonesuch"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and "unknown candidate 'nonesuch'" in out.stderr
    out = subprocess.run([sys.executable, SCRIPT, "--list"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "candidate sac-batchnorm" in out.stdout and "suite learner" in out.stdout
    assert "suite paper" in out.stdout and "candidate ppo" in out.stdout


@pytest.mark.parametrize("seconds, env_steps, max_time_s", [(None, 3000, suite.NO_TIME_LIMIT_S), (120.0, None, 120.0)])
def test_a_budget_in_env_steps_leaves_the_run_no_time_limit(make_config, seconds, env_steps, max_time_s):
    """runtime.max_time_s=null would be the device's default, 885 s on a CPU: an env-step budget
    on a slow or shared machine would end early, at the default's wall time."""
    cfg = resolve(make_config(["runtime.device=cpu", *suite.budget_overrides(seconds, env_steps)])).config
    assert cfg.runtime.max_time_s == max_time_s
    cpu_default = resolve(make_config(["runtime.device=cpu"])).config.runtime.max_env_steps
    assert cfg.runtime.max_env_steps == (env_steps or cpu_default)


def test_the_curves_put_each_task_in_a_panel_of_its_own(tmp_path):
    """OUT/curves.png: the finished runs' evaluations against wall time, a panel per task."""
    import json

    for candidate, overrides in (("defaults", []), ("sac", ["algo=sac"])):
        for task in ("Ant", "Anymal"):
            run = suite.run_dir_of(str(tmp_path), candidate, task, 0)
            os.makedirs(os.path.join(run, ".hydra"))
            rows = ["env_steps,wall_time_s,eval/return", "1000,10,1", "2000,20,2"]
            with open(os.path.join(run, "metrics.csv"), "w") as f:
                f.write("\n".join(rows) + "\n")
            with open(os.path.join(run, "config.json"), "w") as f:
                json.dump({"task": {"name": task}}, f)
            with open(os.path.join(run, ".hydra", "overrides.yaml"), "w") as f:
                f.write("".join(f"- {o}\n" for o in [f"task={task}", *overrides]))
    results = [
        suite.Result(c, t, 0, 2.0, 2.0, 2.0, 2, 2000, 20.0, "python train.py")
        for c in ("defaults", "sac")
        for t in ("Ant", "Anymal")
    ]
    suite.plot_curves(str(tmp_path), results)
    assert (tmp_path / suite.CURVES).stat().st_size > 10_000
