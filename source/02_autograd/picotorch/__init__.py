"""picotorch made of chapters 01_tensor. Generated; do not edit."""
from .ch01_tensor import *  # noqa: F401,F403
