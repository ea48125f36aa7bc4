"""Trainer-step cost of running snapd beside a CPU training loop.

Used by scripts/dense-bench.sh. A PyTorch MLP (about 3.3 M parameters,
AdamW: a torch.save checkpoint of model + optimizer is about 40 MB, every
element changing each step) trains on random batches. The run alternates
windows of --steps steps: in a "with" window every --every-th step's
checkpoint is published into the daemon's generations directory and
requested (snapd_trainer.publish_generation + request_snapshot), and the
window ends by waiting for the daemon to have pushed the last one (the
wait is not counted); in a "without" window the same checkpoints are
written beside it but not requested. Step time is forward + backward +
optimizer step (the checkpoint write is the trainer's own cost in both
windows and is not counted). Prints one line per window and the medians.

    python3 trainer.py --state-dir DIR --rounds 3 --steps 30 --every 5
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import snapd_trainer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--snapd", default=None, help="the snapd binary (for wait)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--width", type=int, default=1024)
    args = ap.parse_args()

    torch.manual_seed(0)
    w = args.width
    model = torch.nn.Sequential(torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, w), torch.nn.ReLU(),
                                torch.nn.Linear(w, w), torch.nn.ReLU(), torch.nn.Linear(w, 128))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, w), torch.randn(256, 128)
    gens_dir = os.path.join(args.state_dir, "gens")
    scratch = os.path.join(args.state_dir, "scratch")
    os.makedirs(scratch, exist_ok=True)
    log = snapd_trainer.RequestLog(os.path.join(args.state_dir, "wal"))

    def step():
        t = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return time.perf_counter() - t

    def save(f):
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, f)

    for _ in range(5):  # warm-up
        step()
    gen = 0
    medians = {"with": [], "without": []}
    ratios = []
    for r in range(args.rounds):
        # Alternate which window comes first, so a drift in the machine's
        # load does not favour one of them.
        order = ["without", "with"] if r % 2 == 0 else ["with", "without"]
        got = {}
        for kind in order:
            times = []
            for s in range(1, args.steps + 1):
                times.append(step())
                if s % args.every:
                    continue
                if kind == "with":
                    gen += 1
                    p = snapd_trainer.publish_generation(gens_dir, gen, save, suffix=".pt")
                    snapd_trainer.request_snapshot(gen, p, log=log)
                else:
                    p = os.path.join(scratch, "ckpt.pt")
                    with open(p + ".tmp", "wb") as f:
                        save(f)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(p + ".tmp", p)
            if kind == "with":
                snapd_trainer.wait(gen, timeout=3600, pushed=True, state_dir=args.state_dir, snapd=args.snapd)
            m = statistics.median(times)
            got[kind] = m
            medians[kind].append(m)
            print("round %d %-7s window: median step %.1f ms (%d steps, %s)" % (
                r + 1, kind, m * 1e3, len(times), "gens up to %d requested and pushed" % gen if kind == "with" else "checkpoints written, not requested"),
                flush=True)
        ratios.append(got["with"] / got["without"])
    mw, mo = statistics.median(medians["with"]), statistics.median(medians["without"])
    print("trainer step: median %.1f ms with the daemon, %.1f ms without: %.3fx; per-round ratios %s, median %.3fx" % (
        mw * 1e3, mo * 1e3, mw / mo, " ".join("%.3f" % x for x in ratios), statistics.median(ratios)))
    log.close()


if __name__ == "__main__":
    main()
