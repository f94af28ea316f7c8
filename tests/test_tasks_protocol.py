"""The batched-env protocol: shapes and dtypes, auto-reset of finished envs only, final_obs,
truncation at the step limit, and seeded reproducibility."""

import gymnasium
import numpy as np
import pytest
import torch

import tasks
from tasks.mujoco import GYMNASIUM_TASKS

BACKENDS = ["mujoco", "mjwarp"]


def random_actions(env, steps, seed, scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        u = torch.rand((env.num_envs, env.act_dim), generator=gen)
        yield scale * (env.action_low + u * (env.action_high - env.action_low))


@pytest.mark.parametrize("name", GYMNASIUM_TASKS)
def test_shapes_dtypes_and_bounds(name):
    env = tasks.make(name, 4, "cpu", seed=0, backend="mujoco")
    obs = env.reset()
    assert obs.shape == (4, env.obs_dim) and obs.dtype == torch.float32
    assert env.action_low.shape == env.action_high.shape == (env.act_dim,)
    assert env.action_low.dtype == torch.float32 and (env.action_low < env.action_high).all()
    assert env.max_episode_steps == gymnasium.spec(f"{name}-v5").max_episode_steps
    assert env.num_envs == 4 and env.device == torch.device("cpu")
    obs, reward, terminated, truncated, info = env.step(next(random_actions(env, 1, 0)))
    assert obs.shape == info["final_obs"].shape == (4, env.obs_dim)
    assert reward.shape == terminated.shape == truncated.shape == (4,)
    assert reward.dtype == torch.float32 and terminated.dtype == truncated.dtype == torch.bool
    # What an export says of it: one joint per action; a video's frame interval, Gymnasium's step.
    assert len(env.interface.joint_names) == env.act_dim
    assert env.dt == pytest.approx(gymnasium.make(f"{name}-v5").unwrapped.dt)
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_both_backends_render_the_same_scene(backend):
    env = tasks.make("Ant", 2, "cpu", seed=0, backend=backend)
    first = env.render(1)
    for actions in random_actions(env, 20, 0):
        env.step(actions)
    later = env.render(1)
    assert first.shape == (240, 320, 3) and first.dtype == np.uint8
    assert np.abs(first.astype(int) - later).mean() > 1  # the walker moved under the camera's eyes
    mujoco_env = tasks.make("Ant", 2, "cpu", seed=0, backend="mujoco")
    assert np.abs(mujoco_env.render(1).astype(int) - first).mean() < 0.5  # the same start, drawn alike
    env.close()
    mujoco_env.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["Hopper", "HalfCheetah", "HumanoidStandup"])
def test_info_entries_belong_to_the_step_that_returned_them(name, backend):
    """Position entries come from the physics state, which the auto-reset and the next step
    overwrite: what a step returned must stay that step's, also for the envs it restarted."""
    env = tasks.make(name, 4, "cpu", seed=0, backend=backend)
    actions = random_actions(env, 40, 0)
    for _ in range(30):
        *_, info = env.step(next(actions))
    env._elapsed[:2] = env.max_episode_steps - 1  # envs 0 and 1 truncate, and restart, on this step
    _, _, _, truncated, info = env.step(next(actions))
    assert truncated[:2].all() and not truncated[2:].any()
    kept = {key: value.clone() for key, value in info.items()}
    assert all(
        value.shape == (4,) and value.dtype == torch.float32 for key, value in kept.items() if key != "final_obs"
    )
    assert (kept["x_position"][:2] != env.physics.state["qpos"][:2, 0].float()).all()  # not the new episode's
    env.step(next(actions))
    assert all(torch.equal(info[key], kept[key]) for key in kept)
    env.close()


def test_gymnasium_observation_sizes():
    sizes = {name: tasks.make(name, 1, "cpu", backend="mujoco").obs_dim for name in GYMNASIUM_TASKS}
    assert sizes == {
        "Ant": 105,
        "Humanoid": 348,
        "HalfCheetah": 17,
        "Hopper": 11,
        "InvertedPendulum": 4,
        "Reacher": 10,
        "Pusher": 23,
        "Walker2d": 17,
        "Swimmer": 8,
        "InvertedDoublePendulum": 9,
        "HumanoidStandup": 348,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_auto_reset_touches_only_finished_envs(backend):
    """Env 0 is pushed hard and falls early; the others get the same actions in two runs, one of
    which keeps env 0 alive longer: their trajectories must not notice env 0's resets."""
    pushed, calm = (tasks.make("InvertedPendulum", 4, "cpu", seed=3, backend=backend) for _ in range(2))
    pushed.reset(), calm.reset()
    resets_seen = 0
    for actions in random_actions(pushed, 40, seed=1, scale=0.3):
        obs_p, rew_p, term_p, trunc_p, info_p = pushed.step(torch.cat([torch.full((1, 1), 3.0), actions[1:]]))
        obs_c, rew_c, term_c, trunc_c, info_c = calm.step(torch.cat([torch.zeros(1, 1), actions[1:]]))
        assert torch.equal(obs_p[1:], obs_c[1:]) and torch.equal(rew_p[1:], rew_c[1:])
        assert torch.equal(term_p[1:], term_c[1:])
        done = term_p | trunc_p
        assert torch.equal(info_p["final_obs"][~done], obs_p[~done])
        if done[0] and not (term_c[0] | trunc_c[0]):
            resets_seen += 1
            # The pole ended past 0.2 rad; the new episode starts within reset noise of upright.
            assert info_p["final_obs"][0, 1].abs() > 0.2 and obs_p[0, :2].abs().max() <= 0.01 + 1e-6
    assert resets_seen > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_at_step_limit_is_not_termination(backend):
    env = tasks.make("InvertedPendulum", 3, "cpu", seed=0, backend=backend)
    env.max_episode_steps = 5
    env.reset()
    zero = torch.zeros(3, 1)
    for step in range(1, 6):
        obs, _, terminated, truncated, info = env.step(zero)
        assert not terminated.any()
        assert truncated.all() == (step == 5) and truncated.any() == (step == 5)
    assert not torch.equal(obs, info["final_obs"])  # the new episodes began
    _, _, _, truncated, _ = env.step(zero)
    assert not truncated.any()  # the step counters restarted with the episodes


def test_default_limit_truncates_at_1000_steps():
    env = tasks.make("HalfCheetah", 2, "cpu", seed=0, backend="mujoco")  # HalfCheetah never terminates
    env.reset()
    zero = torch.zeros(2, env.act_dim)
    for step in range(1, 1001):
        _, _, terminated, truncated, _ = env.step(zero)
        assert not terminated.any() and truncated.all() == (step == 1000)


def test_termination_wins_over_truncation_on_the_last_step():
    env = tasks.make("InvertedPendulum", 1, "cpu", seed=0, backend="mujoco")
    env.reset()
    push = torch.full((1, 1), 3.0)
    steps = 1
    while not env.step(push)[2].any():
        steps += 1
    env.max_episode_steps = steps
    env.reset_to(torch.zeros(1, 2), torch.zeros(1, 2))
    for _ in range(steps - 1):
        env.step(push)
    _, _, terminated, truncated, _ = env.step(push)
    assert terminated.all() and not truncated.any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_seeded_runs_repeat(backend):
    def run(seed):
        env = tasks.make("Hopper", 3, "cpu", seed=seed, backend=backend)
        out = [env.reset()]
        for actions in random_actions(env, 30, seed=7):
            obs, reward, terminated, truncated, _ = env.step(actions)
            out += [obs, reward, terminated.float(), truncated.float()]
        env.close()
        return torch.cat([t.flatten() for t in out])

    first = run(11)
    assert torch.equal(first, run(11))
    assert not torch.equal(first, run(12))


def start_states(env):
    return torch.cat([env.physics.state["qpos"], env.physics.state["qvel"]], dim=1).double()


@pytest.mark.parametrize("backend", BACKENDS)
def test_reset_noise_is_keyed_by_seed_env_and_episode(backend):
    """Env i's k-th random start depends on (seed, i, k) alone: not on the number of envs, nor on
    which other envs restarted before it."""
    few, many = (tasks.make("Ant", n, "cpu", seed=4, backend=backend) for n in (2, 5))
    assert torch.equal(start_states(few), start_states(many)[:2])
    few.physics.reset(torch.tensor([True, False]))  # env 0's third start: env 1 does not draw
    few.physics.reset(torch.tensor([False, True]))
    many.physics.reset(torch.tensor([False, True, True, False, False]))
    assert torch.equal(start_states(few)[1], start_states(many)[1])
    assert not torch.equal(start_states(few)[0], start_states(many)[0])
    other_seed = tasks.make("Ant", 2, "cpu", seed=5, backend=backend)
    assert not torch.isclose(
        start_states(other_seed), start_states(tasks.make("Ant", 2, "cpu", seed=4, backend=backend))
    ).any()


def test_reset_noise_is_the_same_on_both_backends():
    """One kernel draws it for both: only float32 rounding of mjwarp's state differs."""
    mujoco_c, mjwarp = (tasks.make("Hopper", 3, "cpu", seed=2, backend=backend) for backend in BACKENDS)
    torch.testing.assert_close(start_states(mjwarp), start_states(mujoco_c), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "name, normal_qvel",
    [("Ant", True), ("InvertedPendulum", False), ("InvertedDoublePendulum", True), ("Swimmer", False)],
)
def test_reset_noise_distribution(name, normal_qvel):
    """qpos = qpos0 + U(±scale); qvel ~ N(0, scale²) or U(±scale), as Gymnasium's reset_model draws.
    Moments within 4 standard errors (the std within 10%) over 400 envs."""
    env = tasks.make(name, 400, "cpu", seed=0, backend="mujoco")
    scale = env.task.reset_noise_scale
    dqpos = env.physics.state["qpos"] - torch.from_numpy(env.physics.model.qpos0)
    qvel = env.physics.state["qvel"]
    assert 0.99 * scale < dqpos.abs().max() <= scale
    assert (qvel.abs().max() > scale) == normal_qvel
    for draws, std in [(dqpos, scale / 3**0.5), (qvel, scale if normal_qvel else scale / 3**0.5)]:
        assert abs(draws.std().item() - std) < 0.1 * std
        assert abs(draws.mean().item()) < 4 * std / draws.numel() ** 0.5
