"""The MuJoCo Warp backend (on Warp's CPU device): a reset brings up to date exactly the fields the
task reads, without a full forward; buffer overflows stop the run; the tasks' buffer sizes hold
what MuJoCo C needs."""

import mujoco
import numpy as np
import pytest
import torch

import tasks
from tasks.mujoco import TASKS
from tasks.mujoco.ant import Ant
from tasks.mujoco.env import MujocoEnv
from tasks.mujoco.physics_mjwarp import MjwarpPhysics
from tasks.mujoco.task import load_asset

CPU = torch.device("cpu")


def random_actions(env, steps, seed):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        yield env.action_low + torch.rand((env.num_envs, env.act_dim), generator=gen) * (
            env.action_high - env.action_low
        )


@pytest.mark.parametrize("name", ["Ant", "Humanoid", "InvertedDoublePendulum"])
@pytest.mark.parametrize("random_start", [True, False])
def test_reset_gives_the_fields_of_mj_forward(name, random_start):
    """After some steps, worlds 0 and 2 restart: every field the task reads must be what MuJoCo C's
    mj_resetData + mj_forward gives at the new state (float32 rounding apart), as if a full forward
    had run (Humanoid reads cinert and cvel: kinematics, com_pos and com_vel must all have run;
    InvertedDoublePendulum reads qfrc_constraint, which only the constraint solver gives)."""
    env = tasks.make(name, 3, "cpu", seed=1, backend="mjwarp")
    for actions in random_actions(env, 4, seed=0):
        env.step(actions)
    mask = torch.tensor([True, False, True])
    if random_start:
        env.physics.reset(mask)
    else:
        model = load_asset(TASKS[name].xml)
        qpos = torch.from_numpy(model.qpos0).float().repeat(3, 1)
        qpos[:, 2] += 0.3  # off the ground, so that the state is not the one before
        env.physics.reset(mask, (qpos, torch.full((3, model.nv), 0.5)))
    model = load_asset(TASKS[name].xml)
    data = mujoco.MjData(model)
    for world in (0, 2):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = env.physics.state["qpos"][world].numpy()
        data.qvel[:] = env.physics.state["qvel"][world].numpy()
        mujoco.mj_forward(model, data)
        for field in env.task.fields:
            expected = torch.from_numpy(getattr(data, field).copy()).float()
            torch.testing.assert_close(
                env.physics.state[field][world],
                expected,
                rtol=1e-4,
                atol=1e-5,
                msg=lambda m: f"{field} of world {world}: {m}",
            )


class CrowdedAnt(Ant):
    njmax = 4  # fewer rows than the four feet on the floor need


class ContactStarvedAnt(Ant):
    nconmax = 1  # one contact per world where the feet make up to four


@pytest.mark.parametrize(
    "task_cls, message",
    [
        (CrowdedAnt, r"a world needed more than CrowdedAnt\.njmax = 4 constraint rows.*raise CrowdedAnt\.njmax"),
        (
            ContactStarvedAnt,
            r"more than ContactStarvedAnt\.nconmax x num_envs = 1 x 2 contacts.*"
            r"raise ContactStarvedAnt\.nconmax",
        ),
    ],
)
def test_buffer_overflow_stops_the_run(task_cls, message):
    """The Ant falls onto its feet within a few steps; with buffers too small for that, the step
    that overflows raises (on the CPU at once) instead of running on without the dropped rows."""
    env = MujocoEnv(task_cls, 2, CPU, 0, MjwarpPhysics)
    with pytest.raises(tasks.TaskError, match=message):
        for _ in range(30):
            env.step(torch.zeros(2, env.act_dim))


def test_default_sizes_do_not_overflow():
    env = tasks.make("Ant", 2, "cpu", seed=0, backend="mjwarp")
    for actions in random_actions(env, 30, seed=0):
        env.step(actions)


def test_unsupported_field_is_refused():
    class Peeking(Ant):
        fields = Ant.fields + ("qfrc_bias",)

    with pytest.raises(tasks.TaskError, match="Peeking reads qfrc_bias, which the mjwarp backend does not recompute"):
        MujocoEnv(Peeking, 1, CPU, 0, MjwarpPhysics)


@pytest.mark.parametrize("name", tasks.TASK_NAMES)
def test_buffer_sizes_hold_what_mujoco_c_needs(name):
    """Task.nconmax and Task.njmax hold the contacts and constraint rows of MuJoCo C worlds driven
    by bang-bang actions without termination (fallen robots included), with room to spare."""
    task_cls = TASKS[name]
    model = load_asset(task_cls.xml)
    rng = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange.T
    most_contacts = most_rows = 0
    for _ in range(4):
        data = mujoco.MjData(model)
        data.qpos[:] = model.qpos0 + rng.uniform(-0.1, 0.1, model.nq)
        for step in range(300):
            if step % 10 == 0:  # held for a while: large motions and falls
                data.ctrl[:] = np.where(rng.random(model.nu) < 0.5, low, high)
            for _ in range(task_cls.frame_skip):
                mujoco.mj_step(model, data)
                most_contacts, most_rows = max(most_contacts, data.ncon), max(most_rows, data.nefc)
    assert most_contacts * 1.5 <= task_cls.nconmax and most_rows * 1.5 <= task_cls.njmax


def test_reset_within_a_joint_limit_gives_its_constraint_force():
    """InvertedDoublePendulum observes the force of the cart's rail-end limit: a start within that
    limit's margin must show MuJoCo C's nonzero force, which the mjwarp reset computes with a full
    forward rather than zeroing it."""
    qpos = torch.tensor([[0.995, 0.0, 0.0], [0.0, 0.1, -0.1]])
    qvel = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    obs = {
        backend: tasks.make("InvertedDoublePendulum", 2, "cpu", seed=0, backend=backend).reset_to(qpos, qvel)
        for backend in ("mujoco", "mjwarp")
    }
    assert obs["mujoco"][0, -1] != 0 and obs["mujoco"][1, -1] == 0
    torch.testing.assert_close(obs["mjwarp"], obs["mujoco"], rtol=1e-4, atol=1e-5)
