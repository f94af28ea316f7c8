"""The long learning checks and README's expected results, as one benchmark run by hand or on a
schedule, never in CI.

    python bench/learning.py [--tasks NAME ...] [--seeds N] [--out DIR] [--max-time-s S] [--list]

Each check is one training run, `python train.py <overrides> runtime.seed=S` as a subprocess of
its own from the repository root (so a run is exactly the command printed beside it; the runs see
no GPU, as README's rows are CPU rows), writing to OUT/<check>/seed<S>:

    ant-walks               tests/test_learning.py's Ant check: 300k env steps in sequential mode;
                            ok when the final policy beats standing still (zero torques) and its
                            torso travels >= 30 m along +x in an episode
    double-pendulum         PQL on InvertedDoublePendulum, 80k env steps: ok at an eval >= 9,000
    sac-pendulum            SAC on InvertedPendulum, 160k env steps: ok at an eval >= 900
    Ant ... Pusher          README's command, `python train.py task=<Task>`: 885 s of training
    InvertedPendulum,       README's 5-minute runs (runtime.max_time_s=300 runtime.eval_every=10000);
    InvertedDoublePendulum  the figure is the wall time of the first evaluation at the maximum,
                            taken as >= 950 (of 1,000) and >= 9,300 (of ~9,360)
    gym-HalfCheetah         README's HalfCheetah command through task=gym:HalfCheetah-v5 (its
                            128 envs as Gymnasium copies stepped in one loop, sync, which steps
                            them 3x faster than async here): held to HalfCheetah's floor
    rsl_rl-final-obs-hidden HalfCheetah through examples/rsl_rl_task.py (rsl_rl's interface)
    rsl_rl-final-obs-shown  for 5 minutes, its final observation hidden or shown: `measured`

One seed of everything takes about 2.7 hours on README's 2-core CPU. The machine's speed comes
first: a 2-thread 2048² float32 matmul (sgemm) in GFLOP/s, with the CPU, torch, MuJoCo and the
commit. Then a line per row as it finishes, and a Markdown table (check, seed, command, env
steps, result, README, floor, verdict), also written to OUT/learning.md, and the same rows in
OUT/learning.csv (its first lines, `# key: value`, give the machine, the sgemm figure, the commit
and the date; pandas reads it with comment="#"); both are rewritten after every row. A run's
directory keeps train.log, metrics.csv, checkpoint.pt and stderr.log (train.py's stderr); its
replay files are deleted once its row is read: a benchmark never resumes, and a 15-minute run's
replay is about 1.3 GB.

Reading the verdict of a README row. README's figures were measured on one machine on given
days; another machine, or another day of the same VM (whose speed varies by up to 2×), makes
other numbers of env steps in the same 15 minutes. So a row is held to a floor that the run's own
speed sets:

    r     = env steps this run made / the mean env steps of README's runs
    floor = B + (V - B) * sqrt(min(1, r)) - 2 * sd

B is the return of a policy of zero actions (the middle of the action box, which is zero on
every task here), measured on pql's env over the same 10 starts as the run's evaluations; V is
README's mean; sd is the standard deviation of README's per-seed returns, or 10% of |V - B| where
README has one seed (the measured spreads are 5 to 15% of V - B: HumanoidStandup, Reacher and
Pusher near 5%, Ant, Walker2d and Swimmer near 14%). Why the square root: README's "a machine
half as fast makes half the env steps: Ant then ends near 2,500" puts Ant's curve at half the
steps (2,500 - 996) / (3,117 - 996) = 0.71 of the way from standing still to README's mean, and
sqrt(0.5) = 0.71; it is 0.8 of 3,117 itself, so on the raw return the square root is the lenient
side. A learning curve rises quickly and then flattens, which the square root follows; r is
capped at 1 because a faster machine's extra steps buy little on that flat part, and the floor
asks it for no more than README. Why 2 sd: the row is one seed, and one seed scatters about the
mean by the per-seed sd (not the s.e., which is the mean's); two of them below the mean leave a
sound run under the floor about one time in 40.

The pendulum rows measure seconds, lower being better: ok when the first evaluation at the
maximum comes within README's seconds × 2 / min(1, r), where r is the run's env steps per second
(at that evaluation, or at its end if none reached the maximum) over README's (10k env steps at
52 s, 20k at 87 s). The × 2 lets the balance come at least one evaluation after README's (they
are 10k env steps apart); on a slower machine the rule is the same as balancing within twice
README's env steps.

Verdicts: `ok` at or above the floor (within the limit for the pendulums; the three long checks:
their own conditions), `below` otherwise, `measured` for a figure read beside another row's,
`failed` when the run did not finish (its exit code and last line of stderr in the row), and
`trial` for every row of a run with --max-time-s, whose budgets are not README's: its floor is
printed but not judged. Exit code: 0 when every row is
ok or measured, 1 otherwise (a trial included), 2 for a bad argument (an unknown check is refused in one line).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial

# torch and pql are imported inside the functions that use them: --list, a refused name and the
# tests of this file's arithmetic then answer before torch's import of several seconds.

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STDERR = "stderr.log"  # train.py's stderr, beside its train.log in the run directory


@dataclass(frozen=True)
class Reported:
    """README's pql figure for a task ("Expected results", CPU rows) and the runs behind it
    (docs/benchmarks.md, "CPU: 15 minutes against SB3")."""

    value: float  # README's mean final eval return; for the pendulums, seconds to the maximum
    seeds: tuple[float, ...]  # each seed's final eval return (for the pendulums: its seconds)
    env_steps: tuple[int, ...]  # each seed's env steps (for the pendulums: at that evaluation)


README_RESULTS: dict[str, Reported] = {
    "Ant": Reported(3_117, (3_445, 2_858, 3_048), (1_182_000, 1_257_000, 1_217_000)),
    "HalfCheetah": Reported(8_879, (8_879,), (1_403_000,)),
    "Hopper": Reported(3_266, (3_266,), (1_561_000,)),
    "Walker2d": Reported(4_118, (3_700, 4_536), (1_327_000, 1_298_000)),
    "Humanoid": Reported(5_298, (5_298,), (780_000,)),
    "HumanoidStandup": Reported(153_513, (157_635, 149_390), (926_000, 905_000)),
    "Swimmer": Reported(120, (102.7, 132.8, 125.5), (2_318_000, 2_284_000, 2_329_000)),
    "Reacher": Reported(-3.91, (-4.23, -3.59), (93_000, 108_000)),
    "Pusher": Reported(-34.7, (-35.44, -33.99), (196_000, 195_000)),
    "InvertedPendulum": Reported(52, (52,), (10_000,)),
    "InvertedDoublePendulum": Reported(87, (87,), (20_000,)),
}
# "At the maximum": InvertedPendulum scores one per step alive over 1,000 steps; a balanced
# InvertedDoublePendulum about 9.35 per step (README's run first reached 9,354).
BALANCED = {"InvertedPendulum": 950.0, "InvertedDoublePendulum": 9_300.0}
BASELINE_ENVS = 10  # task.eval_envs' default: B is scored over the run's own evaluation starts
SINGLE_SEED_SPREAD = 0.1  # sd where README has one seed, as a share of |V - B|

# The learning tests' overrides (tests/test_learning.py imports them). runtime.eval_max_share=1:
# an evaluation every eval_every env steps however long it takes, so that a run stops at the first
# one that solves it.
PENDULUM = (
    "task=InvertedPendulum",
    "task.num_envs=16",
    "runtime.max_env_steps=2000000",
    "runtime.max_time_s=170",
    "runtime.eval_every=2000",
    "runtime.eval_max_share=1",
    "runtime.stop_at_return=900",
    "runtime.log_every_s=15",
    "runtime.checkpoint_every=1000000000",
    "algo.net.actor_hidden=[64,64]",
    "algo.net.critic_hidden=[64,64]",
)
OFF_POLICY = ("algo.batch_size=256", "algo.beta_av=8")
# IMPALA's: sequential on CPU-2, seeds 0, 1 and 2 solved in 19, 40 and 22 s (seed 0 took 40 s at
# the defaults, algo.lr=3e-4 and 16 envs).
IMPALA = ("algo=impala", "algo.lr=1e-3", "task.num_envs=32")
# A budget of env steps, sequential, on one thread: a seed learns the same curve however fast the
# machine, and other work on the CPU cannot slow its updates.
STEP_BUDGET = ("runtime.mode=sequential", "runtime.torch_threads=1", "runtime.max_time_s=900")
DOUBLE_PENDULUM = (
    "task=InvertedDoublePendulum",
    "task.num_envs=16",
    "runtime.mode=sequential",
    "runtime.torch_threads=1",
    "runtime.max_env_steps=80000",
    "runtime.max_time_s=900",
    "runtime.eval_every=4000",
    "runtime.eval_max_share=1",
    "runtime.stop_at_return=9000",
    "runtime.log_every_s=15",
    "runtime.checkpoint_every=1000000000",
    "algo.batch_size=256",
    "algo.net.actor_hidden=[64,64]",
    "algo.net.critic_hidden=[64,64]",
)
# Ant with the CPU defaults on an env-step budget; the time cap only stops a machine far slower.
ANT_ENV_STEPS = 300_000
ANT_MIN_DISTANCE = 30.0  # metres; standing still: ~0.1
ANT_WALKS = (
    "task=Ant",
    "runtime.mode=sequential",
    f"runtime.max_env_steps={ANT_ENV_STEPS}",
    "runtime.max_time_s=3600",
    "runtime.eval_every=20000",
    "runtime.log_every_s=30",
    "runtime.checkpoint_every=1000000000",
)
DOUBLE_PENDULUM_SOLVED = 9_000.0
SAC_PENDULUM_SOLVED = 900.0


def merged(*groups: Sequence[str]) -> list[str]:
    """Hydra overrides with each key once: a later group's value wins, in the key's first place."""
    by_key: dict[str, str] = {}
    for override in (o for group in groups for o in group):
        by_key[override.split("=", 1)[0]] = override
    return list(by_key.values())


def fmt(x: float) -> str:
    """A figure at about README's precision; inf (a pendulum never balanced) as "never"."""
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "never"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.1f}".removesuffix(".0") if abs(x) >= 10 else f"{x:.2f}"


def floor(v: float, b: float, sd: float, r: float) -> float:
    """The lowest final return a README row accepts from a run that made r times README's env
    steps: B + (V - B)·sqrt(min(1, r)) - 2·sd (the module docstring says why)."""
    return b + (v - b) * math.sqrt(min(1.0, r)) - 2.0 * sd


def per_seed_sd(reported: Reported, b: float) -> float:
    """The spread of one seed's final return: README's seeds' standard deviation, or
    SINGLE_SEED_SPREAD of the gain over B where README has one seed."""
    if len(reported.seeds) > 1:
        return statistics.stdev(reported.seeds)
    return SINGLE_SEED_SPREAD * abs(reported.value - b)


def seconds_limit(readme_s: float, r: float) -> float:
    """The latest a pendulum may balance: README's seconds × 2 / min(1, r)."""
    return readme_s * 2.0 / min(1.0, r)


@dataclass(frozen=True)
class Run:
    """One finished `python train.py` of a check."""

    check: str
    seed: int
    command: str  # as a shell would take it, without hydra.run.dir
    run_dir: str
    returncode: int
    error: str  # the last line of its stderr
    trial: bool  # --max-time-s replaced the budgets


@dataclass
class Row:
    """One line of the table. bound and op: the floor (">=", ">") or the pendulums' limit ("<=")."""

    check: str
    seed: int
    command: str
    env_steps: int | None
    result: float  # the figure judged: a final eval return, or seconds (inf: never balanced)
    readme: float | None
    op: str
    bound: float
    r: float | None
    verdict: str
    unit: str = ""
    note: str = ""  # the rest of what was judged, or why the run failed


def row_of(
    run: Run,
    env_steps: int,
    result: float,
    op: str,
    bound: float,
    passed: bool,
    *,
    readme: float | None = None,
    r: float | None = None,
    unit: str = "",
    note: str = "",
) -> Row:
    """The row of a finished run; a trial's is never judged."""
    verdict = "trial" if run.trial else ("ok" if passed else "below")
    return Row(run.check, run.seed, run.command, env_steps, result, readme, op, bound, r, verdict, unit, note)


# What a finished run is read with; the files are those of a pql run directory (docs/logging.md).


def metrics(run: Run) -> dict:
    from pql.logging import METRICS_CSV, read_metrics

    return read_metrics(os.path.join(run.run_dir, METRICS_CSV))


def final_return(run: Run) -> float:
    """The last finite evaluation return of the run (its final evaluation)."""
    import numpy as np

    from pql.logging import EVAL_RETURN

    evals = metrics(run)[EVAL_RETURN]
    finite = evals[np.isfinite(evals)]
    return float(finite[-1]) if len(finite) else math.nan


def checkpoint(run: Run) -> dict:
    from pql.checkpoint import load_checkpoint

    return load_checkpoint(os.path.join(run.run_dir, "checkpoint.pt"))


def zero_action_return(task: str, seed: int) -> float:
    """B: the mean return of zero actions over the BASELINE_ENVS starts a run of `seed` evaluates on."""
    import torch

    import tasks
    from pql.evaluate import evaluate
    from pql.runtime.settings import EVAL_SEED_OFFSET

    env = tasks.make(task, num_envs=BASELINE_ENVS, device="cpu", seed=seed + EVAL_SEED_OFFSET, backend="mujoco")
    return evaluate(env, lambda obs: torch.zeros(len(obs), env.act_dim), torch.nn.Identity())["eval/return"]


def forward_distance_and_return(env, act) -> tuple[float, float]:
    """Mean x-distance (m) the torso travels in one episode per env under act(obs), and the mean return."""
    import torch

    from pql.envs import to_env_action

    with torch.no_grad():
        obs = env.reset()
        start = env.task.position(env.physics.state)[:, 0].clone()
        distance, returns = torch.zeros(env.num_envs), torch.zeros(env.num_envs)
        running = torch.ones(env.num_envs, dtype=torch.bool)
        for _ in range(env.max_episode_steps):
            obs, reward, term, trunc, _ = env.step(to_env_action(act(obs), env))
            returns += reward * running
            running &= ~(term | trunc)
            # An env that just finished was reset inside step: its distance stays the one before.
            distance = torch.where(running, env.task.position(env.physics.state)[:, 0] - start, distance)
            if not running.any():
                break
    return float(distance.mean()), float(returns.mean())


# The judges: a finished run (exit code 0) -> its row.


def judge_return(task: str, run: Run) -> Row:
    reported = README_RESULTS[task]
    steps = checkpoint(run)["counters"]["env_steps"]
    b = zero_action_return(task, run.seed)
    r = steps / statistics.mean(reported.env_steps)
    least = floor(reported.value, b, per_seed_sd(reported, b), r)
    result = final_return(run)
    return row_of(
        run, steps, result, ">=", least, result >= least, readme=reported.value, r=r, note=f"zero actions {fmt(b)}"
    )


def judge_balance(task: str, run: Run) -> Row:
    import numpy as np

    from pql.logging import EVAL_RETURN

    reported, m = README_RESULTS[task], metrics(run)
    at_max = np.flatnonzero(m[EVAL_RETURN] >= BALANCED[task])
    # The run's speed where it balanced, or over its whole length where it never did.
    i = int(at_max[0]) if len(at_max) else int(np.flatnonzero(np.isfinite(m["wall_time_s"]))[-1])
    seconds = float(m["wall_time_s"][i]) if len(at_max) else math.inf
    r = (m["env_steps"][i] / m["wall_time_s"][i]) / (reported.env_steps[0] / reported.value)
    limit = seconds_limit(reported.value, r)
    end = f"none >= {fmt(BALANCED[task])} by {fmt(m['wall_time_s'][i])} s"
    note = f"at {fmt(m['env_steps'][i])} env steps" if len(at_max) else end
    steps = checkpoint(run)["counters"]["env_steps"]
    return row_of(run, steps, seconds, "<=", limit, seconds <= limit, readme=reported.value, r=r, unit="s", note=note)


def judge_solved(threshold: float, run: Run) -> Row:
    result = final_return(run)
    return row_of(run, checkpoint(run)["counters"]["env_steps"], result, ">=", threshold, result >= threshold)


def judge_measured(run: Run) -> Row:
    """A figure to compare with another row's (no floor of its own): the final eval return."""
    row = row_of(run, checkpoint(run)["counters"]["env_steps"], final_return(run), "", math.nan, True)
    return row if row.verdict == "trial" else dataclasses.replace(row, verdict="measured")


def judge_ant_walks(run: Run) -> Row:
    """The checkpoint's policy and normaliser, walked one episode per eval env against zero torques."""
    import torch

    from pql.config import load_config
    from pql.envs import build_env
    from pql.export import checkpoint_policy
    from pql.runtime.settings import EVAL_SEED_OFFSET, load_runner

    state = checkpoint(run)
    cfg = load_config(state["config"])
    env = build_env(cfg.task, cfg.task.eval_envs, "cpu", cfg.runtime.seed + EVAL_SEED_OFFSET)
    policy, normalizer = checkpoint_policy(
        load_runner(cfg.algo.name), cfg.algo, state, env.policy_obs_dim, env.act_dim, "cpu"
    )
    distance, _ = forward_distance_and_return(env, lambda obs: policy(normalizer(obs)))
    standing_distance, standing = forward_distance_and_return(env, lambda obs: torch.zeros(len(obs), env.act_dim))
    steps, result = state["counters"]["env_steps"], final_return(run)
    passed = result > standing and distance >= ANT_MIN_DISTANCE and steps >= ANT_ENV_STEPS
    note = f"walks {distance:.1f} m, needs {ANT_MIN_DISTANCE:.0f}; standing still {standing_distance:.2f} m" + (
        "" if steps >= ANT_ENV_STEPS else f"; stopped before {ANT_ENV_STEPS:,} env steps"
    )
    return row_of(run, steps, result, ">", standing, passed, note=note)


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    overrides: tuple[str, ...]  # train.py's, without runtime.seed
    judge: Callable[[Run], Row]


def readme_checks() -> list[Check]:
    """One check per CPU row of README's "Expected results", in README's order."""
    checks = []
    for task, reported in README_RESULTS.items():
        if task in BALANCED:
            overrides = (f"task={task}", "runtime.max_time_s=300", "runtime.eval_every=10000")
            what = f"README's 5-minute run: balanced at {fmt(reported.value)} s"
            checks.append(Check(task, what, overrides, partial(judge_balance, task)))
        else:
            what = f"README's 15-minute run: final eval return {fmt(reported.value)}"
            checks.append(Check(task, what, (f"task={task}",), partial(judge_return, task)))
    return checks


CHECKS: dict[str, Check] = {
    c.name: c
    for c in [
        Check(
            "ant-walks",
            f"Ant walks {ANT_MIN_DISTANCE:.0f} m after {ANT_ENV_STEPS:,} env steps",
            ANT_WALKS,
            judge_ant_walks,
        ),
        Check(
            "double-pendulum",
            f"PQL reaches {fmt(DOUBLE_PENDULUM_SOLVED)} on InvertedDoublePendulum in 80k env steps",
            DOUBLE_PENDULUM,
            partial(judge_solved, DOUBLE_PENDULUM_SOLVED),
        ),
        Check(
            "sac-pendulum",
            f"SAC reaches {fmt(SAC_PENDULUM_SOLVED)} on InvertedPendulum in 160k env steps",
            tuple(merged(PENDULUM, OFF_POLICY, STEP_BUDGET, ["runtime.max_env_steps=160000", "algo=sac"])),
            partial(judge_solved, SAC_PENDULUM_SOLVED),
        ),
        *readme_checks(),
        # The generic path of a user's Gymnasium env on README's HalfCheetah row: the same
        # reward, stepped by Gymnasium's vector env (tasks/gym_env.py), held to the same floor.
        Check(
            "gym-HalfCheetah",
            "README's HalfCheetah command through task=gym:HalfCheetah-v5",
            ("task=gym:HalfCheetah-v5", "task.num_envs=128", "task.vectorization=sync"),
            partial(judge_return, "HalfCheetah"),
        ),
        # What rsl_rl's interface costs where it hides the final observation (tasks/rsl_rl_env.py
        # then bootstraps a truncated episode from the observation before its last step): the same
        # seed and wall time with it hidden and shown. HalfCheetah's episodes all end truncated.
        *(
            Check(
                f"rsl_rl-final-obs-{shown}",
                f"HalfCheetah through examples/rsl_rl_task.py, final observation {shown}, 5 minutes",
                (
                    "task=examples.rsl_rl_task:make_env",
                    "task.kwargs.task=HalfCheetah",
                    f"task.kwargs.final_obs={str(shown == 'shown').lower()}",
                    "runtime.max_time_s=300",
                ),
                judge_measured,
            )
            for shown in ("hidden", "shown")
        ),
    ]
}


def launch(check: Check, seed: int, out: str, max_time_s: float | None) -> Run:
    overrides = merged(
        check.overrides,
        [f"runtime.seed={seed}"],
        [] if max_time_s is None else [f"runtime.max_time_s={max_time_s:g}"],
    )
    run_dir = os.path.join(out, check.name, f"seed{seed}")
    command = shlex.join(["python", "train.py", *overrides])
    print(f"bench/learning.py: {check.name} seed {seed}: {command} (log: {run_dir}/train.log)", flush=True)
    os.makedirs(run_dir)
    stderr = os.path.join(run_dir, STDERR)
    # README's rows are CPU rows: on a GPU machine the same command would train with the GPU's
    # defaults and budgets.
    with open(stderr, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}"],
            cwd=ROOT,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            proc.wait()
        except KeyboardInterrupt:
            proc.wait()  # the run got the same Ctrl-C: it stops its roles and writes its checkpoint first
            raise
    with open(stderr) as err:
        lines = [line.strip() for line in err if line.strip()]
    return Run(check.name, seed, command, run_dir, proc.returncode, lines[-1] if lines else "", max_time_s is not None)


def judged(check: Check, run: Run) -> Row:
    """The check's row, or a `failed` one when the run did not finish."""
    from pql.bulk import remove_unreferenced

    if run.returncode != 0 or not os.path.isfile(os.path.join(run.run_dir, "checkpoint.pt")):
        note = f"train.py exited {run.returncode}: {run.error}"
        return Row(run.check, run.seed, run.command, None, math.nan, None, "", math.nan, None, "failed", note=note)
    row = check.judge(run)
    remove_unreferenced(run.run_dir, set())
    return row


# The report: the machine first, then the rows.


def sgemm_gflops(n: int = 2048, threads: int = 2, warmup: int = 3, timed: int = 20) -> float:
    """GFLOP/s of an n×n float32 matmul on `threads` threads: the day's speed of the machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        for _ in range(warmup):
            torch.mm(a, b)
        start = time.perf_counter()
        for _ in range(timed):
            torch.mm(a, b)
        return 2 * n**3 * timed / (time.perf_counter() - start) / 1e9
    finally:
        torch.set_num_threads(before)


def git_commit() -> str:
    """The short commit, with -dirty where tracked files differ from it."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    return head.stdout.strip() + ("-dirty" if changed.stdout.strip() else "")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def machine_header(max_time_s: float | None) -> dict[str, str]:
    import mujoco
    import torch

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "sgemm": f"{sgemm_gflops():.0f} GFLOP/s (2048² float32, 2 threads)",
        "software": f"torch {torch.__version__}, mujoco {mujoco.__version__}, Python {sys.version.split()[0]}",
        "commit": git_commit(),
        "budgets": "README's"
        if max_time_s is None
        else f"trial: runtime.max_time_s={max_time_s:g} for every run; no row is judged against README",
    }


COLUMNS = ("check", "seed", "command", "env steps", "result", "README", "floor", "verdict")


def cells(row: Row) -> tuple[str, ...]:
    unit = f" {row.unit}" if row.unit else ""
    result = fmt(row.result) + (unit if math.isfinite(row.result) else "") + (f" ({row.note})" if row.note else "")
    bound = "" if math.isnan(row.bound) else f"{row.op} {fmt(row.bound)}{unit}"
    bound += "" if row.r is None else f" (r = {row.r:.2f})"
    return (
        row.check,
        str(row.seed),
        f"`{row.command}`",
        "—" if row.env_steps is None else f"{row.env_steps:,}",
        result,
        "—" if row.readme is None else fmt(row.readme) + unit,
        bound or "—",
        row.verdict,
    )


def markdown(header: dict[str, str], rows: list[Row]) -> str:
    lines = ["# bench/learning.py", ""] + [f"- {k}: {v}" for k, v in header.items()] + [""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def write_report(out: str, header: dict[str, str], rows: list[Row]) -> str:
    """OUT/learning.md and OUT/learning.csv, each headed by the machine's lines. -> the Markdown."""
    report = markdown(header, rows)
    with open(os.path.join(out, "learning.md"), "w") as f:
        f.write(report)
    names = [f.name for f in fields(Row)]
    with open(os.path.join(out, "learning.csv"), "w", newline="") as f:
        f.writelines(f"# {k}: {v}\n" for k, v in header.items())
        writer = csv.writer(f)
        writer.writerow(names)
        writer.writerows(["" if getattr(row, n) is None else getattr(row, n) for n in names] for row in rows)
    return report


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--tasks", nargs="+", metavar="NAME", help="checks to run (default: all; --list names them)")
    p.add_argument("--seeds", type=int, default=1, help="runs seeds 0 .. N-1 of each check")
    p.add_argument("--out", help="report directory (default runs/bench_learning/<date_time>)")
    p.add_argument(
        "--max-time-s", type=float, help="a quick trial: every run's wall-time budget; its rows are marked trial"
    )
    p.add_argument("--list", action="store_true", help="print the checks and exit")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.max_time_s is not None and args.max_time_s <= 0:
        p.error(f"--max-time-s must be > 0, got {args.max_time_s}")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.list:
        for c in CHECKS.values():
            print(f"{c.name:<24}{c.what}")
        return 0
    unknown = [name for name in args.tasks or [] if name not in CHECKS]
    if unknown:
        print(f"bench/learning.py: unknown check {unknown[0]!r}; allowed: {', '.join(CHECKS)}", file=sys.stderr)
        return 2
    checks = [CHECKS[name] for name in dict.fromkeys(args.tasks or CHECKS)]
    out = os.path.abspath(
        args.out or os.path.join("runs", "bench_learning", datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S"))
    )
    # A run directory left by an earlier report would mix its metrics.csv into this one's.
    taken = [d for c in checks for s in range(args.seeds) if os.path.exists(d := os.path.join(out, c.name, f"seed{s}"))]
    if taken:
        print(f"bench/learning.py: {taken[0]} exists; give another --out", file=sys.stderr)
        return 2
    os.makedirs(out, exist_ok=True)
    header = machine_header(args.max_time_s)
    for k, v in header.items():
        print(f"bench/learning.py: {k}: {v}", flush=True)
    rows: list[Row] = []
    for check in checks:
        for seed in range(args.seeds):
            row = judged(check, launch(check, seed, out, args.max_time_s))
            rows.append(row)
            c = dict(zip(COLUMNS, cells(row)))
            print(
                f"bench/learning.py: {row.check} seed {row.seed}: {c['result']}; README {c['README']}; "
                f"floor {c['floor']}: {row.verdict}",
                flush=True,
            )
            report = write_report(out, header, rows)  # after every row: a report cut short keeps its rows
    print("\n" + report + f"\nwritten: {out}/learning.md, {out}/learning.csv", flush=True)
    return 0 if all(row.verdict in ("ok", "measured") for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
