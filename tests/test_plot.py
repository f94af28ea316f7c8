"""`python -m pql.plot` on fake run directories, as Hydra lays them out."""

import json
import subprocess
import sys

import numpy as np

from pql.logging.curves import SE, plot_curves, plot_task_panels
from pql.plot import find_runs, labels_and_title, load_curves, main, mean_over_seeds, seed_means, task_of, task_panels

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _fake_run(run_dir, overrides, returns, task=None):
    (run_dir / ".hydra").mkdir(parents=True)
    if task is not None:
        (run_dir / "config.json").write_text(json.dumps({"task": {"name": task}, "algo": {"name": "pql"}}))
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    rows = [f"{1000 * (i + 1)},{1.5 * (i + 1):.3f},{r}" for i, r in enumerate(returns)]
    (run_dir / "metrics.csv").write_text("env_steps,wall_time_s,eval/return\n" + "\n".join(rows) + "\n")
    return run_dir


def test_two_runs_labelled_by_differing_overrides(tmp_path, capsys):
    a = _fake_run(tmp_path / "a", ["task=Ant", "algo.beta_pv=2"], [1.0, 5.0, 9.0])
    b = _fake_run(tmp_path / "b", ["task=Ant", "algo.beta_pv=4"], [2.0, 3.0])
    assert labels_and_title([str(a), str(b)]) == (["algo.beta_pv=2", "algo.beta_pv=4"], "task=Ant")
    out = tmp_path / "figs" / "cmp.png"
    assert main([str(a), str(b), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    assert str(out) in capsys.readouterr().out


def test_multirun_directory_expands_to_its_runs(tmp_path, capsys):
    sweep = tmp_path / "multirun"
    _fake_run(sweep / "0", ["algo.beta_pv=2", "runtime.seed=0"], [1.0])
    _fake_run(sweep / "1", ["algo.beta_pv=2", "runtime.seed=1"], [2.0])
    _fake_run(sweep / "10", ["algo.beta_pv=8", "runtime.seed=0"], [3.0])
    (sweep / "2").mkdir()  # a job that has not started: no metrics.csv
    (sweep / "3").mkdir()
    (sweep / "3" / "metrics.csv").write_text("env_steps,wall_time_s\n")  # started, nothing evaluated yet
    assert main([str(sweep)]) == 0
    captured = capsys.readouterr()
    assert (sweep / "compare_eval_return.png").read_bytes().startswith(PNG_SIGNATURE)
    assert "skipping" in captured.err and "3" in captured.err
    labels, _ = labels_and_title([str(sweep / d) for d in ("0", "1", "10")])
    assert labels == [
        "algo.beta_pv=2, runtime.seed=0",
        "algo.beta_pv=2, runtime.seed=1",
        "algo.beta_pv=8, runtime.seed=0",
    ]


def test_seeds_of_one_setting_are_drawn_as_their_mean(tmp_path, capsys):
    sweep = tmp_path / "multirun"
    _fake_run(sweep / "0", ["task=Ant", "algo.beta_pv=2", "runtime.seed=0"], [1.0, 5.0, 9.0])
    _fake_run(sweep / "1", ["task=Ant", "algo.beta_pv=2", "runtime.seed=1"], [3.0, 7.0])  # its evaluations end first
    _fake_run(sweep / "2", ["task=Ant", "algo.beta_pv=4", "runtime.seed=0"], [2.0, 4.0, 6.0])
    groups = mean_over_seeds(load_curves(find_runs([str(sweep)]), "eval/return"), "eval/return")
    assert [[d[-1] for d in dirs] for dirs, _ in groups] == [["0", "1"], ["2"]]
    both, single = groups[0][1], groups[1][1]
    assert both["env_steps"].tolist() == [1000, 2000] and both["eval/return"].tolist() == [2.0, 6.0]
    assert np.allclose(both["eval/return" + SE], [1.0, 1.0])  # std (ddof 1) √2 over √2 seeds
    assert np.allclose(both["wall_time_s"], [1.5, 3.0])
    assert single["eval/return"].tolist() == [2.0, 4.0, 6.0] and "eval/return" + SE not in single
    curves, seeds = seed_means(load_curves(find_runs([str(sweep)]), "eval/return"), "eval/return")
    assert labels_and_title([d for d, _ in curves], seeds) == (
        ["algo.beta_pv=2 (mean of 2 seeds)", "algo.beta_pv=4"],
        "task=Ant",
    )
    plain = [_fake_run(tmp_path / d, [], [1.0, 2.0]) for d in ("x", "y")]  # no seed: never merged
    assert len(mean_over_seeds(load_curves(find_runs(list(map(str, plain))), "eval/return"), "eval/return")) == 2
    fig = plot_curves([("a", both)], "eval/return", str(tmp_path / "m.png"))
    assert len(fig.axes[0].collections) == 1  # the band of ± one standard error
    long = "algo.net.actor_hidden=[512,256,128], algo.net.critic_hidden=[512,256,128] (mean of 2 seeds)"
    fig = plot_curves([(long, both), ("b", single), ("c", single)], "eval/return", str(tmp_path / "m.png"))
    assert fig.legends[0]._ncols == 1  # three columns of it would run off the figure
    out = tmp_path / "mean.png"
    assert main([str(sweep), "--mean-seeds", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_runs_of_several_tasks_get_a_panel_per_task(tmp_path, capsys):
    runs = [
        _fake_run(tmp_path / "a0", ["task=Ant", "runtime.seed=0"], [1.0, 900.0], task="Ant"),
        _fake_run(tmp_path / "h0", ["task=Hopper", "runtime.seed=0"], [5.0, 30.0], task="Hopper"),
        _fake_run(tmp_path / "a1", ["task=Ant", "runtime.seed=1"], [2.0, 700.0], task="Ant"),
    ]
    curves = load_curves(find_runs([str(r) for r in runs]), "eval/return")
    panels = task_panels(curves, [task_of(d) for d, _ in curves])
    assert [(task, [label for label, _ in group]) for task, group in panels] == [
        ("Ant", ["runtime.seed=0", "runtime.seed=1"]),
        ("Hopper", [None]),
    ]
    assert list(panels[1][1][0][1]["eval/return"]) == [5.0, 30.0]
    out = tmp_path / "tasks.png"
    assert main([*map(str, runs), "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    (tmp_path / "h0" / "config.json").write_text("[]")
    assert main([*map(str, runs), "--out", str(out)]) == 2
    assert "is not a pql config" in capsys.readouterr().err


def test_task_panels_against_wall_time(tmp_path):
    runs = [
        _fake_run(tmp_path / "a", ["task=Ant"], [1.0, 900.0, 950.0], task="Ant"),
        _fake_run(tmp_path / "h", ["task=Hopper"], [5.0, 30.0], task="Hopper"),
    ]
    curves = load_curves(find_runs([str(r) for r in runs]), "eval/return")
    panels = task_panels(curves, [task_of(d) for d, _ in curves])
    fig = plot_task_panels(panels, "eval/return", str(tmp_path / "t.png"), "wall_time_s")
    assert list(fig.axes[0].lines[0].get_xdata()) == [1.5, 3.0, 4.5]  # seconds: the runs are shorter than 2 min
    assert fig.axes[1].lines[0].get_ydata().tolist() == [5.0, 30.0]
    assert "wall time (s)" in [text.get_text() for text in fig.texts]  # the supxlabel (get_supxlabel: 3.8 on)
    out = tmp_path / "tasks.png"
    assert main([*map(str, runs), "--x", "wall_time", "--out", str(out)]) == 0
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_runs_without_overrides_use_directory_names(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    assert labels_and_title([str(tmp_path / "x"), str(tmp_path / "y")]) == (["x", "y"], None)


def test_empty_metrics_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "metrics.csv").write_text("env_steps,wall_time_s\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "has no 'eval/return' values" in err


def test_bad_directory_exits_2_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pql.plot", str(tmp_path / "missing")], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"pql.plot: error: {tmp_path / 'missing'}: no such directory"


def test_a_setting_has_one_colour_in_every_task_panel(tmp_path):
    runs = [
        _fake_run(tmp_path / "r0", ["algo.tau=0.05", "runtime.seed=0"], [-9.0, -8.0], task="Reacher"),
        _fake_run(tmp_path / "r1", ["algo.tau=0.05", "runtime.seed=1"], [-10.0, -9.0], task="Reacher"),
        _fake_run(tmp_path / "r2", ["algo.tau=0.01", "runtime.seed=0"], [-9.5, -7.0], task="Reacher"),
        _fake_run(tmp_path / "h0", ["algo.tau=0.01", "runtime.seed=0"], [900.0, 1500.0], task="HalfCheetah"),
        _fake_run(tmp_path / "h1", ["algo.tau=0.05", "runtime.seed=0"], [1800.0, 4300.0], task="HalfCheetah"),
    ]
    curves = load_curves(find_runs([str(r) for r in runs]), "eval/return")
    curves, seeds = seed_means(curves, "eval/return")
    panels = task_panels(curves, [task_of(d) for d, _ in curves], seeds)
    fig = plot_task_panels(panels, "eval/return", str(tmp_path / "c.png"))
    colours = [{line.get_label(): line.get_color() for line in ax.lines} for ax in fig.axes[:2]]
    # HalfCheetah draws its settings in the other order, and Reacher's τ = 0.05 is a mean of two seeds.
    assert colours[0]["algo.tau=0.05 (mean of 2 seeds)"] == colours[1]["algo.tau=0.05"]
    assert colours[0]["algo.tau=0.01"] == colours[1]["algo.tau=0.01"]
    assert colours[1]["algo.tau=0.05"] != colours[1]["algo.tau=0.01"]
