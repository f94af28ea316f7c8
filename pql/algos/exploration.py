"""The off-policy actors' exploration state per env: PQL's noise scales (mixed or Ape-X), and noise
draws held for several steps (algo.noise_hold), for PQL's action noise and SAC's policy samples."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def mixed_noise_stds(num_envs: int, std_min: float, std_max: float, device) -> torch.Tensor:
    """PQL's mixed exploration: env i gets σ_i spread evenly over [σ_min, σ_max]. -> [N, 1]."""
    if num_envs == 1:
        return torch.full((1, 1), std_max, device=device)
    return torch.linspace(std_min, std_max, num_envs, device=device).unsqueeze(1)


def ape_x_noise_stds(num_envs: int, epsilon: float, alpha: float, device) -> torch.Tensor:
    """Ape-X/Agent57 schedule ε_l = ε^(1 + α·l/(L−1)) for env l of L. -> [N, 1]."""
    if num_envs == 1:
        return torch.full((1, 1), epsilon, device=device)
    level = torch.arange(num_envs, device=device, dtype=torch.float64) / (num_envs - 1)
    return (epsilon ** (1.0 + alpha * level)).float().unsqueeze(1)


def noise_stds(cfg, num_envs: int, device) -> torch.Tensor:
    """The configured schedule (cfg: PQLConfig). -> [N, 1] float32."""
    if cfg.exploration == "ape_x":
        return ape_x_noise_stds(num_envs, cfg.ape_x_epsilon, cfg.ape_x_alpha, device)
    return mixed_noise_stds(num_envs, cfg.noise_std_min, cfg.noise_std_max, device)


def zeta_cdf(mu: float, max_steps: int, device) -> torch.Tensor:
    """The CDF of the Zeta distribution P(k) ∝ k^−μ truncated to 1..max_steps. -> [max_steps]."""
    k = torch.arange(1, max_steps + 1, dtype=torch.float64, device=device)
    pmf = k.pow(-mu)
    return (pmf.cumsum(0) / pmf.sum()).float()


class HeldNoise:
    """Standard normal draws ε [N, act_dim], each env's held for k steps, k ~ Zeta(μ) truncated to
    1..max_steps and drawn anew per env each time its hold ends (FlashSAC holds one k for all envs
    at once). A held draw moves the body one way for a while instead of jittering it step to step:
    with μ = 2 and at most 16 steps a draw lasts 1 step 63% of the time, and 4 steps or more 14%
    of it. Everything stays on the device: no host read decides a renewal."""

    def __init__(self, num_envs: int, act_dim: int, mu: float, max_steps: int, device):
        self.cdf = zeta_cdf(mu, max_steps, device)
        self.eps = torch.zeros(num_envs, act_dim, device=device)
        self.left = torch.zeros(num_envs, dtype=torch.long, device=device)  # steps the draw has left; 0: renew

    def draw(self) -> torch.Tensor:
        """This step's ε [N, act_dim] (renewed where the hold ran out)."""
        renew = self.left <= 0
        self.eps = torch.where(renew.unsqueeze(-1), torch.randn_like(self.eps), self.eps)
        steps = torch.searchsorted(self.cdf, torch.rand(self.left.shape, device=self.left.device), right=True) + 1
        steps = steps.clamp_max(self.cdf.numel())  # a draw of rand() at the CDF's rounding
        self.left = torch.where(renew, steps, self.left) - 1
        return self.eps

    def state_dict(self) -> dict:
        return {"eps": self.eps, "left": self.left}

    def load_state_dict(self, state: dict) -> None:
        self.eps = state["eps"].to(self.eps.device)
        self.left = state["left"].to(self.left.device)


@dataclass
class Noise:
    """An off-policy actor's exploration state, made once and passed to every explore: std, PQL's
    noise scale per env [N, 1] (None for SAC, whose policy has its own); held, the held draws
    (None: a fresh draw every step, algo.noise_hold=0)."""

    std: torch.Tensor | None
    held: HeldNoise | None

    def state_dict(self) -> dict:
        return {"noise_std": self.std, "held": None if self.held is None else self.held.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if self.std is not None:
            self.std.copy_(state["noise_std"])
        if self.held is not None and state.get("held") is not None:
            self.held.load_state_dict(state["held"])


def held_noise(cfg, num_envs: int, act_dim: int, device) -> HeldNoise | None:
    """cfg's held draws (algo.noise_hold, the Zeta's maximum; 0: none)."""
    if cfg.noise_hold == 0:
        return None
    return HeldNoise(num_envs, act_dim, cfg.noise_hold_mu, cfg.noise_hold, device)
