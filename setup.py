from setuptools import find_packages, setup

setup(
    name="pql",
    version="0.1.0",
    description="GPU-native parallel off-policy RL (Parallel Q-Learning) for PyTorch",
    python_requires=">=3.10",
    packages=find_packages(include=["pql", "pql.*", "tasks", "tasks.*"]),
    package_data={"tasks": ["mujoco/assets/*.xml", "mujoco/assets/LICENSE*"]},
    install_requires=[
        # torch is pinned by the installer (CPU wheel on CI, CUDA build on GPU machines);
        # any 2.x satisfies us, so no requirement here pulls a second build.
        "torch>=2.3",
        "numpy",
        "mujoco>=3.3",
        "mujoco-warp",
        "warp-lang",
        "triton",
        "hydra-core>=1.3",
        "omegaconf>=2.3",
        "tensorboard",
        "matplotlib",
    ],
    extras_require={
        "test": ["pytest", "gymnasium[mujoco]>=1.0", "scipy", "wandb"],
        "wandb": ["wandb"],
    },
)
