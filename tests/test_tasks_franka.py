"""FrankaCubeStack: the scene against IsaacGymEnvs' numbers, each reward term on hand-built states,
the operational-space controller against MuJoCo's own Jacobian and mass matrix, a grasp that
holds, the starts' distribution, both backends against each other, saved states and the env
contract."""

import math

import mujoco
import numpy as np
import pytest
import torch
import warp as wp
from conftest import refused_on_mjwarp
from scipy import stats
from task_checks import elliptic, relative_gap, step_both

from tasks.contract import check_contract
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.franka_cube_stack import ARM_JOINTS, FrankaCubeStack
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tasks.mujoco.physics_mujoco import MujocoPhysics
from tasks.mujoco.rotations import quat_mul
from tasks.mujoco.task import Starts, init_warp, load_asset

CPU = torch.device("cpu")
PHYSICS = {"mujoco": MujocoPhysics, "mjwarp": MjwarpPhysics}
TABLE_TOP = 1.025
DEFAULT_ARM = [0.0, 0.1963, 0.0, -2.6180, 0.0, 2.9416, 0.7854]
MIN_CUBE_DISTANCE = 2 * (0.05 + 0.07) * math.sqrt(2) / 2


def stack_env(num_envs=2, backend="mujoco", seed=0, model=None):
    return MujocoEnv(FrankaCubeStack, num_envs, CPU, seed, PHYSICS[backend], model=model)


def named(model, kind, name):
    return mujoco.mj_name2id(model, kind, name)


def test_the_scene_has_isaac_gyms_sizes_drives_and_frames():
    """Table, stand, cubes, robot base, effort limits and finger drives as IsaacGymEnvs sets them;
    the robot weightless; the grip site and fingertips at the URDF's offsets."""
    env = stack_env(1)
    model, data = env.physics.model, env.physics._datas[0]
    assert (env.obs_dim, env.act_dim, env.max_episode_steps) == (19, 7, 300)
    assert env.action_low.tolist() == [-1.0] * 7 and env.action_high.tolist() == [1.0] * 7
    assert model.opt.timestep * FrankaCubeStack.frame_skip == pytest.approx(1 / 60)
    geom = lambda name: named(model, mujoco.mjtObj.mjOBJ_GEOM, name)
    np.testing.assert_allclose(model.geom_size[geom("table")], [0.6, 0.6, 0.025])
    np.testing.assert_allclose(model.geom_pos[geom("table")], [0, 0, 1.0])
    np.testing.assert_allclose(model.geom_size[geom("stand")], [0.1, 0.1, 0.05])
    np.testing.assert_allclose(model.geom_pos[geom("stand")], [-0.5, 0, 1.075])
    np.testing.assert_allclose(data.xpos[named(model, mujoco.mjtObj.mjOBJ_BODY, "panda/link0")], [-0.45, 0, 1.125])
    for cube, size, mass in (("cubeA", 0.05, 0.125), ("cubeB", 0.07, 0.343)):
        body = named(model, mujoco.mjtObj.mjOBJ_BODY, cube)
        assert model.geom_size[model.body_geomadr[body]].tolist() == pytest.approx([size / 2] * 3)
        assert model.body_mass[body] == pytest.approx(mass)
    np.testing.assert_array_equal(model.actuator_ctrlrange[:7, 1], [87, 87, 87, 87, 12, 12, 12])
    assert (model.actuator_gainprm[7:, 0] == 5000).all() and (model.actuator_biasprm[7:, 2] == -100).all()
    np.testing.assert_array_equal(model.actuator_forcerange[7:], [[-200, 200]] * 2)
    robot = [b for b in range(model.nbody) if model.body(b).name.startswith("panda/")]
    assert model.body_gravcomp[robot[1:]].tolist() == [1.0] * (len(robot) - 1)  # all but the fixed base
    hand = named(model, mujoco.mjtObj.mjOBJ_BODY, "panda/hand")
    local = lambda site, body: data.xmat[body].reshape(3, 3).T @ (data.site_xpos[site] - data.xpos[body])
    np.testing.assert_allclose(local(env.task.sites[0], hand), [0, 0, 0.1025], atol=1e-12)
    for tip, finger, y in ((1, "panda/left_finger", 1), (2, "panda/right_finger", -1)):
        body = named(model, mujoco.mjtObj.mjOBJ_BODY, finger)
        # In the hand's axes (the URDF's finger frames are the hand's), each tip 1.5 mm outwards.
        offset = data.xmat[hand].reshape(3, 3).T @ (data.site_xpos[env.task.sites[tip]] - data.xpos[body])
        np.testing.assert_allclose(offset, [0, y * 0.0015, 0.0441], atol=1e-12)


# -- the reward, term by term --------------------------------------------------------------------------


def hand_built(cube_a, cube_b, grip, tips):
    """A physics state [n, ...] with the cubes' centres, the grip site and the fingertips given."""
    model = load_asset(FrankaCubeStack.xml)
    n = len(cube_a)
    qpos = torch.from_numpy(model.qpos0).repeat(n, 1)
    qpos[:, 9:12], qpos[:, 16:19] = torch.tensor(cube_a, dtype=torch.float64), torch.tensor(cube_b, dtype=torch.float64)
    sites = torch.zeros(n, model.nsite, 3, dtype=torch.float64)
    order = FrankaCubeStack(model, torch.float64, CPU).sites  # grip site, left and right fingertips
    sites[:, order] = torch.tensor([grip, *tips], dtype=torch.float64).transpose(0, 1)
    return {"qpos": qpos, "qvel": torch.zeros(n, model.nv, dtype=torch.float64), "site_xpos": sites}


def test_each_reward_term_on_hand_built_states():
    """IsaacGymEnvs' compute_franka_reward: 16 when stacked (and the episode ends), else
    0.1 · max(dist, align) + 1.5 · lifted + 2 · align."""
    b = [0.1, 0.1, TABLE_TOP + 0.035]
    cube_a = [
        [0.105, 0.1, TABLE_TOP + 0.095],  # on cube B, 5 mm off centre, the gripper away: stacked
        [0.1, 0.1, TABLE_TOP + 0.105],  # 1 cm above its place on B, still in the gripper
        [0.2, -0.1, TABLE_TOP + 0.025],  # on the table
        [0.3, 0.0, TABLE_TOP + 0.089],  # its bottom 3.9 cm above the table: not lifted
        [0.3, 0.0, TABLE_TOP + 0.091],  # 4.1 cm: lifted
        [0.1, 0.1, TABLE_TOP + 0.125],  # above B, 3 cm too high to count as stacked
    ]
    grip = [
        [0.1, 0.1, TABLE_TOP + 0.3],
        cube_a[1],
        [0.2, -0.1, TABLE_TOP + 0.125],
        cube_a[3],
        cube_a[4],
        [0.1, 0.1, TABLE_TOP + 0.3],
    ]
    tips = [[[g[0], g[1] + side, g[2]] for g in grip] for side in (0.02, -0.03)]
    state = hand_built(cube_a, [b] * 6, grip, tips)
    task = FrankaCubeStack(load_asset(FrankaCubeStack.xml), torch.float64, CPU)
    reward, terminated, info = task.reward_and_termination(state, None, torch.zeros(6, 7))

    def expected(a, g, lf, rf):
        dist = 1 - math.tanh(10 * (math.dist(a, g) + math.dist(a, lf) + math.dist(a, rf)) / 3)
        lifted = (a[2] - TABLE_TOP) - 0.05 > 0.04
        align = (1 - math.tanh(10 * math.dist([b[0], b[1], b[2] + 0.06], a))) * lifted
        stacked = math.dist(a[:2], b[:2]) < 0.02 and abs(a[2] - TABLE_TOP - 0.095) < 0.02 and math.dist(a, g) > 0.04
        return 16.0 if stacked else 0.1 * max(dist, align) + 1.5 * lifted + 2 * align

    want = [expected(a, g, lf, rf) for a, g, lf, rf in zip(cube_a, grip, *tips)]
    torch.testing.assert_close(reward, torch.tensor(want, dtype=torch.float64))
    assert terminated.tolist() == [True, False, False, False, False, False]
    assert info["stacked"].tolist() == [1.0, 0, 0, 0, 0, 0]
    assert info["reward_lift"].tolist() == [0.0, 1.5, 0.0, 0.0, 1.5, 1.5]
    assert info["reward_stack"].tolist() == [16.0, 0, 0, 0, 0, 0]
    assert info["reward_align"][2:4].tolist() == [0.0, 0.0] and info["reward_align"][1] > 1.7
    torch.testing.assert_close(reward, sum(v for k, v in info.items() if k.startswith("reward_")))


# -- the controller ------------------------------------------------------------------------------------


def isaac_osc(model, qpos, qvel, action):
    """IsaacGymEnvs' _compute_osc_torques, literally, on MuJoCo's Jacobian (mj_jacSite) and mass
    matrix (mj_fullM) and the grip site's velocity (mj_objectVelocity) at one state; float64 numpy."""
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    site = named(model, mujoco.mjtObj.mjOBJ_SITE, "panda/grip_site")
    jacp, jacr = np.zeros((3, model.nv)), np.zeros((3, model.nv))
    mujoco.mj_jacSite(model, data, jacp, jacr, site)
    j_eef = np.vstack([jacp, jacr])[:, :7]
    full = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, full)
    mm = full[:7, :7]
    velocity = np.zeros(6)  # rotation first
    mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, site, velocity, 0)
    eef_vel = np.concatenate([velocity[3:], velocity[:3]])
    kp, kp_null = 150.0, 10.0
    kd, kd_null = 2 * np.sqrt(kp), 2 * np.sqrt(kp_null)
    dpose = np.clip(action[:6], -1, 1) * np.array([0.1, 0.1, 0.1, 0.5, 0.5, 0.5])
    q, qd = qpos[:7], qvel[:7]
    mm_inv = np.linalg.inv(mm)
    m_eef = np.linalg.inv(j_eef @ mm_inv @ j_eef.T)
    u = j_eef.T @ m_eef @ (kp * dpose - kd * eef_vel)
    j_eef_inv = m_eef @ j_eef @ mm_inv
    u_null = kd_null * -qd + kp_null * ((np.array(DEFAULT_ARM) - q + np.pi) % (2 * np.pi) - np.pi)
    u += (np.eye(7) - j_eef.T @ j_eef_inv) @ (mm @ u_null)
    return np.clip(u, -model.actuator_ctrlrange[:7, 1], model.actuator_ctrlrange[:7, 1])


def test_the_controller_is_isaac_gyms_on_mujocos_jacobian_and_mass_matrix():
    """After steps that leave the arm moving, control(a) gives IsaacGymEnvs' operational-space
    torques (some at their effort limit) for a[:6], and for a[6] both fingers' open (0.04) or
    closed (0) targets."""
    env = stack_env(4, seed=3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        env.step(torch.rand(4, 7, generator=gen) * 2 - 1)
    action = torch.tensor(
        [[0.3, -0.2, 0.5, 0.1, 0.0, -0.4, 0.0], [1, 1, 1, 1, 1, 1, -0.1], [2, -3, 0, 0, 0.2, 0, 1], [0] * 7]
    )
    ctrl = env.task.control(action, env.physics.state)
    state = env.physics.state
    reference = [
        isaac_osc(env.physics.model, state["qpos"][i].numpy(), state["qvel"][i].numpy(), action[i].double().numpy())
        for i in range(4)
    ]
    torch.testing.assert_close(ctrl[:, :7], torch.from_numpy(np.stack(reference)), rtol=1e-9, atol=1e-9)
    assert (ctrl[:, :7].abs() == torch.tensor([87.0] * 4 + [12.0] * 3, dtype=torch.float64)).any()
    assert ctrl[:, 7:].tolist() == [[0.04, 0.04], [0.0, 0.0], [0.04, 0.04], [0.04, 0.04]]


# -- the grasp ---------------------------------------------------------------------------------------------


def reach(obs, target, close):
    """A scripted action [N, 7]: the grip site towards target [N, 3] (at most 0.1 m a step), the hand
    pointing down with its fingers across cube A's faces, the gripper closed or open."""
    a_quat, grip, hand = obs[:, :4], obs[:, 10:13], obs[:, 13:17]
    yaw = 2 * torch.atan2(a_quat[:, 3], a_quat[:, 0])
    wanted = torch.stack([0 * yaw, torch.cos(yaw / 2), torch.sin(yaw / 2), 0 * yaw], dim=1)  # Rz(yaw)·Rx(π)
    error = quat_mul(wanted, hand * torch.tensor([1.0, -1.0, -1.0, -1.0]))
    error = torch.where(error[:, :1] < 0, -error, error)
    norm = error[:, 1:].norm(dim=1, keepdim=True).clamp(min=1e-9)
    rotation = error[:, 1:] / norm * 2 * torch.atan2(norm, error[:, :1])
    gripper = torch.full_like(yaw[:, None], -1.0 if close else 1.0)
    return torch.cat([((target - grip) / 0.1).clamp(-1, 1), (rotation / 0.5).clamp(-1, 1), gripper], dim=1)


UP = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
# The scripted grasp: (steps, the grip site's target relative to cube A's start, gripper closed):
# above the cube, down to it, close, lift 20 cm, then swing 30 cm from side to side.
GRASP = [(45, 0.12 * UP, False), (35, 0 * UP, False), (15, 0 * UP, True), (40, 0.2 * UP, True)]
GRASP += [(10, torch.tensor([side * 0.15, 0.1, 0.2], dtype=torch.float64), True) for side in (1, -1, 1, -1)]


def grasp_start(env):
    """qpos [2, nq]: the arm at its default pose, cube A before it turned 0 or 0.6 rad, cube B aside."""
    qpos = env.physics.state["qpos"].double().clone()
    qpos[:, :9] = torch.tensor([*DEFAULT_ARM, 0.035, 0.035], dtype=torch.float64)
    for i, yaw in enumerate((0.0, 0.6)):
        cube_a = [0.05, -0.05, TABLE_TOP + 0.025, math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
        qpos[i, 9:16] = torch.tensor(cube_a, dtype=torch.float64)
        qpos[i, 16:23] = torch.tensor([-0.15, 0.2, TABLE_TOP + 0.035, 1, 0, 0, 0], dtype=torch.float64)
    return qpos


def test_a_grasped_cube_stays_in_the_gripper():
    """The gripper comes down on cube A, closes, lifts it 20 cm and swings it 30 cm from side to side:
    the cube stays between the fingers, whose pads sink less than 1 mm into it under their 123 N
    squeeze once the closing has settled."""
    env = stack_env(2)
    obs = env.reset_to(grasp_start(env), torch.zeros_like(env.physics.state["qvel"])).double()
    start = obs[:, 4:7].clone()
    for steps, offset, close in GRASP:
        for _ in range(steps):
            obs = env.step(reach(obs, start + offset, close).float())[0].double()
        if close and offset[2] > 0:
            cube, grip = obs[:, 4:7], obs[:, 10:13]
            assert ((cube - grip).norm(dim=1) < 0.01).all(), (cube, grip)
            assert (cube[:, 2] > TABLE_TOP + 0.15).all()
            assert ((obs[:, 17:19] > 0.024) & (obs[:, 17:19] < 0.0255)).all(), obs[:, 17:19]


def test_a_scripted_stack_ends_the_episode_with_the_bonus():
    """The gripper picks cube A up, carries it over cube B, sets it down there, lets go and rises:
    the shaped reward climbs to 3.6 (0.1 + 1.5 + 2, cube A held in its place on B), and once the
    gripper is 4 cm away the step pays 16 and ends the episode, the env restarting at a new start."""
    env = stack_env(2)
    obs = env.reset_to(grasp_start(env), torch.zeros_like(env.physics.state["qvel"])).double()
    cube_a, cube_b = obs[:, 4:7].clone(), obs[:, 4:7] + obs[:, 7:10]
    phases = [(45, cube_a + 0.12 * UP, False), (35, cube_a, False), (15, cube_a, True), (30, cube_a + 0.15 * UP, True)]
    phases += [(40, cube_b + 0.15 * UP, True), (30, cube_b + 0.065 * UP, True), (10, cube_b + 0.065 * UP, False)]
    phases += [(30, cube_b + 0.2 * UP, False)]
    rewards = []
    for target, close in [(target, close) for steps, target, close in phases for _ in range(steps)]:
        obs, reward, terminated, truncated, info = env.step(reach(obs.double(), target, close).float())
        rewards.append(reward)
        if terminated.any():
            break
    assert terminated.all() and reward.tolist() == [16.0, 16.0] and info["stacked"].tolist() == [1.0, 1.0]
    assert not truncated.any() and (obs != info["final_obs"]).any(dim=1).all()
    assert len(rewards) > 205 and (torch.stack(rewards[:-1]).max(dim=0).values > 3.5).all()  # after letting go


# -- the starts ---------------------------------------------------------------------------------------------


def draw_starts(task_cls, num_envs, seed):
    """qpos [N, nq] float64: every env's first random start, drawn by the task's start kernel from
    MuJoCo's reset state (qpos0, zero velocity) as the backends do, and qvel [N, nv]."""
    init_warp()
    model = load_asset(task_cls.xml)
    task = task_cls(model, torch.float64, CPU)
    qpos = torch.from_numpy(model.qpos0).repeat(num_envs, 1)
    qvel = torch.zeros(num_envs, model.nv, dtype=torch.float64)
    restart = torch.ones(num_envs, dtype=torch.bool)
    episodes = torch.zeros(num_envs, dtype=torch.int32)
    task.add_reset_noise(seed, Starts(*(wp.from_torch(t) for t in (restart, episodes, qpos, qvel))))
    return qpos, qvel


def isaac_cube_a(cube_b, rng):
    """Cube A's xy by IsaacGymEnvs' rejection from cube B's [n, 2] (numpy)."""
    a = rng.uniform(-0.25, 0.25, cube_b.shape)
    while (far := np.linalg.norm(a - cube_b, axis=1) < MIN_CUBE_DISTANCE).any():
        a[far] = rng.uniform(-0.25, 0.25, (far.sum(), 2))
    return a


def start_problems(qpos, qvel):
    """Why starts (qpos [n, 23], qvel [n, 21]) do not follow IsaacGymEnvs' reset; empty if they do."""
    n, problems = qpos.shape[0], []
    critical = 1.95 / n**0.5  # the Kolmogorov-Smirnov distance of a 0.1% test

    def uniform(what, x, low, high):
        if x.min() < low or x.max() > high:
            problems.append(f"{what} outside [{low}, {high}]")
        if stats.kstest(x, stats.uniform(low, high - low).cdf).statistic > critical:
            problems.append(f"{what} is not U({low}, {high})")

    for j in range(ARM_JOINTS):
        uniform(f"arm joint {j}", qpos[:, j].numpy(), DEFAULT_ARM[j] - 0.25, DEFAULT_ARM[j] + 0.25)
    if (qpos[:, 7:9] != torch.tensor(0.035, dtype=torch.float32).item()).any() or (qvel != 0).any():
        problems.append("the fingers do not start at 0.035, or something moves")
    turns = []
    for name, adr, half in (("cube A", 9, 0.025), ("cube B", 16, 0.035)):
        if ((qpos[:, adr + 2] - (TABLE_TOP + half)).abs() > 1e-6).any():
            problems.append(f"{name} does not rest on the table")
        quat = qpos[:, adr + 3 : adr + 7]
        if (quat[:, 1:3] != 0).any() or not torch.allclose(quat.norm(dim=1), torch.ones(n, dtype=torch.float64)):
            problems.append(f"{name} is not turned about z alone")
        turns.append((2 * torch.atan2(quat[:, 3], quat[:, 0])).numpy())
        uniform(f"{name}'s turn", turns[-1], -0.785, 0.785)
    cube_a, cube_b = qpos[:, 9:11].numpy(), qpos[:, 16:18].numpy()
    # Independent draws: only the rejection couples cube A's x to B's x and its y to B's y (-0.22).
    drawn = np.column_stack([qpos[:, :ARM_JOINTS].numpy(), cube_a, cube_b, *turns])
    correlation = np.corrcoef(drawn.T) - np.eye(drawn.shape[1])
    correlation[[7, 8, 9, 10], [9, 10, 7, 8]] = 0.0
    if np.abs(correlation).max() > 4 / n**0.5:
        problems.append(f"correlated draws: {np.unravel_index(np.abs(correlation).argmax(), correlation.shape)}")
    for k in range(2):
        uniform(f"cube B's {'xy'[k]}", cube_b[:, k], -0.25, 0.25)
    distance = np.linalg.norm(cube_a - cube_b, axis=1)
    if distance.min() < MIN_CUBE_DISTANCE or np.abs(cube_a).max() > 0.25:
        problems.append(f"cube A {distance.min():.4f} from cube B, or off the square")
    reference = np.linalg.norm(isaac_cube_a(cube_b, np.random.default_rng(0)) - cube_b, axis=1)
    if stats.ks_2samp(distance, reference).statistic > critical * 2**0.5:
        problems.append("cube A's distance from cube B is not distributed as Isaac's rejection draws it")
    return problems


class Crowding(FrankaCubeStack):
    """A mistake: cube A drawn anywhere, even on cube B."""

    cube_spacing = 0.0


@pytest.mark.parametrize("task_cls, fails", [(FrankaCubeStack, False), (Crowding, True)])
def test_start_distribution(task_cls, fails):
    problems = start_problems(*draw_starts(task_cls, 4000, seed=0))
    assert bool(problems) == fails, problems


def test_starts_are_keyed_by_seed_and_env():
    few, many, other = (stack_env(n, seed=s).physics.state["qpos"] for n, s in ((3, 4), (6, 4), (3, 5)))
    assert torch.equal(few, many[:3]) and (other[:, 9:11] != few[:, 9:11]).all()


# -- both backends, saved states, the contract ---------------------------------------------------------------


def test_both_backends_follow_the_same_trajectory():
    """The same seed gives both backends the same starts, and the same controls there. From a set
    start, the same scripted actions (those MuJoCo C's observations ask for) bring the gripper down
    onto cube A, close it and lift the cube: to 3e-4 of 1 + |value| until the fingers close. From
    there each mjwarp world is put back onto MuJoCo C's state before each step (float32 rounding and
    the solver's stopping point grow apart through the squeezing contacts), and one step agrees to 1e-4."""
    model = elliptic(load_asset(FrankaCubeStack.xml))
    if refused_on_mjwarp(model, lambda: stack_env(2, "mjwarp", seed=5, model=model)):
        return
    envs = {b: stack_env(2, b, seed=5, model=model) for b in PHYSICS}
    obs = {b: env.reset() for b, env in envs.items()}
    torch.testing.assert_close(obs["mjwarp"], obs["mujoco"], rtol=0, atol=1e-5)
    action = torch.tensor([[0.5, -0.3, 0.2, 0.1, -0.4, 0.3, 1.0], [-1.0, 1.0, -0.5, 0.0, 0.2, -0.2, -1.0]])
    controls = {b: env.task.control(action, env.physics.state).double() for b, env in envs.items()}
    torch.testing.assert_close(controls["mjwarp"], controls["mujoco"], rtol=1e-4, atol=1e-3)
    qpos = grasp_start(envs["mujoco"])
    obs = {b: env.reset_to(qpos, torch.zeros(2, 21)) for b, env in envs.items()}
    start, step = obs["mujoco"][:, 4:7].double(), 0
    for steps, offset, close in GRASP[:4]:
        for _ in range(steps):
            action = reach(obs["mujoco"].double(), start + offset, close).float()
            out = step_both(envs, action, put_back_first=close)
            obs = {b: o[0] for b, o in out.items()}
            tolerance = 1e-4 if close else 3e-4
            assert relative_gap(out, 0) < tolerance and relative_gap(out, 1) < tolerance, step
            assert not (out["mujoco"][2] | out["mjwarp"][2]).any()
            step += 1
    assert (obs["mjwarp"][:, 6] > TABLE_TOP + 0.1).all()  # lifted


@pytest.mark.parametrize("backend", list(PHYSICS))
def test_an_env_continues_exactly_from_its_saved_state(backend):
    env = stack_env(3, backend)
    gen = torch.Generator().manual_seed(1)
    actions = [torch.rand(3, 7, generator=gen) * 2 - 1 for _ in range(30)]
    for a in actions[:20]:
        env.step(a)
    saved = env.state_dict()
    assert "task_state" not in saved  # the controller's torques are a function of the state and the action
    later = [env.step(a) for a in actions[20:]]
    resumed = stack_env(3, backend)
    resumed.load_state_dict(saved)
    for a, (obs, reward, *_) in zip(actions[20:], later):
        again = resumed.step(a)
        assert torch.equal(again[0], obs) and torch.equal(again[1], reward)


def test_the_env_keeps_the_contract():
    assert check_contract(stack_env(2), make_again=lambda: stack_env(2)) == []
