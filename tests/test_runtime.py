"""The three-role runtime: exact ratios, determinism, supervision, checkpoints and resume."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types
import weakref

import numpy as np
import pytest
import torch
from conftest import (
    ONE_THREAD,
    alive,
    assert_stopped_at_an_agreed_step,
    compose_config,
    running,
    settings_of,
    started_roles,
)

from pql import __version__
from pql.checkpoint import load_checkpoint, save_checkpoint
from pql.config import ConfigError
from pql.envs import ObsLayout, build_env
from pql.evaluate import evaluate
from pql.logging import EVAL_RETURN, METRICS_CSV, read_metrics
from pql.logging import run_logger as run_logger_module
from pql.nets import ObsNormalizer
from pql.runtime import device as device_module
from pql.runtime import evaluation as evaluate_module
from pql.runtime import run as run_module
from pql.runtime import stopping as stopping_module
from pql.runtime import train
from pql.runtime.control import RatioController, RatioCounters
from pql.runtime.off_policy.roles import build_role, make_ratios, make_rules, make_shared
from pql.runtime.off_policy.runner import OffPolicyRunner
from pql.runtime.settings import EVAL_SEED_OFFSET
from pql.runtime.shared import RunCounters, RunStats, Wakeup, make_shared_state
from pql.runtime.stopping import SAME_STOP_S, Stopped, StopSignals
from pql.runtime.supervisor import role_process
from pql.runtime.weight_sync import SharedWeights

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = [
    "task=InvertedPendulum",
    "task.num_envs=8",
    "algo.batch_size=64",
    "algo.net.actor_hidden=[32,32]",
    "algo.net.critic_hidden=[32,32]",
    "runtime.eval_every=1000000000",
    "runtime.log_every_s=5",
    "task.eval_envs=2",
    "algo.warmup_steps=4",
    ONE_THREAD,  # also where a test runs train.py
]
# SMALL's nets with one hidden layer (or residual block) each, where a test's cost grows with the
# net's depth: compiled graphs of fewer kernels, a normalized learner that trains faster.
ONE_BLOCK = ["algo.net.actor_hidden=[32]", "algo.net.critic_hidden=[32]"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """finished_run(*overrides) -> the directory of a run of SMALL + overrides trained to its end:
    trained once in this module for each set of overrides, so the tests whose assertions start
    from the same finished run share it. A test that writes into it takes `copy_of` it."""
    runs = {}

    def run(*overrides: str):
        if overrides not in runs:
            run_dir = tmp_path_factory.mktemp("finished")
            train(compose_config(SMALL + list(overrides), run_dir))
            runs[overrides] = run_dir
        return runs[overrides]

    return run


def copy_of(run_dir, to):
    """A copy of a finished run's directory (the checkpoint and its replay files) at `to`."""
    return shutil.copytree(run_dir, to)


SHORT_RUN = ("runtime.mode=sequential", "runtime.max_env_steps=200")  # a run to start from


def endless_run(run_dir, *overrides: str, mode: str = "process") -> list[str]:
    """train.py on SMALL in `run_dir` with no step budget to end it: the test stops it, or it fails."""
    return [
        sys.executable,
        "train.py",
        *SMALL,
        f"runtime.mode={mode}",
        "runtime.max_env_steps=100000000",
        *overrides,
        f"hydra.run.dir={run_dir}",
    ]


def measured_ratios(counters: dict, warmup_steps: int = 4) -> tuple[float, float]:
    """(β_a:v, β_p:v) of a run that started from scratch (SMALL's warm-up is not counted)."""
    critic = counters["critic_updates"]
    return critic / (counters["actor_steps"] - warmup_steps), critic / counters["policy_updates"]


@pytest.mark.slow
def test_process_mode_holds_the_configured_ratios(make_config):
    cfg = make_config(
        SMALL
        + [
            "runtime.mode=process",
            "runtime.max_env_steps=6000",
            "algo.beta_av=4",
            "algo.beta_pv=3",
            "runtime.actor_device=cpu",
            "runtime.v_learner_device=cpu",
            "runtime.p_learner_device=cpu",
        ]
    )
    train(cfg)
    beta_av, beta_pv = measured_ratios(load_checkpoint(os.path.join(cfg.run_dir, "checkpoint.pt"))["counters"])
    assert abs(beta_av - 4) / 4 < 0.05, beta_av
    assert abs(beta_pv - 3) / 3 < 0.05, beta_pv


def test_early_ratio_allows_its_updates_for_the_first_actor_steps_of_the_run():
    counters = RatioCounters()
    counters.start_launch(warmup_steps=0)
    ratios = RatioController(counters, beta_av=4, beta_pv=1, max_lag=2, early_beta_av=16, early_steps=10)
    counters.policy_updates = 10_000  # keep the policy out of the way

    def may_update_to(actor_steps: int) -> int:
        counters.actor_steps = actor_steps
        counters.critic_updates = 0
        while ratios.critic_may_update():
            counters.critic_updates += 1
        return counters.critic_updates

    assert may_update_to(5) == 16 * 5
    assert may_update_to(10) == 16 * 10
    assert may_update_to(15) == 16 * 10 + 4 * 5
    # The actor may run max_lag steps ahead of the critic, counted at the ratio in force.
    counters.actor_steps, counters.critic_updates = 3, 16 * 2
    assert ratios.actor_may_step() and not ratios.actor_may_step(in_flight=1)
    counters.actor_steps, counters.critic_updates = 13, 16 * 10 + 4 * 2
    assert ratios.actor_may_step() and not ratios.actor_may_step(in_flight=1)
    # A resumed run does not repeat its start: a launch at actor step 6 has 4 early steps left.
    counters.actor_steps, counters.critic_updates, counters.policy_updates = 6, 0, 0
    counters.start_launch(warmup_steps=0)
    counters.policy_updates = 10_000
    assert may_update_to(6 + 8) == 16 * 4 + 4 * 4
    # Without early_beta_av, early_steps changes nothing.
    plain = RatioController(counters, beta_av=4, beta_pv=1, max_lag=2, early_beta_av=None, early_steps=10)
    counters.actor_steps, counters.critic_updates = 6 + 8, 32
    assert not plain.critic_may_update()


def test_a_run_ends_at_the_early_and_the_plain_ratios_counts(make_config):
    """Sequential mode catches the learners up exactly: the early steps' updates and the rest's."""
    cfg = make_config(
        SMALL
        + [
            "runtime.mode=sequential",
            "runtime.max_env_steps=800",
            "runtime.device=cpu",
            "algo.beta_av=2",
            "algo.early_beta_av=8",
            "algo.early_steps=20",
        ]
    )
    train(cfg)
    counters = load_checkpoint(os.path.join(cfg.run_dir, "checkpoint.pt"))["counters"]
    counted = counters["actor_steps"] - 4  # SMALL's warm-up
    assert counted > 20
    assert counters["critic_updates"] == 8 * 20 + 2 * (counted - 20)


def test_placement_on_a_machine_without_those_gpus_is_one_line(tmp_path):
    cmd = [
        sys.executable,
        "train.py",
        *SMALL,
        "runtime.actor_device=cuda:0",
        "runtime.v_learner_device=cuda:1",
        "runtime.p_learner_device=cuda:1",
        f"hydra.run.dir={tmp_path}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "pql: config error: runtime.actor_device='cuda:0' is not allowed; expected cpu or "
        "auto: no CUDA device is available"
    )


@pytest.mark.slow
def test_sequential_mode_is_deterministic(make_config, tmp_path):
    """Bit for bit on the CPU with MuJoCo's C engine. Not on CUDA: MuJoCo Warp's contact and
    constraint kernels and torch's atomic-add kernels (index_add, scatter in the replay) sum in
    whatever order the threads run, so runs there agree only statistically."""
    finals = []
    for run in ("a", "b"):
        cfg = make_config(
            SMALL
            + ["runtime.mode=sequential", "runtime.max_env_steps=800", "runtime.device=cpu", "task.backend=mujoco"],
            run_dir=tmp_path / run,
        )
        train(cfg)
        finals.append(load_checkpoint(tmp_path / run / "checkpoint.pt"))
    for k, v in finals[0]["policy"].items():
        assert torch.equal(v, finals[1]["policy"][k]), k
    assert finals[0]["counters"] == finals[1]["counters"]
    # The schedule's counters as the runtime made them before its parts took settings instead of
    # the config (f222f99): the change kept what runs and in which order.
    schedule = {k: v for k, v in finals[0]["counters"].items() if k != "episodes"}
    assert schedule == {"env_steps": 800, "actor_steps": 98, "critic_updates": 1504, "policy_updates": 752}
    beta_av, beta_pv = measured_ratios(finals[0]["counters"])
    assert beta_av == pytest.approx(cfg.algo.beta_av, rel=0.05) and beta_pv == pytest.approx(2, rel=0.05)


@pytest.mark.slow
def test_sequential_mode_waits_for_copies_in_flight(make_config, tmp_path, monkeypatch):
    """On a GPU a ring copy lands when the stream reaches it, so the whole ring can be in flight
    with no role ready; sequential mode then waits for the device rather than calling the
    schedule stuck (it did so on an H200). Here each fence lands only once the host has waited
    for the device after it was recorded, the slowest a GPU stream can be."""

    def record(fence):
        fence.syncs_at_record = device_module.sync_count()
        return fence

    monkeypatch.setattr(device_module.Fence, "record", record)
    monkeypatch.setattr(device_module.Fence, "done", lambda fence: device_module.sync_count() > fence.syncs_at_record)
    # A warm-up longer than the ring, as on a GPU: the ring fills before any learner may update.
    cfg = make_config(
        SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=800", "runtime.device=cpu", "algo.warmup_steps=32"]
    )
    train(cfg)
    counters = load_checkpoint(tmp_path / "checkpoint.pt")["counters"]
    assert counters["env_steps"] >= 800
    beta_av, beta_pv = measured_ratios(counters, warmup_steps=32)
    assert beta_av == pytest.approx(cfg.algo.beta_av, rel=0.05) and beta_pv == pytest.approx(2, rel=0.05)


@pytest.mark.slow
def test_no_evaluation_starts_that_would_end_past_the_time_limit(make_config, tmp_path, monkeypatch):
    """Evaluations due back to back, each 45 s on the run's clock, the limit 100 s: the third would
    end past the limit, so only the two before it and the final one run (on a GPU, an evaluation
    straddling the limit and then the final one made a 180-s run last 213 s). An evaluation moves
    the run's clock on instead of sleeping, so the test does not hang on how fast the machine
    trains between evaluations: the second may start up to ~10 s after the first (a 2-s sleep
    with a 5-s limit left 0.7 s, which a slow CI machine overran)."""
    eval_s, limit = 45.0, 100.0
    clock = {"skipped": 0.0}
    run_clock = types.SimpleNamespace(monotonic=lambda: time.monotonic() + clock["skipped"])

    def evaluation_of_eval_s(*args):
        clock["skipped"] += eval_s
        return {"eval/return": 0.0, "eval/length": 1.0}

    monkeypatch.setattr(evaluate_module, "evaluate", evaluation_of_eval_s)
    for module in (run_module, run_logger_module, evaluate_module):
        monkeypatch.setattr(module, "time", run_clock)
    train(
        make_config(
            SMALL
            + [
                "runtime.mode=sequential",
                "runtime.max_env_steps=100000000",
                "runtime.device=cpu",
                f"runtime.max_time_s={limit}",
                "runtime.eval_every=8",
                "runtime.eval_max_share=1",
            ]
        )
    )
    columns = read_metrics(tmp_path / METRICS_CSV)
    ends = list(columns["wall_time_s"][~np.isnan(columns[EVAL_RETURN])])
    assert len(ends) == 3, ends
    # 0.1 s: the logger's clock starts a little before the monitor's.
    assert [end > limit + 0.1 for end in ends] == [False] * (len(ends) - 1) + [True], ends


@pytest.mark.slow
def test_rates_logged_after_an_evaluation_count_the_steps_made_during_it(make_config, tmp_path, monkeypatch):
    """Where the main process evaluates in turn with its other work while roles step elsewhere
    (IMPALA's actor process; here PQL's roles with the evaluation kept inline), the line logged
    after an evaluation counts again: read before it, the counts were one evaluation old (on an
    H200, 21-24 s), and the last interval of a 3-minute Ant run read 2.3 times its true rate.
    Each evaluation here takes 1 s, in which the roles make steps; the rates row of the same tick
    must hold them."""

    def one_second_evaluation(*args):
        time.sleep(1.0)
        return {"eval/return": 0.0, "eval/length": 1.0}

    monkeypatch.setattr(evaluate_module, "evaluate", one_second_evaluation)
    monkeypatch.setattr(OffPolicyRunner, "trains_elsewhere", False)
    train(
        make_config(
            SMALL
            + [
                "runtime.mode=process",
                "runtime.max_env_steps=100000000",
                "runtime.device=cpu",
                "runtime.max_time_s=12",
                # Every 8 actor steps: on a loaded machine the roles start late, and 10 s of
                # evaluating every 200 env steps once ended with no evaluation at all.
                "runtime.eval_every=64",
                "runtime.log_every_s=0.5",
                "runtime.eval_max_share=1",
            ]
        )
    )
    columns = read_metrics(tmp_path / METRICS_CSV)
    assert EVAL_RETURN in columns, "no evaluation in the run"
    # Not the final tick's: the roles may have finished by then.
    evaluated = np.flatnonzero(~np.isnan(columns[EVAL_RETURN]))
    evaluated = evaluated[evaluated + 1 < len(columns["env_steps"]) - 1]
    assert len(evaluated) >= 2, evaluated
    # A tick logs its evaluation, then (its line being due) its rates: the next row.
    assert all(not np.isnan(columns["perf/env_steps_per_s"][i + 1]) for i in evaluated)
    before, after = columns["env_steps"][evaluated], columns["env_steps"][evaluated + 1]
    assert (after > before).all(), list(zip(before, after))


def tensors(state, prefix=""):
    """{path: tensor} of every tensor in a nested state (a checkpoint or a part of one)."""
    if isinstance(state, torch.Tensor):
        return {prefix: state}
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, (list, tuple)) else ()
    return {path: t for k, v in items for path, t in tensors(v, f"{prefix}/{k}").items()}


@pytest.mark.slow
def test_resume_continues_counters_and_training(make_config, finished_run, tmp_path):
    """A resume trains on from its checkpoint's counters. A process-mode run's resume:
    tests/test_resume.py's run stopped by a signal, which loses no transition."""
    first = finished_run("runtime.mode=sequential", "runtime.max_env_steps=600")
    saved = load_checkpoint(first / "checkpoint.pt")
    assert saved["counters"]["env_steps"] >= 600
    second = make_config(
        SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=1200", f"checkpoint={first / 'checkpoint.pt'}"],
        run_dir=tmp_path / "second",
    )
    train(second)
    resumed = load_checkpoint(tmp_path / "second" / "checkpoint.pt")
    for name in ("env_steps", "actor_steps", "critic_updates", "policy_updates", "episodes"):
        assert resumed["counters"][name] > saved["counters"][name], name
    assert resumed["counters"]["env_steps"] >= 1200
    changed = any(not torch.equal(v, resumed["policy"][k]) for k, v in saved["policy"].items())
    assert changed, "the resumed run did not train the policy"
    assert not [f for f in os.listdir(tmp_path / "second") if f.endswith(".tmp")]


RESUMABLE = [
    ("pql", "sequential"),
    ("pql", "process"),
    ("sac", "sequential"),
    ("ppo", "sequential"),
    ("impala", "sequential"),
    ("impala", "process"),
]


@pytest.mark.slow
@pytest.mark.parametrize("algo,mode", RESUMABLE)
def test_resume_restores_every_saved_tensor_and_counter(make_config, finished_run, tmp_path, algo, mode):
    """A resume with no env steps left to make writes back exactly what it loaded: weights, target
    networks, optimiser states, normaliser, generators and counters. (A resume that loaded nothing,
    or only part, writes freshly initialised tensors instead.)"""
    small = (
        SMALL if algo not in ("ppo", "impala") else [o for o in SMALL if "batch_size" not in o and "warmup" not in o]
    )
    # pql's first runs are test_resume_continues_counters_and_training's.
    first_run = [f"runtime.mode={mode}", "runtime.max_env_steps=600"]
    if algo == "pql":
        first = finished_run(*first_run)
    else:
        first = tmp_path / "first"
        train(make_config(small + [f"algo={algo}", *first_run], run_dir=first))
    saved = load_checkpoint(first / "checkpoint.pt")
    again = make_config(
        small
        + [
            f"algo={algo}",
            f"runtime.mode={mode}",
            f"runtime.max_env_steps={saved['counters']['env_steps']}",
            f"checkpoint={first / 'checkpoint.pt'}",
        ],
        run_dir=tmp_path / "again",
    )
    train(again)
    rewritten = load_checkpoint(tmp_path / "again" / "checkpoint.pt")
    assert rewritten["counters"] == saved["counters"]
    before, after = (
        tensors({k: saved[k] for k in ("policy", "normalizer", "roles")}),
        tensors({k: rewritten[k] for k in ("policy", "normalizer", "roles")}),
    )
    assert before.keys() == after.keys() and len(before) > 10
    assert [k for k in before if not torch.equal(before[k], after[k])] == []


@pytest.mark.slow
@pytest.mark.parametrize("key,value", [("algo", "sac"), ("task", "Hopper")])
def test_resume_with_another_algo_or_task_is_a_config_error(make_config, finished_run, tmp_path, key, value):
    ckpt = finished_run(*SHORT_RUN) / "checkpoint.pt"
    with pytest.raises(
        ConfigError, match=f"{key}='{value}' is not allowed; expected .*written by algo=pql task=InvertedPendulum"
    ):
        train(make_config(SMALL + [f"{key}={value}", f"checkpoint={ckpt}"], run_dir=tmp_path / "resumed"))
    cmd = [
        sys.executable,
        "train.py",
        *SMALL,
        f"{key}={value}",
        f"checkpoint={ckpt}",
        f"hydra.run.dir={tmp_path / 'cli'}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# 368 policy updates: the average is the plain mean for its first 1/τ = 20, then Polyak's.
AVERAGED_RUN = ("runtime.mode=sequential", "runtime.max_env_steps=400")


@pytest.mark.slow
@pytest.mark.parametrize("average", [0.0, 0.05])
def test_the_run_delivers_the_average_of_its_policy(finished_run, average):
    """algo.policy_average: the checkpoint's policy, what an evaluation and a user load, is the
    P-learner's Polyak average (kept in its state for a resume); with 0 it is the latest policy
    and no average is kept."""
    run_dir = finished_run(*AVERAGED_RUN, f"algo.policy_average={average}")
    state = load_checkpoint(run_dir / "checkpoint.pt")
    learner = state["roles"]["p_learner"]
    latest_is_delivered = [torch.equal(v, learner["policy"][k]) for k, v in state["policy"].items()]
    if average:
        assert all(torch.equal(v, learner["delivered"][k]) for k, v in state["policy"].items())
        assert not any(latest_is_delivered)
    else:
        assert "delivered" not in learner and all(latest_is_delivered)


@pytest.mark.slow
def test_a_checkpoint_without_an_average_resumes_with_one(make_config, finished_run, tmp_path):
    """A run saved with algo.policy_average=0 resumes with an average, which starts from its policy."""
    first = finished_run(*AVERAGED_RUN, "algo.policy_average=0.0")
    again = make_config(
        SMALL
        + [
            "runtime.mode=sequential",
            "runtime.max_env_steps=600",
            "algo.policy_average=0.05",
            f"checkpoint={first / 'checkpoint.pt'}",
        ],
        run_dir=tmp_path / "again",
    )
    train(again)
    learner = load_checkpoint(tmp_path / "again" / "checkpoint.pt")["roles"]["p_learner"]
    assert learner["delivered"].keys() == learner["policy"].keys()


def test_warmup_can_be_zero(make_config, tmp_path):
    """algo.warmup_steps=0: the actor acts with its policy from the first step, and the ratios
    count every actor step."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=400", "algo.warmup_steps=0"])
    assert cfg.algo.warmup_steps == 0
    train(cfg)
    counters = load_checkpoint(tmp_path / "checkpoint.pt")["counters"]
    beta_av, _ = measured_ratios(counters, warmup_steps=0)
    assert beta_av == pytest.approx(cfg.algo.beta_av, rel=0.1)


def actor_and_v_learner(cfg):
    """The shared state and the actor and V-learner of InvertedPendulum (obs 4, action 1), in this
    process, to step by hand."""
    settings = settings_of(cfg).runner
    rules = make_rules(settings.algo, ObsLayout.shared(4), 1)
    shared = make_shared(settings, rules, 4, 1)
    roles = {
        name: build_role(
            name,
            settings,
            shared,
            rules,
            make_ratios(settings.ratios, shared),
            ObsLayout.shared(4),
            1,
            fresh_start=True,
        )
        for name in ("actor", "v_learner")
    }
    return shared, roles


def test_actor_priorities_reach_the_replay(make_config):
    """replay.actor_priorities: new items enter at the priorities the actor computed, so the
    tree's leaves differ from one another (at the max priority they would start out equal)."""
    cfg = make_config(
        SMALL
        + [
            "runtime.mode=sequential",
            "replay.kind=prioritized",
            "replay.actor_priorities=true",
            "replay.capacity=4096",
            "algo.nstep=1",
        ]
    )
    shared, roles = actor_and_v_learner(cfg)
    for _ in range(shared.ring_slots):
        roles["actor"].step()
    roles["v_learner"].ingest()
    leaves = roles["v_learner"].replay.sampler.priorities.leaves
    filled = leaves[leaves > 0]
    assert filled.numel() == shared.ring_slots * cfg.task.num_envs
    assert filled.unique().numel() > filled.numel() // 2


def test_the_replay_holds_scaled_rewards_and_the_episodes_the_envs_own(make_config):
    """algo.reward_scale: InvertedPendulum pays 1 per step and 0 when the pole falls, so with
    one-step folds each stored reward is the scale or 0, while the training episodes' running
    returns still count whole steps."""
    cfg = make_config(
        SMALL + ["runtime.mode=sequential", "replay.capacity=4096", "algo.nstep=1", "algo.reward_scale=0.25"]
    )
    shared, roles = actor_and_v_learner(cfg)
    for _ in range(shared.ring_slots):
        roles["actor"].step()
    roles["v_learner"].ingest()
    size = len(roles["v_learner"].replay)
    assert size == shared.ring_slots * cfg.task.num_envs
    stored = roles["v_learner"].replay.storage["reward"][:size]
    assert torch.all((stored == 0.25) | (stored == 0)) and (stored == 0.25).float().mean() > 0.5  # 0: the pole fell
    episodes = roles["actor"].episodes
    assert episodes.ep_length.sum() > 0 and torch.equal(episodes.ep_return, episodes.ep_length)


def test_greedy_nstep_first_steps_reach_the_critic_update(make_config):
    """algo.greedy_nstep: the first step of each fold travels through the ring into the replay,
    is normalised like the other observations, and the V-learner's update uses it."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "algo.greedy_nstep=true", "replay.capacity=4096"])
    shared, roles = actor_and_v_learner(cfg)
    for _ in range(shared.ring_slots + cfg.algo.nstep):
        roles["actor"].step()
    v_learner = roles["v_learner"]
    v_learner.ingest()
    stored = v_learner.replay.storage
    size = len(v_learner.replay)
    assert size > 0 and {"reward1", "next_obs1", "discount1"} <= set(stored)
    # InvertedPendulum ends only by termination or at 1,000 steps: γ_1 is γ, or 0 where the pole fell.
    gamma1 = stored["discount1"][:size]
    assert torch.all((gamma1 == 0) | torch.isclose(gamma1, torch.tensor(cfg.algo.gamma)))
    assert not torch.equal(stored["next_obs1"][:size], stored["next_obs"][:size])
    batch, indices, _ = v_learner._sample(32)
    assert torch.allclose(batch["next_obs1"], v_learner.normalizer(stored["next_obs1"][indices]))
    v_learner.step()
    assert v_learner.updates == 1


def test_test_mode_evaluates_a_checkpoint(make_config, tmp_path, capsys):
    """test=true evaluates the checkpoint's policy with its observation statistics: the same
    numbers as evaluating them by hand on envs seeded as the run's evaluation envs."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=300"], run_dir=tmp_path / "run")
    train(cfg)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    result = train(make_config(SMALL + ["test=true", f"checkpoint={ckpt}"], run_dir=tmp_path / "eval"))
    assert "mean return" in capsys.readouterr().out
    state = load_checkpoint(ckpt)
    policy = make_rules(cfg.algo, ObsLayout.shared(4), 1).make_policy()
    policy.load_state_dict(state["policy"])
    normalizer = ObsNormalizer(4)
    normalizer.load_state_dict(state["normalizer"])
    env = build_env(cfg.task, cfg.task.eval_envs, "cpu", cfg.runtime.seed + EVAL_SEED_OFFSET)
    assert result == evaluate(env, policy, normalizer)


def test_checkpoint_auto_starts_fresh_then_resumes_the_run_directory(make_config, tmp_path, capsys):
    """checkpoint=auto: a run directory without a checkpoint starts fresh, saying so (and that
    Hydra's default directory, named by the time of each launch, never has one); one with a
    checkpoint resumes it."""
    run_dir = tmp_path / "2026-01-01_00-00-00_InvertedPendulum_pql"
    overrides = SMALL + ["runtime.mode=sequential", "checkpoint=auto"]
    train(make_config(overrides + ["runtime.max_env_steps=128"], run_dir=run_dir))
    fresh = f"pql: checkpoint=auto: no checkpoint in {run_dir}, starting fresh; {run_dir} is Hydra's default"
    assert fresh in capsys.readouterr().out
    train(make_config(overrides + ["runtime.max_env_steps=256"], run_dir=run_dir))
    path = run_dir / "checkpoint.pt"
    assert f"pql: checkpoint=auto: resuming from {path} at 128 env steps" in capsys.readouterr().out
    assert load_checkpoint(path)["counters"]["env_steps"] == 256


@pytest.mark.slow
# The actor (the role with children of its own: env copies) and a learner: the P-learner's death
# takes the V-learner's path through the supervisor (each role is watched the same way).
@pytest.mark.parametrize("victim", ["actor", "v_learner"])
def test_killed_role_stops_the_run_promptly(tmp_path, victim):
    cmd = endless_run(tmp_path)
    with running(cmd) as proc:
        pids = {}
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            pids = started_roles(line) or pids
            if pids:
                break
            assert time.monotonic() < deadline
        assert set(pids) == {"actor", "v_learner", "p_learner"}
        time.sleep(3)  # let the roles get going
        os.kill(pids[victim], signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=30)
    assert time.monotonic() - killed < 10
    assert proc.returncode != 0
    assert f"role {victim} died (killed by SIGKILL)" in err, err
    # No stack trace from pql's code. One CI run (1 of 8) also caught a BrokenPipeError traceback
    # from `File "<string>", line 36` (a program run from a string, in no file of pql's, not
    # found since): a child of the killed role writing to it, most likely.
    assert not re.search(r'File "[^"]*(/pql/|/tasks/|train\.py)', err), err
    assert err.count("Traceback") == err.count('File "<string>"'), err
    time.sleep(0.5)
    assert not [n for n, p in pids.items() if alive(p)]


def signalled_run(cmd: list[str], sig: int, whole_group: bool = False, again: bool = False) -> tuple:
    """Run cmd, send it `sig` once it trains (its whole process group with whole_group), and with
    `again` the same signal again once it says it stops, past SAME_STOP_S (sooner, the run takes
    it for the same stop delivered twice). -> (exit code, stdout from the first signal on,
    stderr, {role: pid}, seconds from the last signal to the exit)."""
    with running(cmd) as proc:
        pids = {}
        for line in proc.stdout:
            pids = started_roles(line) or pids
            if re.match(r"[1-9]\S*(/\S+)? steps", line):  # a progress line with env steps done: it trains
                break
        send = (lambda: os.killpg(proc.pid, sig)) if whole_group else (lambda: proc.send_signal(sig))
        send()
        sent, seen = time.monotonic(), []
        for line in proc.stdout if again else ():
            seen.append(line)
            if line.startswith("pql: stopping ("):
                time.sleep(max(0.0, sent + SAME_STOP_S + 0.5 - time.monotonic()))
                send()
                sent = time.monotonic()
                break
        out, err = proc.communicate(timeout=60)
    return proc.returncode, "".join(seen) + out, err, pids, time.monotonic() - sent


def test_a_signal_repeated_at_once_is_the_same_stop(monkeypatch):
    """SLURM signals every process of a job step and torchrun forwards the signal to its replicas:
    a replica gets the same stop twice within moments. Only a signal later than SAME_STOP_S after
    the first stops the run at once."""
    now = [100.0]
    monkeypatch.setattr(stopping_module.time, "monotonic", lambda: now[0])
    signals = StopSignals()
    signals.received(signal.SIGTERM)
    now[0] += SAME_STOP_S / 2
    signals.received(signal.SIGTERM)  # the same stop
    assert signals.code == 143
    now[0] += SAME_STOP_S
    with pytest.raises(Stopped) as stopped:
        signals.received(signal.SIGINT)
    assert stopped.value.code == 130 and signals.code == 143


@pytest.mark.parametrize(
    "mode,sig,whole_group,code",
    [
        ("sequential", signal.SIGINT, False, 130),
        ("process", signal.SIGINT, True, 130),  # a terminal's Ctrl-C reaches the whole process group
    ],
    ids=["sequential-SIGINT", "process-SIGINT-group"],
)
@pytest.mark.slow
def test_a_stop_signal_writes_a_checkpoint_and_stops_every_role(tmp_path, mode, sig, whole_group, code):
    """Ctrl-C: the run stops at an agreed step, writes its checkpoint (no final evaluation), stops
    every role and exits 130. SIGTERM to the main process alone, and checkpoint=auto's resume:
    tests/test_chaos.py's first launch; to every process of a job, as SLURM sends it:
    tests/test_chaos.py's replicas."""
    returncode, out, err, pids, _ = signalled_run(
        endless_run(tmp_path, "runtime.checkpoint_every=1000000000", mode=mode), sig, whole_group
    )
    assert returncode == code, err
    said = "pql: terminated (SIGTERM)" if sig == signal.SIGTERM else "pql: interrupted"
    assert said in err and "Traceback" not in err and "leaked" not in err, err
    assert_stopped_at_an_agreed_step(load_checkpoint(tmp_path / "checkpoint.pt"), num_envs=8)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert not [n for n, p in pids.items() if alive(p)]
    log = (tmp_path / "train.log").read_text()
    assert log.startswith(f"pql {__version__}: task=InvertedPendulum"), log
    stopping = f"pql: stopping ({signal.Signals(sig).name}): training finishes at its next check, then the run writes"
    assert stopping in log and "pql: wrote" in log and said in log, log


@pytest.mark.slow
def test_a_second_signal_stops_at_once_without_a_checkpoint(tmp_path):
    """A second signal while the run finishes stops it at once: no checkpoint (the previous one,
    here none, stays), every role stopped. The learners run up to 64 actor steps behind the actor
    (runtime.max_lag), and at 64 critic updates an actor step the agreed stop, which waits for them
    to catch up (4,096 updates), takes longer than the test's second signal does to come (at 16 a
    step, a loaded CI machine once caught up and wrote the checkpoint first)."""
    returncode, out, err, pids, stopped_in = signalled_run(
        endless_run(tmp_path, "runtime.checkpoint_every=1000000000", "runtime.max_lag=64", "algo.beta_av=64"),
        signal.SIGTERM,
        again=True,
    )
    assert returncode == 143 and "pql: terminated (SIGTERM)" in err, err
    assert "Traceback" not in err and "leaked" not in err, err
    assert "pql: wrote" not in out and stopped_in < 10, (stopped_in, out)
    assert not (tmp_path / "checkpoint.pt").exists() and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    assert not [n for n, p in pids.items() if alive(p)]


@pytest.mark.slow
def test_a_stop_signal_while_the_roles_start_kills_none_of_them(tmp_path):
    """SIGTERM to the whole group as soon as the roles are started, while they still import:
    no role dies of it; the run writes its checkpoint and exits 143 as it would later on."""
    cmd = endless_run(tmp_path, "runtime.checkpoint_every=1000000000")
    with running(cmd) as proc:
        pids = {}
        for line in proc.stdout:
            pids = started_roles(line)
            if pids:
                break
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "pql: terminated (SIGTERM)" in err and "died" not in err and "Traceback" not in err, err
    assert "pql: wrote" in out, out
    assert load_checkpoint(tmp_path / "checkpoint.pt")["task"] == "InvertedPendulum"  # whole, and this run's
    assert not [n for n, p in pids.items() if alive(p)]


@pytest.mark.slow
def test_a_full_disk_keeps_the_previous_checkpoint(finished_run, tmp_path):
    """Checkpoints the file system refuses (here a file-size limit, EFBIG, as a full disk's
    ENOSPC would): each periodic one is a warning and training goes on; the final one fails the
    run with one line; the checkpoint already there stays as it was."""
    import resource

    run_dir = copy_of(finished_run(*SHORT_RUN), tmp_path / "run")
    path = run_dir / "checkpoint.pt"
    before = path.read_bytes()
    limit = len(before) // 2  # no checkpoint of these networks fits; the logs (a few kB) do

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    cmd = [
        sys.executable,
        "train.py",
        *SMALL,
        "runtime.mode=sequential",
        "runtime.max_env_steps=600",
        "runtime.checkpoint_every=100",
        f"checkpoint={path}",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert proc.returncode == 1, proc.stderr
    warning = f"pql: warning: could not write checkpoint {path}: File too large; the previous checkpoint there is kept"
    assert warning in proc.stderr and "training goes on" in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"pql: run failed: could not write checkpoint {path}")
    assert "Traceback" not in proc.stderr
    assert path.read_bytes() == before and load_checkpoint(path)["counters"]["env_steps"] == 200
    assert not [p for p in os.listdir(run_dir) if p.endswith(".tmp")]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sequential", "process"])
def test_a_diverging_run_stops_naming_role_quantity_and_update(tmp_path, mode):
    """A learning rate that sends the critic to inf within a few updates: the run stops with one
    line naming the role, the quantity and the update, and writes no checkpoint holding nan."""
    cmd = endless_run(tmp_path, "algo.critic_lr=1e30", "runtime.checkpoint_every=8", mode=mode)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stderr
    # Which sees it first depends on the timing: the critic's loss, or the actions of the policy
    # that learnt from that critic.
    assert re.search(
        r"(v_learner diverged: (critic loss|mean Q) is (nan|inf|-inf) at critic update [\d,]+"
        r"|actor diverged: the policy's actions contain NaN or inf .* at actor step [\d,]+)",
        proc.stderr,
    ), proc.stderr
    assert "Traceback" not in proc.stderr
    if (tmp_path / "checkpoint.pt").exists():
        for value in tensors(load_checkpoint(tmp_path / "checkpoint.pt")).values():
            assert not value.is_floating_point() or torch.isfinite(value).all()


@pytest.mark.slow
def test_a_loss_past_its_bound_keeps_the_last_good_checkpoint(finished_run, tmp_path):
    run_dir = copy_of(finished_run(*SHORT_RUN), tmp_path / "run")
    path = run_dir / "checkpoint.pt"
    cmd = endless_run(run_dir, "runtime.max_critic_loss=1e-12", "runtime.checkpoint_every=8", f"checkpoint={path}")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stderr
    assert re.search(
        r"role v_learner failed:\nv_learner diverged: critic loss is \S+ at critic update [\d,]+, above "
        r"the bound 1e-12 \(runtime.max_critic_loss\)",
        proc.stderr,
    ), proc.stderr
    assert load_checkpoint(path)["counters"]["env_steps"] >= 200


@pytest.mark.slow
def test_raising_role_reports_its_traceback(finished_run, tmp_path):
    """A role that raises (here: the V-learner loading a checkpoint whose copy of its critic alone
    was given a layer of another size) ends the run with that role's traceback, exit code 1 and no
    surviving child."""
    path = copy_of(finished_run(*SHORT_RUN), tmp_path / "run") / "checkpoint.pt"
    state = load_checkpoint(path)
    critic = state["roles"]["v_learner"]["critic"]
    first = next(iter(critic))
    critic[first] = torch.zeros(critic[first].shape[0] + 1, *critic[first].shape[1:])
    save_checkpoint(path, state)
    cmd = endless_run(tmp_path / "resumed", f"checkpoint={path}")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "role v_learner failed" in proc.stderr and "Traceback" in proc.stderr and "size mismatch" in proc.stderr
    log = (tmp_path / "resumed" / "train.log").read_text()  # the console, error included, kept in the run dir
    assert (
        log.startswith(f"pql {__version__}: task=InvertedPendulum")
        and "role v_learner failed" in log
        and "size mismatch" in log
    )


def _work_with(shared) -> list:
    """A role's work: objects of its own that refer to the shared tensors and to each other."""
    role = types.SimpleNamespace(ring=shared.ring["x"], flat=shared.weights["w"].flat)
    role.me = role
    role.ring.add_(1)
    return [weakref.ref(role.ring), weakref.ref(role.flat)]


def _finish_a_role(shared, answer) -> None:
    with role_process("probe", shared, 1, None):
        refs = _work_with(shared)
    answer.put(sum(ref() is not None for ref in refs))


def test_a_role_that_finishes_lets_go_of_the_shared_tensors():
    """torch gives a role's hold on the main process's CUDA tensors back only when the role frees
    them; one that exits still holding them never does (on an H200 the main process then warned at
    exit that shared CUDA tensors were not released). Here on the CPU: once a role's frame has
    closed, nothing in the role process refers to the ring or the weights any more."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    shared = make_shared_state(
        RunCounters(),
        RunStats(),
        {"x": ((4,), torch.float32)},
        (3, 2),
        "cpu",
        {"w": SharedWeights(torch.nn.Linear(2, 2), "cpu")},
        ("probe",),
        ctx,
    )
    answer = ctx.Queue()
    role = ctx.Process(target=_finish_a_role, args=(shared, answer), daemon=True)
    role.start()
    try:
        assert answer.get(timeout=60) == 0
        role.join(timeout=30)
        assert role.exitcode == 0
        assert float(shared.ring["x"].sum()) == 3 * 2 * 4  # the role did its work on the shared ring
    finally:
        if role.is_alive():
            role.kill()


def test_evaluation_runs_on_one_thread_and_gives_the_count_back(make_config):
    """An evaluation's idle thread pool would spin on the cores the roles train on: it runs on one
    torch thread, and the process keeps its own count afterwards."""
    cfg = make_config(SMALL)
    env = build_env(cfg.task, 3, "cpu", 0)
    seen = []

    class Recording(torch.nn.Module):
        def forward(self, obs):
            seen.append(torch.get_num_threads())
            return torch.zeros(obs.shape[0], env.act_dim)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        evaluate(env, Recording(), ObsNormalizer(env.obs_dim))
        assert seen and set(seen) == {1}
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def _sleep_until_flagged(wakeup: Wakeup, flag: torch.Tensor, woke_at: torch.Tensor) -> None:
    wakeup.sleep("sleeper", lambda: bool(flag[0]), timeout=60.0)
    woke_at[0] = time.monotonic()


def test_a_role_that_counts_never_waits_for_a_sleeping_role_to_wake():
    """multiprocessing's Condition.notify waits until the sleeper has woken, which cost the critic
    0.4 ms per update on 2 busy cores. Waking through `Wakeup` returns at once even while the
    sleeping process is stopped, and the sleeper, once continued, wakes from that release (not
    from its 60-s timeout)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    wakeup = Wakeup(ctx, ("sleeper",))
    flag, woke_at = torch.zeros(1).share_memory_(), torch.zeros(1, dtype=torch.float64).share_memory_()
    sleeper = ctx.Process(target=_sleep_until_flagged, args=(wakeup, flag, woke_at), daemon=True)
    sleeper.start()
    try:
        deadline = time.monotonic() + 60
        while not int(wakeup.asleep[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert int(wakeup.asleep[0]), "the sleeper never went to sleep"
        os.kill(sleeper.pid, signal.SIGSTOP)
        flag[0] = 1
        start = time.monotonic()
        wakeup.wake_all()
        assert time.monotonic() - start < 0.5
        continued = time.monotonic()
        os.kill(sleeper.pid, signal.SIGCONT)
        sleeper.join(timeout=30)
        assert sleeper.exitcode == 0
        assert float(woke_at[0]) - continued < 10
    finally:
        if sleeper.is_alive():
            sleeper.kill()
