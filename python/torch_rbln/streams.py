"""`torch.rbln.streams`, as `torch.cuda.streams`."""
from .rbln import Event, ExternalStream, Stream  # noqa: F401
