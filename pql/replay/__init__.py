from pql.replay.buffer import ReplayBuffer, UniformSampler

__all__ = ["ReplayBuffer", "UniformSampler"]
