"""Bad input raises tasks.TaskError (a ValueError) saying what was wrong."""

import pytest
import torch

import tasks


@pytest.fixture(scope="module")
def env():
    env = tasks.make("Ant", 4, "cpu", seed=0, backend="mujoco")
    yield env
    env.close()


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(tasks.TaskError, match="unknown task 'Antt'") as err:
        tasks.make("Antt", 4, "cpu")
    for name in tasks.TASK_NAMES:
        assert name in str(err.value)
    assert issubclass(tasks.TaskError, ValueError)


@pytest.mark.parametrize("num_envs", [0, -3, 2.5, True])
def test_num_envs_must_be_a_positive_integer(num_envs):
    with pytest.raises(tasks.TaskError, match="num_envs must be an integer > 0"):
        tasks.make("Ant", num_envs, "cpu")


def test_unknown_backend_and_device():
    with pytest.raises(tasks.TaskError, match="backend must be one of auto, mujoco, mjwarp"):
        tasks.make("Ant", 1, "cpu", backend="physx")
    with pytest.raises(tasks.TaskError, match="device"):
        tasks.make("Ant", 1, "tpu")


@pytest.mark.parametrize(
    "actions, message",
    [
        (torch.zeros(4, 7), r"shape \(4, 8\) \(num_envs, act_dim\), got \(4, 7\)"),
        (torch.zeros(3, 8), r"shape \(4, 8\) \(num_envs, act_dim\), got \(3, 8\)"),
        (torch.zeros(4, 8, dtype=torch.float64), "must be float32, got torch.float64"),
        (torch.zeros(4, 8, device="meta"), "on the env's device cpu, got meta"),
        ([[0.0] * 8] * 4, "must be a torch.Tensor"),
    ],
)
def test_malformed_actions(env, actions, message):
    with pytest.raises(tasks.TaskError, match=message):
        env.step(actions)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_actions_name_the_envs(env, bad):
    actions = torch.zeros(4, 8)
    actions[1, 3] = bad
    actions[3, 0] = bad
    with pytest.raises(tasks.TaskError, match=r"NaN or inf in 2 env\(s\), indices \[1, 3\]"):
        env.step(actions)


def test_isaacgym_without_isaacgym_says_how_to_install():
    try:
        import isaacgym  # noqa: F401
    except ImportError:
        with pytest.raises(tasks.TaskError, match="Isaac Gym") as err:
            tasks.make("isaacgym/Ant", 4, "cpu")
        assert "\n" not in str(err.value)
    else:
        pytest.skip("Isaac Gym is installed here")


def test_unknown_reset_noise_kind():
    from tasks.mujoco.env import MujocoEnv
    from tasks.mujoco.hopper import Hopper
    from tasks.mujoco.physics_mujoco import MujocoPhysics

    class Shaky(Hopper):
        qvel_noise = "gaussian"

    with pytest.raises(tasks.TaskError, match="Shaky.qvel_noise must be 'uniform' or 'normal', got 'gaussian'"):
        MujocoEnv(Shaky, 1, torch.device("cpu"), 0, MujocoPhysics)
