#!/usr/bin/env python3
"""A sharded 'trainer' for snapd's multi-rank tests.

    ranks_trainer.py GEN WORLD_SIZE STATE_DIR_0 ... STATE_DIR_{W-1}

Writes generation GEN as WORLD_SIZE torch.save shards, one per rank (rank R
holds its slice of every layer, named as a tensor-parallel job names them:
layers.L.w with its own rows), publishes each atomically into
STATE_DIR_R/gens and asks rank R's daemon for it with
snapd_trainer.request_snapshot(..., rank=R, world_size=W). Values change
with GEN in a few rows only, as training does. Needs torch.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import snapd_trainer  # noqa: E402
import torch  # noqa: E402


def shard(gen, rank, world):
    g = torch.Generator().manual_seed(1000 + rank)
    out = {}
    for layer in range(3):
        w = torch.randn(256 // world, 64, generator=g)
        # Training moves a few rows per step.
        rows = torch.arange(gen % 7, w.shape[0], 17)
        w[rows] += 0.01 * gen
        out["layers.%d.w" % layer] = w
        out["layers.%d.b" % layer] = torch.full((64,), float(gen + rank))
    out["step"] = torch.tensor(gen)
    return out


def main():
    gen, world = int(sys.argv[1]), int(sys.argv[2])
    states = sys.argv[3:]
    if len(states) != world:
        raise SystemExit("want %d state dirs, got %d" % (world, len(states)))
    for rank, state in enumerate(states):
        gens = os.path.join(state, "gens")
        path = snapd_trainer.publish_generation(gens, gen, lambda f: torch.save(shard(gen, rank, world), f), suffix=".pt")
        snapd_trainer.request_snapshot(gen, path, state_dir=state, requester="trainer:rank%d" % rank, rank=rank, world_size=world)


if __name__ == "__main__":
    main()
