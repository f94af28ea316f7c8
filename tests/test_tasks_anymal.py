"""Anymal: its model as IsaacGymEnvs drives it, each reward term and the observation on hand-built
states, the commands' and starts' draws, both backends against each other, an exact resume, the
env contract, and the two episode metrics through an evaluation."""

import math

import mujoco
import numpy as np
import pytest
import torch
from task_checks import BACKENDS, follow

import tasks
from pql.evaluate import evaluate
from pql.nets import ObsNormalizer
from tasks.contract import run_checks
from tasks.mujoco.anymal import JOINTS, Anymal
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tasks.mujoco.physics_mujoco import MujocoPhysics
from tasks.mujoco.task import load_asset

CPU = torch.device("cpu")
PHYSICS = {"mujoco": MujocoPhysics, "mjwarp": MjwarpPhysics}
DEFAULT = [0.03, 0.4, -0.8, -0.03, 0.4, -0.8, 0.03, -0.4, 0.8, -0.03, -0.4, 0.8]  # Anymal.yaml, in JOINTS' order


def anymal_env(num_envs=3, backend="mujoco", seed=0, task_cls=Anymal):
    return MujocoEnv(task_cls, num_envs, CPU, seed, PHYSICS[backend])


def test_the_task_is_registered_with_isaac_gyms_sizes():
    env = tasks.make("Anymal", 2, "cpu", backend="mujoco")
    assert (env.obs_dim, env.act_dim, env.max_episode_steps) == (48, 12, 2500)
    assert env.action_low.tolist() == [-1.0] * 12 and env.action_high.tolist() == [1.0] * 12
    assert env.episode_metrics == ("lin_vel_error", "yaw_rate_error")
    assert env.task.dt == pytest.approx(0.02)


def test_the_model_is_driven_as_isaac_gym_drives_it():
    """PD drives of stiffness 85 and damping 2 within ±80 N m, targets within default ± 0.5 rad, no
    joint damping or friction, the standing pose mirror-symmetric, and no part of the robot colliding
    with another (IsaacGymEnvs' actor filter): only with the floor."""
    model = load_asset(Anymal.xml)
    assert [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, i) for i in range(model.nu)] == list(JOINTS)
    np.testing.assert_array_equal(model.actuator_gainprm[:, 0], 85.0)
    np.testing.assert_array_equal(model.actuator_biasprm[:, :3], [[0.0, -85.0, -2.0]] * 12)
    np.testing.assert_array_equal(model.actuator_forcerange, [[-80.0, 80.0]] * 12)
    np.testing.assert_allclose(model.actuator_ctrlrange, np.array(DEFAULT)[:, None] + [-0.5, 0.5])
    assert (model.dof_damping == 0).all() and (model.dof_frictionloss == 0).all()
    floor = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, "floor")
    robot = [g for g in range(model.ngeom) if g != floor]
    collide = lambda a, b: (
        bool(model.geom_contype[a] & model.geom_conaffinity[b])
        or bool(model.geom_contype[b] & model.geom_conaffinity[a])
    )
    assert all(collide(g, floor) for g in robot) and not any(collide(a, b) for a in robot for b in robot)
    data = mujoco.MjData(model)
    data.qpos[7:] = DEFAULT
    mujoco.mj_kinematics(model, data)
    feet = {
        leg: data.geom_xpos[mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, f"{leg}_FOOT")]
        for leg in "LF RF LH RH".split()
    }
    np.testing.assert_allclose(feet["LF"] * [1, -1, 1], feet["RF"], atol=1e-6)
    np.testing.assert_allclose(feet["LF"] * [-1, 1, 1], feet["LH"], atol=1e-6)
    np.testing.assert_allclose(feet["LF"] * [-1, -1, 1], feet["RH"], atol=1e-6)
    assert model.body_subtreemass[1] == pytest.approx(44.97, abs=0.01)


# -- the reward and the observation on hand-built states ------------------------------------------


def yaw(angle):
    return [math.cos(angle / 2), 0.0, 0.0, math.sin(angle / 2)]


def standing_state(num_envs, quat=(1.0, 0.0, 0.0, 0.0), linear=(0.0, 0.0, 0.0), angular=(0.0, 0.0, 0.0)):
    """A physics state of the robot at its default pose, base at 0.5 m turned to quat, moving at the
    given world-axis linear and base-axis angular velocity; no contact forces."""
    qpos = torch.zeros(num_envs, 19, dtype=torch.float64)
    qpos[:, 2], qpos[:, 3:7], qpos[:, 7:] = 0.5, torch.as_tensor(quat, dtype=torch.float64), torch.tensor(DEFAULT)
    qvel = torch.zeros(num_envs, 18, dtype=torch.float64)
    qvel[:, :3], qvel[:, 3:6] = (
        torch.as_tensor(linear, dtype=torch.float64),
        torch.as_tensor(angular, dtype=torch.float64),
    )
    return {"qpos": qpos, "qvel": qvel, "cfrc_ext": torch.zeros(num_envs, 14, 6, dtype=torch.float64)}


def task_with(commands):
    task = Anymal(load_asset(Anymal.xml), torch.float64, CPU)
    task.start(len(commands), 0)
    task.command.copy_(torch.as_tensor(commands, dtype=torch.float64))
    return task


def test_each_reward_term_on_hand_built_states():
    """IsaacGymEnvs' terms, times dt = 0.02: exp(-|cmd_xy - v_xy|² / 0.25), 0.5 exp(-(cmd_yaw - ω_z)² /
    0.25), -2.5e-5 |τ|², the total clipped at 0; base velocities in the base's frame."""
    commands = [[1.0, 0.0, 0.0], [1.0, 0.5, 0.5], [0.0, 0.0, -1.0]]
    task = task_with(commands)
    # env 0: 1 m/s along world y, turned 90° left: 1 m/s forward in its own frame; env 1: off by
    # (0.5, 0.5) and 0.25 rad/s; env 2 at rest, commanded to turn
    state = standing_state(3)
    state["qpos"][0, 3:7] = torch.tensor(yaw(math.pi / 2))
    state["qvel"][0, :3] = torch.tensor([0.0, 1.0, 0.0])
    state["qvel"][1, :3] = torch.tensor([0.5, 0.0, 0.0])
    state["qvel"][1, 3:6] = torch.tensor([0.0, 0.0, 0.25])
    task.control(torch.zeros(3, 12), state)
    reward, terminated, info = task.reward_and_termination(state, None, torch.zeros(3, 12))
    lin = torch.tensor([0.0, 0.5, 0.0], dtype=torch.float64)  # squared errors
    ang = torch.tensor([0.0, 0.0625, 1.0], dtype=torch.float64)
    torch.testing.assert_close(info["reward_lin_vel"], 0.02 * torch.exp(-lin / 0.25))
    torch.testing.assert_close(info["reward_ang_vel"], 0.01 * torch.exp(-ang / 0.25))
    torque = 85.0 * (task.targets - state["qpos"][:, 7:]) - 2.0 * state["qvel"][:, 6:]
    torch.testing.assert_close(info["reward_torque"], -2.5e-5 * 0.02 * torque.square().sum(dim=1))
    torch.testing.assert_close(reward, sum(info[k] for k in info if k.startswith("reward_")))
    assert not terminated.any()
    torch.testing.assert_close(info["lin_vel_error"], lin.sqrt())
    torch.testing.assert_close(info["yaw_rate_error"], ang.sqrt())


def test_a_large_torque_is_clipped_to_zero_reward_and_a_base_or_thigh_contact_ends_the_episode():
    task = task_with([[2.0, 1.0, 1.0]] * 3)
    state = standing_state(3)
    task.control(torch.ones(3, 12), state)  # targets 0.5 rad off: 42.5 N m a joint
    state["cfrc_ext"][1, task.base, 3:] = torch.tensor([0.0, 0.0, 1.5])
    state["cfrc_ext"][2, task.thighs[3], 3:] = torch.tensor([0.6, 0.0, 0.6])
    reward, terminated, info = task.reward_and_termination(state, None, torch.ones(3, 12))
    assert (reward == 0).all() and (info["reward_clip"] > 0).all()
    assert terminated.tolist() == [False, True, False]  # 0.85 N on a thigh is under the 1 N limit
    state["cfrc_ext"][2, task.thighs[3], 3:] = torch.tensor([0.8, 0.0, 0.8])
    assert task.reward_and_termination(state, None, torch.ones(3, 12))[1].tolist() == [False, True, True]


def test_the_observation_on_a_hand_built_state():
    """IsaacGymEnvs' 48 numbers and scales: 2 v_base, 0.25 ω_base, gravity in the base's frame,
    the command scaled (2, 2, 0.25), q - default, 0.05 q̇, the last action, all clipped to ±5."""
    task = task_with([[1.0, -0.5, 0.8]])
    pitch = [math.cos(0.1), 0.0, math.sin(0.1), 0.0]  # 0.2 rad nose down
    state = standing_state(1, quat=pitch, linear=(1.0, 0.0, 3.0), angular=(0.0, 0.0, 0.4))
    state["qpos"][0, 7] += 0.1
    state["qvel"][0, 6:] = 200.0
    task.control(torch.full((1, 12), 0.5), state)
    obs = task.observe(state)[0]
    c, s = math.cos(0.2), math.sin(0.2)
    torch.testing.assert_close(obs[:3], torch.tensor([2 * (c - 3 * s), 0.0, 5.0], dtype=torch.float64))
    torch.testing.assert_close(obs[3:6], torch.tensor([0.0, 0.0, 0.1], dtype=torch.float64))
    torch.testing.assert_close(obs[6:9], torch.tensor([math.sin(0.2), 0.0, -math.cos(0.2)], dtype=torch.float64))
    torch.testing.assert_close(obs[9:12], torch.tensor([2.0, -1.0, 0.2], dtype=torch.float64))
    torch.testing.assert_close(obs[12:24], torch.tensor([0.1] + [0.0] * 11, dtype=torch.float64))
    assert obs[24:36].tolist() == [5.0] * 12  # 0.05 x 200 = 10, clipped
    assert obs[36:].tolist() == [0.5] * 12


# -- commands and starts -----------------------------------------------------------------------------


def test_commands_and_starts_have_isaac_gyms_ranges_and_repeat_per_env_whichever_envs_draw_when():
    n = 4000
    task = task_with(torch.zeros(n, 3))
    everyone = torch.ones(n, dtype=torch.bool)
    qpos, qvel = task.draw_starts(everyone)
    task.restart(everyone, None)
    command = task.command
    for k, (low, high) in enumerate([(-2.0, 2.0), (-1.0, 1.0), (-1.0, 1.0)]):
        column = command[:, k]
        assert low <= column.min() < low + 0.01 and high - 0.01 < column.max() <= high
        assert abs(column.mean()) < 0.05 * high and column.std() == pytest.approx(
            (high - low) / math.sqrt(12), rel=0.05
        )
    ratio = qpos[:, 7:] / torch.tensor(DEFAULT, dtype=torch.float64)
    assert ratio.min() >= 0.5 and ratio.max() <= 1.5 and ratio.mean() == pytest.approx(1.0, abs=0.01)
    assert qpos[:, :7].tolist() == [[0.0, 0.0, 0.62, 1.0, 0.0, 0.0, 0.0]] * n
    assert (qvel[:, :6] == 0).all() and qvel[:, 6:].abs().max() <= 0.1
    together = task_with(torch.zeros(3, 3))
    together.restart(torch.ones(3, dtype=torch.bool), None)
    apart = task_with(torch.zeros(3, 3))
    apart.restart(torch.tensor([False, True, False]), None)
    apart.restart(torch.tensor([True, False, True]), None)
    torch.testing.assert_close(apart.command, together.command, rtol=0, atol=0)


# -- both backends, a resume, the contract ----------------------------------------------------------


def test_both_backends_start_alike_and_follow_the_same_trajectory():
    """The same seed gives both backends the same starts and commands; the same actions give the same
    steps, to float32 rounding while the robot drops onto its feet (its first 20 steps) and, each
    mjwarp world put back onto MuJoCo C's state before each step, to 1e-2 of 1 + |value| through the
    feet's contacts (the solvers stop at different points), the reward to 1e-3."""
    envs = {b: anymal_env(3, b, seed=3) for b in BACKENDS}
    obs = {b: env.reset() for b, env in envs.items()}
    torch.testing.assert_close(obs["mjwarp"], obs["mujoco"], rtol=0, atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.rand(3, 12, generator=gen) * 2 - 1 for _ in range(40)]
    follow(envs, actions, free_steps=20, early=(1e-3, 1e-3), late=(1e-2, 1e-3))


class ShortAnymal(Anymal):
    """Anymal whose episodes end within a test, by the step limit."""

    max_episode_steps = 30


def test_the_env_keeps_the_contract():
    """The contract's checks, its state round trip included: a saved env, loaded, goes on to the bit
    through episode ends (30-step episodes), its commands and metrics' sums with it."""
    report = run_checks(anymal_env(4, task_cls=ShortAnymal), make_again=lambda: anymal_env(4, task_cls=ShortAnymal))
    assert report.findings == () and "state_round_trip" in report.passed


def test_an_evaluation_reports_both_metrics_as_the_episodes_means():
    """Standing still (zero actions) follows no command: an episode's mean linear error is about
    |cmd_xy| (the drop onto the feet moves the base a little), its yaw-rate error about |cmd_yaw|."""
    env = anymal_env(4, task_cls=ShortAnymal)
    twin = anymal_env(4, task_cls=ShortAnymal)
    twin.reset()  # the commands of the episodes the evaluation scores: each env's second
    command = twin.task.command
    still = torch.nn.Linear(48, 12)
    torch.nn.init.zeros_(still.weight)
    torch.nn.init.zeros_(still.bias)
    scores = evaluate(env, still, ObsNormalizer(48))
    assert set(scores) == {"eval/return", "eval/length", "eval/lin_vel_error", "eval/yaw_rate_error"}
    assert scores["eval/length"] == 30
    assert scores["eval/lin_vel_error"] == pytest.approx(command[:, :2].norm(dim=1).mean().item(), abs=0.05)
    assert scores["eval/yaw_rate_error"] == pytest.approx(command[:, 2].abs().mean().item(), abs=0.05)


# -- the mirror symmetry ---------------------------------------------------------------------------


def mirrored(x, index, sign):
    return x[..., list(index)] * torch.tensor(sign, dtype=x.dtype)


def test_the_mirror_is_the_robots_own_through_a_rollout():
    """The mirror's maps are involutions, and the mirror image of a state, stepped under the mirror
    images of the actions, follows the mirror image of the original's trajectory: to 1e-3 over the
    first 10 steps, while the feet land (Menagerie's model is mirror-symmetric but for its hips'
    centres of mass, 0.1 mm apart; later, feet touching down a step apart part the two)."""
    envs = [anymal_env(2, seed=5) for _ in range(2)]
    m = envs[0].mirror
    obs = torch.randn(3, 48, dtype=torch.float64)
    torch.testing.assert_close(mirrored(mirrored(obs, m.obs_index, m.obs_sign), m.obs_index, m.obs_sign), obs)
    action = torch.randn(3, 12, dtype=torch.float64)
    torch.testing.assert_close(
        mirrored(mirrored(action, m.action_index, m.action_sign), m.action_index, m.action_sign), action
    )
    qpos, qvel = envs[0].physics.state["qpos"].clone(), envs[0].physics.state["qvel"].clone()
    qvel[:, :6] = torch.tensor([0.3, -0.2, 0.1, 0.5, -0.4, 0.3], dtype=torch.float64)
    image_qpos, image_qvel = qpos.clone(), qvel.clone()
    image_qpos[:, 1] *= -1
    image_qpos[:, 3:7] *= torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=torch.float64)  # the reflected rotation
    image_qvel[:, :6] *= torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    image_qpos[:, 7:] = mirrored(qpos[:, 7:], m.action_index, m.action_sign)
    image_qvel[:, 6:] = mirrored(qvel[:, 6:], m.action_index, m.action_sign)
    envs[0].reset_to(qpos, qvel)
    envs[1].reset_to(image_qpos, image_qvel)
    envs[1].task.command.copy_(mirrored(envs[0].task.command, (0, 1, 2), (1.0, -1.0, -1.0)))
    gen = torch.Generator().manual_seed(2)
    for _ in range(10):
        action = torch.rand(2, 12, generator=gen) * 2 - 1
        first, reward, *_ = envs[0].step(action)
        image, image_reward, *_ = envs[1].step(mirrored(action, m.action_index, m.action_sign))
        torch.testing.assert_close(image, mirrored(first, m.obs_index, m.obs_sign), atol=1e-3, rtol=0)
        torch.testing.assert_close(image_reward, reward, atol=1e-4, rtol=0)
