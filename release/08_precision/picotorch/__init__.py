"""picotorch made of chapters 01_tensor, 02_autograd, 03_module, 04_training, 05_backend, 06_compile, 07_conv. Generated; do not edit."""
from .ch01_tensor import *  # noqa: F401,F403
from .ch02_autograd import *  # noqa: F401,F403
from .ch03_module import *  # noqa: F401,F403
from .ch04_training import *  # noqa: F401,F403
from .ch05_backend import *  # noqa: F401,F403
from .ch06_compile import *  # noqa: F401,F403
from .ch07_conv import *  # noqa: F401,F403
