"""The two learning updates of an off-policy algorithm (PQL, PQL-D, SAC), each an object that owns
what it changes: `CriticUpdate` the critic, its target, their optimiser and the policy copy its
targets read (the V-learner's); `PolicyUpdate` the policy, its optimiser, the critic copy its loss
reads and the policy average the run delivers (the P-learner's). The algorithm's maths comes
from its rules (pql.algos.rules.OffPolicyRules); the roles move data, count updates and sync
weights. PQL splits an algorithm between two processes, so its state is split the same way:
each role holds only the networks it reads.

An update runs in one of two forms, the same mathematics:
- eager (the reference, and the CPU default): loss, backward, the replicas' gradient mean,
  fused Adam, the Polyak update;
- compiled (runtime.compile): one function from the batch to the new parameters (gradients by
  `torch.autograd.grad`, Adam and the Polyak update as `_foreach_` ops on the optimiser's own
  state, learning rates as tensors) compiled with `fullgraph=True`, so no op leaves the graph
  and nothing reads a value back to the host. On CUDA it is compiled with
  mode="reduce-overhead", which replays it as a CUDA graph. With several replicas the
  all-reduce of the gradients splits it in two graphs, around the collective.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn

from pql.algos.common import Checkpointable, SoftUpdate, adam
from pql.algos.rules import Batch, OffPolicyRules

Stats = dict[str, torch.Tensor]
"""Scalars to log, as 0-d tensors: reading one is a host sync, so the learners read them every
few dozen updates."""

GradientMean = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
"""The replicas' mean of a list of gradients (one all-reduce); None where there is one replica."""


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


def compile_unavailable() -> str | None:
    """Why this torch cannot compile a whole update into one graph, or None where it can: the
    gradients are taken inside the graph, which needs dynamo to trace torch.autograd.grad."""
    import torch._dynamo

    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        return f"torch {torch.__version__} cannot trace torch.autograd.grad into a graph (no trace_autograd_ops)"
    return None


def compiled(fn: Callable, device: torch.device) -> Callable:
    """`fn` compiled whole (`fullgraph=True`: a graph break is an error, not a slow path): with
    inductor's fusion on the CPU, replayed as a CUDA graph on CUDA."""
    import torch._dynamo

    # torch.autograd.grad traced into the graph (dynamo otherwise breaks the graph before it).
    torch._dynamo.config.trace_autograd_ops = True
    graph = torch.compile(fn, fullgraph=True, dynamic=False, mode="reduce-overhead" if device.type == "cuda" else None)
    if device.type != "cuda":
        return graph

    def call(*args):
        # One call is one update: the outputs of the previous update's graph may be overwritten.
        torch.compiler.cudagraph_mark_step_begin()
        return graph(*args)

    return call


def mark_static(tensors: Sequence[torch.Tensor]) -> None:
    """State a CUDA graph may update in place, at addresses that never change (optimiser state,
    targets): without it, a graph that mutates a tensor not a parameter is not captured."""
    for t in tensors:
        torch._dynamo.mark_static_address(t)


class _Update(Checkpointable):
    """What both updates share: one optimiser over `params`, the step in its eager or compiled
    form, and the gradients' replica mean."""

    optim: torch.optim.Adam
    params: list[torch.Tensor]

    def _build_step(
        self, loss_fn: Callable, after_step: Callable[[], None], average: GradientMean | None, compile: bool
    ) -> None:
        """self.step(*inputs) -> loss_fn's outputs without the loss: loss, gradients, their mean,
        Adam, then after_step (the Polyak updates)."""
        self.adam: CompiledAdam | None = None
        if not compile or compile_unavailable():  # the run's start said so (pql.config.announce)

            def eager(*inputs):
                loss, *outputs = loss_fn(*inputs)
                self.optim.zero_grad(set_to_none=True)
                loss.backward()
                if average is not None:
                    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
                    for p, g in zip(self.params, average(grads)):
                        p.grad = g
                self.optim.step()
                after_step()
                return tuple(outputs)

            self.step = eager
            return
        self.adam = adam = CompiledAdam(self.optim)
        self._mark_static()
        device = self.params[0].device

        def gradients(*inputs):
            loss, *outputs = loss_fn(*inputs)
            return list(torch.autograd.grad(loss, self.params)), tuple(outputs)

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

    def static_state(self) -> list[torch.Tensor]:
        """Tensors the update changes in place besides the parameters and Adam's state."""
        return []

    def _mark_static(self) -> None:
        if self.adam is not None and self.params[0].device.type == "cuda":
            mark_static(self.adam.static_tensors() + self.static_state())

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if self.adam is not None:
            self.adam.refresh()  # loading replaced the optimiser's state tensors
            self._mark_static()


class CriticUpdate(_Update):
    """The V-learner's: the critic, its target θ' (Polyak-averaged at rate τ after each step),
    their optimiser, and the policy copy the targets read (refreshed by the V-learner from the
    P-learner's publications). share(module) gives every replica rank 0's networks before the
    target is copied from them."""

    state_attrs = ("critic", "target_critic", "optim")

    def __init__(
        self,
        rules: OffPolicyRules,
        device: torch.device,
        tau: float,
        share: Callable[[nn.Module], None],
        average: GradientMean | None,
        compile: bool,
    ):
        self.critic = rules.make_critic().to(device)
        share(self.critic)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.soft_update = SoftUpdate(self.target_critic, self.critic)
        self.policy = rules.make_policy().to(device).requires_grad_(False)
        self.optim = adam(rules.critic_optim_params(self.critic))
        self.params = [p for g in self.optim.param_groups for p in g["params"]]

        def loss(batch: Batch, weights: torch.Tensor):
            return rules.critic_loss(self.critic, self.target_critic, self.policy, batch, weights)

        self._build_step(loss, lambda: self.soft_update(tau), average, compile)

    def static_state(self) -> list[torch.Tensor]:
        return list(self.target_critic.parameters()) + list(self.target_critic.buffers())

    def update(self, batch: Batch, weights: torch.Tensor) -> tuple[torch.Tensor, Stats]:
        """One critic update on a normalised batch. weights: importance weights [B].
        -> (|TD error| [B] for the priorities, scalars to log)."""
        td_abs, stats = self.step(batch, weights)
        return td_abs, stats


class PolicyUpdate(_Update):
    """The P-learner's: the policy, its optimiser, the critic copy its loss reads (refreshed by
    the P-learner), and with a rate τ_π (algo.policy_average) the delivered policy, a Polyak
    average of the trained one at rate max(τ_π, 1/(k+1)) after its k-th update: until 1/τ_π
    updates are made, the mean of them all, since the first policies would otherwise keep
    (1 − τ_π)^k of the random initial one (37% after 1,000 updates at τ_π = 0.001)."""

    def __init__(
        self,
        rules: OffPolicyRules,
        device: torch.device,
        average_rate: float,
        share: Callable[[nn.Module], None],
        average: GradientMean | None,
        compile: bool,
    ):
        self.policy = rules.make_policy().to(device)
        share(self.policy)
        self.critic = rules.make_critic().to(device).requires_grad_(False)
        self.optim = adam(rules.policy_optim_params(self.policy))
        self.params = [p for g in self.optim.param_groups for p in g["params"]]
        self.average_rate = average_rate
        self.state_attrs: tuple[str, ...] = ("policy", "optim")
        self.updates = torch.zeros((), dtype=torch.float32, device=device)  # k, for the compiled rate
        after_step: Callable[[], None] = lambda: None
        if average_rate:
            # The policy the run delivers: a Polyak average of this one, published for evaluation.
            self.delivered = copy.deepcopy(self.policy).requires_grad_(False)
            self.average = SoftUpdate(self.delivered, self.policy)
            self.state_attrs += ("delivered",)
            after_step = self._average_compiled if compile else self._average_eager
        self.made = 0  # updates made, for the eager rate (the P-learner sets it on a resume)

        def loss(obs: torch.Tensor):
            return rules.policy_loss(self.policy, self.critic, obs)

        self._build_step(loss, after_step, average, compile)

    def _average_eager(self) -> None:
        self.made += 1
        self.average(max(self.average_rate, 1.0 / self.made))

    def _average_compiled(self) -> None:
        self.updates.add_(1.0)
        rate = torch.clamp(1.0 / self.updates, min=self.average_rate)
        diff = torch._foreach_sub(self.average.source, self.average.target)
        torch._foreach_mul_(diff, rate)
        torch._foreach_add_(self.average.target, diff)
        for t, s in self.average.buffers:
            t.copy_(s)

    def static_state(self) -> list[torch.Tensor]:
        delivered = [*self.delivered.parameters(), *self.delivered.buffers()] if self.average_rate else []
        return [self.updates, *delivered]

    def start_count(self, updates: int) -> None:
        """The updates made before this object (a resume): where the average's rate continues."""
        self.made = updates
        self.updates.fill_(updates)

    def update(self, obs: torch.Tensor) -> Stats:
        """One policy update on normalised observations [B, obs_dim]. -> scalars to log."""
        (stats,) = self.step(obs)
        return stats
