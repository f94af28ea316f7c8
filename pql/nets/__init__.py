from pql.nets.actor import DeterministicActor, GaussianActor, SquashedGaussianActor
from pql.nets.critic import DoubleQ, ValueNet
from pql.nets.mlp import mlp
from pql.nets.normalizer import ObsNormalizer, ReturnScale

__all__ = [
    "DeterministicActor",
    "GaussianActor",
    "SquashedGaussianActor",
    "DoubleQ",
    "ValueNet",
    "mlp",
    "ObsNormalizer",
    "ReturnScale",
]
