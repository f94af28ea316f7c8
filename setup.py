import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
# pql[export]: pql.export's policy.onnx (torch's exporter needs onnxscript, and torch 2.11's and
# later exporters need onnxscript 0.6, the first with their API module; onnxruntime runs the file
# in tests and in docs/deploy.md's program). Floors: the oldest checked (docker/README.md, "Versions").
EXPORT = ["onnx>=1.17", "onnxscript>=0.6", "onnxruntime>=1.20"]
# pql/__init__.py defines the version once; read, not imported (importing pql needs its requirements).
VERSION = re.search(r'^__version__ = "([^"]+)"', (HERE / "pql" / "__init__.py").read_text(), re.M).group(1)

setup(
    name="pql",
    version=VERSION,
    description="GPU-native parallel off-policy RL (Parallel Q-Learning) for PyTorch",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    license_files=[
        "LICENSE",
        "tasks/mujoco/assets/LICENSE",
        "tasks/mujoco/assets/hand/LICENSE.md",
        "tasks/mujoco/assets/anymal_c/LICENSE",
        "tasks/mujoco/assets/allegro/LICENSE",
        "tasks/mujoco/assets/franka/LICENSE",
    ],
    classifiers=[
        "Programming Language :: Python :: 3",
        "Operating System :: POSIX :: Linux",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    python_requires=">=3.10",
    packages=find_packages(include=["pql", "pql.*", "tasks", "tasks.*"]),
    package_data={
        "tasks": [
            "mujoco/assets/*.xml",
            "mujoco/assets/LICENSE*",
            "mujoco/assets/hand/*",
            "mujoco/assets/stls/hand/*.stl",
            "mujoco/assets/anymal_c/*",
            "mujoco/assets/allegro/*",
            "mujoco/assets/franka/*",
        ]
    },
    # The floors: the oldest releases the code needs (from numpy on: the oldest checked); the fast
    # tests pass with all of them pinned at once (docker/README.md, "Versions"). Install torch
    # first (the CPU wheel on CI, the CUDA build on GPU machines): a torch already there satisfies
    # this and pulls no second build.
    install_requires=[
        # The CUDA wheels of torch pin their Triton; 2.8 is the first that pins Triton 3.4.
        "torch>=2.8",
        # pql.kernels reads triton.knobs, new in Triton 3.4.
        "triton>=3.4",
        "numpy>=1.24",
        # MuJoCo and MuJoCo Warp as low as mjlab 1.6 pins them (mujoco~=3.11, mujoco-warp~=3.11),
        # so that pql installs beside it. tasks/mujoco/physics_mjwarp.py reads the few places where
        # MuJoCo Warp 3.11 differs from its later releases, and refuses in one line a model it
        # cannot step (the Shadow hand's, the dog's). warp-lang 1.14 (what mujoco-warp 3.11 asks)
        # cannot hand a CPU array to torch under numpy 1.24; 1.15 can.
        "mujoco>=3.11",
        "mujoco-warp>=3.11",
        "warp-lang>=1.15",
        # task=gym:<EnvId> (tasks/gym_env.py): vector envs with same-step autoreset, new in 1.1.
        "gymnasium>=1.1",
        # task=dmc/<domain>-<task> (tasks/dmc/): the suite's models and random starts. 1.0.44 is the
        # first for MuJoCo 3.11; up to 1.0.50 it reads MjModel fields that MuJoCo 4 dropped, so with
        # MuJoCo 4 pip takes 1.0.52 or later (which need mujoco >= 4.0.1), and tasks/dmc refuses an
        # older one in one line.
        "dm-control>=1.0.44",
        "hydra-core>=1.3",
        "omegaconf>=2.3",
        "tensorboard>=2.14",
        "matplotlib>=3.7",
        # pql.play's and runtime.video_every's MP4s: imageio, with the ffmpeg binary imageio-ffmpeg ships.
        "imageio>=2.30",
        "imageio-ffmpeg>=0.5",
    ],
    extras_require={
        # The tools that run and judge the tests are pinned: a new release of one must not fail a
        # commit that passed (ruff's and mypy's new rules; pytest 9.2's monkeypatch.undo deletes
        # entries of torch's config modules that 9.0's restored). What pql runs on or talks to
        # (torch, MuJoCo, Gymnasium, dm_control, wandb) keeps floors only: CI resolves their newest
        # releases, as a new user does, so a release that breaks pql fails CI before it fails a
        # user. scipy serves two of its oldest functions (chisquare, kstest) and stays unpinned.
        # gymnasium-robotics: the Shadow hand's model that tests/test_tasks_hand.py compares with,
        # and the goal envs with Dict observations of tests/test_tasks_gym.py. rsl-rl-lib: the
        # VecEnv base class that examples/rsl_rl_task.py subclasses (tests/test_own_env.py).
        "test": [
            "pytest==9.2.0",
            "pytest-xdist==3.8.0",
            "gymnasium[mujoco]>=1.1",
            "gymnasium-robotics==1.4.2",
            "rsl-rl-lib>=5.4.2",
            "scipy",
            "wandb",
            "ruff==0.17.6",
            "mypy==2.4.1",
            *EXPORT,
        ],
        "export": EXPORT,
        # MuJoCo Playground's tasks (examples/playground_task.py, tests/playground): 0.2.0, the
        # release checked, asks for Python 3.11 and leaves JAX unpinned; JAX 0.10.2 is what pip
        # resolves beside torch 2.13 on a CPU, the one checked. A GPU needs a CUDA build of JAX on
        # top (docs/own_env.md, "MuJoCo Playground").
        "playground": ["playground>=0.2.0", "jax>=0.10.2"],
        "wandb": ["wandb"],
    },
)
