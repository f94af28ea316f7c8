"""AllegroHand: its model against MuJoCo Menagerie's right hand and IsaacGymEnvs' drive and cube, each
reward term and observation type on hand-built states, the two backends against each other, a saved
env's continuation, the env contract, and a cube dropped onto the palm."""

import mujoco
import numpy as np
import pytest
import torch
from conftest import refused_on_mjwarp
from task_checks import BACKENDS, about_z, cube_state, follow

from tasks import TaskError
from tasks.contract import check_contract
from tasks.mujoco.allegro_hand import AllegroHand
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tasks.mujoco.physics_mujoco import MujocoPhysics

CPU = torch.device("cpu")
FINGERS = ("ff", "mf", "rf")

# Menagerie's wonik_allegro/right_hand.xml: each body's (parent, pos, quat), each joint's class, and
# each class's (axis, range), which the actuator's ctrlrange repeats.
MENAGERIE_BODIES = {
    "palm": ("world", (0, 0, 0), (0, 1, 0, 1)),
    "ff_base": ("palm", (0, 0.0435, -0.001542), (0.999048, -0.0436194, 0, 0)),
    "mf_base": ("palm", (0, 0, 0.0007), (1, 0, 0, 0)),
    "rf_base": ("palm", (0, -0.0435, -0.001542), (0.999048, 0.0436194, 0, 0)),
    "th_base": ("palm", (-0.0182, 0.019333, -0.045987), (0.477714, -0.521334, -0.521334, -0.477714)),
    "th_proximal": ("th_base", (-0.027, 0.005, 0.0399), (1, 0, 0, 0)),
    "th_medial": ("th_proximal", (0, 0, 0.0177), (1, 0, 0, 0)),
    "th_distal": ("th_medial", (0, 0, 0.0514), (1, 0, 0, 0)),
    "th_tip": ("th_distal", (0, 0, 0), (1, 0, 0, 0)),
}
for f in FINGERS:
    for link, parent, z in (("proximal", "base", 0.0164), ("medial", "proximal", 0.054), ("distal", "medial", 0.0384)):
        MENAGERIE_BODIES[f"{f}_{link}"] = (f"{f}_{parent}", (0, 0, z), (1, 0, 0, 0))
    MENAGERIE_BODIES[f"{f}_tip"] = (f"{f}_distal", (0, 0, 0), (1, 0, 0, 0))
JOINT_CLASSES = {
    "base": ((0, 0, 1), (-0.47, 0.47)),
    "proximal": ((0, 1, 0), (-0.196, 1.61)),
    "medial": ((0, 1, 0), (-0.174, 1.709)),
    "distal": ((0, 1, 0), (-0.227, 1.618)),
    "thumb_base": ((-1, 0, 0), (0.263, 1.396)),
    "thumb_proximal": ((0, 0, 1), (-0.105, 1.163)),
    "thumb_medial": ((0, 1, 0), (-0.189, 1.644)),
    "thumb_distal": ((0, 1, 0), (-0.162, 1.719)),
}
JOINTS = [(f"{f}j{k}", c) for f in FINGERS for k, c in enumerate(("base", "proximal", "medial", "distal"))]
JOINTS += [(f"thj{k}", f"thumb_{c}") for k, c in enumerate(("base", "proximal", "medial", "distal"))]
# The collision primitives, by body: (type, half-sizes, pos).
BOX, CAPSULE = mujoco.mjtGeom.mjGEOM_BOX, mujoco.mjtGeom.mjGEOM_CAPSULE
FINGER_GEOMS = {
    "base": (BOX, (0.0098, 0.01375, 0.0082), (0, 0, 0.0082)),
    "proximal": (BOX, (0.0098, 0.01375, 0.027), (0, 0, 0.027)),
    "medial": (BOX, (0.0098, 0.01375, 0.0192), (0, 0, 0.0192)),
    "distal": (BOX, (0.0098, 0.01375, 0.008), (0, 0, 0.008)),
    "tip": (CAPSULE, (0.012, 0.01, 0), (0, 0, 0.019)),
}
THUMB_GEOMS = {
    "base": (BOX, (0.0179, 0.017, 0.02275), (-0.0179, 0.009, 0.0145)),
    "proximal": (BOX, (0.0098, 0.01375, 0.00885), (0, 0, 0.00885)),
    "medial": (BOX, (0.0098, 0.01375, 0.0257), (0, 0, 0.0257)),
    "distal": (BOX, (0.0098, 0.01375, 0.0157), (0, 0, 0.0157)),
    "tip": (CAPSULE, (0.012, 0.008, 0), (0, 0, 0.035)),
}
CUBE = 16  # qpos index of the cube's free joint


def name(model, kind, i):
    return mujoco.mj_id2name(model, kind, i)


def test_the_model_is_menageries_right_hand_with_isaac_gyms_drive_and_cube():
    """Bodies, joints, ranges, collision primitives, contact exclusions and actuators as in
    Menagerie's right_hand.xml; IsaacGymEnvs' drive (stiffness 3, damping 0.1, effort 0.5, friction
    0.01, armature 0.001) and no gravity on the hand; its 6.5 cm cube of density 400 on a free joint;
    the 1/120 s PhysX substep."""
    model = AllegroHand.load_model()
    body = lambda i: name(model, mujoco.mjtObj.mjOBJ_BODY, i)
    hand = {body(i): i for i in range(1, model.nbody - 1)}
    assert set(hand) == set(MENAGERIE_BODIES) | {"palm"} and body(model.nbody - 1) == "object"
    for child, (parent, pos, quat) in MENAGERIE_BODIES.items():
        i = hand[child]
        assert body(model.body_parentid[i]) == parent, child
        np.testing.assert_allclose(model.body_pos[i], pos, atol=1e-12, err_msg=child)
        np.testing.assert_allclose(model.body_quat[i], np.array(quat) / np.linalg.norm(quat), atol=1e-6, err_msg=child)
    assert [name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(16)] == [j for j, _ in JOINTS]
    assert [name(model, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in range(16)] == [j.replace("j", "a") for j, _ in JOINTS]
    for j, (joint, joint_class) in enumerate(JOINTS):
        axis, limits = JOINT_CLASSES[joint_class]
        np.testing.assert_allclose(model.jnt_axis[j], axis, err_msg=joint)
        np.testing.assert_allclose(model.jnt_range[j], limits, err_msg=joint)
        np.testing.assert_allclose(model.actuator_ctrlrange[j], limits, err_msg=joint)
        assert model.actuator_trnid[j, 0] == j
    for i, geom_body in ((g, body(model.geom_bodyid[g])) for g in range(model.ngeom)):
        if geom_body in ("palm", "object"):
            continue
        kind, size, pos = (THUMB_GEOMS if geom_body.startswith("th") else FINGER_GEOMS)[geom_body.split("_")[1]]
        assert model.geom_type[i] == kind, geom_body
        np.testing.assert_allclose(model.geom_size[i], size, err_msg=geom_body)
        np.testing.assert_allclose(model.geom_pos[i], pos, err_msg=geom_body)
    excluded = {(body(a), body(b)) for a, b in ((p >> 16, p & 0xFFFF) for p in model.exclude_signature)}
    assert excluded == {("palm", f"{f}_base") for f in (*FINGERS, "th")} | {("palm", "th_proximal")}
    # IsaacGymEnvs' drive, gravity off on the hand
    np.testing.assert_array_equal(model.actuator_gainprm[:, 0], 3.0)
    np.testing.assert_array_equal(model.actuator_biasprm[:, :3], [[0.0, -3.0, -0.1]] * 16)
    np.testing.assert_array_equal(model.actuator_forcerange, [[-0.5, 0.5]] * 16)
    assert model.actuator_forcelimited.all()
    hand_dofs = slice(0, 16)
    np.testing.assert_array_equal(model.dof_armature[hand_dofs], 0.001)
    np.testing.assert_array_equal(model.dof_frictionloss[hand_dofs], 0.01)
    np.testing.assert_array_equal(model.dof_damping, 0.0)
    assert all(model.body_gravcomp[i] == 1 for b, i in hand.items() if b != "palm") and model.body_gravcomp[-1] == 0
    # IsaacGymEnvs' cube, free, undamped
    cube = model.nbody - 1
    assert model.jnt_type[16] == mujoco.mjtJoint.mjJNT_FREE and (model.dof_armature[16:] == 0).all()
    np.testing.assert_allclose(model.geom_size[model.body_geomadr[cube]], [0.0325] * 3)
    assert model.body_mass[cube] == pytest.approx(400 * 0.065**3)
    assert model.opt.timestep == pytest.approx(1 / 120) and AllegroHand.frame_skip == 4


def allegro_env(num_envs=2, backend="mujoco", task_cls=AllegroHand, seed=0):
    physics = MujocoPhysics if backend == "mujoco" else MjwarpPhysics
    return MujocoEnv(task_cls, num_envs, CPU, seed, physics)


class Full(AllegroHand):
    obs_type = "full"


class FullState(AllegroHand):
    obs_type = "full_state"


def test_the_task_has_isaac_gyms_sizes_in_each_observation_type():
    env = allegro_env(3)
    assert (env.obs_dim, env.act_dim, env.max_episode_steps) == (50, 16, 600)
    assert env.action_low.tolist() == [-1.0] * 16 and env.action_high.tolist() == [1.0] * 16
    assert env.episode_metrics == ("consecutive_successes",)
    assert env.task.dt == pytest.approx(1 / 30)
    model = AllegroHand.load_model()
    assert [cls(model, torch.float64, CPU).obs_dim for cls in (Full, FullState)] == [72, 88]

    class OpenAI(AllegroHand):
        obs_type = "openai"

    with pytest.raises(TaskError, match="obs_type must be one of"):
        OpenAI(model, torch.float64, CPU)


# -- the task's terms on hand-built states ---------------------------------------------------------


def task_with(goal_quat, cls=AllegroHand):
    task = cls(AllegroHand.load_model(), torch.float64, CPU)
    task.start(len(goal_quat), 0)
    task.goal_quat.copy_(torch.as_tensor(goal_quat, dtype=torch.float64))
    return task


def test_absolute_and_relative_control():
    """Absolute (IsaacGymEnvs' default): each target is the action scaled onto the joint's range;
    relative: the last target moved by dofSpeedScale x 1/60 s x the action; both clamped."""
    task = task_with([about_z(0.0)] * 3)
    low, high = task.joint_low, task.joint_high
    action = torch.tensor([-1.0, 0.0, 2.0]).repeat_interleave(16).view(3, 16)
    targets = task.control(action, None)
    torch.testing.assert_close(targets, torch.stack([low, (low + high) / 2, high]))
    assert task.last_action[2].tolist() == [1.0] * 16  # clipped, as clipActions does

    class Relative(AllegroHand):
        relative_control = True

    task = task_with([about_z(0.0)] * 3, Relative)
    start = (low + high) / 2
    task.targets.copy_(torch.stack([start, start, high]))
    targets = task.control(torch.tensor([[1.0] * 16, [-0.5] * 16, [1.0] * 16]), None)
    torch.testing.assert_close(targets, torch.stack([(start + 20 / 60).minimum(high), start - 10 / 60, high]))


def test_each_observation_type_has_isaac_gyms_layout():
    """full_no_vel: joints scaled to [-1, 1], cube pose, goal pose, q_cube x q_goal*, last action;
    full adds 0.2 x joint velocities, the cube's linear and 0.2 x angular velocity (world axes);
    full_state adds 10 x the actuators' joint forces."""
    goal = about_z(0.5)
    tasks = {cls.obs_type: task_with([goal], cls) for cls in (AllegroHand, Full, FullState)}
    low, high = tasks["full"].joint_low, tasks["full"].joint_high
    joints = low + 0.25 * (high - low)
    state = cube_state(CUBE, [[0.01, 0.02, 0.05]], [about_z(0.2)], joints)
    state["qvel"][0, :CUBE] = torch.linspace(-1, 1, 16, dtype=torch.float64)
    state["qvel"][0, CUBE : CUBE + 6] = torch.tensor([0.1, 0.2, 0.3, 0.0, 0.0, 2.0], dtype=torch.float64)
    action = torch.linspace(-1, 1, 16, dtype=torch.float64)[None]
    for task in tasks.values():
        task.control(action, None)
    cube = [0.01, 0.02, 0.05, *about_z(0.2)]
    goal_pose = [*tasks["full"].target_pos.tolist(), *goal]
    diff = about_z(-0.3)
    scaled = [-0.5] * 16
    obs = {k: t.observe(state)[0] for k, t in tasks.items()}
    torch.testing.assert_close(
        obs["full_no_vel"], torch.tensor([*scaled, *cube, *goal_pose, *diff, *action[0]], dtype=torch.float64)
    )
    velocities = (0.2 * state["qvel"][0, :CUBE]).tolist()
    cube_velocities = [0.1, 0.2, 0.3, 0.0, 0.0, 0.4]  # the angular velocity turned from the cube's axes: about z
    torch.testing.assert_close(
        obs["full"],
        torch.tensor(
            [*scaled, *velocities, *cube, *cube_velocities, *goal_pose, *diff, *action[0]], dtype=torch.float64
        ),
    )
    targets = low + 0.5 * (action[0] + 1) * (high - low)
    forces = (3 * (targets - joints) - 0.1 * state["qvel"][0, :CUBE]).clamp(-0.5, 0.5)
    torch.testing.assert_close(obs["full_state"][:48], torch.cat([obs["full"][:32], 10 * forces]))
    torch.testing.assert_close(obs["full_state"][48:], obs["full"][32:])


# -- the env -------------------------------------------------------------------------------------------


def test_both_backends_follow_the_same_trajectory():
    """The same seed gives both backends the same starts and goals, and the same actions the same
    trajectory: to 1e-4 while the cube drops onto the palm and lands (its first 5 steps). Then
    float32 rounding and the solver's stopping point grow apart chaotically through the contacts, so
    each mjwarp world is put back onto MuJoCo C's state before each step: one step then agrees to
    5e-2 of 1 + |value| in the observation and 2e-2 in the reward (the rotation reward, 1 / (θ + 0.1),
    is the most sensitive)."""
    if refused_on_mjwarp(AllegroHand.load_model(), lambda: allegro_env(3, "mjwarp", seed=5)):
        return
    envs = {b: allegro_env(3, b, seed=5) for b in BACKENDS}
    obs = {b: env.reset() for b, env in envs.items()}
    torch.testing.assert_close(obs["mjwarp"], obs["mujoco"], rtol=0, atol=1e-5)
    torch.testing.assert_close(envs["mjwarp"].task.goal_quat.double(), envs["mujoco"].task.goal_quat, rtol=0, atol=1e-6)
    gen = torch.Generator().manual_seed(0)
    actions = [0.3 * (torch.rand(3, 16, generator=gen) * 2 - 1) for _ in range(30)]
    follow(envs, actions, free_steps=5, early=(1e-4, 1e-4), late=(5e-2, 2e-2))


def test_an_env_continues_exactly_from_its_saved_state():
    """Saved mid-episode, an env goes on to the bit: its goals, successes and targets, and the starts
    of the episodes that follow (bang-bang actions drop every cube within the 40 steps after the save)."""
    env = allegro_env(3)
    gen = torch.Generator().manual_seed(1)
    actions = [(torch.rand(3, 16, generator=gen) * 2 - 1).sign() for _ in range(50)]
    for a in actions[:10]:
        env.step(a)
    saved = env.state_dict()
    assert set(saved["task_state"]) == {"goal_quat", "goals_drawn", "successes", "targets", "last_action"}
    later = [env.step(a) for a in actions[10:]]
    assert torch.stack([out[2] for out in later]).any(dim=0).all()  # every env restarted after the save
    resumed = allegro_env(3)
    resumed.load_state_dict(saved)
    for a, out in zip(actions[10:], later):
        again = resumed.step(a)
        assert all(torch.equal(x, y) for x, y in zip(again[:4], out[:4]))
    assert torch.equal(resumed.task.goal_quat, env.task.goal_quat)


def test_the_env_keeps_the_contract():
    findings = check_contract(allegro_env(2, seed=3), make_again=lambda: allegro_env(2, seed=3))
    assert findings == []


def test_a_cube_dropped_onto_the_palm_rests_there():
    """With zero actions (every target mid-range: the fingers half closed), the cube dropped from its
    start lands on the palm, within the fall distance, and stays there: 150 steps (5 s), no episode
    ends, and the cube rests on the palm's surface, over the palm."""
    env = allegro_env(4, seed=2)
    env.reset()
    for _ in range(150):
        _, _, terminated, truncated, _ = env.step(torch.zeros(4, 16))
        assert not terminated.any() and not truncated.any()
    cube = env.physics.state["qpos"][:, CUBE : CUBE + 3]
    palm_top, half = 0.0111, 0.0325  # the palm's box in world axes: x in [-0.095, 0], y in ±0.0565
    assert ((cube[:, 0] > -0.095) & (cube[:, 0] < 0.0) & (cube[:, 1].abs() < 0.0565)).all(), cube
    assert ((cube[:, 2] > palm_top + half - 0.005) & (cube[:, 2] < palm_top + half + 0.015)).all(), cube
    assert (env.physics.state["qvel"][:, CUBE:].abs() < 0.05).all()
