"""The env contract (tasks/contract.py) and its command line (pql.check_env): a real task passes
every check, and each breach of the BatchedEnv protocol is a finding of its own check, named with
what to fix; the command line exits 0 or 2 with one line."""

import time

import pytest
import torch

import tasks
from pql.check_env import main
from tasks.base import BatchedEnv, TaskError
from tasks.contract import QUICK_CHECKS, Finding, check_contract, raise_on_findings, run_checks

CPU = torch.device("cpu")


class Pendulum(BatchedEnv):
    """A real InvertedPendulum batch, passed through; each breach below overrides one part."""

    def __init__(self, num_envs: int = 4, seed: int = 0):
        self.inner = tasks.make("InvertedPendulum", num_envs, "cpu", seed, backend="mujoco")
        for name in ("num_envs", "device", "obs_dim", "act_dim", "max_episode_steps", "action_low", "action_high"):
            setattr(self, name, getattr(self.inner, name))

    def reset(self):
        return self.inner.reset()

    def step(self, actions):
        return self.inner.step(actions)

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)

    def close(self):
        self.inner.close()


class ShortObs(Pendulum):
    def step(self, actions):
        obs, *rest = super().step(actions)
        return obs[:, :-1], *rest


class AllForTheCritic(Pendulum):
    critic_obs_dim = 4  # every column, none left for the policy


class DoubleObs(Pendulum):
    def reset(self):
        return super().reset().double()


class RewardColumn(Pendulum):
    def step(self, actions):
        obs, reward, *rest = super().step(actions)
        return obs, reward[:, None], *rest


class NaNObs(Pendulum):
    def step(self, actions):
        obs, *rest = super().step(actions)
        obs = obs.clone()
        obs[1, 0] = float("nan")
        return obs, *rest


class BothDone(Pendulum):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        terminated, truncated = terminated.clone(), truncated.clone()
        terminated[0] = truncated[0] = True
        return obs, reward, terminated, truncated, info


class NoFinalObs(Pendulum):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        del info["final_obs"]
        return obs, reward, terminated, truncated, info


class FinalObsIsResetObs(Pendulum):
    """The new episode's first observation, off by rounding, where the last one should be."""

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        done = (terminated | truncated)[:, None]
        info["final_obs"] = torch.where(done, obs * (1 + 1e-7), info["final_obs"])
        return obs, reward, terminated, truncated, info


class InvertedBounds(Pendulum):
    def __init__(self):
        super().__init__()
        self.action_low, self.action_high = self.action_high, self.action_low


class Noisy(Pendulum):
    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        noise = 1e-3 * torch.rand_like(obs)  # the global RNG, which a second env does not share
        info["final_obs"] = info["final_obs"] + noise
        return obs + noise, reward, terminated, truncated, info


class NoisySaysSo(Noisy):
    deterministic = False


class ForgetfulLoad(Pendulum):
    def load_state_dict(self, state):
        pass


class RaisesOnStep2(Pendulum):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def step(self, actions):
        self.steps += 1
        if self.steps == 2:
            raise ValueError("boom in the simulator")
        return super().step(actions)


class Counter(BatchedEnv):
    """obs = the episode's step count; never terminates, truncated once `ends_at` steps are done
    (a right env: ends_at = max_episode_steps)."""

    def __init__(self, ends_at: int, num_envs: int = 3):
        self.num_envs, self.device, self.obs_dim, self.act_dim, self.max_episode_steps = num_envs, CPU, 1, 1, 5
        self.action_low, self.action_high = -torch.ones(1), torch.ones(1)
        self.ends_at = ends_at

    def reset(self):
        self.count = torch.zeros(self.num_envs, 1)
        return self.count.clone()

    def step(self, actions):
        self.count += 1
        final_obs = self.count.clone()
        truncated = self.count[:, 0] >= self.ends_at
        self.count[truncated] = 0
        reward = torch.zeros(self.num_envs)
        return self.count.clone(), reward, torch.zeros_like(truncated), truncated, {"final_obs": final_obs}


def checks_of(findings: list[Finding]) -> list[str]:
    return [f.check for f in findings]


def test_inverted_pendulum_passes_quick_and_full_with_a_state_round_trip():
    env = tasks.make("InvertedPendulum", 4, "cpu", 0, backend="mujoco")
    rng = torch.get_rng_state()
    start = time.perf_counter()
    quick = run_checks(env, quick=True)
    assert time.perf_counter() - start < 1.0
    assert quick.findings == () and quick.passed == QUICK_CHECKS and quick.env_steps_per_s is None
    fresh = tasks.make("InvertedPendulum", 4, "cpu", 0, backend="mujoco")
    full = run_checks(fresh, make_again=lambda: tasks.make("InvertedPendulum", 4, "cpu", 0, backend="mujoco"))
    assert full.findings == () and full.skipped == {}
    assert {"autoreset", "episode_length", "determinism", "state_round_trip"} <= set(full.passed)
    assert full.env_steps_per_s > 0
    assert torch.equal(torch.get_rng_state(), rng)  # a run's draws do not depend on its check


def test_a_right_env_without_state_passes_and_skips_the_round_trip():
    report = run_checks(Counter(ends_at=5), make_again=lambda: Counter(ends_at=5))
    assert report.findings == ()
    assert "cannot be checkpointed" in report.skipped["state_round_trip"]


@pytest.mark.parametrize(
    ("env", "check", "word"),
    [
        (ShortObs, "shapes", "obs of shape (4, 3)"),
        (DoubleObs, "dtypes", "torch.float64"),
        (RewardColumn, "shapes", "reward of shape (4, 1)"),
        (NaNObs, "finite", "NaN"),
        (BothDone, "done_flags", "both true"),
        (NoFinalObs, "final_obs", "no info['final_obs']"),
        (InvertedBounds, "action_bounds", "not below"),
        (RaisesOnStep2, "calls", "step() at step 2 raised ValueError: boom"),
        (AllForTheCritic, "attributes", "env.critic_obs_dim is 4; the protocol wants an int from 0 to obs_dim - 1 = 3"),
    ],
)
def test_the_quick_check_names_each_breach(env, check, word):
    findings = check_contract(env(), quick=True)
    assert check in checks_of(findings)
    assert word in next(f.message for f in findings if f.check == check)


@pytest.mark.parametrize(
    ("make", "checks", "word"),
    [
        (FinalObsIsResetObs, ["autoreset"], "must reset a finished env"),
        (lambda: Counter(ends_at=6), ["episode_length"], "max_episode_steps = 5"),
        # Its steps do not repeat after a load either.
        (Noisy, ["determinism", "state_round_trip"], "deterministic = False"),
        (ForgetfulLoad, ["state_round_trip"], "load_state_dict() restore it"),
    ],
)
def test_the_full_check_names_each_breach(make, checks, word):
    findings = check_contract(make(), make_again=make)
    assert checks_of(findings) == checks
    assert word in findings[0].message


def test_an_env_that_says_it_is_not_deterministic_is_not_held_to_it():
    report = run_checks(NoisySaysSo(), make_again=NoisySaysSo)
    assert report.findings == ()
    assert "deterministic = False" in report.skipped["determinism"]


def test_a_raising_step_stops_the_checks_it_would_feed():
    report = run_checks(RaisesOnStep2())
    assert checks_of(list(report.findings)) == ["calls"]
    assert report.skipped["state_round_trip"] == "not reached (calls failed first)"


def test_raise_on_findings_is_one_line_naming_the_first_and_the_command():
    raise_on_findings([], "Ant")
    findings = check_contract(BothDone(), quick=True)
    with pytest.raises(TaskError) as caught:
        raise_on_findings(findings[:1], "InvertedPendulum")
    message = str(caught.value)
    assert "\n" not in message and "done_flags: step() at step 1 returned terminated and truncated" in message
    assert message.endswith("(python -m pql.check_env InvertedPendulum runs every check)")
    with pytest.raises(TaskError, match=r"\(\+2 more: python -m pql.check_env gym:Pendulum-v1 lists them\)$"):
        raise_on_findings([Finding("shapes", "a"), Finding("dtypes", "b"), Finding("device", "c")], "gym:Pendulum-v1")


def test_main_passes_inverted_pendulum_and_prints_its_speed(capsys):
    assert main(["InvertedPendulum", "task.num_envs=3", "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "ok  state_round_trip" in out and "FAIL" not in out
    assert "env steps/s (3 envs x 30 steps" in out.splitlines()[-1]


def test_main_says_in_one_line_what_is_wrong_with_an_unknown_task(capsys):
    assert main(["NoSuchTask"]) == 2
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and "NoSuchTask" in captured.err
    assert "Traceback" not in captured.err + captured.out
