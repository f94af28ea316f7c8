"""What a CUDA run needs from the runtime, checked on the CPU: the device each process sets, the
settings validated against the machine, host synchronisations per update, the startup stall
limit, compiled updates, the bf16 actor copy and checkpoint state loaded on the CPU."""

import time

import pytest
import torch
import torch.multiprocessing as mp
from conftest import settings_of
from test_runtime import ONE_BLOCK, SMALL

from pql import bulk
from pql.checkpoint import load_checkpoint, save_checkpoint
from pql.config import ConfigError, resolve
from pql.envs import ObsLayout
from pql.runtime import device as device_module
from pql.runtime import train
from pql.runtime.control import RatioController, RatioCounters
from pql.runtime.off_policy.precision import InferenceCopy, _bf16_copy
from pql.runtime.off_policy.roles import build_role, make_ratios, make_rules, make_shared
from pql.runtime.shared import Wakeup
from pql.runtime.waiting import StallError, Waiter


@pytest.fixture
def fake_cuda(monkeypatch):
    """A machine with two CUDA devices, as far as device selection can tell (no tensor is made)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(torch.device(d)))
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield calls
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32


def test_use_device_makes_the_runs_gpu_current_and_enables_tf32(fake_cuda):
    torch.backends.cuda.matmul.allow_tf32 = False
    assert device_module.use_device("cuda:1") == torch.device("cuda", 1)
    assert fake_cuda == [torch.device("cuda", 1)]
    assert torch.backends.cuda.matmul.allow_tf32
    assert device_module.use_device("cuda") == torch.device("cuda", 0)  # the index is filled in
    assert device_module.use_device("cpu") == torch.device("cpu") and len(fake_cuda) == 2


@pytest.mark.parametrize("value, resolved", [("cuda", "cuda:0"), ("cuda:1", "cuda:1"), ("auto", "cuda:0")])
def test_cuda_devices_resolve_to_an_index(make_config, fake_cuda, value, resolved):
    cfg = resolve(make_config([f"runtime.device={value}"])).config
    assert cfg.runtime.device == resolved
    assert cfg.runtime.compile is True and cfg.algo.batch_size == 8192
    assert (cfg.algo.beta_av, cfg.runtime.eval_every, cfg.runtime.max_time_s) == (16, 2_000_000, None)


def test_cpu_defaults_spend_a_wall_time_budget(make_config):
    """On a CPU the learners are the bottleneck (docs/tuning.md): small batches, more updates per
    env step, rarer evaluations, and 15 minutes rather than an env-step count."""
    cfg = resolve(make_config(["runtime.device=cpu"])).config
    assert (cfg.algo.batch_size, cfg.algo.beta_av, cfg.runtime.eval_every) == (128, 16, 50_000)
    assert cfg.runtime.max_time_s == 885.0 and cfg.runtime.max_env_steps == 10_000_000


def test_a_gpu_the_machine_lacks_is_a_config_error(make_config, fake_cuda):
    with pytest.raises(ConfigError, match=r"runtime.device='cuda:2'.*index < 2 \(this machine has 2"):
        resolve(make_config(["runtime.device=cuda:2"]))


PAPER_LAYOUT = ["runtime.actor_device=cuda:0", "runtime.v_learner_device=cuda:1", "runtime.p_learner_device=cuda:1"]


def test_roles_are_placed_on_their_devices(make_config, fake_cuda):
    """The PQL paper's layout: the simulator on one GPU, both learners on another. Each part of the
    shared state lives on its writer's device."""
    cfg = resolve(make_config(PAPER_LAYOUT + ["runtime.device=cuda:0"])).config
    assert (cfg.runtime.actor_device, cfg.runtime.v_learner_device, cfg.runtime.p_learner_device) == (
        "cuda:0",
        "cuda:1",
        "cuda:1",
    )
    roles = settings_of(cfg).runner
    assert [str(roles.role(n).device) for n in ("actor", "v_learner", "p_learner")] == ["cuda:0", "cuda:1", "cuda:1"]
    cfg = resolve(make_config(["runtime.device=cuda:1"])).config
    assert {cfg.runtime.actor_device, cfg.runtime.v_learner_device, cfg.runtime.p_learner_device} == {"cuda:1"}


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["runtime.v_learner_device=cuda:2"], r"runtime.v_learner_device='cuda:2'.*index < 2"),
        (
            PAPER_LAYOUT + ["runtime.mode=sequential"],
            r"runtime.mode='sequential'.*process when the roles are on different",
        ),
        (["algo=ppo", "runtime.actor_device=cuda:1"], r"runtime.actor_device='cuda:1'.*null with algo=ppo"),
    ],
)
def test_impossible_placements_are_config_errors(make_config, fake_cuda, overrides, match):
    with pytest.raises(ConfigError, match=match):
        resolve(make_config(overrides))


def test_int8_actor_on_cuda_is_a_config_error(make_config, fake_cuda):
    with pytest.raises(ConfigError, match="actor.precision='int8'.*fp32 or bf16 on CUDA"):
        resolve(make_config(["runtime.device=cuda", "actor.precision=int8"]))


def test_cpu_runs_stay_eager_unless_asked(make_config):
    cfg = resolve(make_config(["runtime.device=cpu"])).config
    assert cfg.runtime.compile is False
    cfg = resolve(make_config(["runtime.device=cpu", "runtime.compile=true"])).config
    assert cfg.runtime.compile is True


@pytest.mark.slow
def test_a_run_synchronises_rarely(make_config, tmp_path):
    """Weight sync and the ring hand-over never wait for the device: what is left is a stats read
    every few dozen updates. (Counted on the CPU through the same calls that wait on CUDA.)"""
    before = device_module.sync_count()
    train(make_config(SMALL + ["runtime.mode=sequential", "runtime.max_env_steps=1600", "runtime.device=cpu"]))
    syncs = device_module.sync_count() - before
    ckpt = load_checkpoint(tmp_path / "checkpoint.pt")
    updates = ckpt["counters"]["critic_updates"]
    assert updates > 500
    assert syncs / updates < 0.1, (syncs, updates)


def test_the_stall_limit_waits_for_startup(tmp_path):
    """Until every role has counted once, a waiting role allows runtime.startup_timeout_s (Warp
    compiles its kernels cold); afterwards runtime.stall_timeout_s."""
    counters = RatioCounters()
    ratios = RatioController(counters, 8, 2, 4)
    waiter = Waiter(
        counters,
        Wakeup(mp.get_context("spawn"), ("test",)),
        "test",
        stall_timeout_s=0.2,
        startup_timeout_s=2.0,
        started=ratios.started,
    )

    def time_to_stall() -> float:
        start = time.monotonic()
        with pytest.raises(StallError, match="no progress"):
            waiter.wait(lambda: False, lambda: None, "a test")
        return time.monotonic() - start

    assert time_to_stall() >= 2.0
    counters.actor_steps = counters.critic_updates = counters.policy_updates = 1
    assert time_to_stall() < 1.5


@pytest.mark.slow
def test_a_compiled_run_trains_and_resumes(make_config, tmp_path):
    """The learners' compiled updates, while the replay fills (its write position moves between
    every two updates): one graph each, made once, with no break; then a resume trains on."""
    compiled = SMALL + ONE_BLOCK  # the graphs inductor compiles have fewer kernels (each a C++ build)
    first = make_config(
        compiled
        + ["runtime.mode=sequential", "runtime.device=cpu", "runtime.compile=true", "runtime.max_env_steps=600"],
        run_dir=tmp_path / "first",
    )
    counters = torch._dynamo.utils.counters
    torch._dynamo.reset()
    counters.clear()
    train(first)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])  # the critic's and the policy's
    assert not counters["graph_break"], dict(counters["graph_break"])
    second = make_config(
        compiled
        + [
            "runtime.mode=sequential",
            "runtime.device=cpu",
            "runtime.compile=true",
            "runtime.max_env_steps=1000",
            f"checkpoint={tmp_path / 'first' / 'checkpoint.pt'}",
        ],
        run_dir=tmp_path / "second",
    )
    train(second)
    saved, resumed = (load_checkpoint(tmp_path / run / "checkpoint.pt") for run in ("first", "second"))
    assert resumed["counters"]["critic_updates"] > saved["counters"]["critic_updates"]
    assert any(not torch.equal(v, resumed["policy"][k]) for k, v in saved["policy"].items())


def test_bf16_actor_copy_is_made_once_and_refreshed_in_place(make_config):
    cfg = make_config(SMALL)
    policy = make_rules(cfg.algo, ObsLayout.shared(4), 1).make_policy()
    acting = InferenceCopy(policy, "bf16")
    module = acting.module
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(-0.5)
    acting.refresh()
    assert acting.module is module
    obs = torch.randn(16, 4)
    torch.testing.assert_close(acting.module(obs), _bf16_copy(policy)(obs))
    torch.testing.assert_close(acting.module(obs), policy(obs), rtol=0.05, atol=0.02)


def test_role_state_loads_from_a_cpu_checkpoint(make_config, tmp_path):
    """Checkpoints load on the CPU whatever the run's device: RNG states must reach
    Generator.set_state as CPU byte tensors, and each role moves the rest onto its device."""
    cfg = make_config(SMALL + ["runtime.mode=sequential"])
    settings = settings_of(cfg).runner
    rules = make_rules(settings.algo, ObsLayout.shared(4), 1)

    def roles():
        shared = make_shared(settings, rules, 4, 1)
        ratios = make_ratios(settings.ratios, shared)
        return {
            name: build_role(name, settings, shared, rules, ratios, ObsLayout.shared(4), 1, fresh_start=True)
            for name in ("actor", "v_learner", "p_learner")
        }

    first = roles()
    first["v_learner"].generator.manual_seed(1234)
    save_checkpoint(tmp_path / "ckpt.pt", {name: role.state_dict() for name, role in first.items()})
    state = load_checkpoint(tmp_path / "ckpt.pt")
    bulk.locate(state, tmp_path / "ckpt.pt")  # the replays written beside it, as a resume finds them
    tensors = []

    def collect(obj):
        if isinstance(obj, torch.Tensor):
            tensors.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                collect(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                collect(v)

    collect(state)
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    second = roles()
    for name, role in second.items():
        role.load_state_dict(state[name])
    assert torch.equal(second["v_learner"].generator.get_state(), first["v_learner"].generator.get_state())
    for k, v in first["p_learner"].algorithm.policy.state_dict().items():
        assert torch.equal(v, second["p_learner"].algorithm.policy.state_dict()[k])
