#!/usr/bin/env python3
"""Trains a small MLP on random data and prints each step's loss, for comparing runs with and without
tvmm (docs/pytorch.md):

    python examples/pytorch_mlp.py                                     # reference
    LD_PRELOAD=build/lib/libtvmm_preload.so TVMM_DEVICE_BACKEND=cuda \\
        TVMM_DEVICE_BUDGET=1GiB python examples/pytorch_mlp.py          # transparent mode
    python examples/pytorch_mlp.py --pluggable build/lib/libtvmm_preload.so
"""
import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pluggable", metavar="LIB", help="use tvmm through CUDAPluggableAllocator from LIB")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--width", type=int, default=8192, help="hidden width (memory grows with its square)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--peak", action="store_true", help="print the peak memory PyTorch allocated")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("pytorch_mlp: no CUDA device; this example needs a GPU", file=sys.stderr)
        return 2
    if args.pluggable:
        alloc = torch.cuda.memory.CUDAPluggableAllocator(args.pluggable, "tvmm_malloc", "tvmm_free")
        torch.cuda.memory.change_current_allocator(alloc)

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(args.batch, args.width, generator=gen).to(dev)
    y = torch.randint(0, 10, (args.batch,), generator=gen).to(dev)

    for step in range(args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        print(f"step {step} loss {loss.item():.6f} time_ms {(time.perf_counter() - t0) * 1e3:.1f}", flush=True)
    if args.peak and not args.pluggable:
        print(f"peak_bytes {torch.cuda.max_memory_allocated()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
