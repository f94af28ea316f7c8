"""gym:<EnvId> tasks (tasks/gym_env.py): Gymnasium's vector envs behind the batched-env protocol,
checked against plain Gymnasium envs, and each refusal by an env built to break it."""

import itertools
import math
import multiprocessing
import os
import tempfile

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

import tasks
from tasks.gym_env import make_gym_env

CPU = torch.device("cpu")
MAIN_PID = os.getpid()  # what the async copies' subprocesses, forked from this one, are not


class Walk(gymnasium.Env):
    """A point moved by its actions from a seeded start: obs [position, steps taken, scale, 0...]
    (`width` values); terminated at step `terminate_at`, if given."""

    def __init__(self, scale=1.0, width=3, terminate_at=None):
        self.scale = scale
        self.terminate_at = terminate_at
        self.observation_space = spaces.Box(-np.inf, np.inf, (width,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.steps = float(self.np_random.uniform(-1, 1)), 0
        return self._obs(), {}

    def step(self, action):
        self.position += self.scale * float(action[0])
        self.steps += 1
        return self._obs(), -abs(self.position), self.steps == self.terminate_at, False, {}

    def _obs(self):
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[:3] = self.position, self.steps, self.scale
        return obs


class Parts(gymnasium.Env):
    """Fixed observations of any Box or Dict space: part `key` holds len(key) + its flat index / 100
    (0 + ... for a Box), so the flattened order and layout can be read off the values."""

    def __init__(self, observation_space=None, action_space=None):
        self.observation_space = observation_space or spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = action_space or spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}

    def _obs(self):
        if isinstance(self.observation_space, spaces.Dict):
            return {key: part_values(space, len(key)) for key, space in self.observation_space.items()}
        return part_values(self.observation_space, 0)


def part_values(space, base):
    return (base + np.arange(math.prod(space.shape)) / 100).reshape(space.shape).astype(space.dtype)


_made = itertools.count()


def counted():
    """A Walk one wider from the second one made in this process on: the copies differ from the first."""
    return Walk(width=3 + (next(_made) > 0))


def forked(fail=False):
    """A Walk one wider in a subprocess; with `fail`, async copy 1 raises instead (copy 0 runs on)."""
    if fail and multiprocessing.current_process().name == "Worker<AsyncVectorEnv>-1":
        raise RuntimeError("no simulator licence for a second copy")
    return Walk(width=3 + (os.getpid() != MAIN_PID))


def broken():
    raise ValueError("gravity must be positive\nsecond line")


gymnasium.register("pqltest/Walk-v0", entry_point=Walk, max_episode_steps=8)
gymnasium.register("pqltest/Parts-v0", entry_point=Parts)  # no step limit of its own
gymnasium.register("pqltest/Counted-v0", entry_point=counted, max_episode_steps=8)
gymnasium.register("pqltest/Forked-v0", entry_point=forked, max_episode_steps=8)
gymnasium.register("pqltest/Broken-v0", entry_point=broken, max_episode_steps=8)


def make(env_id, num_envs=2, seed=0, vectorization="sync", import_module=None, **kwargs):
    return make_gym_env(env_id, num_envs, CPU, seed, kwargs, import_module, vectorization)


def random_actions(env, steps, seed):
    """Uniform actions in the env's bounds, [N, act_dim] float32."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        u = torch.rand((env.num_envs, env.act_dim), generator=gen)
        yield env.action_low + u * (env.action_high - env.action_low)


def async_workers():
    return [p for p in multiprocessing.active_children() if p.name.startswith("Worker<AsyncVectorEnv>")]


def test_mujoco_env_matches_plain_gymnasium_envs_across_episode_ends():
    """Each copy is a plain gym.make env seeded seed + i: the same observations, rewards and ends,
    final_obs the one that ended an episode and obs the next episode's first."""
    env = make("InvertedPendulum-v5", num_envs=2, seed=3, max_episode_steps=12)
    assert (env.num_envs, env.obs_dim, env.act_dim, env.max_episode_steps) == (2, 4, 1, 12)
    assert env.device == CPU and env.obs_layout == [("obs", 4)]
    assert env.action_low.dtype == env.action_high.dtype == torch.float32
    assert env.action_low.tolist() == [-3.0] and env.action_high.tolist() == [3.0]
    plain = [gymnasium.make("InvertedPendulum-v5", max_episode_steps=12) for _ in range(2)]
    expected = np.stack([p.reset(seed=3 + i)[0] for i, p in enumerate(plain)]).astype(np.float32)
    obs = env.reset()
    assert obs.shape == (2, 4) and obs.dtype == torch.float32 and np.array_equal(obs.numpy(), expected)
    ended = {"terminated": 0, "truncated": 0}
    for actions in random_actions(env, 40, seed=0):
        obs, reward, terminated, truncated, info = env.step(actions)
        assert reward.dtype == torch.float32 and terminated.dtype == truncated.dtype == torch.bool
        assert obs.shape == info["final_obs"].shape == (2, 4) and reward.shape == terminated.shape == (2,)
        for i, p in enumerate(plain):
            last, r, te, tr, _ = p.step(actions[i].numpy())
            assert np.array_equal(info["final_obs"][i].numpy(), last.astype(np.float32))
            assert reward[i].item() == np.float32(r) and (terminated[i].item(), truncated[i].item()) == (te, tr)
            if te or tr:
                ended["terminated" if te else "truncated"] += 1
                assert not torch.equal(obs[i], info["final_obs"][i])
                assert np.array_equal(obs[i].numpy(), p.reset()[0].astype(np.float32))
            else:
                assert torch.equal(obs[i], info["final_obs"][i])
    assert ended["terminated"] and ended["truncated"]
    env.close()
    for p in plain:
        p.close()


def test_async_pendulum_steps_as_sync_does_and_leaves_no_subprocess():
    env = tasks.make("gym:Pendulum-v1", 2, "cpu", seed=4, vectorization="async")
    sync = make("Pendulum-v1", num_envs=2, seed=4)
    workers = env.vector_env.processes
    assert len(workers) == 2 and all(p.is_alive() for p in workers)
    assert torch.equal(env.reset(), sync.reset())
    for actions in random_actions(env, 5, seed=1):
        (*got, got_info), (*want, want_info) = env.step(actions), sync.step(actions)
        assert all(map(torch.equal, got, want)) and torch.equal(got_info["final_obs"], want_info["final_obs"])
    env.close()
    sync.close()
    assert all(p.exitcode is not None for p in workers) and not async_workers()


def test_goal_env_dict_is_flattened_observation_first(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # each maze leaves an XML file in the temporary folder
    env = make("PointMaze_UMaze-v3", seed=5, import_module="gymnasium_robotics", max_episode_steps=3)
    assert env.obs_layout == [("observation", 4), ("achieved_goal", 2), ("desired_goal", 2)]
    assert env.obs_dim == 8 and env.max_episode_steps == 3
    plain = gymnasium.make("PointMaze_UMaze-v3", max_episode_steps=3)
    order = [key for key, _ in env.obs_layout]
    flat = lambda o: np.concatenate([o[key] for key in order]).astype(np.float32)
    assert np.array_equal(env.reset()[0].numpy(), flat(plain.reset(seed=5)[0]))
    for actions in random_actions(env, 3, seed=2):
        obs, _, _, truncated, info = env.step(actions)
        last = plain.step(actions[0].numpy())[0]
    assert truncated.all() and np.array_equal(info["final_obs"][0].numpy(), flat(last))
    assert np.array_equal(obs[0].numpy(), flat(plain.reset()[0]))
    env.close()
    plain.close()


def test_other_dict_keys_follow_in_sorted_order_and_rank_2_floats_flatten_row_major():
    box = lambda *shape, dtype=np.float32: spaces.Box(-np.inf, np.inf, shape, dtype)
    parts = {"zeta": box(2), "desired_goal": box(1), "alpha": box(2, 3), "observation": box(3, dtype=np.float64)}
    env = make("pqltest/Parts-v0", max_episode_steps=5, observation_space=spaces.Dict(parts))
    assert env.obs_layout == [("observation", 3), ("desired_goal", 1), ("alpha", 6), ("zeta", 2)]
    expected = np.concatenate([part_values(parts[key], len(key)).reshape(-1) for key, _ in env.obs_layout])
    assert np.array_equal(env.reset()[0].numpy(), expected.astype(np.float32))
    env.close()
    env = make("pqltest/Parts-v0", max_episode_steps=5, observation_space=box(4, 3))
    assert env.obs_dim == 12 and np.allclose(env.reset()[1].numpy(), np.arange(12) / 100)
    env.close()


def test_kwargs_reach_the_constructor_and_max_episode_steps_gym_make():
    env = make("pqltest/Walk-v0", scale=2.5, max_episode_steps=4)
    assert env.vector_env.envs[0].unwrapped.scale == 2.5 and env.max_episode_steps == 4
    assert (env.reset()[:, 2] == 2.5).all()
    for _ in range(4):
        obs, _, terminated, truncated, info = env.step(torch.zeros(2, 1))
    assert truncated.all() and not terminated.any()
    assert (info["final_obs"][:, 1] == 4).all() and (obs[:, 1] == 0).all()  # steps taken: the limit, then 0
    env.close()


def test_an_end_that_is_also_the_step_limit_is_terminated_only():
    env = make("pqltest/Walk-v0", terminate_at=3, max_episode_steps=3)
    env.reset()
    for _ in range(3):
        _, _, terminated, truncated, _ = env.step(torch.zeros(2, 1))
    assert terminated.all() and not truncated.any()
    env.close()


def test_a_seed_repeats_its_trajectory_and_only_the_first_reset_seeds():
    def trajectory(seed):
        env = make("pqltest/Walk-v0", num_envs=3, seed=seed, max_episode_steps=2)
        seen = [env.reset(), env.reset()]
        for actions in random_actions(env, 6, seed=0):
            seen += env.step(actions)[0:1]
        env.close()
        return torch.stack(seen)

    first = trajectory(7)
    assert torch.equal(first, trajectory(7)) and not torch.equal(first, trajectory(8))
    assert not torch.equal(first[0], first[1])  # a second reset starts new episodes


@pytest.mark.parametrize(
    "action_space, shown",
    [
        (spaces.Discrete(3), "Discrete(3)"),
        (spaces.MultiDiscrete([2, 3]), "MultiDiscrete"),
        (spaces.MultiBinary(2), "MultiBinary"),
        (spaces.Tuple((spaces.Box(-1, 1, (1,)), spaces.Box(-1, 1, (1,)))), "Tuple"),
        (spaces.Box(0, 4, (2,), np.int64), "int64"),
    ],
)
def test_actions_must_be_continuous(action_space, shown):
    with pytest.raises(tasks.TaskError, match="continuous actions") as err:
        make("pqltest/Parts-v0", max_episode_steps=5, action_space=action_space)
    assert shown in str(err.value)


def test_a_discrete_registered_env_is_refused_and_unbounded_actions_too():
    with pytest.raises(tasks.TaskError, match=r"gym:CartPole-v1: .*continuous actions.*Discrete\(2\)"):
        make("CartPole-v1")
    with pytest.raises(tasks.TaskError, match="unbounded.*must be finite"):
        make("pqltest/Parts-v0", max_episode_steps=5, action_space=spaces.Box(-np.inf, np.inf, (2,)))


@pytest.mark.parametrize(
    "observation_space, message",
    [
        (spaces.Box(0, 255, (8, 8, 3), np.uint8), "is an image"),
        (spaces.Box(0, 255, (10, 12), np.uint8), "is an image"),
        (spaces.Box(0, 1, (64, 64)), "is an image"),
        (spaces.Dict({"observation": spaces.Box(-1, 1, (2,)), "camera": spaces.Box(0, 1, (3, 4, 4))}), "'camera'"),
        (spaces.Discrete(4), "a Box or a Dict of Boxes"),
        (spaces.Dict({"observation": spaces.Dict({"x": spaces.Box(-1, 1, (1,))})}), "nested Dicts"),
    ],
)
def test_observations_must_be_vectors(observation_space, message):
    with pytest.raises(tasks.TaskError, match=message):
        make("pqltest/Parts-v0", max_episode_steps=5, observation_space=observation_space)


def test_an_unknown_id_names_the_closest_and_a_namespace_hints_import_module():
    with pytest.raises(tasks.TaskError, match="unknown Gymnasium id gym:Pendulm-v1; closest registered: Pendulum-v1"):
        make("Pendulm-v1")
    with pytest.raises(tasks.TaskError, match="gym:foo/Bar-v0.*task.import_module"):
        make("foo/Bar-v0")


def test_a_missing_import_module_is_named():
    with pytest.raises(tasks.TaskError, match="task.import_module=no_such_module_xyz.*No module named"):
        make("Pendulum-v1", import_module="no_such_module_xyz")


def test_an_env_without_a_step_limit_asks_for_one():
    with pytest.raises(tasks.TaskError, match="no step limit.*task.kwargs.max_episode_steps=<steps>"):
        make("pqltest/Parts-v0")
    with pytest.raises(tasks.TaskError, match="no step limit"):
        make("Pendulum-v1", max_episode_steps=-1)  # gym.make's "no TimeLimit"


def test_a_constructor_that_raises_is_one_line():
    with pytest.raises(tasks.TaskError) as err:
        make("pqltest/Broken-v0")
    assert str(err.value) == "gym:pqltest/Broken-v0 could not be made: ValueError: gravity must be positive"


def test_copies_whose_spaces_differ_are_refused_naming_the_copy():
    with pytest.raises(tasks.TaskError, match=r"spaces differ: copy 0's observation space is .*\(4,\).*\(3,\)"):
        make("pqltest/Counted-v0")


@pytest.mark.parametrize(
    "fail, message", [(False, r"spaces differ: copy 0's observation space"), (True, "copy's subprocess exited")]
)
def test_async_copies_that_differ_or_fail_leave_no_subprocess(fail, message):
    with pytest.raises(tasks.TaskError, match=message) as err:
        make("pqltest/Forked-v0", vectorization="async", fail=fail)
    assert not async_workers() and err.value.__cause__  # stopped, not left to the garbage collector


def _make_async_in(queue):
    try:
        make("Pendulum-v1", vectorization="async")
    except tasks.TaskError as err:
        queue.put(str(err))


def test_async_inside_a_daemonic_process_asks_for_sync():
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=_make_async_in, args=(queue,), daemon=True)
    process.start()
    assert "task.vectorization=sync" in queue.get(timeout=30)
    process.join()


def test_bad_vectorization_actions_and_checkpoints():
    with pytest.raises(tasks.TaskError, match="task.vectorization must be one of async, sync, got 'threads'"):
        make("Pendulum-v1", vectorization="threads")
    env = make("Pendulum-v1")
    with pytest.raises(tasks.TaskError, match=r"reset\(\) before the first step"):
        env.step(torch.zeros(2, 1))
    env.reset()
    with pytest.raises(tasks.TaskError, match=r"shape \(2, 1\)"):
        env.step(torch.zeros(2, 3))
    with pytest.raises(tasks.TaskError, match="NaN or inf"):
        env.step(torch.full((2, 1), float("nan")))
    for call in (env.state_dict, lambda: env.load_state_dict({})):
        with pytest.raises(tasks.TaskError, match="gym:Pendulum-v1 cannot be checkpointed: a Gymnasium env"):
            call()
    env.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tensors_live_on_the_cuda_device():
    device = torch.device("cuda", torch.cuda.current_device())
    env = make_gym_env("Pendulum-v1", 2, device, 0, {}, None, "sync")
    assert env.reset().device == env.action_low.device == device
    for value in env.step(torch.zeros(2, 1, device=device)):
        assert (value["final_obs"] if isinstance(value, dict) else value).device == device
    env.close()
