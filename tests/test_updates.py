"""The learners' updates (pql.algos.updates) of PQL, PQL-D and SAC, in their eager and compiled
forms: the compiled one is one graph with no break, the eager one reads nothing back to the host,
and both make the same parameters."""

import pytest
import torch
import torch._inductor.config
from host_syncs import HostSyncs
from test_runtime import SMALL

from pql.algos.updates import CompiledAdam, CriticUpdate, PolicyUpdate
from pql.config import resolve
from pql.runtime.off_policy.roles import make_rules

OBS_DIM, ACT_DIM, BATCH = 4, 1, 32
CPU = torch.device("cpu")
ALGOS = ("pql", "pql_d", "sac")


def batch_of(seed: int) -> tuple[dict, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    batch = {
        "obs": torch.randn(BATCH, OBS_DIM, generator=gen),
        "action": torch.rand(BATCH, ACT_DIM, generator=gen) * 2 - 1,
        "reward": torch.randn(BATCH, generator=gen),
        "next_obs": torch.randn(BATCH, OBS_DIM, generator=gen),
        "discount": torch.full((BATCH,), 0.99),
    }
    return batch, torch.rand(BATCH, generator=gen) + 0.5


def updates(make_config, algo: str, compile: bool, seed: int = 0, device: torch.device = CPU):
    cfg = resolve(make_config(SMALL + [f"algo={algo}", "runtime.device=cpu"])).config
    rules = make_rules(cfg.algo, OBS_DIM, ACT_DIM)
    torch.manual_seed(seed)
    critic = CriticUpdate(rules, device, 0.05, lambda module: None, None, compile)
    policy = PolicyUpdate(rules, device, 0.05, lambda module: None, None, compile)
    return critic, policy


def run(critic: CriticUpdate, policy: PolicyUpdate, n: int) -> list[torch.Tensor]:
    """n updates of each, on batches of their own; -> every tensor they changed."""
    device = critic.params[0].device
    for i in range(n):
        batch, weights = batch_of(i)
        batch, weights = {k: v.to(device) for k, v in batch.items()}, weights.to(device)
        td_abs, stats = critic.update(batch, weights)
        assert td_abs.shape == (BATCH,) and stats["critic/loss"].dim() == 0
        policy.critic.load_state_dict(critic.critic.state_dict())
        stats = policy.update(batch["obs"])
        assert stats["policy/loss"].dim() == 0
    return [
        *critic.critic.parameters(),
        *critic.target_critic.parameters(),
        *policy.policy.parameters(),
        *policy.delivered.parameters(),
    ]


def compiled_against_eager(make_config, algo: str, device: torch.device, monkeypatch) -> None:
    """fullgraph=True: a graph break would raise; each update is one graph, compiled once. Ten
    critic and policy updates, in float64 so that rounding cannot flip a ReLU between the two forms
    (Adam still magnifies the last digits where a gradient's second moment is tiny); inductor's
    random ops fall back to eager's (SAC samples its policy, PQL smooths its targets), so both
    draw the same noise. On CUDA the compiled update must also be replayed as a CUDA graph."""
    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    counters = torch._dynamo.utils.counters
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        finals = []
        for compile in (False, True):
            torch._dynamo.reset()
            counters.clear()
            critic, policy = updates(make_config, algo, compile, device=device)
            torch.manual_seed(1)
            finals.append([t.detach().clone() for t in run(critic, policy, 10)])
        assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])  # the critic's and the policy's
        assert not counters["graph_break"], dict(counters["graph_break"])
        assert not counters["inductor"]["cudagraph_skips"], "a CUDA graph was not captured (TORCH_LOGS=cudagraphs)"
        start = [t.detach() for t in run(*updates(make_config, algo, False, device=device), 0)]
    finally:
        torch.set_default_dtype(default)
    for eager, compiled, initial in zip(*finals, start):
        assert not torch.equal(eager, initial), "the updates moved every tensor"
        torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ALGOS)
def test_a_compiled_update_is_one_graph_and_makes_the_eager_parameters(make_config, algo, monkeypatch):
    compiled_against_eager(make_config, algo, CPU, monkeypatch)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("algo", ALGOS)
def test_a_compiled_update_on_cuda_is_one_cuda_graph_and_makes_the_eager_parameters(make_config, algo, monkeypatch):
    compiled_against_eager(make_config, algo, torch.device("cuda"), monkeypatch)


def test_a_host_read_in_a_compiled_update_fails_it(make_config, monkeypatch):
    """What the test above would see of a loss that reads a value back to the host."""
    torch._dynamo.reset()
    cfg = resolve(make_config(SMALL + ["runtime.device=cpu"])).config
    rules = make_rules(cfg.algo, OBS_DIM, ACT_DIM)
    loss = rules.critic_loss

    def reading(*args):
        out = loss(*args)
        return out if out[0].item() < 1e9 else None

    monkeypatch.setattr(rules, "critic_loss", reading)
    critic = CriticUpdate(rules, CPU, 0.05, lambda module: None, None, True)
    with pytest.raises(torch._dynamo.exc.TorchDynamoException, match="data-dependent"):
        critic.update(*batch_of(0))


@pytest.mark.parametrize("algo", ALGOS)
def test_an_eager_update_makes_the_host_wait_for_nothing(make_config, algo):
    """On CUDA a scalar read or a data-dependent shape stalls the stream each update; the CPU makes
    the same calls, so they are counted here."""
    critic, policy = updates(make_config, algo, False)
    run(critic, policy, 1)  # the optimisers make their state at the first step
    with HostSyncs() as syncs:
        run(critic, policy, 2)
    assert syncs.calls == []


def test_compiled_adam_is_torch_s_adam():
    """Against torch's own Adam (fused, the eager form's) over five steps of two parameter groups,
    in float64; its state stays the optimiser's, so a checkpoint holds it."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        ours = [torch.randn(3, 4), torch.randn(5)]
        theirs = [t.clone() for t in ours]
        groups = lambda ps: [{"params": [ps[0]], "lr": 1e-2}, {"params": [ps[1]], "lr": 3e-3, "betas": (0.5, 0.9)}]
        ours_optim = torch.optim.Adam(groups(ours), fused=True)
        theirs_optim = torch.optim.Adam(groups(theirs), fused=True)
        adam = CompiledAdam(ours_optim)
        for _ in range(5):
            grads = [torch.randn(3, 4), torch.randn(5)]
            with torch.no_grad():
                adam.step(grads)
            for p, g in zip(theirs, grads):
                p.grad = g.clone()
            theirs_optim.step()
    finally:
        torch.set_default_dtype(default)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    assert ours_optim.state_dict()["state"][0]["step"].item() == 5
    torch.testing.assert_close(ours_optim.state[ours[0]]["exp_avg"], theirs_optim.state[theirs[0]]["exp_avg"])
