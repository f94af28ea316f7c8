"""The network kinds (algo.net.kind): shapes, the normalizations each kind promises, the weight
projections after an optimiser step, batch normalization's two modes, and the modes each role's
copy of a network runs in."""

import math

import pytest
import torch

from pql.algos.off_policy import OffPolicyAlgorithm, Projection, UpdateSettings
from pql.algos.pql import PQL
from pql.algos.sac import SAC
from pql.config import PQLConfig, SACConfig
from pql.envs import ObsLayout
from pql.nets import DoubleQ, SquashedGaussianActor
from pql.nets.batchnorm import BatchNormNet
from pql.nets.hyperspherical import HypersphericalNet
from pql.nets.layers import BatchNorm, EnsembleLinear, RMSNorm, projected_layers
from pql.runtime.weight_sync import SharedWeights, WeightsReader

KINDS = ("mlp", "hyperspherical", "batchnorm")
OBS_DIM, ACT_DIM = 5, 3


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_makes_a_policy_and_two_distinct_critic_heads(kind):
    torch.manual_seed(0)
    critic = DoubleQ(OBS_DIM, ACT_DIM, (16, 16), out_dim=7, activation="relu", kind=kind)
    policy = SquashedGaussianActor(OBS_DIM, ACT_DIM, (16, 16), activation="relu", kind=kind)
    obs, action = torch.randn(9, OBS_DIM), torch.rand(9, ACT_DIM) * 2 - 1
    q1, q2 = critic(obs, action)
    assert q1.shape == q2.shape == (9, 7)
    assert not torch.allclose(q1, q2), "the heads are initialised apart"
    assert policy(obs).shape == (9, ACT_DIM) and policy(obs).abs().max() <= 1
    assert critic.couples_batch == (kind == "batchnorm")
    assert bool(projected_layers(critic)) == (kind != "mlp")


def _unit_rows(layer: EnsembleLinear) -> torch.Tensor:
    """The norms of the weight vectors of each output feature (the columns of [E, in, out])."""
    return torch.linalg.vector_norm(layer.weight, dim=1)


def test_hyperspherical_features_stay_on_the_unit_sphere():
    torch.manual_seed(1)
    net = HypersphericalNet(OBS_DIM, (32, 32), 4, ensemble=2, expansion=4)
    seen = []
    for block in net.blocks:
        block.register_forward_hook(lambda m, i, out: seen.append(out))
    net(torch.randn(11, OBS_DIM) * 50)  # the input's scale does not reach the features
    assert len(seen) == 2
    for h in seen:
        assert torch.allclose(torch.linalg.vector_norm(h, dim=-1), torch.ones(2, 11), atol=1e-5)


@pytest.mark.parametrize("kind", ["hyperspherical", "batchnorm"])
def test_an_optimiser_step_then_the_projection_restores_every_norm(kind):
    torch.manual_seed(2)
    critic = DoubleQ(OBS_DIM, ACT_DIM, (16, 16), out_dim=5, activation="relu", kind=kind).train()
    optim = torch.optim.Adam(critic.parameters(), lr=0.1)  # a large step: the norms move far
    q1, q2 = critic(torch.randn(32, OBS_DIM), torch.randn(32, ACT_DIM))
    (q1.pow(2).mean() + q2.mean()).backward()
    optim.step()
    layers = projected_layers(critic)
    units = [m for m in layers if isinstance(m, EnsembleLinear)]
    assert units and not all(torch.allclose(_unit_rows(m), torch.ones(1)) for m in units)
    Projection(critic)()
    for m in units:
        assert torch.allclose(_unit_rows(m), torch.ones_like(_unit_rows(m)), atol=1e-5)
    for m in layers:
        if isinstance(m, BatchNorm):
            joint = (m.weight.pow(2) + m.bias.pow(2)).sum(-1).sqrt()
            assert torch.allclose(joint, torch.full_like(joint, math.sqrt(m.weight.shape[-1])), atol=1e-4)
        if isinstance(m, RMSNorm):
            norm = m.weight.pow(2).sum(-1).sqrt()
            assert torch.allclose(norm, torch.full_like(norm, math.sqrt(m.weight.shape[-1])), atol=1e-4)


def test_batch_norm_uses_the_batch_in_training_and_the_running_statistics_in_eval():
    torch.manual_seed(3)
    net = BatchNormNet(OBS_DIM, (16,), 2, ensemble=1, expansion=2).train()
    x = torch.randn(64, OBS_DIM) * 3 + 1
    before = net.embed_norm.running_mean.clone()
    net(x)
    assert not torch.equal(net.embed_norm.running_mean, before), "training folds the batch's statistics in"
    assert torch.allclose(net.embed_norm.running_mean[0, 0], 0.01 * x.mean(0), atol=1e-5)  # momentum 0.01
    # Training mode: a sample's output depends on the rest of the batch; eval mode: not at all.
    assert not torch.allclose(net(x)[0, :8], net(x[:8])[0])
    net.eval()
    running = net.embed_norm.running_mean.clone()
    assert torch.allclose(net(x)[0, :8], net(x[:8])[0], atol=1e-6)
    assert torch.equal(net.embed_norm.running_mean, running), "eval leaves the statistics alone"


def test_the_weight_sync_carries_batch_norm_statistics():
    torch.manual_seed(4)
    source = DoubleQ(OBS_DIM, ACT_DIM, (16,), activation="relu", kind="batchnorm").train()
    source(torch.randn(40, OBS_DIM) * 2, torch.randn(40, ACT_DIM))
    shared = SharedWeights(DoubleQ(OBS_DIM, ACT_DIM, (16,), activation="relu", kind="batchnorm"), "cpu")
    copy = DoubleQ(OBS_DIM, ACT_DIM, (16,), activation="relu", kind="batchnorm").eval()
    reader = WeightsReader(shared, copy)
    shared.publish(source)
    reader.pull()
    for (name, a), b in zip(source.state_dict().items(), copy.state_dict().values()):
        assert torch.equal(a, b), name
    assert any("running_var" in name for name in source.state_dict())


def _algorithm(kind: str, algo: str = "pql"):
    cfg = PQLConfig() if algo == "pql" else SACConfig()
    cfg.net.kind, cfg.net.actor_hidden, cfg.net.critic_hidden = kind, (16, 16), (16, 16)
    rules = (PQL if algo == "pql" else SAC)(cfg, OBS_DIM, ACT_DIM)
    return OffPolicyAlgorithm(rules, torch.device("cpu"), UpdateSettings(0.05, 0.005, False))


def test_each_role_trains_its_own_network_and_reads_the_others_in_eval_mode():
    v_learner, p_learner, actor = (_algorithm("batchnorm") for _ in range(3))
    v_learner.prepare("critic")
    assert v_learner.critic.training and v_learner.target_critic.training and not v_learner.policy.training
    p_learner.prepare("policy")
    assert p_learner.policy.training and not p_learner.critic.training and not p_learner.delivered.training
    actor.act(torch.randn(4, OBS_DIM), actor.exploration_noise(4))
    assert not actor.policy.training


@pytest.mark.parametrize("kind", ["hyperspherical", "batchnorm"])
def test_an_update_leaves_the_trained_network_projected(kind):
    torch.manual_seed(5)
    algo = _algorithm(kind, "sac")
    batch = ObsLayout.shared(OBS_DIM).split(
        {
            "obs": torch.randn(32, OBS_DIM),
            "action": torch.rand(32, ACT_DIM) * 2 - 1,
            "reward": torch.randn(32),
            "next_obs": torch.randn(32, OBS_DIM),
            "discount": torch.full((32,), 0.99),
        }
    )
    algo.update_critic(batch, torch.ones(32))
    algo.update_policy(batch["obs"], batch["critic_obs"])
    for net in (algo.critic, algo.policy):
        for m in projected_layers(net):
            if isinstance(m, EnsembleLinear):
                assert torch.allclose(_unit_rows(m), torch.ones_like(_unit_rows(m)), atol=1e-5)


def test_a_batch_norm_critic_learns_from_its_state_actions_and_the_next_in_one_batch():
    """The critic and its target see (s, a) and (s', a') together, so that the statistics the
    critic learns with are those its target's values come from: the loss is the one of that joint
    batch, and not the one of two separate forwards."""
    torch.manual_seed(6)
    cfg = SACConfig(value="categorical", v_min=-5.0, v_max=5.0, num_atoms=11)
    cfg.net.kind, cfg.net.actor_hidden, cfg.net.critic_hidden = "batchnorm", (16,), (16,)
    rules = SAC(cfg, OBS_DIM, ACT_DIM)
    policy, critic, target = rules.make_policy().eval(), rules.make_critic().train(), rules.make_critic().train()
    batch = ObsLayout.shared(OBS_DIM).split(
        {
            "obs": torch.randn(24, OBS_DIM),
            "action": torch.rand(24, ACT_DIM) * 2 - 1,
            "reward": torch.randn(24),
            "next_obs": torch.randn(24, OBS_DIM) + 1.0,  # another distribution than obs's
            "discount": torch.full((24,), 0.9),
        }
    )
    weights = torch.ones(24)
    torch.manual_seed(7)
    loss, _, _ = rules.critic_loss(critic, target, policy, batch, weights)
    torch.manual_seed(7)
    with torch.no_grad():
        next_action, log_prob = policy.sample(batch["next_obs"])
        both_obs = torch.cat([batch["obs"], batch["next_obs"]])
        both_action = torch.cat([batch["action"], next_action])
        t1, t2 = (t[24:] for t in target(both_obs, both_action))
        alpha = policy.log_alpha.exp()
        want_target = rules._target(batch, t1, t2, -alpha * log_prob)
    o1, o2 = (o[:24] for o in critic(both_obs, both_action))
    assert torch.allclose(loss, rules.value.loss(o1, o2, want_target).mean(), atol=1e-5)
    apart1, apart2 = critic(batch["obs"], batch["action"])
    assert not torch.allclose(loss, rules.value.loss(apart1, apart2, want_target).mean(), atol=1e-3)
