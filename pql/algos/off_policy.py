"""An off-policy algorithm (PQL, PQL-D, SAC) as one object, `OffPolicyAlgorithm`: it owns the
critic, its target, the policy, the policy average the run delivers and their optimisers, and
exposes whole steps: `update_critic(batch, weights)`, `update_policy(obs, critic_obs)`,
`act(obs, noise)`. The
maths comes from the algorithm's rules (pql.algos.rules.OffPolicyRules); the roles of
pql/runtime/off_policy move data, count updates and sync weights.

PQL splits an algorithm between processes: each role holds an OffPolicyAlgorithm and runs the
step it owns (the V-learner update_critic, the P-learner update_policy, the actor act), its copy
of the other networks refreshed from their owner's publications. Networks and optimisers are
made on first use, so a role holds only what it reads, made in the order it reads them.

An update runs in one of two forms, the same mathematics:
- eager (the reference, and the CPU default): loss, gradients, the replicas' gradient mean,
  fused Adam, the Polyak updates;
- compiled (runtime.compile): one function from the batch to the new parameters (Adam and the
  Polyak updates as `_foreach_` ops on the optimiser's own state, step counts and learning rates
  as tensors) compiled with `fullgraph=True`, so no op leaves the graph and nothing reads a value
  back to the host. On CUDA it is compiled with mode="reduce-overhead", which replays it as a
  CUDA graph. With several replicas the all-reduce of the gradients splits it in two graphs,
  around the collective.
Both take the gradients with `torch.autograd.grad` over the trained network's parameters alone:
the copy of the other network takes none.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, Literal, TypeVar

import torch
from torch import nn

from pql.algos.common import SoftUpdate, adam
from pql.algos.rules import Batch, OffPolicyRules
from pql.nets.layers import projected_layers

PolicyT = TypeVar("PolicyT", bound=nn.Module)
NoiseT = TypeVar("NoiseT")

Stats = dict[str, torch.Tensor]
"""Scalars to log, as 0-d tensors: reading one is a host sync, so the learners read them every
few dozen updates."""

GradientMean = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
"""The replicas' mean of a list of gradients (one all-reduce); None where there is one replica."""


@dataclass(frozen=True)
class UpdateSettings:
    """How an algorithm's updates run. tau: the target critic's Polyak rate τ (θ' ← τθ + (1 − τ)θ'
    after each critic update). policy_average: the rate τ_π of the delivered policy, a Polyak
    average of the trained one at rate max(τ_π, 1/k) after its k-th update (0: none, the run
    delivers the policy itself): until 1/τ_π updates are made, the mean of them all, since the
    first policies would otherwise keep (1 − τ_π)^k of the random initial one (37% after 1,000
    updates at τ_π = 0.001). compile: the updates in their compiled form (the module's docstring)."""

    tau: float
    policy_average: float
    compile: bool


Part = Literal["critic", "policy"]
"""What one learner trains and checkpoints: the critic with its target and optimiser (the
V-learner's), or the policy with its optimiser and the delivered average (the P-learner's)."""


class CompiledAdam:
    """Adam's step as `_foreach_` ops on a torch.optim.Adam's own state (so checkpoints, and the
    eager form, keep reading the optimiser), with no host read: the step counts and learning rates
    are tensors on the parameters' device. The optimiser's state is made here, zeros and step 0,
    as torch's first step would make it. Holds no grad: call it under torch.no_grad."""

    def __init__(self, optim: torch.optim.Adam):
        self.optim = optim
        for group in optim.param_groups:
            if group["amsgrad"] or group["weight_decay"] or group["maximize"]:
                raise ValueError("CompiledAdam implements plain Adam: amsgrad, weight_decay and maximize must be off")
            for p in group["params"]:
                if not optim.state[p]:
                    optim.state[p] = {
                        "step": torch.zeros((), dtype=torch.float32, device=p.device),
                        "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                        "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                    }
        self.refresh()

    def refresh(self) -> None:
        """Take the optimiser's state tensors again: loading a state dict replaces them."""
        self.groups = []
        for group in self.optim.param_groups:
            params = list(group["params"])
            state = [self.optim.state[p] for p in params]
            device = params[0].device
            self.groups.append(
                {
                    "params": params,
                    "exp_avg": [s["exp_avg"] for s in state],
                    "exp_avg_sq": [s["exp_avg_sq"] for s in state],
                    "step": [s["step"] for s in state],
                    "lr": torch.tensor(group["lr"], dtype=torch.float64, device=device),
                    "betas": group["betas"],
                    "eps": group["eps"],
                }
            )

    def static_tensors(self) -> list[torch.Tensor]:
        """Every tensor the step changes or reads besides the parameters and gradients."""
        return [t for g in self.groups for k in ("exp_avg", "exp_avg_sq", "step") for t in g[k]] + [
            g["lr"] for g in self.groups
        ]

    def step(self, grads: Sequence[torch.Tensor]) -> None:
        """θ ← θ − lr·m̂/(√v̂ + ε), m̂ = m/(1 − β₁ᵗ), v̂ = v/(1 − β₂ᵗ); grads in the order of the
        optimiser's parameters, group after group."""
        start = 0
        for g in self.groups:
            params = g["params"]
            grad = list(grads[start : start + len(params)])
            start += len(params)
            beta1, beta2 = g["betas"]
            torch._foreach_add_(g["step"], 1.0)
            torch._foreach_lerp_(g["exp_avg"], grad, 1.0 - beta1)
            torch._foreach_mul_(g["exp_avg_sq"], beta2)
            torch._foreach_addcmul_(g["exp_avg_sq"], grad, grad, 1.0 - beta2)
            # In float64, as torch's fused Adam computes them: at the first step 1 − β₂ᵗ is 1e-3,
            # and float32's rounding of β₂ alone is 1e-5 of that.
            correction1 = [1.0 - torch.pow(beta1, t.double()) for t in g["step"]]
            correction2 = [torch.sqrt(1.0 - torch.pow(beta2, t.double())) for t in g["step"]]
            denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(g["exp_avg_sq"]), correction2), g["eps"])
            update = torch._foreach_div(torch._foreach_div(g["exp_avg"], denom), correction1)
            torch._foreach_mul_(update, g["lr"])
            torch._foreach_sub_(params, update)


class Projection:
    """Re-projects the weights of a network's normalized layers (pql.nets.layers: unit rows, gains
    at norm √d) after each optimiser step, as SimbaV2 and FlashSAC do; nothing for an MLP. The
    layers are listed once."""

    def __init__(self, network: nn.Module):
        self.layers = projected_layers(network)

    @torch.no_grad()
    def __call__(self) -> None:
        for layer in self.layers:
            layer.project()


def compile_unavailable(device: torch.device) -> str | None:
    """Why an update on `device` cannot be compiled into one graph here, or None where it can: the
    gradients are taken inside the graph, which needs dynamo to trace torch.autograd.grad, and on
    the CPU inductor writes C++, which needs a compiler."""
    import torch._dynamo
    import torch._inductor.cpp_builder
    import torch._inductor.exc

    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        return f"torch {torch.__version__} cannot trace torch.autograd.grad into a graph (no trace_autograd_ops)"
    if device.type == "cpu":
        try:
            torch._inductor.cpp_builder.get_cpp_compiler()
        except torch._inductor.exc.InvalidCxxCompiler:
            return "no C++ compiler for torch.compile's CPU code (g++, or the one $CXX names)"
    return None


def compiled(fn: Callable, device: torch.device) -> Callable:
    """`fn` compiled whole (`fullgraph=True`: a graph break is an error, not a slow path): with
    inductor's fusion on the CPU, replayed as a CUDA graph on CUDA."""
    import torch._dynamo

    graph = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if device.type == "cuda" else None)
    # torch.autograd.grad traced into the graph (dynamo otherwise breaks the graph before it), in
    # the calls that may compile, not for the rest of the process (a user's own torch.compile, a
    # later test). One patch object serves every call: entering it costs ~5 µs, making one ~18 µs.
    tracing_grad = torch._dynamo.config.patch(trace_autograd_ops=True)
    cuda = device.type == "cuda"

    def call(*args):
        with tracing_grad:
            if cuda:
                # One call is one update: the outputs of the previous update's graph may be overwritten.
                torch.compiler.cudagraph_mark_step_begin()
            return graph(*args)

    return call


def mark_static(tensors: Sequence[torch.Tensor]) -> None:
    """State a CUDA graph may update in place, at addresses that never change (optimiser state,
    targets): without it, a graph that mutates a tensor not a parameter is not captured."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


class _Step:
    """One learner's update in its eager or compiled form: loss_fn(*inputs) -> (loss, *outputs);
    step(*inputs) -> outputs, having applied the gradients of the loss over `optim`'s parameters
    (their replicas' mean first), Adam, then after_step (the Polyak updates). `static` lists what
    the update changes in place besides the parameters and Adam's state (CUDA graphs need them at
    fixed addresses)."""

    def __init__(
        self,
        optim: torch.optim.Adam,
        loss_fn: Callable,
        after_step: Callable[[], None],
        static: list[torch.Tensor],
        average: GradientMean | None,
        compile: bool,
    ):
        self.optim = optim
        self.params = params = [p for g in optim.param_groups for p in g["params"]]
        self.static = static
        self.adam: CompiledAdam | None = None

        def gradients(*inputs):
            loss, *outputs = loss_fn(*inputs)
            return list(torch.autograd.grad(loss, params)), tuple(outputs)

        if not compile:

            def eager(*inputs):
                grads, outputs = gradients(*inputs)
                for p, g in zip(params, grads if average is None else average(grads)):
                    p.grad = g
                optim.step()
                after_step()
                return outputs

            self.step: Callable = eager
            return
        self.adam = adam = CompiledAdam(optim)
        self._mark_static()
        device = params[0].device

        @torch.no_grad()
        def apply(grads):
            adam.step(grads)
            after_step()

        if average is None:

            def whole(*inputs):
                grads, outputs = gradients(*inputs)
                apply(grads)
                return outputs

            self.step = compiled(whole, device)
            return
        gradients_graph, apply_graph = compiled(gradients, device), compiled(apply, device)

        def split(*inputs):
            grads, outputs = gradients_graph(*inputs)
            apply_graph(average(grads))
            return outputs

        self.step = split

    def _mark_static(self) -> None:
        if self.adam is not None and self.params[0].device.type == "cuda":
            mark_static(self.adam.static_tensors() + self.static)

    def optimiser_loaded(self) -> None:
        """Loading the optimiser's state dict replaced its state tensors: take the new ones."""
        if self.adam is not None:
            self.adam.refresh()
            self._mark_static()


class OffPolicyAlgorithm(Generic[PolicyT, NoiseT]):
    """PQL, PQL-D or SAC (by its rules) with its networks, optimisers and targets, updated as
    `settings` say. gradient_mean: the replicas' mean of the trained network's gradients (None:
    one replica)."""

    def __init__(
        self,
        rules: OffPolicyRules[PolicyT, NoiseT],
        device: torch.device,
        settings: UpdateSettings,
        gradient_mean: GradientMean | None = None,
    ):
        self.rules, self.device = rules, device
        self.tau, self.policy_average = settings.tau, settings.policy_average
        self.compile = settings.compile and compile_unavailable(device) is None  # else the run's start said why
        self.gradient_mean = gradient_mean
        self.policy_updates = 0  # k, for the eager average's rate (set on a resume: resume_policy_count)

    # The networks and optimisers, each made on first use.

    # Every network starts in eval mode, as every copy of another role's network stays (a batch-
    # normalized network then uses its running statistics); the network a role trains switches to
    # training mode when its update is built.

    @cached_property
    def critic(self) -> nn.Module:
        """Q: (critic_obs [B, critic_obs_dim], action [B, act_dim]) -> its heads."""
        return self.rules.make_critic().to(self.device).eval()

    @cached_property
    def target_critic(self) -> nn.Module:
        """Q', the critic as it was when first used (a replica's after its broadcast), then
        Polyak-averaged toward it."""
        return copy.deepcopy(self.critic).requires_grad_(False)

    @cached_property
    def policy(self) -> PolicyT:
        """π: obs [B, obs_dim] -> action [B, act_dim]."""
        return self.rules.make_policy().to(self.device).eval()

    @cached_property
    def delivered(self) -> PolicyT:
        """The policy the run delivers with a policy_average: the Polyak average of π."""
        return copy.deepcopy(self.policy).requires_grad_(False).eval()

    @cached_property
    def critic_optim(self) -> torch.optim.Adam:
        return adam(self.rules.critic_optim_params(self.critic))

    @cached_property
    def policy_optim(self) -> torch.optim.Adam:
        return adam(self.rules.policy_optim_params(self.policy))

    # The steps.

    def exploration_noise(self, num_envs: int) -> NoiseT:
        """The actor's per-env exploration state (the rules'), made once and passed to every act."""
        return self.rules.exploration_noise(num_envs, self.device)

    def act(self, obs: torch.Tensor, noise: NoiseT, policy: PolicyT | None = None) -> torch.Tensor:
        """Behaviour actions [N, act_dim] in [-1, 1] for normalised obs [N, obs_dim], explored with
        `noise` (the rules' exploration_noise), by `policy` (default π; the actor passes its
        lower-precision copy)."""
        return self.rules.explore(self.policy if policy is None else policy, obs, noise)

    def priority(self, batch: Batch) -> torch.Tensor:
        """|TD error| [B] of a normalised batch, the critic standing in for its target (Ape-X's
        actor priorities: the actor holds a critic copy, and only the V-learner a target)."""
        return self.rules.td_error(self.critic, self.critic, self.policy, batch)

    def prepare(self, part: Part) -> None:
        """Make what `part`'s updates need (the target or the average, the optimiser, the step) now
        instead of at the first update: the first torch optimiser of a process imports torch's
        compiler, a second or two on a CPU, which mid-run would hold the other roles back."""
        _ = self._critic_step if part == "critic" else self._policy_step

    def update_critic(self, batch: Batch, weights: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """One critic update on a normalised batch (pql.algos.rules.Batch). weights: importance
        weights [B]. -> (|TD error| [B] for the priorities, scalars to log)."""
        td_abs, stats = self._critic_step.step(batch, weights)
        return td_abs, stats

    def update_policy(self, obs: torch.Tensor, critic_obs: torch.Tensor) -> Stats:
        """One policy update on normalised observations of B states, the policy's [B, obs_dim] and
        the critic's [B, critic_obs_dim]. -> scalars to log."""
        (stats,) = self._policy_step.step(obs, critic_obs)
        return stats

    @cached_property
    def _critic_step(self) -> _Step:
        critic, target, policy = self.critic, self.target_critic, self.policy
        # The target in training mode too: a batch-normalized target computes its values with the
        # statistics of the batch the critic learns from (its running ones are the critic's copy).
        critic.train()
        target.train()
        soft_update = SoftUpdate(target, critic)
        project = Projection(critic)

        def loss(batch: Batch, weights: torch.Tensor):
            return self.rules.critic_loss(critic, target, policy, batch, weights)

        def after_step() -> None:
            project()
            soft_update(self.tau)

        # A batch-normalized critic's running statistics change in the update too.
        static = [*target.parameters(), *target.buffers(), *critic.buffers()]
        return _Step(self.critic_optim, loss, after_step, static, self.gradient_mean, self.compile)

    @cached_property
    def _policy_step(self) -> _Step:
        policy, critic = self.policy, self.critic
        policy.train()
        project = Projection(policy)

        def loss(obs: torch.Tensor, critic_obs: torch.Tensor):
            return self.rules.policy_loss(policy, critic, obs, critic_obs)

        average: Callable[[], None] = lambda: None
        static: list[torch.Tensor] = list(policy.buffers())
        if self.policy_average:
            self._average = SoftUpdate(self.delivered, policy)
            if self.compile:
                # k on the device, in float32: inductor lost the in-place increments of a 0-d
                # float64 CPU tensor (torch 2.13). Exact to 2^24 updates; past 1/τ_π the clamp holds.
                count = torch.full((), float(self.policy_updates), dtype=torch.float32, device=self.device)
                self._device_count = count
                average = self._average_on_device
                static += [count, *self.delivered.parameters(), *self.delivered.buffers()]
            else:
                average = self._average_on_host

        def after_step() -> None:
            project()
            average()

        return _Step(self.policy_optim, loss, after_step, static, self.gradient_mean, self.compile)

    def _average_on_host(self) -> None:
        self.policy_updates += 1
        self._average(max(self.policy_average, 1.0 / self.policy_updates))

    def _average_on_device(self) -> None:
        self._device_count.add_(1.0)
        rate = torch.clamp(1.0 / self._device_count, min=self.policy_average)
        diff = torch._foreach_sub(self._average.source, self._average.target)
        torch._foreach_mul_(diff, rate)
        torch._foreach_add_(self._average.target, diff)
        for t, s in self._average.buffers:
            t.copy_(s)

    # Checkpoints.

    def state_dict(self, part: Part) -> dict:
        """What a checkpoint keeps of `part`: the critic's "critic", "target_critic" and "optim",
        or the policy's "policy", "optim" and (with a policy_average) "delivered"."""
        if part == "critic":
            return {
                "critic": self.critic.state_dict(),
                "target_critic": self.target_critic.state_dict(),
                "optim": self.critic_optim.state_dict(),
            }
        state = {"policy": self.policy.state_dict(), "optim": self.policy_optim.state_dict()}
        return {**state, "delivered": self.delivered.state_dict()} if self.policy_average else state

    def load_state_dict(self, state: dict, part: Part) -> None:
        """Restore state_dict(part)'s value, in place (every copy and step keeps its tensors). A
        state saved without a policy average gives the delivered policy the trained one."""
        if part == "critic":
            self.critic.load_state_dict(state["critic"])
            self.target_critic.load_state_dict(state["target_critic"])
            self.critic_optim.load_state_dict(state["optim"])
            step = self.__dict__.get("_critic_step")  # built already: the optimiser's new tensors
        else:
            self.policy.load_state_dict(state["policy"])
            self.policy_optim.load_state_dict(state["optim"])
            if self.policy_average:
                self.delivered.load_state_dict(state.get("delivered", state["policy"]))
            step = self.__dict__.get("_policy_step")
        if step is not None:
            step.optimiser_loaded()

    def resume_policy_count(self, updates: int) -> None:
        """The policy updates made before a resume: where the average's rate continues."""
        self.policy_updates = updates
        if self.compile and self.policy_average and "_policy_step" in vars(self):
            self._device_count.fill_(updates)
