"""Mirror augmentation (algo.mirror, pql/replay/mirror.py): each learner batch joined by its mirror
image under the task's symmetry (tasks.base.Mirror), checked on Anymal's; refused for a task without one."""

import pytest
import torch

from pql.envs import ObsLayout
from pql.replay.mirror import MirrorAugment
from pql.replay.nstep import transition_spec
from pql.runtime import train
from tasks.base import Mirror
from tasks.mujoco.anymal import Anymal, mirror

SWAP = Mirror(obs_index=(1, 0, 2), obs_sign=(1.0, 1.0, -1.0), action_index=(1, 0), action_sign=(-1.0, -1.0))


def test_a_batch_is_followed_by_its_mirror_image():
    batch = {name: torch.randn(4, *shape) for name, (shape, _) in transition_spec(3, 2, first_step=True).items()}
    doubled = MirrorAugment(SWAP, torch.device("cpu"))(batch)
    assert set(doubled) == set(batch) and all(value.shape[0] == 8 for value in doubled.values())
    for name, value in batch.items():
        assert torch.equal(doubled[name][:4], value)
    for name in ("obs", "next_obs", "next_obs1"):
        x = batch[name]
        torch.testing.assert_close(doubled[name][4:], torch.stack([x[:, 1], x[:, 0], -x[:, 2]], 1))
    torch.testing.assert_close(doubled["action"][4:], -batch["action"].flip(1))
    for name in ("reward", "discount", "reward1", "discount1"):
        assert torch.equal(doubled[name][4:], batch[name])


def test_anymals_mirror_reaches_the_learners_through_the_layout():
    import tasks

    env = tasks.make("Anymal", 1, "cpu", backend="mujoco")
    assert ObsLayout.of(env, privileged=True).mirror == mirror() == env.mirror
    assert ObsLayout.of(tasks.make("Ant", 1, "cpu", backend="mujoco"), privileged=True).mirror is None


MIRRORED_RUN = [
    "task.num_envs=4",
    "task.eval_envs=2",
    "runtime.mode=sequential",
    "runtime.max_env_steps=160",
    "runtime.eval_every=1000000000",
    "runtime.checkpoint_every=1000000000",
    "algo.mirror=true",
    "algo.batch_size=32",
    "algo.warmup_steps=4",
    "algo.net.actor_hidden=[32,32]",
    "algo.net.critic_hidden=[32,32]",
]


def test_a_run_trains_on_mirrored_prioritized_batches(make_config, monkeypatch):
    """The V-learner's batches, doubled, write one priority per sampled transition."""
    monkeypatch.setattr(Anymal, "max_episode_steps", 40)  # a final evaluation of 40-step episodes
    final = train(make_config(["task=Anymal", "replay.kind=prioritized", *MIRRORED_RUN]))
    assert 0 < final["eval/length"] <= 40 and final["eval/lin_vel_error"] >= 0


def test_a_task_without_a_mirror_is_refused_in_one_line(make_config):
    from pql.config import ConfigError

    with pytest.raises(ConfigError, match="algo.mirror=True .* task Ant has no mirror symmetry"):
        train(make_config(["task=Ant", *MIRRORED_RUN]))
