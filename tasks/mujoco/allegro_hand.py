"""AllegroHand: the Wonik Allegro hand turns a cube in its palm to goal orientations drawn at random.

The task is IsaacGymEnvs' AllegroHand task with its block object and its default "full_no_vel"
observations, as AllegroHand.yaml configures it (tasks/mujoco/in_hand.py), on MuJoCo Menagerie's
model of the right hand with IsaacGymEnvs' drive and cube (assets/allegro/). docs/tasks.md lists
every term and constant with its source, and where this version differs.
"""

from __future__ import annotations

from .in_hand import InHandReorientation


class AllegroHand(InHandReorientation):
    xml = "allegro/allegro_hand_cube.xml"
    hand_joints = 16
    obs_type = "full_no_vel"
    # 4 substeps of the model's 1/120 s, Isaac Gym's PhysX substep here: a 1/30 s step, its 30 Hz
    # control (dt 1/60 s, 2 substeps, controlFrequencyInv 2).
    frame_skip = 4
    # MuJoCo C reached 38 contacts and 130 constraint rows in 96,000 steps of random and bang-bang
    # actions (the fingers colliding with each other as much as with the cube).
    nconmax = 96
    njmax = 256
