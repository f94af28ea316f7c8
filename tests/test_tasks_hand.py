"""ShadowHandCube: its model against gymnasium-robotics' hand, the two backends against each other,
each reward term on hand-built states, and the goals' distribution over orientations."""

import hashlib
import importlib.util
import os

import mujoco
import numpy as np
import pytest
import torch
from conftest import refused_on_mjwarp
from scipy import stats
from task_checks import BACKENDS, about_z, cube_state, elliptic, follow

import tasks
from pql.checkpoint import load_checkpoint
from pql.logging import METRICS_CSV, read_metrics
from pql.runtime import train
from tasks.mujoco.allegro_hand import AllegroHand
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tasks.mujoco.physics_mujoco import MujocoPhysics
from tasks.mujoco.rotations import quat_conj, quat_mul, rotation_angle
from tasks.mujoco.shadow_hand_cube import HAND_JOINTS, ShadowHandCube
from tasks.mujoco.task import ASSETS, load_asset

CPU = torch.device("cpu")
UPSTREAM = os.path.join(importlib.util.find_spec("gymnasium_robotics").submodule_search_locations[0], "envs", "assets")
# pql's copy -> gymnasium-robotics' file, under the two assets directories
COPIED = {
    **{f"hand/{name}": f"hand/{name}" for name in ("robot.xml", "shared.xml", "shared_asset.xml")},
    "hand/LICENSE.md": "LICENSE.md",
    **{f"stls/hand/{name}": f"stls/hand/{name}" for name in os.listdir(os.path.join(ASSETS, "stls", "hand"))},
}


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_the_hand_files_are_gymnasium_robotics_own():
    """The hand's MJCF files and meshes are copies of gymnasium-robotics' (only the top file is pql's)."""
    assert len(COPIED) == 16
    assert [
        ours for ours, theirs in COPIED.items() if digest(f"{ASSETS}/{ours}") != digest(f"{UPSTREAM}/{theirs}")
    ] == []


def named(model, kind, count):
    return [mujoco.mj_id2name(model, kind, i) for i in range(count)]


def test_the_model_has_gymnasium_robotics_bodies_joints_tendons_and_actuators():
    """Compiled, pql's model and gymnasium-robotics' manipulate_block.xml hold the same hand: the
    same bodies, joints with their ranges, tendons with their ranges and joints, and actuators with
    their joints, gains and control and force ranges; pql's only leaves out the target and the floor."""
    ours = load_asset(ShadowHandCube.xml)
    theirs = mujoco.MjModel.from_xml_path(os.path.join(UPSTREAM, "hand", "manipulate_block.xml"))
    bodies = named(theirs, mujoco.mjtObj.mjOBJ_BODY, theirs.nbody)
    assert named(ours, mujoco.mjtObj.mjOBJ_BODY, ours.nbody) == [b for b in bodies if b not in ("floor0", "target")]
    hand = slice(0, HAND_JOINTS)
    assert (
        named(ours, mujoco.mjtObj.mjOBJ_JOINT, ours.njnt) == named(theirs, mujoco.mjtObj.mjOBJ_JOINT, theirs.njnt)[:-1]
    )
    np.testing.assert_array_equal(ours.jnt_range[hand], theirs.jnt_range[hand])
    np.testing.assert_array_equal(ours.dof_damping, theirs.dof_damping[: ours.nv])
    assert ours.ntendon == theirs.ntendon == 44
    assert named(ours, mujoco.mjtObj.mjOBJ_TENDON, 44) == named(theirs, mujoco.mjtObj.mjOBJ_TENDON, 44)
    for field in ("tendon_range", "tendon_limited", "wrap_objid", "wrap_prm"):
        np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field), err_msg=field)
    assert ours.nu == theirs.nu == 20
    for field in (
        "actuator_trnid",
        "actuator_ctrlrange",
        "actuator_forcerange",
        "actuator_gainprm",
        "actuator_biasprm",
    ):
        np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field), err_msg=field)
    cube = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "object") for m in (ours, theirs)]
    assert ours.body_mass[cube[0]] == theirs.body_mass[cube[1]]
    np.testing.assert_array_equal(ours.body_pos[cube[0]], theirs.body_pos[cube[1]])


def hand_env(num_envs=2, backend="mujoco", task_cls=ShadowHandCube, model=None, seed=0):
    physics = MujocoPhysics if backend == "mujoco" else MjwarpPhysics
    return MujocoEnv(task_cls, num_envs, CPU, seed, physics, model=model)


def test_the_task_is_registered_with_isaac_gyms_sizes():
    env = tasks.make("ShadowHandCube", 3, "cpu", backend="mujoco")
    assert (env.obs_dim, env.act_dim, env.max_episode_steps) == (211, 20, 600)
    assert env.action_low.tolist() == [-1.0] * 20 and env.action_high.tolist() == [1.0] * 20
    assert env.episode_metrics == ("consecutive_successes",)


def test_both_backends_follow_the_same_trajectory():
    """The same seed gives both backends the same starts and goals, and the same actions the same
    trajectory: to 1e-4 while the cube drops onto the palm (its first 10 steps, no contact with the
    hand yet). Through contacts, float32 rounding and the solver's stopping point grow apart
    chaotically, so from there each mjwarp world is put back onto MuJoCo C's state before each
    step: one step then agrees to 5e-2 of 1 + |value| in the observation (the cube's velocity in
    contact is the farthest; MuJoCo C warm-starts its solver, the world put back starts cold) and to
    2e-3 in the reward."""
    model = elliptic(load_asset(ShadowHandCube.xml))
    if refused_on_mjwarp(model, lambda: hand_env(3, "mjwarp", model=model, seed=5)):
        return
    envs = {b: hand_env(3, b, model=model, seed=5) for b in BACKENDS}
    obs = {b: env.reset() for b, env in envs.items()}
    torch.testing.assert_close(obs["mjwarp"], obs["mujoco"], rtol=0, atol=1e-5)
    gen = torch.Generator().manual_seed(0)
    actions = [0.3 * (torch.rand(3, 20, generator=gen) * 2 - 1) for _ in range(40)]
    follow(envs, actions, free_steps=10, early=(1e-4, 1e-4), late=(5e-2, 2e-3))


def test_an_env_continues_exactly_from_its_saved_state():
    env = hand_env(3)
    gen = torch.Generator().manual_seed(1)
    actions = [torch.rand(3, 20, generator=gen) * 2 - 1 for _ in range(30)]
    for a in actions[:20]:
        env.step(a)
    saved = env.state_dict()
    assert set(saved["task_state"]) == {"goal_quat", "goals_drawn", "successes", "targets", "last_action"}
    later = [env.step(a)[0] for a in actions[20:]]
    resumed = hand_env(3)
    resumed.load_state_dict(saved)
    assert all(torch.equal(resumed.step(a)[0], obs) for a, obs in zip(actions[20:], later))


# -- the reward, term by term --------------------------------------------------------------------------


def task_with(goal_quat, seed=0, task_cls=ShadowHandCube):
    task = task_cls(task_cls.load_model(), torch.float64, CPU)
    task.start(len(goal_quat), seed)
    task.goal_quat.copy_(torch.as_tensor(goal_quat, dtype=torch.float64))
    return task


@pytest.mark.parametrize("task_cls", [ShadowHandCube, AllegroHand])
def test_each_reward_term_on_hand_built_states(task_cls):
    """IsaacGymEnvs' terms, the same for both hands (tasks/mujoco/in_hand.py): -10 x distance to the
    goal position, 1 / (|rotation to the goal| + 0.1), -2e-4 x |action|^2, +250 within 0.1 rad of
    the goal (a new goal at once), the fall penalty (0) and the episode's end 0.24 m from the goal
    position (the cube's start, 4 cm lower)."""
    task = task_with([about_z(0.0)] * 4, task_cls=task_cls)
    target = task.target_pos.tolist()
    cube_start = task.qpos0[task.hand_joints : task.hand_joints + 3]
    torch.testing.assert_close(task.target_pos, cube_start - torch.tensor([0.0, 0.0, 0.04], dtype=torch.float64))
    positions = [
        target,  # at the goal: a success
        [target[0] + 0.03, target[1], target[2]],  # 3 cm off, turned 0.5 rad
        [target[0], target[1], target[2] - 0.25],  # fallen
        [target[0], target[1] + 0.04, target[2]],  # 4 cm off, turned 0.09 rad: a success
    ]
    quats = [about_z(0.0), about_z(0.5), about_z(2.0), about_z(0.09)]
    nu = task.ctrl_low.shape[0]
    action = torch.tensor([[0.0] * nu, [1.0] * nu, [0.5] * nu, [-1.0] * nu])
    before = task.goal_quat.clone()
    state = cube_state(task.hand_joints, positions, quats)
    reward, terminated, info = task.reward_and_termination(state, None, action)
    expected_rot = torch.tensor([0.0, 0.5, 2.0, 0.09], dtype=torch.float64)
    distance = torch.tensor([0.0, 0.03, 0.25, 0.04], dtype=torch.float64)
    torch.testing.assert_close(info["rot_dist"], expected_rot)
    torch.testing.assert_close(info["reward_dist"], -10.0 * distance)
    torch.testing.assert_close(info["reward_rot"], 1.0 / (expected_rot + 0.1))
    squares = torch.tensor([0.0, nu, nu / 4, nu], dtype=torch.float64)
    torch.testing.assert_close(info["reward_action"], -2e-4 * squares)
    assert info["reward_success"].tolist() == [250.0, 0.0, 0.0, 250.0]
    assert info["reward_fall"].tolist() == [0.0] * 4  # Isaac Gym's fallPenalty is 0
    torch.testing.assert_close(reward, sum(info[k] for k in info if k.startswith("reward_")))
    assert terminated.tolist() == [False, False, True, False]
    assert info["consecutive_successes"].tolist() == [1.0, 0.0, 0.0, 1.0]
    changed = (task.goal_quat != before).any(dim=1)
    assert changed.tolist() == [True, False, False, True] and task.goals_drawn.tolist() == [1, 0, 0, 1]


class PenalisedFall(ShadowHandCube):
    fall_penalty = -50.0


def test_a_reached_goal_gives_the_bonus_and_the_next_goal_in_the_same_step():
    """An env whose cube is put on its goal's orientation earns the bonus at the next step, counts a
    success, and its observation already shows a new goal; the episode goes on."""
    env = hand_env(2)
    goal = env.task.goal_quat.clone()
    qpos = env.physics.state["qpos"].clone()
    start = env.task.qpos0[HAND_JOINTS : HAND_JOINTS + 3]  # above the palm: the cube drops, turning little
    qpos[0, HAND_JOINTS:] = torch.cat([start, goal[0]])  # env 0's cube turned to its goal
    env.physics.reset(torch.tensor([True, False]), (qpos, torch.zeros_like(env.physics.state["qvel"])))
    obs, reward, terminated, truncated, info = env.step(torch.zeros(2, 20))
    assert info["reward_success"].tolist()[0] == 250.0 and info["consecutive_successes"][0] == 1.0
    assert reward[0] > 250.0 and not terminated.any() and not truncated.any()
    assert not torch.equal(env.task.goal_quat[0], goal[0]) and torch.equal(env.task.goal_quat[1], goal[1])
    torch.testing.assert_close(obs[0, 88:92], env.task.goal_quat[0].float())  # the goal's quaternion


def test_a_fall_ends_the_episode_with_the_penalty():
    env = hand_env(2, task_cls=PenalisedFall)
    env.reset()
    env.task.successes.fill_(3.0)
    qpos = env.physics.state["qpos"].clone()
    qpos[1, HAND_JOINTS + 2] -= 0.3  # env 1's cube below the palm, falling
    env.physics.reset(torch.tensor([False, True]), (qpos, torch.zeros_like(env.physics.state["qvel"])))
    obs, reward, terminated, truncated, info = env.step(torch.zeros(2, 20))
    assert terminated.tolist() == [False, True] and info["reward_fall"].tolist() == [0.0, -50.0]
    assert info["consecutive_successes"].tolist() == [3.0, 3.0]  # the count the ended episode reached
    assert env.task.successes.tolist() == [3.0, 0.0]  # the new episode starts from none
    assert not torch.equal(obs[1], info["final_obs"][1])


# -- the goals' distribution ---------------------------------------------------------------------------


def test_goals_cover_all_orientations_uniformly():
    """For rotations drawn uniformly (Haar measure) the angle θ has the CDF (θ - sin θ) / π and a
    rotated axis is uniform on the sphere, so each of its coordinates is uniform in [-1, 1]. The goals
    pass these tests; Isaac Gym's own draw, Rx(πu)·Ry(πv), covers a 2-D family and fails them."""
    n = 20000
    task = task_with(torch.zeros(n, 4))
    task._draw_goals(torch.ones(n, dtype=torch.bool))
    goals = task.goal_quat
    torch.testing.assert_close(goals.norm(dim=1), torch.ones(n, dtype=torch.float64))

    def p_values(quats):
        angles = rotation_angle(quats).numpy()
        p = [stats.kstest(angles, lambda t: (t - np.sin(t)) / np.pi).pvalue]
        for axis in torch.eye(3, dtype=torch.float64):
            rotated = quat_mul(
                quat_mul(quats, torch.cat([torch.zeros(1, dtype=torch.float64), axis])), quat_conj(quats)
            )
            p += [stats.kstest(rotated[:, 1:].numpy()[:, k], stats.uniform(-1, 2).cdf).pvalue for k in range(3)]
        return p

    assert min(p_values(goals)) > 1e-3
    rng = np.random.default_rng(0)
    a, b = (torch.from_numpy(rng.uniform(-np.pi, np.pi, n)) for _ in range(2))
    rx = torch.stack([torch.cos(a / 2), torch.sin(a / 2), 0 * a, 0 * a], dim=1)
    ry = torch.stack([torch.cos(b / 2), 0 * b, torch.sin(b / 2), 0 * b], dim=1)
    assert min(p_values(quat_mul(rx, ry))) < 1e-6


def test_goals_repeat_per_env_whichever_envs_draw_when():
    """Env i's k-th goal depends on (seed, i, k) alone."""
    together = task_with(torch.zeros(3, 4), seed=4)
    together._draw_goals(torch.ones(3, dtype=torch.bool))
    apart = task_with(torch.zeros(3, 4), seed=4)
    apart._draw_goals(torch.tensor([False, True, False]))
    apart._draw_goals(torch.tensor([True, False, True]))
    torch.testing.assert_close(apart.goal_quat, together.goal_quat, rtol=0, atol=0)
    other_seed = task_with(torch.zeros(3, 4), seed=5)
    other_seed._draw_goals(torch.ones(3, dtype=torch.bool))
    assert not torch.equal(other_seed.goal_quat, together.goal_quat)


def test_the_task_names_its_buffers_when_mujoco_warp_runs_out():
    class Cramped(ShadowHandCube):
        njmax = 8

    if refused_on_mjwarp(load_asset(ShadowHandCube.xml), lambda: hand_env(2, "mjwarp", task_cls=Cramped)):
        return
    env = hand_env(2, "mjwarp", task_cls=Cramped)
    with pytest.raises(tasks.TaskError, match=r"raise Cramped\.njmax"):
        for _ in range(3):
            env.step(torch.zeros(2, 20))


# -- through the runtime --------------------------------------------------------------------------------

HAND_RUN = [
    "task=ShadowHandCube",
    "task.num_envs=4",
    "task.eval_envs=2",
    "runtime.mode=sequential",
    "runtime.eval_every=1000000000",
    "runtime.log_every_s=1",
    "runtime.checkpoint_every=1000000000",
    "algo.batch_size=64",
    "algo.beta_av=1",
    "algo.warmup_steps=4",
    "algo.net.actor_hidden=[32,32]",
    "algo.net.critic_hidden=[32,32]",
]


@pytest.mark.slow
def test_a_training_run_logs_the_successes_and_resumes_its_goals(make_config, tmp_path):
    """PQL trains on the hand end to end: the training log and the final evaluation carry the
    consecutive successes, and the checkpoint's envs hold each env's goal, from which a resume
    goes on (not a learning test: no CPU budget of minutes turns the cube, docs/tasks.md)."""
    first = make_config(HAND_RUN + ["runtime.max_env_steps=2800"], run_dir=tmp_path / "first")
    final = train(first)
    assert final["eval/consecutive_successes"] >= 0 and final["eval/length"] > 0
    logged = read_metrics(str(tmp_path / "first" / METRICS_CSV))
    assert np.isfinite(logged["train/consecutive_successes"]).any()  # 700 steps: episodes have ended
    saved = load_checkpoint(tmp_path / "first" / "checkpoint.pt")
    goals = saved["roles"]["actor"]["envs"]["env"]["task_state"]["goal_quat"]
    assert goals.shape == (4, 4) and torch.allclose(goals.norm(dim=1), torch.ones(4, dtype=goals.dtype))
    second = make_config(
        HAND_RUN + ["runtime.max_env_steps=3200", f"checkpoint={tmp_path / 'first' / 'checkpoint.pt'}"],
        run_dir=tmp_path / "second",
    )
    train(second)
    resumed = load_checkpoint(tmp_path / "second" / "checkpoint.pt")
    assert resumed["counters"]["env_steps"] >= 3200 > saved["counters"]["env_steps"]
    drawn = resumed["roles"]["actor"]["envs"]["env"]["task_state"]["goals_drawn"]
    assert (drawn >= saved["roles"]["actor"]["envs"]["env"]["task_state"]["goals_drawn"]).all()
