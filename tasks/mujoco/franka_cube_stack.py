"""FrankaCubeStack: a Franka Panda picks up a 5 cm cube and stacks it on a 7 cm one.

IsaacGymEnvs' FrankaCubeStack with its default operational-space control ("osc"), as its
FrankaCubeStack.yaml and franka_cube_stack.py define it, on pql's primitive-geometry copy of MuJoCo
Menagerie's Panda (assets/franka/). docs/tasks.md lists every term with its source and where this
version differs.

An action is 6 numbers for the end effector's delta pose and 1 for the gripper. `control` turns the
6 into the arm's joint torques by operational-space control, computed in torch from the physics state
the last step reached (dm_control's stepping, so the Jacobian and the mass matrix are those of the
state reached) and held for the env step, as Isaac holds them for its substeps.

Quaternions are MuJoCo's (w, x, y, z), where Isaac's are (x, y, z, w). The task keeps nothing per
env beyond the physics: the torques are a function of the state and the action.
"""

from __future__ import annotations

import math
from typing import Any

import mujoco
import torch
import warp as wp

from ..base import TaskError
from .task import Task, body_id, finite_rows, launch_start, start_kernel

ARM_JOINTS = 7
_Vec7 = wp.types.vector(length=ARM_JOINTS, dtype=wp.float32)


def _id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
    index = mujoco.mj_name2id(model, kind, name)
    if index < 0:
        raise TaskError(f"the model has no {kind.name[6:].lower()} named {name!r}")
    return index


class FrankaCubeStack(Task):
    xml = "franka/franka_cube_stack.xml"
    # 5 substeps of the model's 1/300 s: Isaac's 1/60 s step (its 2 PhysX substeps of 1/120 s),
    # the torques held for the whole step. A grasped cube stays in the fingers at this timestep
    # (tests/test_tasks_franka.py).
    frame_skip = 5
    max_episode_steps = 300  # episodeLength
    stepping = "dm_control"  # the controller reads the Jacobian and mass matrix of the state reached
    fields = ("qpos", "qvel", "xquat", "site_xpos", "xaxis", "xanchor", "M")
    # MuJoCo C reached 16 contacts and 65 constraint rows in 96,000 steps of random and bang-bang
    # actions (see Task); a grasp adds 8 contacts of the fingers' pads, a stack 4 of the cubes.
    nconmax = 64
    njmax = 256
    reset_noise_scale = 0.0  # unused: add_reset_noise draws the task's own start
    episode_metrics = ("stacked",)

    # IsaacGymEnvs' FrankaCubeStack.yaml and franka_cube_stack.py
    dist_reward_scale = 0.1
    lift_reward_scale = 1.5
    align_reward_scale = 2.0
    stack_reward_scale = 16.0
    lift_height = 0.04  # of cube A's bottom above the table: lifted
    stack_tolerance = 0.02  # of cube A's xy offset from cube B and of its height: stacked
    release_distance = 0.04  # of the gripper from cube A: let go of it, when stacked
    start_position_noise = 0.25  # of the cubes' x and y about the table's centre, U(±)
    start_rotation_noise = 0.785  # of the cubes' turn about z, U(±)
    franka_dof_noise = 0.25  # of the arm's joints about their default, U(±)
    cube_spacing = 2.0  # cube A's centre at least this many times the cubes' radii from B's, in xy
    cube_draws = 100  # of cube A at most, until it is that far
    action_scale = 1.0
    cmd_limit = (0.1, 0.1, 0.1, 0.5, 0.5, 0.5)  # the delta pose's at |action| = 1: m, rad
    kp = 150.0
    kp_null = 10.0
    default_arm = (0.0, 0.1963, 0.0, -2.6180, 0.0, 2.9416, 0.7854)
    default_finger = 0.035

    def __init__(self, model, dtype, device):
        super().__init__(model, dtype, device)
        self.dtype, self.device = dtype, device
        arm = [_id(model, mujoco.mjtObj.mjOBJ_JOINT, f"panda/joint{k}") for k in range(1, ARM_JOINTS + 1)]
        fingers = [_id(model, mujoco.mjtObj.mjOBJ_JOINT, f"panda/finger_joint{k}") for k in (1, 2)]
        if arm + fingers != list(range(ARM_JOINTS + 2)) or model.nu != ARM_JOINTS + 2:
            raise TaskError(f"{self.xml} must hold the arm's 7 hinges, then the 2 fingers, each with one actuator")
        self.cube_a, self.cube_b = (
            int(model.jnt_qposadr[_id(model, mujoco.mjtObj.mjOBJ_JOINT, name)]) for name in ("cubeA", "cubeB")
        )
        self.hand = body_id(model, "panda/hand")
        self.sites = [
            _id(model, mujoco.mjtObj.mjOBJ_SITE, f"panda/{name}")
            for name in ("grip_site", "left_fingertip", "right_fingertip")
        ]
        size = lambda body: 2.0 * float(model.geom_size[model.body_geomadr[body_id(model, body)], 0])
        self.cube_a_size, self.cube_b_size = size("cubeA"), size("cubeB")
        table = _id(model, mujoco.mjtObj.mjOBJ_GEOM, "table")
        top = model.geom_pos[table] + [0.0, 0.0, model.geom_size[table, 2]]
        self.table_top = tuple(float(v) for v in top)  # the centre of the table's top
        as_tensor = lambda values: torch.as_tensor(values, dtype=dtype, device=device)
        self.joint_low, self.joint_high = as_tensor(model.jnt_range[: ARM_JOINTS + 2]).T
        self.effort = as_tensor(model.actuator_ctrlrange[:ARM_JOINTS, 1])
        self.q_default = as_tensor(self.default_arm)
        self.dpose_scale = as_tensor(self.cmd_limit) / self.action_scale
        self.kd, self.kd_null = 2.0 * math.sqrt(self.kp), 2.0 * math.sqrt(self.kp_null)
        # The arm's [7, 7] block of the CSR lower triangle in MjData.M (and MuJoCo Warp's Data.M).
        index = torch.full((ARM_JOINTS, ARM_JOINTS), -1, dtype=torch.int64)
        for i in range(ARM_JOINTS):
            for k in range(model.M_rowadr[i], model.M_rowadr[i] + model.M_rownnz[i]):
                index[i, model.M_colind[k]] = index[model.M_colind[k], i] = k
        if (index < 0).any():
            raise TaskError(f"{self.xml}: the arm's joints must form one chain")
        self._mass_index = index.flatten().to(device)

    def observation_size(self, model):
        return 19  # cube A's quaternion and position, cube B - cube A, the grip site's pose, the fingers

    def action_range(self, model):
        ones = torch.ones(ARM_JOINTS)
        return -ones, ones

    # -- the controller -----------------------------------------------------------------------------

    def control(self, action: torch.Tensor, state) -> torch.Tensor:
        """The 7 arm torques and 2 finger targets [N, 9] for action [N, 7] in [-1, 1] (clamped) at `state`:
        the delta pose a[:6] * cmd_limit by operational-space control; both fingers open (their
        upper limit) where a[6] >= 0, closed (their lower limit) elsewhere."""
        action = action.to(self.dtype).clamp(-1.0, 1.0)
        torques = self.osc_torques(state, action[:, :6] * self.dpose_scale)
        fingers = torch.where(action[:, 6:] >= 0.0, self.joint_high[ARM_JOINTS:], self.joint_low[ARM_JOINTS:])
        return torch.cat([torques, fingers], dim=1)

    def osc_torques(self, state, dpose: torch.Tensor) -> torch.Tensor:
        """Khatib's operational-space control towards the grip site's pose + dpose [N, 6] (position,
        then rotation vector, world axes), with a null-space pull towards the default pose: [N, 7]
        arm torques within the effort limits.

        Λ = (J M⁻¹ Jᵀ)⁻¹,  n = kp_null·wrap(q_default − q) − kd_null·q̇,
        τ = Jᵀ Λ (kp·dpose − kd·J q̇) + (I − Jᵀ Λ J M⁻¹) M n = Jᵀ Λ (kp·dpose − kd·J q̇ − J n) + M n.
        """
        q, qd = state["qpos"][:, :ARM_JOINTS], state["qvel"][:, :ARM_JOINTS, None]
        jac = self.jacobian(state)
        mass = self.arm_mass_matrix(state)
        # Solves rather than Isaac's inverses: the same torques in a fraction of the time; the _ex
        # forms leave their error checks undone, which on CUDA would wait for the device every step.
        inverse_task_mass = jac @ torch.cholesky_solve(jac.mT, torch.linalg.cholesky_ex(mass).L)  # Λ⁻¹ [N, 6, 6]
        wrapped = torch.remainder(self.q_default - q + math.pi, 2.0 * math.pi) - math.pi
        null = self.kp_null * wrapped[:, :, None] - self.kd_null * qd
        wrench = self.kp * dpose[:, :, None] - jac @ (self.kd * qd + null)
        torques = (jac.mT @ torch.linalg.solve_ex(inverse_task_mass, wrench).result + mass @ null).squeeze(2)
        return torques.clamp(-self.effort, self.effort)

    def jacobian(self, state) -> torch.Tensor:
        """[N, 6, 7]: the grip site's linear (rows 0-2) and angular (3-5) velocity per arm joint
        velocity, world axes: for hinge j, axis_j × (site − anchor_j) and axis_j."""
        axis, anchor = state["xaxis"][:, :ARM_JOINTS], state["xanchor"][:, :ARM_JOINTS]
        site = state["site_xpos"][:, self.sites[0], None]
        return torch.cat([torch.linalg.cross(axis, site - anchor), axis], dim=2).transpose(1, 2)

    def arm_mass_matrix(self, state) -> torch.Tensor:
        """[N, 7, 7]: the arm's block of the joint-space inertia (armature included)."""
        return state["M"][:, self._mass_index].view(-1, ARM_JOINTS, ARM_JOINTS)

    # -- observation and reward ---------------------------------------------------------------------

    def _cubes(self, state):
        qpos = state["qpos"]
        a, b = self.cube_a, self.cube_b
        return qpos[:, a : a + 3], qpos[:, a + 3 : a + 7], qpos[:, b : b + 3]

    def observe(self, state):
        a_pos, a_quat, b_pos = self._cubes(state)
        grip = state["site_xpos"][:, self.sites[0]]
        fingers = state["qpos"][:, ARM_JOINTS : ARM_JOINTS + 2]
        return torch.cat([a_quat, a_pos, b_pos - a_pos, grip, state["xquat"][:, self.hand], fingers], dim=1)

    def reward_and_termination(self, state, velocity, action):
        a_pos, _, b_pos = self._cubes(state)
        grip, left, right = state["site_xpos"][:, self.sites].unbind(1)
        d = (a_pos - grip).norm(dim=1)
        dist = 1.0 - torch.tanh(10.0 * (d + (a_pos - left).norm(dim=1) + (a_pos - right).norm(dim=1)) / 3.0)
        height = a_pos[:, 2] - self.table_top[2]
        lifted = (height - self.cube_a_size > self.lift_height).to(self.dtype)
        a_to_b = b_pos - a_pos
        above_b = a_to_b.clone()
        above_b[:, 2] += (self.cube_a_size + self.cube_b_size) / 2.0
        align = (1.0 - torch.tanh(10.0 * above_b.norm(dim=1))) * lifted
        dist = torch.maximum(dist, align)
        stacked = (
            (a_to_b[:, :2].norm(dim=1) < self.stack_tolerance)
            & ((height - (self.cube_b_size + self.cube_a_size / 2.0)).abs() < self.stack_tolerance)
            & (d > self.release_distance)
        )
        shaped = ~stacked
        terms = {
            "reward_dist": self.dist_reward_scale * dist * shaped,
            "reward_lift": self.lift_reward_scale * lifted * shaped,
            "reward_align": self.align_reward_scale * align * shaped,
            "reward_stack": self.stack_reward_scale * stacked.to(self.dtype),
        }
        reward = sum(terms.values())
        finite = finite_rows(state["qpos"], state["qvel"])
        return reward, stacked | ~finite, {**terms, "stacked": stacked.to(self.dtype)}

    # -- starts -------------------------------------------------------------------------------------

    def add_reset_noise(self, seed, starts):
        """IsaacGymEnvs' reset_idx: the arm at its default pose + 0.25 · U(±1) per joint, clamped to
        the joints' ranges, the fingers at 0.035; cube B on the table at its centre + U(±0.25) in x
        and y, turned about z by U(±0.785); cube A likewise, redrawn (up to 100 times) while its xy
        is nearer than 2 · (0.05 + 0.07) · √2/2 to cube B's; everything at rest."""
        params = _StackStart()
        params.arm, params.dof_noise = _Vec7(self.default_arm), self.franka_dof_noise
        params.low, params.high = (_Vec7(limit[:ARM_JOINTS].tolist()) for limit in (self.joint_low, self.joint_high))
        params.finger = self.default_finger
        params.table = wp.vec3(*self.table_top)
        params.half_a, params.half_b = self.cube_a_size / 2.0, self.cube_b_size / 2.0
        params.position_noise, params.rotation_noise = self.start_position_noise, self.start_rotation_noise
        radii = (self.cube_a_size + self.cube_b_size) * math.sqrt(2.0) / 2.0
        params.min_distance, params.tries = wp.float64(self.cube_spacing * radii), self.cube_draws
        params.cube_a, params.cube_b = self.cube_a, self.cube_b
        launch_start(_STACK_START, seed, starts, params)


@wp.struct
class _StackStart:
    arm: _Vec7  # the arm's default joint positions
    low: _Vec7  # the arm joints' ranges
    high: _Vec7
    dof_noise: float
    finger: float  # both fingers' start
    table: wp.vec3  # the table top's centre
    half_a: float  # cube A's half size
    half_b: float
    position_noise: float
    rotation_noise: float
    min_distance: wp.float64  # between the cubes' centres in xy
    tries: wp.int32  # draws of cube A at most
    cube_a: wp.int32  # qpos address of cube A's free joint
    cube_b: wp.int32


@wp.func
def _around(draw: float, centre: float, noise: float) -> float:
    """centre + U(±noise) from a uniform draw in [0, 1)."""
    return centre + noise * (2.0 * draw - 1.0)


@wp.func
def _place_cube(qpos: wp.array2d(dtype=Any), env: wp.int32, adr: wp.int32, x: float, y: float, z: float, angle: float):
    """A cube's free joint at (x, y, z), turned about z by angle."""
    qpos[env, adr] = qpos.dtype(x)
    qpos[env, adr + 1] = qpos.dtype(y)
    qpos[env, adr + 2] = qpos.dtype(z)
    qpos[env, adr + 3] = qpos.dtype(wp.cos(0.5 * angle))
    qpos[env, adr + 4] = qpos.dtype(0.0)
    qpos[env, adr + 5] = qpos.dtype(0.0)
    qpos[env, adr + 6] = qpos.dtype(wp.sin(0.5 * angle))


@wp.func
def _distance(ax: float, ay: float, bx: float, by: float) -> wp.float64:
    dx = wp.float64(ax) - wp.float64(bx)
    dy = wp.float64(ay) - wp.float64(by)
    return wp.sqrt(dx * dx + dy * dy)


@wp.func
def _stack_start(
    state: wp.uint32, p: _StackStart, env: wp.int32, qpos: wp.array2d(dtype=Any), qvel: wp.array2d(dtype=Any)
):
    # Every draw is made here: a wp.func gets a copy of `state`, so one that drew would leave this
    # stream where it was and the next draw here would repeat its numbers.
    for j in range(ARM_JOINTS):
        q = _around(wp.randf(state), p.arm[j], p.dof_noise)
        qpos[env, j] = qpos.dtype(wp.clamp(q, p.low[j], p.high[j]))
    qpos[env, ARM_JOINTS] = qpos.dtype(p.finger)
    qpos[env, ARM_JOINTS + 1] = qpos.dtype(p.finger)
    bx = _around(wp.randf(state), p.table[0], p.position_noise)
    by = _around(wp.randf(state), p.table[1], p.position_noise)
    turn = _around(wp.randf(state), 0.0, p.rotation_noise)
    _place_cube(qpos, env, p.cube_b, bx, by, p.table[2] + p.half_b, turn)
    # The distance test is in float64 on float32 draws, so that the start stored in either backend's
    # dtype is the same and passes it. If all `tries` draws fail (a chance below 1e-40) the last stands.
    ax = _around(wp.randf(state), p.table[0], p.position_noise)
    ay = _around(wp.randf(state), p.table[1], p.position_noise)
    tries = wp.int32(1)
    while tries < p.tries and _distance(ax, ay, bx, by) < p.min_distance:
        ax = _around(wp.randf(state), p.table[0], p.position_noise)
        ay = _around(wp.randf(state), p.table[1], p.position_noise)
        tries += 1
    turn = _around(wp.randf(state), 0.0, p.rotation_noise)
    _place_cube(qpos, env, p.cube_a, ax, ay, p.table[2] + p.half_a, turn)


_STACK_START = start_kernel(_stack_start)
