"""A stand-in for torchvision in CI's SGLang 0.5.18 venv (.ci/run), not a package to ship.

SGLang 0.5.18's sglang.srt.utils.common imports torchvision.io.decode_jpeg at module
load (image inputs), so none of its modules import without torchvision. kvbench
conform never decodes an image, and the only torchvision that loads beside the CPU
torch CI installs is a multi-GB CUDA build; this directory goes on the 0.5.18 venv's
path instead (docs/conform.md).
"""

# transformers reads a torchvision without package metadata by this attribute, and
# parses it as a version (its image processors' defaults): without it the read is
# 'N/A' and SGLang's model configs fail to import (the SWA tree's chain reaches them).
__version__ = "0.0"
