"""Which observations the policy and the critic read (pql.envs.ObsLayout): an env that offers the
critic columns of its own (tasks/base.py: critic_obs_dim) has them read by the critic alone, unless
task.privileged_critic=false; the normaliser a run delivers covers the policy's columns only."""

import torch

from examples.own_env import PointMass
from pql.envs import ObsLayout
from pql.nets import ObsNormalizer


def test_the_policy_reads_its_columns_and_the_critic_its_own():
    env = PointMass(3, "cpu", 0, privileged=True)
    obs = env.reset()
    layout = ObsLayout.of(env, privileged=True)
    assert (layout.width, layout.policy_dim, layout.critic_dim, layout.privileged) == (13, 6, 7, True)
    assert torch.equal(layout.policy(obs), obs[:, :6]) and torch.equal(layout.critic(obs), obs[:, 6:])
    assert torch.equal(layout.critic(obs)[:, :6], layout.policy(obs))  # the example's critic group repeats them
    off = ObsLayout.of(env, privileged=False)
    assert (off.width, off.policy_dim, off.critic_dim, off.privileged) == (13, 6, 6, False)
    assert torch.equal(off.critic(obs), obs[:, :6])


def test_observations_without_a_critic_group_are_read_whole_by_both():
    layout = ObsLayout.of(PointMass(3, "cpu", 0), privileged=True)
    obs = torch.randn(3, 6)
    assert layout == ObsLayout.shared(6) and not layout.privileged
    assert layout.policy(obs) is obs and layout.critic(obs) is obs


def test_a_batch_and_a_rollout_are_split_into_the_policy_s_and_the_critic_s_observations():
    layout = ObsLayout(5, 2, (2, 5))
    obs, next_obs = torch.arange(15.0).view(3, 5), 100 + torch.arange(15.0).view(3, 5)
    batch = layout.split({"obs": obs, "action": torch.zeros(3, 1), "next_obs": next_obs, "next_obs1": -next_obs})
    assert set(batch) == {"obs", "critic_obs", "action", "next_obs", "next_critic_obs", "next_obs1", "next_critic_obs1"}
    assert torch.equal(batch["obs"], obs[:, :2]) and torch.equal(batch["critic_obs"], obs[:, 2:])
    assert torch.equal(batch["next_critic_obs"], next_obs[:, 2:]) and torch.equal(batch["next_obs1"], -next_obs[:, :2])
    rollout = layout.split_rollout({"obs": obs.view(3, 1, 5), "final_obs": next_obs.view(3, 1, 5)})
    assert set(rollout) == {"obs", "critic_obs", "final_critic_obs"}
    assert torch.equal(rollout["final_critic_obs"], next_obs.view(3, 1, 5)[..., 2:])


def test_the_delivered_normaliser_is_the_policy_s_columns_of_the_actor_s():
    normalizer = ObsNormalizer(5)
    normalizer.update(torch.randn(64, 5) * torch.arange(1.0, 6.0) + 3.0)
    head = normalizer.head(2)
    obs = torch.randn(4, 5)
    assert torch.equal(head(obs[:, :2]), normalizer(obs)[:, :2]) and head.count == normalizer.count
    head.mean += 1.0
    assert not torch.equal(head.mean, normalizer.mean[:2])  # a copy: the actor's statistics stay as they are
