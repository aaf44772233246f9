"""Run verl 0.9.1's engine on the CPU (gloo, one process): the --cpu-dry-run of the GPU scripts and benchmarks.

verl only knows accelerator platforms; this registers a CPU stand-in so that its FSDP2 engine, losses and
optimizer run unchanged, and GPU-only scripts can be checked on a CPU before device time is spent.
"""

import os
import types

import torch


def use_cpu_platform() -> None:
    """Make verl (which only knows accelerators) run its engine on the CPU with gloo, for --cpu-dry-run."""
    from verl.plugin.platform.platform_cuda import PlatformCUDA
    from verl.plugin.platform.platform_manager import set_platform

    class CpuDeviceModule(types.ModuleType):
        # verl calls empty_cache / memory_allocated / ... on the device module; on the CPU they are no-ops
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return getattr(torch.cpu, name, lambda *args, **kwargs: 0)

        def mem_get_info(self, device=None):
            return 0, 0

        def get_device_name(self, device=None):
            return "CPU"  # verl's FLOPs table has a CPU peak

    class PlatformCPU(PlatformCUDA):
        device_name = "cpu"
        device_module = CpuDeviceModule("cpu_device")

        def is_available(self):
            return True

        def current_device(self):
            return torch.device("cpu")

        def set_device(self, device_index):
            pass

        def synchronize(self, device_index=None):
            pass

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        def manual_seed_all(self, seed):
            torch.manual_seed(seed)

        def empty_cache(self):
            pass

        def communication_backend_name(self):
            return "gloo"

    set_platform(PlatformCPU())
    os.environ["VERL_ENGINE_DEVICE"] = "cuda"  # EngineRegistry only registers FSDP for cuda/npu
