"""Weight sync and the staging ring without host waits: what a fence guards is used only once it
has landed. On the CPU copies land at once, so `ManualFence` plays CUDA's asynchrony: a fence
lands when the test says so."""

import pickle

import pytest
import torch
from conftest import settings_of
from test_runtime import SMALL
from torch import nn

from pql.envs import ObsLayout
from pql.runtime import device as device_module
from pql.runtime import weight_sync
from pql.runtime.off_policy.roles import build_role, make_ratios, make_rules, make_shared
from pql.runtime.weight_sync import SharedWeights, WeightsReader


class ManualFence:
    """A fence that lands when `land_all` is called (or when waited on), like a CUDA event whose
    work the GPU has not reached yet."""

    made: list = []

    def __init__(self, device):
        self.landed = False
        ManualFence.made.append(self)

    def record(self):
        return self

    def done(self) -> bool:
        return self.landed

    def wait(self) -> None:
        self.landed = True

    @classmethod
    def land_all(cls) -> None:
        for fence in cls.made:
            fence.landed = True


@pytest.fixture
def manual_fences(monkeypatch):
    ManualFence.made = []
    for module in (weight_sync, device_module):
        monkeypatch.setattr(module, "Fence", ManualFence)
    return ManualFence


def net(value: float) -> nn.Module:
    module = nn.Linear(3, 2)
    with torch.no_grad():
        for p in module.parameters():
            p.fill_(value)
    return module


def held(module: nn.Module) -> float:
    return float(module.weight.detach()[0, 0])


def test_a_publication_is_seen_only_once_its_copy_has_landed(manual_fences):
    shared = SharedWeights(net(0.0), "cpu")
    reader_net = net(-1.0)
    reader = WeightsReader(shared, reader_net)
    shared.publish(net(1.0))
    assert shared.current_version() == 0 and not reader.pull() and held(reader_net) == -1.0
    manual_fences.land_all()
    shared.publish(net(2.0))  # commits version 1, queues version 2
    assert shared.current_version() == 1
    assert not reader.pull()  # its copy of version 1 is queued, not landed
    manual_fences.land_all()
    assert reader.pull() and reader.version == 1 and held(reader_net) == 1.0


def test_newer_weights_replace_a_copy_still_in_flight(manual_fences):
    shared = SharedWeights(net(0.0), "cpu")
    shared.publish(net(1.0))
    shared.publish(net(2.0))
    manual_fences.land_all()
    shared.publish(net(3.0))
    assert shared.current_version() == 1  # one version: the second publication replaced the first
    reader_net = net(0.0)
    WeightsReader(shared, reader_net).pull_latest()
    assert held(reader_net) == 2.0


def test_a_reader_drops_a_copy_of_a_buffer_the_writer_went_on_to_overwrite(manual_fences):
    shared = SharedWeights(net(0.0), "cpu")
    shared.publish(net(1.0), wait=True)
    reader_net = net(-1.0)
    reader = WeightsReader(shared, reader_net)
    reader.pull()  # copies buffer 1 (version 1); its fence has not landed
    writer_fences = len(manual_fences.made)
    shared.publish(net(2.0), wait=True)  # version 2 into buffer 0
    shared.publish(net(3.0))  # version 3 into buffer 1: the buffer the reader is copying
    assert len(manual_fences.made) == writer_fences + 2
    manual_fences.made[writer_fences - 1].landed = True  # the reader's copy lands after the overwrite began
    assert not reader.pull() and reader.version == 0 and held(reader_net) == -1.0
    manual_fences.land_all()
    assert reader.pull_latest() == 2 and held(reader_net) == 2.0


def test_pull_latest_returns_the_version_published_when_called_or_newer(manual_fences):
    shared = SharedWeights(net(0.0), "cpu")
    reader = WeightsReader(shared, net(0.0))
    with pytest.raises(RuntimeError, match="no weights have been published"):
        reader.pull_latest()
    for value in (1.0, 2.0, 3.0):
        shared.publish(net(value), wait=True)
    assert reader.pull_latest() == 3 and held(reader.module) == 3.0


def test_a_copy_in_flight_does_not_travel_to_another_process(manual_fences):
    shared = SharedWeights(net(0.0), "cpu")
    shared.publish(net(1.0))
    assert shared._pending is not None
    assert pickle.loads(pickle.dumps(shared))._pending is None


def test_ring_slots_are_handed_over_only_once_their_copies_have_landed(make_config, manual_fences):
    """The actor counts a staged batch only once its ring write has landed; a learner frees a slot
    (counts it consumed) only once its copy into the replay has landed, so the actor never
    overwrites a slot that a learner is still reading."""
    cfg = make_config(SMALL + ["runtime.mode=sequential", "algo.nstep=1"])
    settings = settings_of(cfg).runner
    rules = make_rules(settings.algo, ObsLayout.shared(4), 1)
    shared = make_shared(settings, rules, 4, 1)
    c, slots = shared.counters, shared.ring_slots
    c.warmup_steps = 100
    ratios = make_ratios(settings.ratios, shared)
    roles = {
        name: build_role(name, settings, shared, rules, ratios, ObsLayout.shared(4), 1, fresh_start=True)
        for name in ("actor", "v_learner", "p_learner")
    }
    actor, v_learner = roles["actor"], roles["v_learner"]
    manual_fences.land_all()  # the learners' first publications

    actor.step()
    assert c.actor_steps == 0 and len(actor.ring_writes) == 1
    for _ in range(slots - 1):
        actor.step()
    assert not actor.ready()  # every slot written or being written: none is free
    manual_fences.land_all()
    actor.idle()
    assert c.actor_steps == slots

    v_learner.ingest()
    assert len(v_learner.replay) == slots * cfg.task.num_envs and c.consumed_v == 0
    roles["p_learner"].ingest()
    assert not actor.ready()  # the copies out of the ring have not landed
    manual_fences.land_all()
    v_learner.ingest()
    roles["p_learner"].ingest()
    assert c.consumed_v == slots and c.consumed_p == slots
    assert actor.ready()
