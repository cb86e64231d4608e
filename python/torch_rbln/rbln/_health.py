"""`torch.rbln.utilization`, `memory_usage`, `clock_rate`, `power_draw`, `temperature`: torch.cuda's
device-health readings (NVML's or amdsmi's there), answered by the emulated device.

- `utilization`: the percent of the last second during which the device had work queued or running on any
  of its streams (its stream workers' busy fraction), from samples taken every 10 ms by a sampler thread.
  The thread starts at the first call (which waits a tenth of a second for its first samples) and stops a
  minute after the last one: a process that never asks runs no sampler.
- `memory_usage`: NVML's reading is the percent of time device memory was being read or written; every
  kernel of the emulated device reads and writes its memory, so that would repeat `utilization`. Here it is
  the percent of the device's capacity in use (`device_memory_used() / total_memory`, rounded).
- `clock_rate`, `power_draw`, `temperature`: the emulated device has no clock, power or thermal sensor; they
  answer 0 (MHz, mW, degrees C), as torch.cuda does on ROCm for a reading amdsmi reports as N/A. A driver for
  silicon answers them from the board.
"""
from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

import torch

from ._device import _index, device_count, get_device_properties
from .memory import device_memory_used

__all__ = ["clock_rate", "memory_usage", "power_draw", "temperature", "utilization"]

_WINDOW = 1.0  # seconds: utilization's sample period (NVML's is between 1/6 s and 1 s)
_INTERVAL = 0.01  # seconds between two samples
_NEW_STREAMS = 0.1  # seconds between two looks for streams created since
_FIRST_SAMPLES = 0.1  # seconds of samples the first call waits for
_IDLE_STOP = 60.0  # seconds after the last call when the sampler stops


def _checked(device: Any) -> int:
    index = _index(device)
    if not 0 <= index < device_count():
        raise ValueError(f"Invalid device index rbln:{index}: there are {device_count()} RBLN devices")
    return index


class _Sampler:
    """Samples, per device, whether any of its streams has unfinished work (a stream's `query()`: the
    driver's count of completed tasks against queued ones; lock-free, it never waits)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.samples: collections.deque = collections.deque()  # (time, (busy per device, ...))
        self.asked = 0.0
        self.streams: list[list[torch.Stream]] = []
        self.looked = 0.0  # when _sample last looked for new streams

    def _look_for_streams(self, index: int) -> None:
        """Adds the device's streams created since (ids 0, 1, ... in creation order; a stream lives as long as
        the process)."""
        known = self.streams[index]
        while True:
            stream = torch.Stream(stream_id=len(known), device_index=index, device_type=self.device_type)
            try:
                stream.query()
            except RuntimeError:  # no stream with that id yet
                return
            known.append(stream)

    def _sample(self, now: float) -> tuple[bool, ...]:
        if now - self.looked >= _NEW_STREAMS:
            self.looked = now
            for index in range(len(self.streams)):
                self._look_for_streams(index)
        return tuple(any(not s.query() for s in streams) for streams in self.streams)

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            sample = self._sample(now)
            with self.lock:
                self.samples.append((now, sample))
                while self.samples and self.samples[0][0] < now - _WINDOW:
                    self.samples.popleft()
                if now - self.asked > _IDLE_STOP:
                    self.thread = None
                    self.samples.clear()
                    return
            time.sleep(_INTERVAL)

    def utilization(self, index: int) -> int:
        with self.lock:
            self.asked = time.monotonic()
            if self.thread is None or not self.thread.is_alive():
                if not self.streams:
                    self.streams = [[] for _ in range(device_count())]
                    self.device_type = torch.accelerator.current_stream(0).device_type  # the enum Stream takes
                self.samples.clear()
                self.looked = 0.0
                self.thread = threading.Thread(target=self._run, name="torch.rbln.utilization", daemon=True)
                self.thread.start()
            started = self.samples[0][0] if self.samples else self.asked
        wait = started + _FIRST_SAMPLES - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        with self.lock:
            window = [sample[index] for t, sample in self.samples if t >= time.monotonic() - _WINDOW]
        return round(100 * sum(window) / len(window)) if window else 0

    def after_fork(self) -> None:
        """A forked child has no sampler thread, and a lock the parent's thread held would stay held."""
        self.lock = threading.Lock()
        self.thread = None
        self.samples.clear()


_sampler = _Sampler()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sampler.after_fork)


def utilization(device: Any = None) -> int:
    """Percent of the last second during which one or more of the device's streams had work queued or running
    (torch.cuda's: one or more kernels executing). The first call in a process starts the sampler and waits
    0.1 s for its first samples."""
    return _sampler.utilization(_checked(device))


def memory_usage(device: Any = None) -> int:
    """Percent of the device's memory capacity in use, as `device_memory_used()` counts it (torch.cuda's: the
    percent of time device memory was being read or written, which on the emulated device would repeat
    `utilization`)."""
    index = _checked(device)
    return round(100 * device_memory_used(index) / get_device_properties(index).total_memory)


def clock_rate(device: Any = None) -> int:
    """The clock in MHz: 0, the emulated device has no clock of its own (its kernels run on the host's cores)."""
    _checked(device)
    return 0


def power_draw(device: Any = None) -> int:
    """Power draw in mW: 0, the emulated device has no power sensor."""
    _checked(device)
    return 0


def temperature(device: Any = None) -> int:
    """Temperature in degrees C: 0, the emulated device has no thermal sensor."""
    _checked(device)
    return 0

