"""Data-parallel evaluation under ``torchrun`` / ``accelerate launch``: documents split across ranks.

World size and rank come from the launcher's environment (WORLD_SIZE, RANK, LOCAL_RANK). Every rank
scores every cell of its documents with the same code as a single process, so the gathered cells are
exactly what one process would produce.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    owns_group: bool = False  # we created the process group, so we tear it down

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, items: list[T]) -> list[T]:
        """Round-robin: rank r takes items r, r+size, ... (balanced when lengths are similar)."""
        return items[self.rank::self.size]


def world_from_env() -> World:
    size = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if size <= 1:
        return World()
    return World(int(os.environ.get("RANK", "0")), size, int(os.environ.get("LOCAL_RANK", "0")))


def launcher() -> list[str]:
    """How this process was started: ``ropectl``, or torchrun with as many processes on one machine (a multi-node
    launch is the user's own command: it is named, not rebuilt)."""
    world, local = (int(os.environ.get(k, "1") or 1) for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"))
    if "LOCAL_RANK" not in os.environ:  # no launcher (one launched process still needs one: --fsdp asks for it)
        return ["ropectl"]
    if world == local:
        return ["torchrun", "--nproc_per_node", str(world), "-m", "ropectl"]
    return [f"<your {world}-process launcher>", "-m", "ropectl"]


def init(world: World, device: str) -> World:
    """Join (or create) the process group: gloo on CPU, nccl on CUDA."""
    if world.size <= 1:
        return world
    import torch.distributed as dist

    if dist.is_initialized():
        return world
    backend = "nccl" if device.startswith("cuda") else "gloo"
    # Ranks wait for each other only at the end; long sweeps must not trip the default 30-minute timeout.
    dist.init_process_group(backend=backend, timeout=timedelta(hours=12))
    return World(world.rank, world.size, world.local_rank, owns_group=True)


def broadcast(world: World, value: Any) -> Any:
    """Rank 0's value on every rank (e.g. the timestamped output folder)."""
    if world.size <= 1:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_gather(world: World, items: list[Any]) -> list[Any]:
    if world.size <= 1:
        return list(items)
    import torch.distributed as dist

    boxes: list[Any] = [None] * world.size
    dist.all_gather_object(boxes, list(items))
    return [item for box in boxes for item in box]


def finish(world: World, clean: bool = True) -> None:
    """Leave the group. After a clean run every rank first waits for the others: a rank that tears gloo
    down while a peer is still inside the final gather makes that peer's process abort."""
    if world.owns_group:
        import torch.distributed as dist

        if clean:
            dist.barrier()
        leave_group()


def leave_group() -> None:
    """Tear this process's group down, whoever started it, before the process exits: a gloo rank that exits with its
    threads still up can abort ("terminate called without an active exception"; finetune saw 1 run in 10 on CPU),
    whereupon torchrun kills the other ranks, rank 0 perhaps mid-write."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # no CUDA context started just for this
        torch.cuda.synchronize()  # the last collective's kernels are done before NCCL's communicator goes
    dist.destroy_process_group()
