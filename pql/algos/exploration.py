"""Per-env exploration noise scales for the off-policy actors."""

from __future__ import annotations

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
    """The configured schedule (cfg: OffPolicyConfig). -> [N, 1] float32."""
    if cfg.exploration == "ape_x":
        return ape_x_noise_stds(num_envs, cfg.ape_x_epsilon, cfg.ape_x_alpha, device)
    return mixed_noise_stds(num_envs, cfg.noise_std_min, cfg.noise_std_max, device)
