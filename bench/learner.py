"""How fast each PQL role runs alone, and all three together at the configured ratios.

    python bench/learner.py [--task Ant] [--device auto] [--batch-size 8192] [--num-envs N]
                            [--seconds 10] [--together-seconds S] [--csv PATH] [--greedy-nstep]
                            [--mps auto|on|off] [--compile auto|true|false] [--threads N]
                            [--set algo=sac algo.net.kind=batchnorm ...]

Prints critic updates/s and policy updates/s at the given batch with the default networks, the
actor's env steps/s, and the three roles running together (process mode, for --together-seconds:
default max(30, 3 × --seconds); 0 leaves that run out), measured over its steady state (the log
intervals after both learners began to update, so not their compilation), with the ratios there and the
efficiency: together env steps/s over what the slowest role alone allows
(min(actor alone, critic alone · num_envs / beta_av, policy alone · beta_pv · num_envs / beta_av)).
--csv also writes each figure as a row (task, device, num_envs, batch_size, compile, threads, mps,
quantity, value; mps: the together run's runtime.mps; threads: the roles alone's). --greedy-nstep
measures with algo.greedy_nstep=true. The updates are the learners' own (pql.algos.off_policy): eager,
or compiled whole where runtime.compile is on (a CUDA graph on CUDA, its default there; --compile
sets it, auto: the device's default). --threads sets torch's threads for the roles alone (default:
torch's own). --set gives further algo keys, for another algorithm, network kind or critic
(`--set algo=sac algo.net.kind=batchnorm`).
--mps is the together run's runtime.mps (default auto: on CUDA the run starts an MPS daemon of its
own, as a training run does; off: the role processes take turns on the GPU); the bench prints the
run's line about MPS.

Also home to the helpers the other bench scripts share (`timed`, `CsvRows`).
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pql.algos.off_policy import OffPolicyAlgorithm, UpdateSettings
from pql.config import MPS_MODES, announce, load_config, resolve
from pql.envs import ObsLayout
from pql.replay.nstep import keeps_first_step, transition_spec
from pql.runtime.device import use_device
from pql.runtime.distributed import Replicas
from pql.runtime.off_policy.roles import build_role, make_ratios, make_rules, make_shared
from pql.runtime.settings import run_settings


class CsvRows:
    """Raw bench rows as CSV, each written and flushed as it is measured, so a bench stopped
    midway (a timeout, a crash at the largest size) keeps what it measured. path None: no file."""

    def __init__(self, path: str | None, columns: list[str]):
        self.columns = columns
        self._file = None
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "w", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=columns, lineterminator="\n")
            self._writer.writeheader()
            self._file.flush()

    def write(self, **row) -> None:
        """One row; every column must be given (None writes an empty cell)."""
        if set(row) != set(self.columns):
            raise ValueError(f"CSV row has columns {sorted(row)}; expected {sorted(self.columns)}")
        if self._file is not None:
            self._writer.writerow({k: "" if v is None else v for k, v in row.items()})
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, seconds: float, warmup: int = 3) -> float:
    """Calls of fn per second, measured for about `seconds` after `warmup` calls."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    synchronize(device)
    return calls / (time.perf_counter() - start)


def random_batch(batch_size: int, obs_dim: int, act_dim: int, device, first_step: bool = False) -> dict:
    """Random values of every field the replay holds (transition_spec), as a learner samples them
    (the policy and the critic reading the same observations): actions and discounts within
    [0, 1) (actions in [-1, 1) after the shift), the rest standard normal."""
    batch = {
        k: (torch.rand if k.startswith(("action", "discount")) else torch.randn)(batch_size, *shape, device=device)
        for k, (shape, _) in transition_spec(obs_dim, act_dim, first_step).items()
    }
    batch["action"] = batch["action"] * 2 - 1
    return ObsLayout.shared(obs_dim).split(batch)


def learner_rates(cfg, obs_dim: int, act_dim: int, device, seconds: float) -> tuple[float, float]:
    """Critic and policy updates/s of the learners' own updates (pql.algos.off_policy, in the form
    runtime.compile selects) on one random batch, each learner's algorithm its own."""
    rules = make_rules(cfg.algo, ObsLayout.shared(obs_dim), act_dim)
    settings = UpdateSettings(cfg.algo.tau, cfg.algo.policy_average, bool(cfg.runtime.compile))
    critic, policy = OffPolicyAlgorithm(rules, device, settings), OffPolicyAlgorithm(rules, device, settings)
    batch = random_batch(cfg.algo.batch_size, obs_dim, act_dim, device, keeps_first_step(cfg.algo))
    weights = torch.ones(cfg.algo.batch_size, device=device)
    return (
        timed(lambda: critic.update_critic(batch, weights), device, seconds),
        timed(lambda: policy.update_policy(batch["obs"], batch["critic_obs"]), device, seconds),
    )


def standalone_actor(cfg, rules, obs_dim: int, act_dim: int, device):
    """The real actor role with no learner: -> (actor, step), where step() makes one actor step
    and frees its ring slot at once, as if both learners had copied it."""
    cfg.runtime.max_env_steps = 10**15
    settings = run_settings(cfg, device, Replicas()).runner
    shared = make_shared(settings, rules, obs_dim, act_dim)
    ratios = make_ratios(settings.ratios, shared)
    actor = build_role("actor", settings, shared, rules, ratios, ObsLayout.shared(obs_dim), act_dim, fresh_start=False)

    def step():
        actor.step()
        shared.counters.consumed_v = shared.counters.consumed_p = shared.counters.actor_steps

    return actor, step


def actor_rate(cfg, obs_dim: int, act_dim: int, device, seconds: float) -> float:
    """Env steps/s of the real actor role (policy inference, exploration, n-step folding,
    staging) with nothing consuming its output but this loop."""
    _, step = standalone_actor(cfg, make_rules(cfg.algo, ObsLayout.shared(obs_dim), act_dim), obs_dim, act_dim, device)
    return timed(step, device, seconds) * cfg.task.num_envs


ENV_RATE, CRITIC_RATE, POLICY_RATE = "perf/env_steps_per_s", "updates_per_s/v_learner", "updates_per_s/p_learner"
MIN_STEADY_ROWS = 3


def steady_rates(rows: list[dict], num_envs: int, seconds: float) -> dict:
    """Rates of a together run's steady state, from its metrics.csv rows (one per log interval).

    The steady state starts after the first interval in which both learners updated: before it the
    learners are still compiling (on a cold cache, most of a 30-s run on a GPU) while the actor runs
    ahead, so neither the rates nor the run's cumulative ratio/beta_* columns describe the roles
    together. The last interval holds the shutdown. The ratios are those of the steady intervals."""
    timed = [r for r in rows if r.get(ENV_RATE)]
    started = next(
        (i for i, r in enumerate(timed) if float(r[CRITIC_RATE] or 0) > 0 and float(r[POLICY_RATE] or 0) > 0), None
    )
    steady = [] if started is None else timed[started + 1 : -1]
    if len(steady) < MIN_STEADY_ROWS:
        when = (
            "the learners never updated"
            if started is None
            else f"both learners updated from {float(timed[started]['wall_time_s']):.0f} s on"
        )
        raise RuntimeError(
            f"the together run reached no steady state in {seconds:g} s ({when}; "
            f"{len(steady)} steady log intervals, {MIN_STEADY_ROWS} needed): give it more "
            "--together-seconds"
        )
    mean = lambda k: sum(float(r[k]) for r in steady) / len(steady)
    env, critic, policy = mean(ENV_RATE), mean(CRITIC_RATE), mean(POLICY_RATE)
    return {
        ENV_RATE: env,
        CRITIC_RATE: critic,
        POLICY_RATE: policy,
        "ratio/beta_av": critic * num_envs / env,
        "ratio/beta_pv": critic / policy,
        "steady_from_s": float(steady[0]["wall_time_s"]),
    }


def mps_line(output: str) -> str | None:
    """train.py's line about MPS in its output (pql.runtime.mps.sharing_gpu), or None: it printed
    none (runtime.mps=off, or no processes on a GPU)."""
    return next((line for line in output.splitlines() if line.startswith("pql: MPS")), None)


def together(overrides: list[str], num_envs: int, seconds: float) -> dict:
    """Run train.py in process mode for `seconds` and read its steady rates off metrics.csv;
    "mps" holds the run's line about MPS (None: it printed none, as on the CPU)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as run_dir:
        cmd = [
            sys.executable,
            os.path.join(root, "train.py"),
            *overrides,
            "runtime.mode=process",
            f"runtime.max_time_s={seconds}",
            "runtime.max_env_steps=1000000000000",
            "runtime.log_every_s=2",
            "runtime.eval_every=1000000000000",
            "runtime.checkpoint_every=1000000000000",
            f"hydra.run.dir={run_dir}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise RuntimeError(f"the together run failed (exit {done.returncode}): {' '.join(cmd)}\n{tail}")
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            rows = list(csv.DictReader(f))
    return {**steady_rates(rows, num_envs, seconds), "mps": mps_line(done.stdout)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="Ant")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--num-envs", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=10.0, help="timing window per role alone")
    parser.add_argument(
        "--together-seconds",
        type=float,
        default=None,
        help="length of the together run (default max(30, 3 × --seconds); 0: no together run)",
    )
    parser.add_argument("--csv", default=None, help="also write the figures to this CSV file")
    parser.add_argument("--greedy-nstep", action="store_true", help="with algo.greedy_nstep=true")
    parser.add_argument(
        "--mps",
        choices=MPS_MODES,
        default="auto",
        help="runtime.mps of the together run (default auto: an MPS daemon of the run's own on CUDA)",
    )
    parser.add_argument(
        "--compile",
        choices=("auto", "true", "false"),
        default="auto",
        help="runtime.compile for every measurement (default auto: the device's default)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads for the roles alone")
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="further algo keys (algo.net.kind=batchnorm algo.value=categorical ...; algo=sac picks SAC)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads {args.threads} is not allowed; give an integer >= 1")
        torch.set_num_threads(args.threads)
    if args.together_seconds is not None and args.together_seconds < 0:
        parser.error(f"--together-seconds {args.together_seconds} is negative; give 0 (no together run) or more")

    import tasks

    raw = {
        "task": {"name": args.task, "num_envs": args.num_envs},
        "algo": {"name": "pql", "batch_size": args.batch_size, "greedy_nstep": args.greedy_nstep},
        "runtime": {"device": args.device, "compile": None if args.compile == "auto" else args.compile == "true"},
        "run_dir": tempfile.gettempdir(),
    }
    for pair in args.set:
        key, sep, value = pair.partition("=")
        if not sep or not (key == "algo" or key.startswith("algo.")):
            parser.error(f"--set {pair!r} is not allowed; give algo=NAME or algo.KEY=VALUE")
        *path, leaf = ["name"] if key == "algo" else key.split(".")[1:]
        section = raw["algo"]
        for part in path:
            section = section.setdefault(part, {})
        section[leaf] = yaml.safe_load(value)
    resolved = resolve(load_config(raw))
    announce(resolved)
    cfg = resolved.config
    device = use_device(resolved.devices.main)  # TF32 on CUDA, as in every process of a run
    probe = tasks.make(args.task, num_envs=1, device=device, seed=0)
    obs_dim, act_dim = probe.obs_dim, probe.act_dim
    probe.close()
    threads = torch.get_num_threads()
    n, bav, bpv = cfg.task.num_envs, cfg.algo.beta_av, cfg.algo.beta_pv
    rows = CsvRows(
        args.csv, ["task", "device", "num_envs", "batch_size", "compile", "threads", "mps", "quantity", "value"]
    )

    def record(quantity: str, value: float) -> None:
        rows.write(
            task=args.task,
            device=str(device),
            num_envs=n,
            batch_size=args.batch_size,
            compile=str(cfg.runtime.compile).lower(),
            threads=threads,
            mps=args.mps,
            quantity=quantity,
            value=f"{value:.6g}",
        )

    critic, policy = learner_rates(cfg, obs_dim, act_dim, device, args.seconds)
    record("critic_updates_per_s_alone", critic)
    record("policy_updates_per_s_alone", policy)
    actor = actor_rate(cfg, obs_dim, act_dim, device, args.seconds)
    record("actor_env_steps_per_s_alone", actor)
    bound = min(actor, critic * n / bav, policy * bpv * n / bav)
    record("bound_env_steps_per_s", bound)

    print(
        f"\n{args.task}, device {device}, num_envs {n}, batch {args.batch_size}, β_a:v 1:{bav}, β_p:v 1:{bpv}, "
        f"runtime.compile={str(cfg.runtime.compile).lower()}, algo.greedy_nstep={str(args.greedy_nstep).lower()}, "
        f"torch threads {threads} (alone) / shared by 3 roles (together)"
    )
    print(f"{'':28}{'env steps/s':>14}{'critic upd/s':>14}{'policy upd/s':>14}")
    print(f"{'critic alone':28}{'':>14}{critic:>14.1f}{'':>14}")
    print(f"{'policy alone':28}{'':>14}{'':>14}{policy:>14.1f}")
    print(f"{'actor alone':28}{actor:>14.0f}")
    print(f"{'bound from slowest alone':28}{bound:>14.0f}", flush=True)
    seconds = max(30.0, 3 * args.seconds) if args.together_seconds is None else args.together_seconds
    if seconds > 0:
        overrides = [
            f"task={args.task}",
            f"task.num_envs={n}",
            f"algo.batch_size={args.batch_size}",
            f"runtime.device={cfg.runtime.device}",
            f"algo.greedy_nstep={str(args.greedy_nstep).lower()}",
            f"runtime.mps={args.mps}",
            f"runtime.compile={str(cfg.runtime.compile).lower()}",
            *args.set,
        ]
        run = together(overrides, n, seconds)
        for quantity, key in (
            ("together_env_steps_per_s", ENV_RATE),
            ("together_critic_updates_per_s", CRITIC_RATE),
            ("together_policy_updates_per_s", POLICY_RATE),
            ("together_ratio_beta_av", "ratio/beta_av"),
            ("together_ratio_beta_pv", "ratio/beta_pv"),
        ):
            record(quantity, run[key])
        record("together_efficiency", run[ENV_RATE] / bound)
        print(f"{'all three together':28}{run[ENV_RATE]:>14.0f}{run[CRITIC_RATE]:>14.1f}{run[POLICY_RATE]:>14.1f}")
        print(
            f"steady from {run['steady_from_s']:.0f} s of {seconds:g}; ratios there: critic/actor step "
            f"{run['ratio/beta_av']:.2f} (target {bav}), critic/policy {run['ratio/beta_pv']:.2f} (target {bpv})"
        )
        print(f"efficiency together / bound: {run[ENV_RATE] / bound:.0%}")
        print(f"together run, runtime.mps={args.mps}: {run['mps'] or 'it printed no line about MPS'}")
    rows.close()


if __name__ == "__main__":
    main()
