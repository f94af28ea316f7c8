"""Evaluation off the run's critical path: no step waits on the device, an evaluation can run
beside the main process's work on a snapshot of the policy, and evaluations are spaced to take at
most runtime.eval_max_share of the wall time."""

import threading
import time
import types

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pql import evaluate as evaluate_module
from pql.evaluate import evaluate
from pql.runtime import evaluation as evaluation_module
from pql.runtime.contracts import Runner
from pql.runtime.evaluation import Evaluator
from pql.runtime.run import Monitor
from pql.runtime.settings import MonitorSettings
from pql.runtime.stopping import StopSignals
from tasks.base import BatchedEnv


class Episodes(BatchedEnv):
    """A batched env in plain torch: env i's first episode lasts lengths[i] steps, and each step
    rewards the action's mean; later episodes last max_episode_steps. step() can be held by an
    event, to catch an evaluation in the middle."""

    def __init__(self, lengths, max_episode_steps=50, hold: threading.Event | None = None, delay_s: float = 0.0):
        self.num_envs, self.obs_dim, self.act_dim = len(lengths), 3, 2
        self.device = torch.device("cpu")
        self.max_episode_steps = max_episode_steps
        self.action_low, self.action_high = -torch.ones(2), torch.ones(2)
        self.lengths = torch.tensor(lengths)
        self.hold, self.delay_s = hold, delay_s
        self.steps_taken = 0

    def reset(self):
        self.t = torch.zeros(self.num_envs, dtype=torch.int64)
        self.first = torch.ones(self.num_envs, dtype=torch.bool)
        return torch.zeros(self.num_envs, self.obs_dim)

    def step(self, action):
        if self.hold is not None:
            self.hold.wait()
        time.sleep(self.delay_s)
        self.steps_taken += 1
        self.t += 1
        limit = torch.where(self.first, self.lengths, torch.full_like(self.lengths, self.max_episode_steps))
        done = self.t >= limit
        self.first &= ~done
        self.t.masked_fill_(done, 0)
        return (torch.zeros(self.num_envs, self.obs_dim), action.mean(1), done, torch.zeros_like(done), {})


class Bias(torch.nn.Module):
    """A policy whose action is its bias, whatever the observation."""

    def __init__(self, value: float):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.full((2,), value))

    def forward(self, obs):
        return self.bias.expand(obs.shape[0], 2)


class LandsLate:
    """tasks.base.LateRead as on CUDA: each read returns the host copy made `lag` reads before
    (None until then), never the flags themselves (numpy here: host memory, which the count of
    torch's reads below leaves out, as reading a landed pinned copy does not wait on a GPU)."""

    def __init__(self, flags, lag: int = 3):
        self.flags, self.lag, self.made = flags, lag, []

    def read(self):
        self.made.append(self.flags.clone().numpy())
        return self.made[-1 - self.lag] if len(self.made) > self.lag else None


class HostReads(TorchDispatchMode):
    """Counts the reads of a tensor's value by the host (item(), bool(), tolist())."""

    def __init__(self):
        super().__init__()
        self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads += 1
        return func(*args, **(kwargs or {}))


def test_an_evaluation_reads_the_device_once_at_the_end(monkeypatch):
    """Whether episodes still run comes from a copy that lands steps later, so no step waits on the
    device; the returns stay exact, since what the extra steps add is masked."""
    monkeypatch.setattr(evaluate_module, "LateRead", LandsLate)
    env = Episodes([5, 9, 20])
    with HostReads() as reads:
        scores = evaluate(env, Bias(0.5), torch.nn.Identity())
    mean_return, mean_length = scores["eval/return"], scores["eval/length"]
    assert reads.reads <= 2, reads.reads  # the two means, read together; none per step
    assert mean_length == pytest.approx((5 + 9 + 20) / 3)
    assert mean_return == pytest.approx(0.5 * (5 + 9 + 20) / 3)
    assert 20 < env.steps_taken <= 20 + 3 + 1  # stopped once the late copy showed every episode over


def test_a_background_evaluation_lets_the_caller_go_on_and_evaluates_the_policy_it_was_given():
    hold = threading.Event()
    hold.set()
    evaluator = Evaluator(Episodes([4, 4], hold=hold), "cpu", background=True)
    hold.clear()  # the warm-up step has passed; the evaluation's steps wait
    policy = Bias(1.0)
    evaluator.start(policy, torch.nn.Identity(), version=7, env_steps=1000)
    assert evaluator.busy and evaluator.poll() is None
    with pytest.raises(RuntimeError, match="already under way"):
        evaluator.start(policy, torch.nn.Identity(), version=8, env_steps=2000)
    with torch.no_grad():
        policy.bias.fill_(-1.0)  # the roles publish a newer policy meanwhile
    hold.set()
    result = evaluator.wait()
    assert result.scores == {"eval/return": pytest.approx(4.0), "eval/length": 4.0}  # the snapshot's, bias 1
    assert (result.policy_version, result.env_steps) == (7, 1000) and result.seconds > 0
    assert not evaluator.busy and evaluator.poll() is None


def test_an_evaluation_that_fails_in_the_background_raises_in_the_caller():
    class Broken(Episodes):
        def step(self, action):
            if self.steps_taken:
                raise RuntimeError("the physics ran out of contact buffer")
            return super().step(action)

    evaluator = Evaluator(Broken([3]), "cpu", background=True)
    evaluator.start(Bias(0.0), torch.nn.Identity(), version=1, env_steps=0)
    with pytest.raises(RuntimeError, match="contact buffer"):
        evaluator.wait()


class OneRoleRunner(Runner):
    """Just what Monitor reads of a runner: the counts grow by 100 env steps per tick."""

    def __init__(self, trains_elsewhere: bool):
        self.background, self.steps, self.policy = trains_elsewhere, 0, Bias(0.2)

    @property
    def trains_elsewhere(self) -> bool:
        return self.background

    def counts(self):
        self.steps += 100
        return {"env_steps": self.steps}

    def policy_version(self):
        return 1 + self.steps // 1000

    def latest_policy(self):
        return self.policy, torch.nn.Identity(), self.policy_version()

    def scalars(self):
        return {}

    def checkpoint(self):
        return {"counters": {"env_steps": self.steps}}

    def finished_by(self):
        return 0


class Logged:
    def __init__(self):
        self.rows = []

    def log(self, env_steps, scalars):
        self.rows.append((env_steps, dict(scalars)))

    def progress(self, env_steps, latest):
        pass


def monitor(share: float, background: bool, eval_s: float = 0.05) -> tuple[Monitor, Logged]:
    settings = MonitorSettings(
        eval_every=1,
        eval_max_share=share,
        checkpoint_every=10**12,
        log_every_s=10**6,
        max_time_s=None,
        stop_at_return=None,
        run_dir="unused",
        header={},
        video_every=0,
        export=False,
    )
    logger = Logged()
    board = types.SimpleNamespace(read=lambda: {})
    env = Episodes([2], max_episode_steps=2, delay_s=eval_s / 2)
    mon = Monitor(settings, OneRoleRunner(background), env, logger, board, StopSignals())
    mon.save_checkpoint = lambda path: {}
    mon.checkpoint_path = lambda: "unused"
    return mon, logger


@pytest.mark.parametrize("background", [False, True])
def test_evaluations_take_at_most_their_share_of_the_wall_time(background):
    """Due at every tick (eval_every=1), evaluations of ~0.05 s are spaced so that they take at
    most a fifth of the time; without the spacing (share 1) they would take most of it."""
    shares = {}
    for share in (0.2, 1.0):
        mon, logger = monitor(share, background)
        while mon.elapsed() < 1.5:
            mon.tick()
            time.sleep(0.002)
        mon.evaluator.wait()
        shares[share] = mon.eval_seconds / mon.elapsed()
        mon.tick(final=True)
        evals = [s for _, s in logger.rows if "eval/return" in s]
        assert sum(s["time/eval_s"] for s in evals) == pytest.approx(mon.eval_seconds)
        assert evals[-1]["time/eval_share"] == pytest.approx(mon.eval_seconds / mon.elapsed(), rel=0.1)
        assert len(evals) >= 3
    assert shares[0.2] <= 0.2 + 0.03, shares
    assert shares[1.0] > 0.5, shares


def test_a_background_evaluation_is_logged_when_it_ends_with_the_env_steps_of_its_policy():
    """The logs stay one timeline (metrics.csv never goes back in env steps); eval/env_steps says
    where the policy was taken."""
    mon, logger = monitor(1.0, background=True, eval_s=0.3)
    mon.tick()  # starts an evaluation at 200 env steps (the monitor read 100 when it was built)
    for _ in range(3):
        mon.tick()  # the ticks go on meanwhile
    assert not any("eval/return" in s for _, s in logger.rows)
    mon.runner.steps = 5000  # a newer policy by the end
    mon.tick(final=True)
    evals = [(step, s["eval/env_steps"]) for step, s in logger.rows if "eval/return" in s]
    assert len(evals) == 2  # and the final policy's
    assert evals[0][1] == 200 and evals[0][0] > 200  # taken at 200, logged at the final tick's count
    steps = [step for step, _ in logger.rows]
    assert steps == sorted(steps)


def test_the_evaluation_thread_steps_on_a_stream_of_its_own_on_cuda(monkeypatch):
    """On CUDA a background evaluation makes the run's GPU current in its thread and queues its
    work on a stream of its own, after the snapshot's copies: checked on the CPU with stand-ins
    for what only CUDA has."""
    made = []

    class Stream:
        def __init__(self, device):
            made.append(("stream", device))

        def wait_event(self, event):
            made.append(("waits", event))

    class Event:
        def record(self):
            made.append(("recorded", self))

    monkeypatch.setattr(evaluation_module.torch.cuda, "Stream", Stream)
    monkeypatch.setattr(evaluation_module.torch.cuda, "Event", Event)
    monkeypatch.setattr(evaluation_module.torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())
    monkeypatch.setattr(evaluation_module, "use_device", lambda d: made.append(("current", str(d))))
    evaluator = Evaluator(Episodes([2]), "cpu", background=True)
    evaluator.device = torch.device("cuda", 1)
    evaluator.start(Bias(0.0), torch.nn.Identity(), version=1, env_steps=0)
    evaluator.wait()
    kinds = [m[0] for m in made]
    assert kinds == ["recorded", "current", "stream", "waits"], made
    assert made[1] == ("current", "cuda:1") and made[3][1] is made[0][1]
