"""Entry point for the torchrun test: the same worker bodies, started by ``torch.distributed.run``."""

from __future__ import annotations

import json
import sys

import torch.distributed as dist

from tests.distributed import workers


def main() -> None:
    """Run the checks; rank 0 prints one JSON line."""
    out = {"collectives": workers.data_and_collectives(), "train": workers.train(2, 2, 12)}
    if dist.get_rank() == 0:
        out["train"].pop("params")
        print("RESULT " + json.dumps(out), flush=True)
    dist.barrier()  # nobody tears down while a peer still talks (gloo aborts on a closed peer)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
