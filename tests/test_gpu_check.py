"""bench/gpu_check.py on CPU: the no-CUDA exit, running and stopping steps, the budget, the resume
check and the report, with fake steps standing in for the GPU benches and training runs."""

import dataclasses
import datetime
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from pql import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from conftest import alive  # noqa: E402

from bench import gpu_check  # noqa: E402
from bench.gpu.check import EXPECTED_OVERHEAD_S, MIN_RUN_S, STEPS, Check, fit_run_seconds  # noqa: E402
from bench.gpu.machine import machine_info  # noqa: E402
from bench.gpu.report import FILES, build_report  # noqa: E402
from bench.gpu.results import (  # noqa: E402
    UNRELEASED_WARNING,
    Eval,
    Figures,
    RunSummary,
    pytest_summary,
    read_csv,
    resume_verdict,
    resumed_from,
    run_summary,
)
from bench.gpu.steps import FAILED, OK, SKIPPED, TIMED_OUT, Step, StepResult, run_step  # noqa: E402
from bench.gpu.targets import (  # noqa: E402
    BATCH,
    DOCS_END,
    DOCS_START,
    RETURN_BY_S,
    TARGET_ENVS,
    TARGETS,
    Target,
    docs_table,
    return_by,
    write_targets_csv,
)

INFO = {"title": "pql GPU check, test", "gpu_name": "no GPU", "lines": ["GPU: none (test)"]}


def python_step(name: str, code: str, timeout_s: float = 60) -> Step:
    return Step(name, f"fake {name}", [sys.executable, "-c", textwrap.dedent(code)], timeout_s)


def test_without_cuda_it_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("gpu_check: no CUDA device")
    assert not out.exists()  # nothing was done


def test_a_failing_step_is_recorded_with_the_end_of_its_output(tmp_path):
    log = tmp_path / "log.txt"
    result = run_step(
        python_step("env", "for i in range(100): print(i)\nraise SystemExit(3)"), str(log), time_left_s=60
    )
    assert (result.status, result.detail) == (FAILED, "exit 3")
    assert result.tail(5) == ["95", "96", "97", "98", "99"]
    assert "===== fake env" in log.read_text() and "\n99\n" in log.read_text()


def test_a_hanging_step_is_stopped_with_its_children_at_the_time_left(tmp_path):
    pid_file = tmp_path / "child.pid"
    step = python_step(
        "train",
        f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
    """,
        timeout_s=60,
    )
    start = time.monotonic()
    result = run_step(step, str(tmp_path / "log.txt"), time_left_s=3)
    assert result.status == TIMED_OUT and "3 s" in result.detail
    assert time.monotonic() - start < 20
    assert result.tail() == ["started"]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.1)
    assert not alive(child)  # the step's own child went with it


def test_processes_a_step_leaves_behind_are_ended_with_it(tmp_path):
    pid_file = tmp_path / "child.pid"
    step = python_step(
        "learner",
        f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
    """,
    )
    assert run_step(step, str(tmp_path / "log.txt"), time_left_s=60).status == OK
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.1)
    assert not alive(child)  # it would have held the GPU through the next step


def test_machine_description_without_a_gpu_says_why():
    info = machine_info(datetime.datetime(2026, 1, 2, 3, 4, 5))
    assert info["title"] == "pql GPU check, 2026-01-02 03:04:05"
    gpu, software, host, mps = info["lines"]
    if not torch.cuda.is_available():
        assert gpu.startswith("GPU: could not read the GPU's properties:")
    assert f"torch {torch.__version__.split('+')[0]}" in software and "mujoco-warp " in software
    assert f"{os.cpu_count()} CPU cores" in host
    assert mps.startswith("MPS before the check:")


def test_a_training_run_is_shortened_to_the_budget_or_skipped():
    overhead = EXPECTED_OVERHEAD_S
    assert fit_run_seconds(180, 1000) == 180
    assert fit_run_seconds(180, overhead + 100) == 100
    assert fit_run_seconds(180, overhead + MIN_RUN_S - 1) is None
    assert fit_run_seconds(5, overhead + 5) == 5  # a run asked to be short is not refused


def test_resume_verdict():
    assert resume_verdict(1000, 1000, 1500)[0]
    assert "1,000" in resume_verdict(1000, 1000, 1500)[1]
    for train, start, end, reason in (
        (None, None, None, "no readable checkpoint"),
        (1000, None, 1500, "never said"),
        (1000, 0, 1500, "started at 0"),
        (1000, 1000, None, "no readable checkpoint"),
        (1000, 1000, 1000, "not past"),
    ):
        ok, text = resume_verdict(train, start, end)
        assert not ok and reason in text


def test_log_parsers():
    assert resumed_from("x\npql: resuming from /r/checkpoint.pt at 12,345,678 env steps\n") == 12_345_678
    assert resumed_from(f"pql {__version__}: task=Ant ...") is None
    output = "....\n=========== 40 passed, 12 deselected in 31.20s ===========\n"
    assert pytest_summary(output) == "40 passed, 12 deselected in 31.20s"


def env_rows(rate_at_32768: str, error: str = "") -> list[dict]:
    return [
        {
            "task": "Ant",
            "row": "pql mjwarp",
            "device": "cuda",
            "num_envs": str(n),
            "env_steps_per_s": rate,
            "error": err,
        }
        for n, rate, err in ((4096, "400000.0", ""), (16384, "1100000.0", ""), (32768, rate_at_32768, error))
    ]


ENV_ROWS = env_rows("", "OutOfMemoryError: CUDA out of memory")
PROFILE_ROWS = [
    {
        "task": "Ant",
        "row": "pql mjwarp",
        "device": "cuda",
        "num_envs": str(n),
        "part": part,
        "ms_per_step": ms,
        "share": share,
    }
    for n in (4096, 16384)
    for part, ms, share in (
        ("physics", "20.0", "0.8"),
        ("restart", "1.25", "0.05"),
        ("rest", "3.75", "0.15"),
        ("step", "25.0", "1.0"),
    )
]


def learner_rows(critic: float, efficiency: float, mps: str = "auto") -> list[dict]:
    values = {
        "critic_updates_per_s_alone": critic,
        "policy_updates_per_s_alone": 4500.0,
        "actor_env_steps_per_s_alone": 900000.0,
        "bound_env_steps_per_s": 500000.0,
        "together_env_steps_per_s": 500000.0 * efficiency,
        "together_efficiency": efficiency,
    }
    return [
        {
            "task": "Ant",
            "device": "cuda",
            "num_envs": "4096",
            "batch_size": "8192",
            "compile": "true",
            "mps": mps,
            "quantity": q,
            "value": str(v),
        }
        for q, v in values.items()
    ]


def metrics_csv(path, rows: list[tuple]) -> None:
    """A metrics.csv with columns env_steps, wall_time_s, eval/return, time/eval_s, time/eval_share."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["env_steps,wall_time_s,eval/return,time/eval_s,time/eval_share"]
    lines += [",".join("" if v is None else str(v) for v in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")


KERNEL_ROWS = [
    {"device": "cuda", "operation": op, "impl": impl, "microseconds": us, "note": note}
    for op, impl, us, note in (
        ("index update + sample, capacity 2^23, B=8192", "triton", "80.5", ""),
        ("index update + sample, capacity 2^23, B=8192", "torch", "900.0", ""),
        ("V-trace, T=32, B=4096", "triton", "50.0", ""),
        ("V-trace, T=32, B=4096", "torch", "500.0", ""),
        (
            "PrioritizedSampler update + sample (+ weights), capacity 2^23, B=8192",
            "torchrl",
            "",
            "n/a (torchrl not installed)",
        ),
    )
]


def test_report_from_step_results_and_bench_rows():
    results = [
        StepResult("tests", "kernel tests", "python -m pytest tests/kernels -m gpu", OK, 40),
        StepResult(
            "env",
            "env throughput",
            "python bench/env_throughput.py",
            FAILED,
            90,
            "exit 1",
            "line a\nTraceback\nOutOfMemoryError: CUDA out of memory\n",
        ),
        StepResult("learner", "learner bench", "python bench/learner.py", OK, 70),
        StepResult("learner_no_mps", "learner bench without MPS", "python bench/learner.py", OK, 70),
        StepResult("kernels", "kernels bench", "python bench/kernel_speed.py", OK, 30),
        StepResult("train", "train", "python train.py task=Ant", OK, 230),
        StepResult("resume", "resume", "python train.py task=Ant checkpoint=x", OK, 80),
        StepResult("plot", "return curve", "python -m pql.plot", SKIPPED, detail="10 s of the budget left"),
    ]
    fig = Figures(
        env=ENV_ROWS,
        env_profile=PROFILE_ROWS,
        learner=learner_rows(critic=3500.0, efficiency=0.6),
        learner_no_mps=learner_rows(critic=3400.0, efficiency=0.45, mps="off"),
        kernels=KERNEL_ROWS,
        tests_summary="40 passed, 12 deselected in 31.20s",
        train=RunSummary(
            180,
            9_000_000,
            190.0,
            [Eval(2_000_000, 60.0, 500.0), Eval(9_000_000, 185.0, 2500.0)],
            eval_s=[1.5, 2.5, 1.8],
            eval_share=0.04,
        ),
        resume=RunSummary(45, 11_000_000, 240.0, [Eval(11_000_000, 230.0, 2600.0)]),
        resume_start=9_000_000,
        curve="return_curve.png",
        mps="runtime.mps=auto: pql: MPS: a daemon of this run's own lets the roles share the GPU",
        unreleased=["resume"],
    )
    report = build_report(INFO, results, fig, budget_s=560)
    assert report.startswith("# pql GPU check, test")
    assert "**6 of 8 steps passed**" in report
    assert "| kernel tests | ok: 40 passed, 12 deselected in 31.20s | 40 s |" in report
    assert "| env throughput | **failed (exit 1)** | 90 s |" in report
    assert "| return curve | **skipped (10 s of the budget left)** | — |" in report
    # Targets: the env rate at N = 32,768 (failed there), the learner on the MPS path, the kernels,
    # the train run's evaluations; its return by 300 s needs a run that long.
    assert "| Ant env steps/s, mjwarp (CUDA), N = 32,768: ≥ 1,000,000 | — | not measured |" in report
    assert "| critic updates/s alone at batch 8,192: ≥ 3,000 | 3,500 | met |" in report
    assert "| policy updates/s alone at batch 8,192: ≥ 4,000 | 4,500 | met |" in report
    assert "(runtime.mps=auto): ≥ 90% | 60% | **not met** |" in report
    assert "| 80 µs | met |" in report
    assert "| 10× | **not met** |" in report
    assert "median of the train run's: ≤ 2.0 s | 1.8 s | met |" in report
    assert "spent evaluating: ≤ 5.0% | 4.0% | met |" in report
    assert "(--train-seconds 300): ≥ 6,000 | — | not measured |" in report
    assert "| pql mjwarp | cuda | 32,768 | failed: OutOfMemoryError: CUDA out of memory |" in report
    assert "| pql mjwarp | cuda | 4,096 | 20.00 ms (80%) | 1.25 ms (5%) | 3.75 ms (15%) | 25.00 ms |" in report
    assert "| together / bound | 60% | 45% |" in report  # the column without MPS
    assert "- MPS in the learner bench's together run: runtime.mps=auto: pql: MPS: a daemon" in report
    assert "| 80 µs (11x) | 900 µs | — |" in report
    assert "n/a (torchrl not installed)" in report
    assert "| train | 180 | 9,000,000 | 190 | 2 | 2,500.0 | 2,500.0 |" in report
    assert "Resume: ok: started at 9,000,000 env steps" in report
    assert "Shared CUDA tensors: **not released**: torch warned at the end of resume" in report
    assert "![eval return of the train run](return_curve.png)" in report
    assert "### env throughput: failed (exit 1)" in report and "OutOfMemoryError: CUDA out of memory\n```" in report
    assert "python train.py task=Ant checkpoint=x" in report  # the commands, to rerun a step


def test_the_train_runs_evaluations_measure_their_targets(tmp_path):
    """From the run's metrics.csv: the median evaluation time, the last evaluation share, and the
    best return logged by 300 s of wall time (not a better one after it, nor any in a shorter run)."""
    run = tmp_path / "train"
    metrics_csv(
        run / "metrics.csv",
        [
            (1_000_000, 100.0, 3000.0, 1.0, 0.01),
            (2_000_000, 110.0, None, None, None),
            (3_000_000, 250.0, 6500.0, 3.0, 0.02),
            (4_000_000, 299.0, 6100.0, 1.5, 0.03),
            (5_000_000, 320.0, 7000.0, 1.2, 0.04),
        ],
    )
    fig = Figures(train=run_summary(str(run), 300))
    assert fig.train.wall_s == 320.0 and fig.train.eval_s == [1.0, 3.0, 1.5, 1.2]
    assert [e.wall_s for e in fig.train.evals] == [100.0, 250.0, 299.0, 320.0]
    write_targets_csv(str(tmp_path / "targets.csv"), fig, "NVIDIA H200")
    with open(tmp_path / "targets.csv", newline="") as f:
        header = f.readline().strip()
    assert header == "name,target,measured,unit,met,gpu"
    rows = {r["name"]: r for r in read_csv(str(tmp_path / "targets.csv"))}
    assert [r["name"] for r in read_csv(str(tmp_path / "targets.csv"))] == [t.name for t in TARGETS]
    assert (rows["eval_s"]["measured"], rows["eval_s"]["met"]) == ("1.35", "true")
    assert (rows["eval_share"]["measured"], rows["eval_share"]["met"]) == ("0.04", "true")
    assert (rows["return_at_5_min"]["measured"], rows["return_at_5_min"]["met"]) == ("6500", "true")
    assert rows["critic_updates_per_s"]["measured"] == rows["critic_updates_per_s"]["met"] == ""
    assert {r["gpu"] for r in rows.values()} == {"NVIDIA H200"}

    metrics_csv(run / "metrics.csv", [(1_000_000, 100.0, 3000.0, 1.0, 0.01), (3_000_000, 250.0, 6500.0, 3.0, 0.02)])
    short = Figures(train=run_summary(str(run), 250))
    assert return_by(short) is None  # ended before 300 s: not measured


def test_a_target_is_met_in_its_direction():
    at_least = Target("x", "x", 10, "s", ">=", lambda fig: None)
    at_most = dataclasses.replace(at_least, direction="<=")
    assert at_least.met(10) and at_least.met(11) and not at_least.met(9)
    assert at_most.met(10) and at_most.met(9) and not at_most.met(11)


def test_nothing_runs_without_budget(tmp_path):
    args = gpu_check.parse_args(["--out", str(tmp_path), "--budget-s", "1"])
    check = Check(args, str(tmp_path), str(tmp_path / "runs"), INFO)
    assert check.run_all() == 1
    assert all(r.status == SKIPPED for r in check.results.values())
    assert list(check.results) == list(STEPS)
    report = (tmp_path / "report.md").read_text()
    assert "**0 of 7 steps passed**" in report and "of the budget left" in report


FAKE_TRAIN = """
import os, sys
sys.path.insert(0, os.getcwd())
from pql.checkpoint import load_checkpoint, save_checkpoint

overrides = dict(a.split("=", 1) for a in sys.argv[1:])
run_dir = overrides["hydra.run.dir"]
os.makedirs(run_dir)
with open(os.path.join(run_dir, "argv.txt"), "w") as f:
    f.write(" ".join(sys.argv[1:]))
start = 0
if "checkpoint" in overrides:
    start = load_checkpoint(overrides["checkpoint"])["counters"]["env_steps"]
    print(f"pql: resuming from {overrides['checkpoint']} at {start:,} env steps")
with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
    f.write("env_steps,wall_time_s,eval/return,time/eval_s,time/eval_share\\n")
    f.write(f"{start + 500},1.0,100.0,0.5,0.5\\n{start + 1000},2.0,300.0,1.5,0.75\\n")
save_checkpoint(os.path.join(run_dir, "checkpoint.pt"), {"counters": {"env_steps": start + 1000}})
"""


@pytest.mark.slow
def test_whole_check_with_fake_steps(tmp_path, monkeypatch):
    """Every step as the check runs it, the GPU ones replaced by fakes that write what the real
    ones write; the plot step is the real `python -m pql.plot`."""
    out, runs = tmp_path / "report", tmp_path / "scratch"
    fake_train = tmp_path / "fake_train.py"
    fake_train.write_text(FAKE_TRAIN)
    monkeypatch.setattr("bench.gpu.check.TRAIN", str(fake_train))
    args = gpu_check.parse_args(
        [
            *("--out", str(out), "--runs-dir", str(runs), "--without-mps", "--with-eager"),
            *("--train-seconds", "2", "--resume-seconds", "1"),
        ]
    )
    out.mkdir()
    check = Check(args, str(out), str(runs), INFO)
    env_csv = "task,row,device,num_envs,env_steps_per_s,error\nAnt,pql mjwarp,cuda,32768,1234567.0,\n"
    profile_csv = "task,row,device,num_envs,part,ms_per_step,share\n" + "".join(
        f"Ant,pql mjwarp,cuda,32768,{part},{ms},{ms / 40}\n"
        for part, ms in (("physics", 30), ("restart", 2), ("rest", 8), ("step", 40))
    )
    learner_csv = (
        "task,device,num_envs,batch_size,compile,mps,quantity,value\n"
        "Ant,cuda:0,4096,8192,true,auto,critic_updates_per_s_alone,3200\n"
    )
    learner_off_csv = learner_csv.replace(",auto,", ",off,").replace("3200", "2900")
    learner_eager_csv = learner_csv.replace(",true,", ",false,").replace("3200", "1100")
    # The learner bench runs on the MPS path of a training run, then with --mps off; the env bench profiles.
    assert "--mps" not in check.steps["learner"].argv and check.steps["learner_no_mps"].argv[-2:] == ["--mps", "off"]
    assert check.steps["env"].argv[-2:] == ["--profile-csv", check.path("env_profile")]
    # The eager run times the roles alone, uncompiled.
    assert check.steps["learner_eager"].argv[-4:] == ["--compile", "false", "--together-seconds", "0"]
    fakes = {
        "tests": "print('3 passed, 2 deselected in 0.10s')",
        "env": f"open({check.path('env')!r}, 'w').write({env_csv!r}); "
        f"open({check.path('env_profile')!r}, 'w').write({profile_csv!r})",
        "learner": f"open({check.path('learner')!r}, 'w').write({learner_csv!r}); "
        "print('together run, runtime.mps=auto: pql: MPS not used: no daemon here')",
        "learner_no_mps": f"open({check.path('learner_no_mps')!r}, 'w').write({learner_off_csv!r})",
        "learner_eager": f"open({check.path('learner_eager')!r}, 'w').write({learner_eager_csv!r})",
        "kernels": "print('compiling'); print('boom'); raise SystemExit(1)",
    }
    for name, code in fakes.items():
        check.steps[name] = dataclasses.replace(check.steps[name], argv=[sys.executable, "-c", code])

    assert check.run_all() == 1  # the kernels step failed
    statuses = {name: r.status for name, r in check.results.items()}
    assert statuses == {
        "tests": "ok",
        "env": "ok",
        "learner": "ok",
        "learner_eager": "ok",
        "learner_no_mps": "ok",
        "kernels": "failed",
        "train": "ok",
        "resume": "ok",
        "plot": "ok",
    }
    assert "runtime.max_time_s=2" in (runs / "train" / "argv.txt").read_text()
    resume_argv = (runs / "resume" / "argv.txt").read_text()
    assert f"checkpoint={runs / 'train' / 'checkpoint.pt'}" in resume_argv
    assert "runtime.max_time_s=1" in resume_argv and "runtime.max_env_steps=20001000" in resume_argv
    assert sorted(os.listdir(out)) == [
        "env_profile.csv",
        "env_throughput.csv",
        "learner.csv",
        "learner_eager.csv",
        "learner_no_mps.csv",
        "log.txt",
        "report.md",
        "return_curve.png",
        "targets.csv",
    ]
    assert len(FILES) <= 10
    report = (out / "report.md").read_text()
    assert "**8 of 9 steps passed**" in report
    assert "ok: 3 passed, 2 deselected in 0.10s" in report
    assert "N = 32,768: ≥ 1,000,000 | 1,234,567 | met |" in report
    assert "batch 8,192: ≥ 3,000 | 3,200 | met |" in report
    assert "| pql mjwarp | cuda | 32,768 | 30.00 ms (75%) | 2.00 ms (5%) | 8.00 ms (20%) | 40.00 ms |" in report
    assert "| critic updates/s, V-learner alone | 3,200 | 2,900 | 1,100 |" in report
    assert "- MPS in the learner bench's together run: runtime.mps=auto: pql: MPS not used: no daemon here" in report
    assert "median of the train run's: ≤ 2.0 s | 1.0 s | met |" in report
    targets = {r["name"]: r for r in read_csv(str(out / "targets.csv"))}
    assert targets["env_steps_per_s"] == {
        "name": "env_steps_per_s",
        "target": "1e+06",
        "measured": "1.23457e+06",
        "unit": "env steps/s",
        "met": "true",
        "gpu": INFO["gpu_name"],
    }
    assert targets["eval_share"]["measured"] == "0.75" and targets["eval_share"]["met"] == "false"  # the last
    assert targets["return_at_5_min"]["measured"] == targets["return_at_5_min"]["met"] == ""
    assert "Resume: ok: started at 1,000 env steps (the train checkpoint's count) and ended at 2,000" in report
    assert "| train | 2 | 1,000 | 2 | 2 | 300.0 | 300.0 |" in report
    assert "Shared CUDA tensors: every role let go of the main process's CUDA tensors" in report
    assert "![eval return of the train run](return_curve.png)" in report
    assert "### kernels bench (Triton vs reference vs flat index vs torchrl): failed (exit 1)" in report
    assert "compiling\nboom\n```" in report
    log = (out / "log.txt").read_text()
    assert "===== kernels bench" in log and "boom" in log


def train_and_resume_report(tmp_path, monkeypatch, fake_train_text: str) -> str:
    """The check's train and resume steps run against a fake train.py -> report.md's text."""
    out, runs = tmp_path / "report", tmp_path / "runs"
    fake_train = tmp_path / "fake_train.py"
    fake_train.write_text(fake_train_text)
    monkeypatch.setattr("bench.gpu.check.TRAIN", str(fake_train))
    steps = ["--steps", "train", "resume", "--train-seconds", "2", "--resume-seconds", "1"]
    args = gpu_check.parse_args(["--out", str(out), "--runs-dir", str(runs), *steps])
    out.mkdir()
    Check(args, str(out), str(runs), INFO).run_all()
    return (out / "report.md").read_text()


def test_a_resume_that_starts_over_fails_the_check(tmp_path, monkeypatch):
    """A resumed run whose counter starts from 0 instead of the checkpoint's is caught."""
    report = train_and_resume_report(
        tmp_path, monkeypatch, FAKE_TRAIN.replace('if "checkpoint" in overrides:', "if False:")
    )
    assert "Resume: **failed**: the resumed run never said it was resuming" in report


def test_a_run_that_leaves_shared_cuda_tensors_behind_is_reported(tmp_path, monkeypatch):
    """torch's warning at the end of a training run (a role exited holding the main process's CUDA
    tensors) is found in the run's output and named in the report."""
    report = train_and_resume_report(
        tmp_path,
        monkeypatch,
        FAKE_TRAIN
        + "sys.stderr.write('[W CudaIPCTypes.cpp:16] ' + %r)\n"
        % (UNRELEASED_WARNING + ". See Note [Sharing CUDA tensors]\n"),
    )
    assert "Shared CUDA tensors: **not released**: torch warned at the end of train and resume" in report


@pytest.mark.slow
def test_bench_csvs_feed_the_report(tmp_path):
    """The CSV columns the benches write are the ones the report reads (tiny sizes, on CPU)."""
    env_csv, profile_csv, kernels_csv = tmp_path / "env.csv", tmp_path / "profile.csv", tmp_path / "kernels.csv"
    for argv in (
        [
            "env_throughput.py",
            "--backends",
            "mujoco",
            "--devices",
            "cpu",
            "--sizes",
            "2",
            "--seconds",
            "0.2",
            "--gym-sizes",
            "--rollout-sizes",
            "--csv",
            str(env_csv),
            "--profile-csv",
            str(profile_csv),
        ],
        ["kernel_speed.py", "--device", "cpu", "--batch", "16", "--log2-capacities", "6", "--csv", str(kernels_csv)],
    ):
        done = subprocess.run(
            [sys.executable, os.path.join(ROOT, "bench", argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    fig = Figures(
        env=read_csv(str(env_csv)),
        env_profile=read_csv(str(profile_csv)),
        kernels=read_csv(str(kernels_csv)),
    )
    report = build_report(INFO, [], fig, budget_s=560)
    assert "| pql mujoco | cpu | 2 |" in report
    assert re.search(r"\| pql mujoco \| cpu \| 2 \|( [\d.]+ ms \(\d+%\) \|){3} [\d.]+ ms \|", report), report
    # The Triton cell, then the sum-tree's reference and the flat index, both timed on the CPU.
    kernel_row = r"\| index update \+ sample, capacity 2\^6, B=16 \| not measured \(no CUDA\)( \| [\d,]+ µs){2} \|"
    assert re.search(kernel_row, report), report
    assert "| V-trace, T=32, B=4096 | not measured (no CUDA) |" in report


DOCS_TARGETS = os.path.join(ROOT, "docs", "gpu.md")


def quoted(cell: str) -> tuple[str, float]:
    """A target as a page writes it ("≥ 1,000,000 at N = 32,768", "≤ 5%", "≥ 20×") -> (direction, value)."""
    match = re.search(r"([≥≤]) ([\d,.]+)\s*(%?)", cell)
    assert match, cell
    value = float(match.group(2).replace(",", "")) / (100 if match.group(3) else 1)
    return (">=" if match.group(1) == "≥" else "<="), value


def test_docs_gpu_md_has_the_generated_targets_table():
    # On failure: python -m bench.gpu.targets docs/gpu.md
    with open(DOCS_TARGETS, encoding="utf-8") as f:
        text = f.read()
    assert text.count(DOCS_START) == 1 and text.count(DOCS_END) == 1
    assert text.split(DOCS_START)[1].split(DOCS_END)[0] == f"\n\n{docs_table()}\n\n"
    assert [t.name for t in TARGETS] == [line.split("`")[1] for line in docs_table().splitlines()[2:]]


# docs/gpu.md's Current figures: the start of a row's figure cell -> the target its target cell quotes.
FIGURE_ROWS = {
    "Ant env steps/s": "env_steps_per_s",
    "critic updates/s alone": "critic_updates_per_s",
    "policy updates/s alone": "policy_updates_per_s",
    "three roles together / bound": "together_efficiency",
    "the same under MPS": "together_efficiency",
    "Triton sum-tree update + sample": "sumtree_us",
    "flat index (float64 prefix sum": "flat_us",
    "Triton V-trace": "vtrace_speedup",
    "Ant evaluation (10 episodes)": "eval_s",
    "share of a run's wall time spent evaluating": "eval_share",
    "Ant training return": "return_at_5_min",
}


def test_docs_current_figures_quote_the_targets():
    targets = {t.name: t for t in TARGETS}
    with open(DOCS_TARGETS, encoding="utf-8") as f:
        section = f.read().split("## Current figures")[1].split("\n## ")[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and " | " in line]
    seen = set()
    for figure, target_cell, *_ in rows[1:]:
        name = next((n for start, n in FIGURE_ROWS.items() if figure.lstrip("| ").startswith(start)), None)
        if name is None:
            continue
        seen.add(name)
        assert quoted(target_cell) == (targets[name].direction, targets[name].value), (figure, target_cell)
        if name == "env_steps_per_s":
            assert f"N = {TARGET_ENVS:,}" in target_cell
        if name in ("critic_updates_per_s", "policy_updates_per_s"):
            assert f"batch {BATCH:,}" in figure
        if name == "return_at_5_min":
            assert f"by {RETURN_BY_S / 60:g} minutes" in target_cell
    assert seen == set(targets)  # every target has its row


# Sentences of README and the docs that quote a target: the target's number as a regex group, and
# the factor from the number as written to the target's value.
QUOTES = [
    ("README.md", r"updates/s against a target of ([\d,]+)", "critic_updates_per_s", 1),
    ("README.md", r"M steps/s against ([\d.]+)M", "env_steps_per_s", 1e6),
    ("README.md", r"slower than its ([\d,]+) µs target", "flat_us", 1),
    ("README.md", r"takes at most (\d+)% of a run's wall time", "eval_share", 0.01),
    ("docs/kernels.md", r"V-trace at least (\d+) times as fast as the PyTorch recursion", "vtrace_speedup", 1),
    ("docs/kernels.md", r"capacity 2\^23 within ([\d,]+) µs", "sumtree_us", 1),
    ("docs/benchmarks.md", r"The target, ≥ ([\d,]+) env steps/s at N = 32,768", "env_steps_per_s", 1),
    ("docs/benchmarks.md", r"in a 2\^23 tree ≤ ([\d,]+) µs", "sumtree_us", 1),
    ("docs/benchmarks.md", r"V-trace ≥ (\d+)× the PyTorch recursion", "vtrace_speedup", 1),
]


@pytest.mark.parametrize("path, pattern, name, factor", QUOTES)
def test_readme_and_docs_quote_the_targets(path, pattern, name, factor):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = " ".join(f.read().split())  # a sentence may wrap anywhere
    match = re.search(pattern, text)
    assert match, f"{path} no longer says {pattern!r}: update QUOTES with its new wording"
    target = next(t for t in TARGETS if t.name == name)
    assert float(match.group(1).replace(",", "")) * factor == pytest.approx(target.value), (path, match.group(0))
