"""PQL, PQL-D and SAC as algorithm objects (pql.algos.off_policy): their updates in the eager and
compiled forms, the compiled one graph with no break, the eager one reading nothing back to the
host, both making the same parameters; a role's networks made as it reads them; checkpoints. The
critic reads observations of its own, overlapping the policy's (pql.envs.ObsLayout), as a learner
hands them over: views of one normalised batch."""

import functools
import io

import pytest
import torch
import torch._inductor.config
from host_syncs import HostSyncs
from test_runtime import ONE_BLOCK, SMALL

from pql.algos.off_policy import CompiledAdam, OffPolicyAlgorithm, UpdateSettings, compile_unavailable
from pql.config import resolve
from pql.config.announce import compile_warning
from pql.envs import ObsLayout
from pql.runtime.off_policy.roles import make_rules

OBS_DIM, ACT_DIM, BATCH = 4, 1, 32
LAYOUT = ObsLayout(OBS_DIM + 3, OBS_DIM, (2, OBS_DIM + 3))  # the critic: the policy's last 2 and 3 more
CPU = torch.device("cpu")
# Each algorithm, and the normalized learners: SimbaV2's form on PQL with the HL-Gauss critic,
# FlashSAC's on SAC with the categorical one (the return's scale is the V-learner's input, not the
# update's), and one residual block each (SMALL's two would double the size of the graphs the
# compiled tests build).
VARIANTS = {
    "pql": ["algo=pql"],
    "pql_d": ["algo=pql_d"],
    "sac": ["algo=sac"],
    "pql-hyperspherical": ["algo=pql", "algo.net.kind=hyperspherical", "algo.value=hl_gauss", *ONE_BLOCK],
    "sac-batchnorm": [
        "algo=sac",
        *ONE_BLOCK,
        "algo.net.kind=batchnorm",
        "algo.value=categorical",
        "algo.return_scaling=true",
        "algo.target_entropy_std=0.15",
    ],
}
ALGOS = tuple(VARIANTS)
# On the CPU the compiled form is checked against the eager one on the two that together hold
# PQL's and SAC's losses, both histogram heads and both residual kinds with their projections
# (6-10 s each); the MLP's compiled updates with the scalar head run in tests/test_device.py's
# compiled training run (inductor's code, one graph each, no break) and the compiled resume below
# (SAC's, bit for bit).
COMPILED = ("pql-hyperspherical", "sac-batchnorm")


@pytest.fixture
def aot_eager(monkeypatch):
    """torch.compile as the library calls it, with the backend "aot_eager": dynamo and AOTAutograd
    trace the update as for inductor (one graph or an error, torch.autograd.grad, the functionalized
    optimiser step, the weight projections, the batch-norm statistics: everything pql's code
    decides), and the traced graphs run eagerly. Inductor would generate and compile C++ for ~45
    kernels a variant, 30-60 s on 2 cores with its cache cold, as on a fresh CI machine; its own
    code runs in tests/test_device.py's compiled training run, and on CUDA below."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))


def batch_of(seed: int, device: torch.device = CPU) -> tuple[dict, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    batch = {
        "obs": torch.randn(BATCH, LAYOUT.width, generator=gen),
        "action": torch.rand(BATCH, ACT_DIM, generator=gen) * 2 - 1,
        "reward": torch.randn(BATCH, generator=gen),
        "next_obs": torch.randn(BATCH, LAYOUT.width, generator=gen),
        "discount": torch.full((BATCH,), 0.99),
    }
    weights = torch.rand(BATCH, generator=gen) + 0.5
    return LAYOUT.split({k: v.to(device) for k, v in batch.items()}), weights.to(device)


def algorithm(make_config, algo: str, compile: bool, device: torch.device = CPU) -> OffPolicyAlgorithm:
    cfg = resolve(make_config(SMALL + VARIANTS[algo] + ["runtime.device=cpu"])).config
    return OffPolicyAlgorithm(make_rules(cfg.algo, LAYOUT, ACT_DIM), device, UpdateSettings(0.05, 0.05, compile))


def updates(make_config, algo: str, compile: bool, seed: int = 0, device: torch.device = CPU):
    """The algorithm objects of a V-learner and a P-learner, their networks made in the learners'
    order."""
    torch.manual_seed(seed)
    v_learner, p_learner = (algorithm(make_config, algo, compile, device) for _ in range(2))
    _ = v_learner.critic, v_learner.policy  # made on first use: in the V-learner's order,
    _ = p_learner.policy, p_learner.critic  # and in the P-learner's
    return v_learner, p_learner


def run(v_learner: OffPolicyAlgorithm, p_learner: OffPolicyAlgorithm, n: int) -> list[torch.Tensor]:
    """n updates of each, on batches of their own, each learner's copy of the other's network
    refreshed before its update; -> every tensor they changed."""
    device = v_learner.device
    for i in range(n):
        batch, weights = batch_of(i, device)
        v_learner.policy.load_state_dict(p_learner.policy.state_dict())
        td_abs, stats = v_learner.update_critic(batch, weights)
        assert td_abs.shape == (BATCH,) and stats["critic/loss"].dim() == 0
        p_learner.critic.load_state_dict(v_learner.critic.state_dict())
        stats = p_learner.update_policy(batch["obs"], batch["critic_obs"])
        assert stats["policy/loss"].dim() == 0
    return [
        *v_learner.critic.parameters(),
        *v_learner.target_critic.parameters(),
        *p_learner.policy.parameters(),
        *p_learner.delivered.parameters(),
    ]


def compiled_against_eager(make_config, algo: str, device: torch.device) -> None:
    """fullgraph=True: a graph break would raise; each update is one graph, compiled once. Ten
    critic and policy updates, in float64 so that rounding cannot flip a ReLU between the two forms
    (Adam still magnifies the last digits where a gradient's second moment is tiny); inductor's
    random ops fall back to eager's (SAC samples its policy, PQL smooths its targets), so both
    draw the same noise. On CUDA the compiled update must also be replayed as a CUDA graph. Torch's
    settings are changed through its own scoped patch: a monkeypatched config module loses the
    entry on undo (pytest 9.2 deletes what was not in the module's __dict__)."""
    with torch._inductor.config.patch(fallback_random=True):
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
            assert not torch._dynamo.config.trace_autograd_ops, "the compiled update left dynamo's setting changed"
            start = [t.detach() for t in run(*updates(make_config, algo, False, device=device), 0)]
        finally:
            torch.set_default_dtype(default)
    for eager, compiled, initial in zip(*finals, start):
        assert not torch.equal(eager, initial), "the updates moved every tensor"
        torch.testing.assert_close(compiled, eager, rtol=1e-6, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("algo", COMPILED)
def test_a_compiled_update_is_one_graph_and_makes_the_eager_parameters(make_config, algo, aot_eager):
    compiled_against_eager(make_config, algo, CPU)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("algo", ALGOS)
def test_a_compiled_update_on_cuda_is_one_cuda_graph_and_makes_the_eager_parameters(make_config, algo):
    compiled_against_eager(make_config, algo, torch.device("cuda"))


def test_a_host_read_in_a_compiled_update_fails_it(make_config, monkeypatch):
    """What the test above would see of a loss that reads a value back to the host."""
    torch._dynamo.reset()
    cfg = resolve(make_config(SMALL + ["runtime.device=cpu"])).config
    rules = make_rules(cfg.algo, LAYOUT, ACT_DIM)
    loss = rules.critic_loss

    def reading(*args):
        out = loss(*args)
        return out if out[0].item() < 1e9 else None

    monkeypatch.setattr(rules, "critic_loss", reading)
    compiled = OffPolicyAlgorithm(rules, CPU, UpdateSettings(0.05, 0.0, True))
    with pytest.raises(torch._dynamo.exc.TorchDynamoException, match="data-dependent"):
        compiled.update_critic(*batch_of(0))


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


def test_a_role_makes_only_the_networks_it_reads(make_config):
    """The actor acts: a policy and nothing else; the V-learner's update makes the critic, its
    target and their optimiser beside the policy copy, and no policy optimiser or average."""
    actor = algorithm(make_config, "pql", False)
    actor.act(torch.randn(3, OBS_DIM), actor.exploration_noise(3))
    assert {"policy"} == {k for k in ("critic", "target_critic", "policy", "delivered") if k in vars(actor)}
    v_learner = algorithm(make_config, "pql", False)
    v_learner.update_critic(*batch_of(0))
    made = {
        k
        for k in ("critic", "target_critic", "policy", "delivered", "critic_optim", "policy_optim")
        if k in vars(v_learner)
    }
    assert made == {"critic", "target_critic", "policy", "critic_optim"}


@pytest.mark.slow
@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_a_resumed_algorithm_updates_as_the_uninterrupted_one(make_config, compile, aot_eager):
    """Each learner's part saved after three updates and loaded into fresh objects, one of them
    having updated already (a compiled step then takes the optimiser's new state tensors): three
    more updates give the uninterrupted objects' tensors, bit for bit."""
    torch._dynamo.reset()
    first = updates(make_config, "sac", compile, seed=0)
    run(*first, 3)
    file = io.BytesIO()  # as a checkpoint holds them: copies, not the live tensors
    torch.save([first[0].state_dict("critic"), first[1].state_dict("policy")], file)
    file.seek(0)
    saved = torch.load(file)
    resumed = updates(make_config, "sac", compile, seed=1)
    run(*resumed, 1)
    resumed[0].load_state_dict(saved[0], "critic")
    resumed[1].load_state_dict(saved[1], "policy")
    resumed[1].resume_policy_count(3)
    torch.manual_seed(2)  # SAC's draws
    uninterrupted = [t.detach().clone() for t in run(*first, 3)]
    torch.manual_seed(2)
    for a, b in zip(uninterrupted, run(*resumed, 3)):
        assert torch.equal(a, b)


def test_without_a_cpp_compiler_the_updates_run_eagerly_and_the_start_says_so(make_config):
    with torch._inductor.config.patch({"cpp.cxx": ("no-such-compiler++",)}):
        assert "no C++ compiler" in compile_unavailable(CPU)
        compiled = algorithm(make_config, "pql", True)
        compiled.update_critic(*batch_of(0))
        assert not compiled.compile and compiled._critic_step.adam is None  # the eager form
        resolved = resolve(make_config(SMALL + ["runtime.device=cpu", "runtime.compile=true"]))
        assert compile_warning(resolved) == (
            "pql: warning: runtime.compile=true runs the updates eagerly: no C++ compiler for "
            "torch.compile's CPU code (g++, or the one $CXX names)"
        )
    assert compile_warning(resolve(make_config(SMALL + ["runtime.device=cpu"]))) is None
