"""mixcse: unsupervised sentence encoders with MixCSE (Zhang et al., AAAI 2022) and SimCSE."""

from .config import TrainConfig, load_recipe
from .encoder import SentenceEncoder
from .errors import MixCSEError
from .losses import PRESETS, ContrastiveObjective, contrastive_loss
from .trainer import train

__all__ = ["TrainConfig", "load_recipe", "SentenceEncoder", "MixCSEError", "PRESETS", "ContrastiveObjective",
           "contrastive_loss", "train"]
__version__ = "0.1.0"
