"""Unit quaternions (w, x, y, z), MuJoCo's order, batched over the leading dimensions, in torch."""

from __future__ import annotations

import torch


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The Hamilton product a ⊗ b of [..., 4] quaternions: the rotation b, then a."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        dim=-1,
    )


def quat_conj(q: torch.Tensor) -> torch.Tensor:
    """The conjugate of q [..., 4]: the inverse rotation of a unit quaternion."""
    return torch.cat([q[..., :1], -q[..., 1:]], dim=-1)


def quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v [..., 3] rotated by the unit quaternions q [..., 4]: a body's axes to the world's."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.linalg.cross(u, v)
    return v + w * t + torch.linalg.cross(u, t)


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v [..., 3] rotated by the inverse of q [..., 4]: world axes to the body's."""
    return quat_rotate(quat_conj(q), v)


def rotation_angle(q: torch.Tensor) -> torch.Tensor:
    """The angle in [0, pi] of the rotation a unit quaternion q [..., 4] stands for: 2 asin |(x, y, z)|."""
    return 2.0 * torch.asin(q[..., 1:].norm(dim=-1).clamp(max=1.0))
