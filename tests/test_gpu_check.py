"""bench/gpu_check.py on CPU: the no-CUDA exit, running and stopping steps, the budget, the resume
check and the report, with fake steps standing in for the GPU benches and training runs."""
import dataclasses
import datetime
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from pql import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_check  # noqa: E402
from conftest import alive  # noqa: E402

INFO = {"title": "pql GPU check, test", "gpu_name": "no GPU", "lines": ["GPU: none (test)"]}


def python_step(name: str, code: str, timeout_s: float = 60) -> gpu_check.Step:
    return gpu_check.Step(name, f"fake {name}", [sys.executable, "-c", textwrap.dedent(code)], timeout_s)


def test_without_cuda_it_says_so_in_one_line_and_exits_2(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert done.stderr.startswith("gpu_check: no CUDA device")
    assert not out.exists()  # nothing was done


def test_a_failing_step_is_recorded_with_the_end_of_its_output(tmp_path):
    log = tmp_path / "log.txt"
    result = gpu_check.run_step(python_step("env", "for i in range(100): print(i)\nraise SystemExit(3)"),
                                str(log), time_left_s=60)
    assert (result.status, result.detail) == (gpu_check.FAILED, "exit 3")
    assert result.tail(5) == ["95", "96", "97", "98", "99"]
    assert "===== fake env" in log.read_text() and "\n99\n" in log.read_text()


def test_a_hanging_step_is_stopped_with_its_children_at_the_time_left(tmp_path):
    pid_file = tmp_path / "child.pid"
    step = python_step("train", f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
    """, timeout_s=60)
    start = time.monotonic()
    result = gpu_check.run_step(step, str(tmp_path / "log.txt"), time_left_s=3)
    assert result.status == gpu_check.TIMED_OUT and "3 s" in result.detail
    assert time.monotonic() - start < 20
    assert result.tail() == ["started"]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.1)
    assert not alive(child)  # the step's own child went with it


def test_processes_a_step_leaves_behind_are_ended_with_it(tmp_path):
    pid_file = tmp_path / "child.pid"
    step = python_step("learner", f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
    """)
    assert gpu_check.run_step(step, str(tmp_path / "log.txt"), time_left_s=60).status == gpu_check.OK
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(child):
        time.sleep(0.1)
    assert not alive(child)  # it would have held the GPU through the next step


def test_machine_description_without_a_gpu_says_why():
    info = gpu_check.machine_info(datetime.datetime(2026, 1, 2, 3, 4, 5))
    assert info["title"] == "pql GPU check, 2026-01-02 03:04:05"
    gpu, software, host, mps = info["lines"]
    if not torch.cuda.is_available():
        assert gpu.startswith("GPU: could not read the GPU's properties:")
    assert f"torch {torch.__version__.split('+')[0]}" in software and "mujoco-warp " in software
    assert f"{os.cpu_count()} CPU cores" in host
    assert mps.startswith("MPS before the check:")


def test_a_training_run_is_shortened_to_the_budget_or_skipped():
    overhead = gpu_check.EXPECTED_OVERHEAD_S
    assert gpu_check.fit_run_seconds(180, 1000) == 180
    assert gpu_check.fit_run_seconds(180, overhead + 100) == 100
    assert gpu_check.fit_run_seconds(180, overhead + gpu_check.MIN_RUN_S - 1) is None
    assert gpu_check.fit_run_seconds(5, overhead + 5) == 5  # a run asked to be short is not refused


def test_resume_verdict():
    assert gpu_check.resume_verdict(1000, 1000, 1500)[0]
    assert "1,000" in gpu_check.resume_verdict(1000, 1000, 1500)[1]
    for train, start, end, reason in ((None, None, None, "no readable checkpoint"),
                                      (1000, None, 1500, "never said"),
                                      (1000, 0, 1500, "started at 0"),
                                      (1000, 1000, None, "no readable checkpoint"),
                                      (1000, 1000, 1000, "not past")):
        ok, text = gpu_check.resume_verdict(train, start, end)
        assert not ok and reason in text


def test_log_parsers():
    assert gpu_check.resumed_from("x\npql: resuming from /r/checkpoint.pt at 12,345,678 env steps\n") == 12_345_678
    assert gpu_check.resumed_from(f"pql {__version__}: task=Ant ...") is None
    output = "....\n=========== 40 passed, 12 deselected in 31.20s ===========\n"
    assert gpu_check.tests_summary(output) == "40 passed, 12 deselected in 31.20s"


ENV_ROWS = [{"task": "Ant", "row": "pql mjwarp", "device": "cuda", "num_envs": str(n), "env_steps_per_s": rate,
             "error": error} for n, rate, error in ((4096, "400000.0", ""), (16384, "1100000.0", ""),
                                                    (32768, "", "OutOfMemoryError: CUDA out of memory"))]


def learner_rows(critic: float, efficiency: float) -> list[dict]:
    values = {"critic_updates_per_s_alone": critic, "policy_updates_per_s_alone": 2000.0,
              "actor_env_steps_per_s_alone": 900000.0, "bound_env_steps_per_s": 500000.0,
              "together_env_steps_per_s": 500000.0 * efficiency, "together_efficiency": efficiency}
    return [{"task": "Ant", "device": "cuda", "num_envs": "4096", "batch_size": "8192", "compile": "true",
             "quantity": q, "value": str(v)} for q, v in values.items()]


KERNEL_ROWS = [{"device": "cuda", "operation": op, "impl": impl, "microseconds": us, "note": note}
               for op, impl, us, note in (
                   ("SumTree update + sample, capacity 2^23, B=8192", "triton", "80.5", ""),
                   ("SumTree update + sample, capacity 2^23, B=8192", "torch", "900.0", ""),
                   ("V-trace, T=32, B=4096", "triton", "50.0", ""),
                   ("V-trace, T=32, B=4096", "torch", "500.0", ""),
                   ("PrioritizedSampler update + sample (+ weights), capacity 2^23, B=8192", "torchrl", "",
                    "n/a (torchrl not installed)"))]


def test_report_from_step_results_and_bench_rows():
    results = [gpu_check.StepResult("tests", "kernel tests", "python -m pytest tests/kernels -m gpu", gpu_check.OK, 40),
               gpu_check.StepResult("env", "env throughput", "python bench/env_throughput.py", gpu_check.FAILED, 90,
                                    "exit 1", "line a\nTraceback\nOutOfMemoryError: CUDA out of memory\n"),
               gpu_check.StepResult("learner", "learner bench", "python bench/learner.py", gpu_check.OK, 70),
               gpu_check.StepResult("learner_mps", "learner bench under MPS", "python bench/learner.py",
                                    gpu_check.OK, 70),
               gpu_check.StepResult("kernels", "kernels bench", "python bench/kernels.py", gpu_check.OK, 30),
               gpu_check.StepResult("train", "train", "python train.py task=Ant", gpu_check.OK, 230),
               gpu_check.StepResult("resume", "resume", "python train.py task=Ant checkpoint=x", gpu_check.OK, 80),
               gpu_check.StepResult("plot", "return curve", "python -m pql.plot", gpu_check.SKIPPED,
                                    detail="10 s of the budget left")]
    fig = gpu_check.Figures(
        env=ENV_ROWS, learner=learner_rows(critic=1500.0, efficiency=0.6),
        learner_mps=learner_rows(critic=1400.0, efficiency=0.85), kernels=KERNEL_ROWS,
        tests_summary="40 passed, 12 deselected in 31.20s",
        train=gpu_check.RunSummary(180, 9_000_000, 190.0, [(2_000_000, 500.0), (9_000_000, 2500.0)]),
        resume=gpu_check.RunSummary(45, 11_000_000, 240.0, [(11_000_000, 2600.0)]), resume_start=9_000_000,
        curve="return_curve.png", mps="a daemon of the check's own served the learner bench", unreleased=["resume"])
    report = gpu_check.build_report(INFO, results, fig, budget_s=560)
    assert report.startswith("# pql GPU check, test")
    assert "**6 of 8 steps passed**" in report
    assert "| kernel tests | ok: 40 passed, 12 deselected in 31.20s | 40 s |" in report
    assert "| env throughput | **failed (exit 1)** | 90 s |" in report
    assert "| return curve | **skipped (10 s of the budget left)** | — |" in report
    # Targets: the env rate at N ≥ 16,384, the learner without MPS, the kernels.
    assert "| 1,100,000 (N = 16,384) | met |" in report
    assert "| 1,500 | met |" in report
    assert "| 60% | **not met** |" in report
    assert "| 80 µs | met |" in report
    assert "| 10× | **not met** |" in report
    assert "| pql mjwarp | cuda | 32,768 | failed: OutOfMemoryError: CUDA out of memory |" in report
    assert "| together / bound | 60% | 85% |" in report  # the MPS column
    assert "| 80 µs (11x) | 900 µs | — |" in report
    assert "n/a (torchrl not installed)" in report
    assert "| train | 180 | 9,000,000 | 190 | 2 | 2,500.0 | 2,500.0 |" in report
    assert "Resume: ok: started at 9,000,000 env steps" in report
    assert "Shared CUDA tensors: **not released**: torch warned at the end of resume" in report
    assert "![eval return of the train run](return_curve.png)" in report
    assert "### env throughput: failed (exit 1)" in report and "OutOfMemoryError: CUDA out of memory\n```" in report
    assert "python train.py task=Ant checkpoint=x" in report  # the commands, to rerun a step


def test_nothing_runs_without_budget(tmp_path):
    args = gpu_check.parse_args(["--out", str(tmp_path), "--budget-s", "1"])
    check = gpu_check.Check(args, str(tmp_path), str(tmp_path / "runs"), INFO)
    assert check.run_all() == 1
    assert all(r.status == gpu_check.SKIPPED for r in check.results.values())
    assert list(check.results) == list(gpu_check.STEPS)
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
    f.write("env_steps,wall_time_s,eval/return\\n")
    f.write(f"{start + 500},1.0,100.0\\n{start + 1000},2.0,300.0\\n")
save_checkpoint(os.path.join(run_dir, "checkpoint.pt"), {"counters": {"env_steps": start + 1000}})
"""


@pytest.mark.slow
def test_whole_check_with_fake_steps(tmp_path, monkeypatch):
    """Every step as the check runs it, the GPU ones replaced by fakes that write what the real
    ones write; the plot step is the real `python -m pql.plot`."""
    out, runs = tmp_path / "report", tmp_path / "scratch"
    fake_train = tmp_path / "fake_train.py"
    fake_train.write_text(FAKE_TRAIN)
    monkeypatch.setattr(gpu_check, "TRAIN", str(fake_train))
    monkeypatch.setattr(gpu_check, "MPS_CONTROL", "pql-test-no-such-mps-control")
    args = gpu_check.parse_args(["--out", str(out), "--runs-dir", str(runs), "--mps",
                                 "--train-seconds", "2", "--resume-seconds", "1"])
    out.mkdir()
    check = gpu_check.Check(args, str(out), str(runs), INFO)
    env_csv = "task,row,device,num_envs,env_steps_per_s,error\nAnt,pql mjwarp,cuda,16384,1234567.0,\n"
    learner_csv = ("task,device,num_envs,batch_size,compile,quantity,value\n"
                   "Ant,cuda:0,4096,8192,true,critic_updates_per_s_alone,1200\n")
    fakes = {"tests": "print('3 passed, 2 deselected in 0.10s')",
             "env": f"open({check.path('env')!r}, 'w').write({env_csv!r})",
             "learner": f"open({check.path('learner')!r}, 'w').write({learner_csv!r})",
             "kernels": "print('compiling'); print('boom'); raise SystemExit(1)"}
    for name, code in fakes.items():
        check.steps[name] = dataclasses.replace(check.steps[name], argv=[sys.executable, "-c", code])

    assert check.run_all() == 1  # the kernels step failed, MPS could not start
    statuses = {name: r.status for name, r in check.results.items()}
    assert statuses == {"tests": "ok", "env": "ok", "learner": "ok", "learner_mps": "skipped", "kernels": "failed",
                        "train": "ok", "resume": "ok", "plot": "ok"}
    assert "runtime.max_time_s=2" in (runs / "train" / "argv.txt").read_text()
    resume_argv = (runs / "resume" / "argv.txt").read_text()
    assert f"checkpoint={runs / 'train' / 'checkpoint.pt'}" in resume_argv
    assert "runtime.max_time_s=1" in resume_argv and "runtime.max_env_steps=20001000" in resume_argv
    assert sorted(os.listdir(out)) == ["env_throughput.csv", "learner.csv", "log.txt", "report.md",
                                       "return_curve.png"]
    report = (out / "report.md").read_text()
    assert "**6 of 8 steps passed**" in report
    assert "ok: 3 passed, 2 deselected in 0.10s" in report
    assert "| 1,234,567 (N = 16,384) | met |" in report
    assert "| 1,200 | met |" in report
    assert "MPS (--mps): not used: pql-test-no-such-mps-control is not on PATH" in report
    assert "Resume: ok: started at 1,000 env steps (the train checkpoint's count) and ended at 2,000" in report
    assert "| train | 2 | 1,000 | 2 | 2 | 300.0 | 300.0 |" in report
    assert "Shared CUDA tensors: every role let go of the main process's CUDA tensors" in report
    assert "![eval return of the train run](return_curve.png)" in report
    assert "### kernels bench (Triton vs reference vs torchrl): failed (exit 1)" in report
    assert "compiling\nboom\n```" in report
    log = (out / "log.txt").read_text()
    assert "===== kernels bench" in log and "boom" in log


def test_a_resume_that_starts_over_fails_the_check(tmp_path, monkeypatch):
    """A resumed run whose counter starts from 0 instead of the checkpoint's is caught."""
    out, runs = tmp_path / "report", tmp_path / "runs"
    fake_train = tmp_path / "fake_train.py"
    fake_train.write_text(FAKE_TRAIN.replace('if "checkpoint" in overrides:', 'if False:'))
    monkeypatch.setattr(gpu_check, "TRAIN", str(fake_train))
    args = gpu_check.parse_args(["--out", str(out), "--runs-dir", str(runs), "--steps", "train", "resume",
                                 "--train-seconds", "2", "--resume-seconds", "1"])
    out.mkdir()
    check = gpu_check.Check(args, str(out), str(runs), INFO)
    check.run_all()
    report = (out / "report.md").read_text()
    assert "Resume: **failed**: the resumed run never said it was resuming" in report


def test_a_run_that_leaves_shared_cuda_tensors_behind_is_reported(tmp_path, monkeypatch):
    """torch's warning at the end of a training run (a role exited holding the main process's CUDA
    tensors) is found in the run's output and named in the report."""
    out, runs = tmp_path / "report", tmp_path / "runs"
    fake_train = tmp_path / "fake_train.py"
    fake_train.write_text(FAKE_TRAIN + "sys.stderr.write('[W CudaIPCTypes.cpp:16] ' + %r)\n"
                          % (gpu_check.UNRELEASED_WARNING + ". See Note [Sharing CUDA tensors]\n"))
    monkeypatch.setattr(gpu_check, "TRAIN", str(fake_train))
    args = gpu_check.parse_args(["--out", str(out), "--runs-dir", str(runs), "--steps", "train", "resume",
                                 "--train-seconds", "2", "--resume-seconds", "1"])
    out.mkdir()
    gpu_check.Check(args, str(out), str(runs), INFO).run_all()
    report = (out / "report.md").read_text()
    assert "Shared CUDA tensors: **not released**: torch warned at the end of train and resume" in report


@pytest.mark.slow
def test_bench_csvs_feed_the_report(tmp_path):
    """The CSV columns the benches write are the ones the report reads (tiny sizes, on CPU)."""
    env_csv, kernels_csv = tmp_path / "env.csv", tmp_path / "kernels.csv"
    for argv in (["env_throughput.py", "--backends", "mujoco", "--devices", "cpu", "--sizes", "2", "--seconds", "0.2",
                  "--gym-sizes", "--rollout-sizes", "--csv", str(env_csv)],
                 ["kernels.py", "--device", "cpu", "--batch", "16", "--log2-capacities", "6", "--csv", str(kernels_csv)]):
        done = subprocess.run([sys.executable, os.path.join(ROOT, "bench", argv[0]), *argv[1:]], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    fig = gpu_check.Figures(env=gpu_check.read_csv(str(env_csv)), kernels=gpu_check.read_csv(str(kernels_csv)))
    report = gpu_check.build_report(INFO, [], fig, budget_s=560)
    assert "| pql mujoco | cpu | 2 |" in report
    assert "| SumTree update + sample, capacity 2^6, B=16 | not measured (no CUDA) |" in report
    assert "| V-trace, T=32, B=4096 | not measured (no CUDA) |" in report
