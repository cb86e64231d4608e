"""vLLM on rbln: the platform plugin vLLM finds through the `vllm.platform_plugins` entry point.

`register` runs in every vLLM process before the platform is chosen; it imports nothing from vLLM so that
listing plugins stays cheap. See docs/serving.md.
"""


def register() -> str | None:
    """vLLM's platform plugin hook: the class path of the rbln platform, or None with no rbln device."""
    import torch

    import torch_rbln  # noqa: F401  (registers the device)

    return "torch_rbln.vllm.platform.RBLNPlatform" if torch.rbln.is_available() else None
