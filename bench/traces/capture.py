#!/usr/bin/env python3
"""Captures a tvmm model trace (docs/trace-format.md) from a real PyTorch training step on the CPU.

Runs one warm-up step (so gradients and optimizer state exist), then records the next step -- forward,
loss, backward and optimizer -- under a TorchDispatchMode that sees every aten operator. For each
operator it writes the tensor storages read and written, with their sizes, and the operator's
measured time. Weights are randomly initialised; nothing is downloaded.

    python3 bench/traces/capture.py resnet18 bench/traces/resnet18.trace.gz
    python3 bench/traces/capture.py gpt2 bench/traces/gpt2.trace.gz

Needs Debian's python3-torch and python3-torchvision (tools/setup/install-deps.sh traces).
"""
import argparse
import gzip
import math
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"capture.py: {e}; install python3-torch and python3-torchvision "
             "(tools/setup/install-deps.sh traces)")


def tensors_in(value):
    flat, _ = tree_flatten(value)
    return [t for t in flat if isinstance(t, torch.Tensor)]


def storage_of(t):
    """(key, bytes) of a tensor's storage; None for tensors without memory of their own."""
    if t.layout != torch.strided or t.is_meta:
        return None
    s = t.storage()
    ptr, nbytes = s.data_ptr(), s.nbytes()
    return None if ptr == 0 or nbytes == 0 else (ptr, nbytes)


class Recorder(TorchDispatchMode):
    """Records each aten op's storages and time. Storages are keyed by data pointer; a fresh output
    (a return with no alias annotation) is a new storage even if its pointer was used before."""

    def __init__(self, known):
        super().__init__()
        self.known = known  # data_ptr -> (kind, name) of storages that existed before the step
        self.ids = {}       # data_ptr -> storage id
        self.storages = []  # (bytes, kind, name)
        self.ops = []       # (time_us, name, reads, writes)

    def _id(self, t, kind=None, name=None, fresh=False):
        st = storage_of(t)
        if st is None:
            return None
        ptr, nbytes = st
        if fresh or ptr not in self.ids:
            k, n = (kind, name) if fresh else self.known.get(ptr, ("other", "-"))
            self.ids[ptr] = len(self.storages)
            self.storages.append([nbytes, k, n])
        sid = self.ids[ptr]
        self.storages[sid][0] = max(self.storages[sid][0], nbytes)
        return sid

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        reads, writes = [], []
        for i, arg in enumerate(schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            written = arg.alias_info is not None and arg.alias_info.is_write
            for t in tensors_in(value):
                sid = self._id(t)
                if sid is None:
                    continue
                if not (written and arg.kwarg_only):  # out= arguments are written, not read
                    reads.append(sid)
                if written:
                    writes.append(sid)
        start = time.perf_counter()
        out = func(*args, **kwargs)
        elapsed_us = (time.perf_counter() - start) * 1e6
        outs = out if isinstance(out, (tuple, list)) else (out,)
        name = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        for ret, value in zip(schema.returns, outs):
            fresh = ret.alias_info is None
            for t in tensors_in(value):
                if fresh:
                    sid = self._id(t, "temp", "aten::" + name, fresh=True)
                    if sid is not None:
                        writes.append(sid)
                elif ret.alias_info.is_write:
                    sid = self._id(t)
                    if sid is not None and sid not in writes:
                        writes.append(sid)
        dedup = lambda ids: list(dict.fromkeys(ids))
        self.ops.append((elapsed_us, "aten::" + str(func).split("aten.")[-1], dedup(reads), dedup(writes)))
        return out


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, n, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, pre-norm blocks, tied LM head."""

    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.ln(x) @ self.tok.weight.t()


def build(model, args):
    torch.manual_seed(0)
    if model == "resnet18":
        import torchvision
        net = torchvision.models.resnet18(num_classes=100)
        x = torch.randn(args.batch, 3, args.image, args.image)
        y = torch.randint(0, 100, (args.batch,))
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        loss_fn = lambda: F.cross_entropy(net(x), y)
        meta = {"batch": args.batch, "image": args.image, "optimizer": "SGD(momentum=0.9)"}
    else:
        net = GPT(args.vocab, args.seq, args.width, args.layers, args.heads)
        x = torch.randint(0, args.vocab, (args.batch, args.seq))
        y = torch.randint(0, args.vocab, (args.batch, args.seq))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        loss_fn = lambda: F.cross_entropy(net(x).flatten(0, 1), y.flatten())
        meta = {"batch": args.batch, "seq": args.seq, "vocab": args.vocab, "width": args.width,
                "layers": args.layers, "heads": args.heads, "optimizer": "AdamW"}
    return net, opt, loss_fn, (x, y), meta


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", choices=["resnet18", "gpt2"])
    p.add_argument("out", help="trace file to write (.gz: gzip-compressed)")
    p.add_argument("--batch", type=int, default=None, help="batch size (resnet18: 16, gpt2: 4)")
    p.add_argument("--image", type=int, default=128, help="resnet18: image side in pixels")
    p.add_argument("--seq", type=int, default=128, help="gpt2: sequence length")
    p.add_argument("--vocab", type=int, default=8192, help="gpt2: vocabulary size")
    p.add_argument("--width", type=int, default=512, help="gpt2: embedding width")
    p.add_argument("--layers", type=int, default=6, help="gpt2: blocks")
    p.add_argument("--heads", type=int, default=8, help="gpt2: attention heads")
    args = p.parse_args()
    if args.batch is None:
        args.batch = 16 if args.model == "resnet18" else 4
    torch.set_num_threads(max(1, torch.get_num_threads()))

    net, opt, loss_fn, inputs, meta = build(args.model, args)
    print(f"capture: {args.model}: {sum(q.numel() for q in net.parameters()) / 1e6:.1f}M parameters; "
          "warm-up step...", file=sys.stderr)
    opt.zero_grad(set_to_none=False)
    loss_fn().backward()
    opt.step()
    opt.zero_grad(set_to_none=False)  # keeps the gradient storages: the recorded step reuses them

    known = {}
    for pname, prm in net.named_parameters():
        known.setdefault(prm.storage().data_ptr(), ("param", pname))
        if prm.grad is not None:
            known.setdefault(prm.grad.storage().data_ptr(), ("grad", pname + ".grad"))
        for sname, st in opt.state.get(prm, {}).items():
            if isinstance(st, torch.Tensor) and st.numel() > 0:
                known.setdefault(st.storage().data_ptr(), ("state", f"{pname}.{sname}"))
    for i, t in enumerate(inputs):
        known.setdefault(t.storage().data_ptr(), ("input", f"input{i}"))

    print("capture: recording one training step...", file=sys.stderr)
    rec = Recorder(known)
    with rec:
        loss = loss_fn()
        loss.backward()
        opt.step()

    lines = ["tvmm-trace 1", f"meta model {args.model}", f"meta torch {torch.__version__}",
             f"meta loss {loss.item():.6f}"]
    lines += [f"meta {k} {v}" for k, v in sorted(meta.items())]
    for i, (nbytes, kind, name) in enumerate(rec.storages):
        lines.append(f"storage {i} {nbytes} {kind} {name}")
    fmt = lambda ids: ",".join(map(str, ids)) if ids else "-"
    for us, name, r, w in rec.ops:
        lines.append(f"op {us:.3f} {name} {fmt(r)} {fmt(w)}")
    text = "\n".join(lines) + "\n"
    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wt") as f:
        f.write(text)
    total = sum(s[0] for s in rec.storages)
    print(f"capture: {len(rec.ops)} ops, {len(rec.storages)} storages, {total / 2**20:.1f} MiB in all, "
          f"{sum(o[0] for o in rec.ops) / 1e3:.1f} ms of op time -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
