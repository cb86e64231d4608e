"""`torch.rbln.streams`, as `torch.cuda.streams`."""
from .rbln import Event, Stream  # noqa: F401
