"""torchvision.io as far as SGLang 0.5.18 imports it (see __init__.py): nothing here runs."""


def decode_jpeg(*args, **kwargs):
    raise NotImplementedError("CI's torchvision stand-in decodes no image (ci/sglang-0518)")
