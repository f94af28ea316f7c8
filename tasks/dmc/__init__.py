"""The DeepMind Control Suite on pql's batched simulators: `task=dmc/<domain>-<task>` (suite.py)."""

from __future__ import annotations

from .acrobot import AcrobotSwingup, AcrobotSwingupSparse
from .ball_in_cup import BallInCupCatch
from .cartpole import CartpoleBalance, CartpoleBalanceSparse, CartpoleSwingup, CartpoleSwingupSparse
from .cheetah import CheetahRun
from .dog import DogRun, DogStand, DogTrot, DogWalk
from .finger import FingerSpin, FingerTurnEasy, FingerTurnHard
from .fish import FishSwim, FishUpright
from .hopper import HopperHop, HopperStand
from .humanoid import HumanoidRun, HumanoidStand, HumanoidWalk
from .manipulator import ManipulatorBringBall
from .pendulum import PendulumSwingup
from .point_mass import PointMassEasy
from .quadruped import QuadrupedRun, QuadrupedWalk
from .reacher import ReacherEasy, ReacherHard
from .suite import DmcTask
from .swimmer import SwimmerSwimmer6, SwimmerSwimmer15
from .walker import WalkerRun, WalkerStand, WalkerWalk

PREFIX = "dmc/"
DMC_TASKS: dict[str, type[DmcTask]] = {
    f"{PREFIX}{cls.domain}-{cls.suite_task}": cls
    for cls in (
        AcrobotSwingup,
        AcrobotSwingupSparse,
        BallInCupCatch,
        CartpoleBalance,
        CartpoleBalanceSparse,
        CartpoleSwingup,
        CartpoleSwingupSparse,
        CheetahRun,
        DogStand,
        DogWalk,
        DogTrot,
        DogRun,
        FingerSpin,
        FingerTurnEasy,
        FingerTurnHard,
        FishUpright,
        FishSwim,
        HopperStand,
        HopperHop,
        HumanoidStand,
        HumanoidWalk,
        HumanoidRun,
        ManipulatorBringBall,
        PendulumSwingup,
        PointMassEasy,
        QuadrupedWalk,
        QuadrupedRun,
        ReacherEasy,
        ReacherHard,
        SwimmerSwimmer6,
        SwimmerSwimmer15,
        WalkerStand,
        WalkerWalk,
        WalkerRun,
    )
}
