"""Training under `torchrun`: several processes (GPUs, or CPU processes with gloo) share one job.

Outside torchrun everything here is a no-op with rank 0 of 1, so the trainer reads the same either
way. Under torchrun each process takes its slice of every batch; DistributedDataParallel averages
the gradients, and the loss is weighted so that the average equals the single-process gradient of
the whole batch exactly. Rank 0 alone evaluates, logs, saves checkpoints and polls for a stop
request; it broadcasts its decisions so every rank leaves the loop at the same step.

    torchrun --standalone --nproc_per_node 2 -m lab train --preset tfmr-scratch --name ddp-run
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def launched() -> bool:
    """True in a process started by torchrun, or by another launcher with more than one process.
    torchrun with one process joins a group of one: the same NCCL (or gloo) group and DDP wrapper
    as with several, which is what one GPU allows (NCCL refuses two ranks on one GPU)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 or "TORCHELASTIC_RUN_ID" in os.environ


def setup(device: torch.device) -> tuple[int, int, torch.device]:
    """Join the process group when launched by torchrun: (rank, world size, this rank's device)."""
    if not launched():
        return 0, 1, device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def rank() -> int:
    """This process's rank (from torchrun's environment before the group is joined); 0 alone."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def broadcast(value: int, device: torch.device) -> int:
    """Rank 0's integer, on every rank (a decision: go on, stop now, stop after the checkpoint)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], device=device)
    dist.broadcast(t, src=0)
    return int(t.item())


def mean(value: float, device: torch.device) -> float:
    """The mean over ranks (e.g. of the weighted batch loss: the whole batch's loss)."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def teardown(together: bool = True) -> None:
    """Leave the process group (the end of a run under torchrun). together: every rank ended its
    run normally, so they wait for each other first; a rank that left while another was still
    finishing its last collective was once aborted by gloo ("terminate called without an active
    exception"). After an error a rank leaves at once (the others may never arrive)."""
    if dist.is_available() and dist.is_initialized():
        if together:
            dist.barrier()
        dist.destroy_process_group()
