"""ShadowHandCube: the Shadow hand turns a cube in its palm to goal orientations drawn at random.

The task is IsaacGymEnvs' ShadowHand task with its block object and "full_state" observations, as
its ShadowHand.yaml configures it (tasks/mujoco/in_hand.py), on gymnasium-robotics' MuJoCo model of
the hand. docs/tasks.md lists every term and constant with its source, and where this version
differs (the model is not Isaac Gym's; the goals are drawn uniformly over all orientations).
"""

from __future__ import annotations

from .in_hand import InHandReorientation

HAND_JOINTS = 24


class ShadowHandCube(InHandReorientation):
    xml = "hand/shadow_hand_cube.xml"
    hand_joints = HAND_JOINTS
    fingertips = ("robot0:ffdistal", "robot0:mfdistal", "robot0:rfdistal", "robot0:lfdistal", "robot0:thdistal")
    obs_type = "full_state"
    # 8 substeps of the model's 0.002 s: a 0.016 s step (62.5 Hz), the nearest to Isaac Gym's 60 Hz.
    frame_skip = 8
    fields = ("qpos", "qvel", "xpos", "xquat", "subtree_com", "cvel", "cfrc_ext")
    # MuJoCo C reached 14 contacts and 110 constraint rows in 12,000 steps of random and bang-bang
    # actions; a policy that grips the cube presses more fingers on it than those did.
    nconmax = 64
    njmax = 256
