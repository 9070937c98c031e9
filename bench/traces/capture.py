#!/usr/bin/env python3
"""Captures a tvmm model trace (docs/trace-format.md) from a real PyTorch training step on the CPU.

Runs one warm-up step (so gradients and optimizer state exist), then records the next step -- forward,
loss, backward and optimizer -- under a TorchDispatchMode that sees every aten operator. For each
operator it writes the tensor storages read and written, with their sizes, and the operator's
measured time. Weights are randomly initialised; nothing is downloaded.

    python3 bench/traces/capture.py resnet18 bench/traces/resnet18.trace.gz
    python3 bench/traces/capture.py gpt2 bench/traces/gpt2.trace.gz
    (also mobilenet_v2, widefc, encoder, lstm, unet, vit, densenet121, convnext_tiny, seq2seq, mixer:
    capture.py --help)

Each op also gets its floating-point operations and the bytes of the tensors it read and wrote, so that
replay can model its time on a GPU (trace format version 2).

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
    import os
    import subprocess
    system = "/usr/bin/python3"
    # Debian's python3-torch installs for the system interpreter; another python3 first on PATH (a
    # virtual environment, pyenv) does not see it.
    if (os.path.realpath(sys.executable) != os.path.realpath(system) and os.access(system, os.X_OK)
            and subprocess.run([system, "-c", "import torch, torchvision"], capture_output=True).returncode == 0):
        sys.exit(f"capture.py: {e} in {sys.executable}, but {system} has torch and torchvision "
                 f"(Debian's python3-torch): run {system} {' '.join(sys.argv)}")
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


def tensor_bytes(t):
    """Bytes of a tensor's own elements (a slice: its part), 0 for tensors without memory."""
    if t.layout != torch.strided or t.is_meta:
        return 0
    return t.numel() * t.element_size()


def shape_of(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def op_flops(func, args, kwargs, outs):
    """Floating-point operations of one aten op: 2 per multiply-add for matrix products and
    convolutions (forward and backward), one per element of the largest tensor otherwise."""
    name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
    arg = lambda i: args[i] if i < len(args) else None
    if name in ("mm", "addmm", "bmm", "baddbmm", "addbmm"):
        a, b = (arg(0), arg(1)) if name in ("mm", "bmm") else (arg(1), arg(2))
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() >= 2 and b.dim() >= 2:
            batch = a.shape[0] if a.dim() == 3 else 1
            return 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
    if name in ("convolution", "_convolution", "convolution_backward"):
        # convolution(input, weight, bias, stride, padding, dilation, transposed, ...);
        # convolution_backward(grad_output, input, weight, ..., transposed, output_padding, groups, output_mask)
        backward = name == "convolution_backward"
        x, wt = (arg(1), arg(2)) if backward else (arg(0), arg(1))
        y = arg(0) if backward else (outs[0] if outs else None)
        transposed = bool(arg(7) if backward else arg(6))
        if isinstance(x, torch.Tensor) and isinstance(wt, torch.Tensor) and isinstance(y, torch.Tensor):
            src = x if transposed else y  # each of its positions takes the whole kernel once per image
            per_pass = 2 * src.shape[0] * math.prod(src.shape[2:]) * wt.numel()
            if not backward:
                return per_pass
            mask = arg(10) if arg(10) is not None else (True, True, True)
            return per_pass * (int(bool(mask[0])) + int(bool(mask[1])))
    sizes = [t.numel() for t in tensors_in(args) + tensors_in(kwargs) + tensors_in(outs)]
    return max(sizes) if sizes else 0


class Recorder(TorchDispatchMode):
    """Records each aten op's storages and time. Storages are keyed by data pointer; a fresh output
    (a return with no alias annotation) is a new storage even if its pointer was used before."""

    def __init__(self, known):
        super().__init__()
        self.known = known  # data_ptr -> (kind, name) of storages that existed before the step
        self.ids = {}       # data_ptr -> storage id
        self.storages = []  # (bytes, kind, name)
        self.ops = []       # (time_us, name, reads, writes, flops, bytes)

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
        read_bytes = written_bytes = 0
        for i, arg in enumerate(schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            written = arg.alias_info is not None and arg.alias_info.is_write
            for t in tensors_in(value):
                if not (written and arg.kwarg_only):
                    read_bytes += tensor_bytes(t)
                if written:
                    written_bytes += tensor_bytes(t)
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
        fresh_any = False
        for ret, value in zip(schema.returns, outs):
            fresh = ret.alias_info is None
            for t in tensors_in(value):
                if fresh:
                    fresh_any = True
                    written_bytes += tensor_bytes(t)
                    sid = self._id(t, "temp", "aten::" + name, fresh=True)
                    if sid is not None:
                        writes.append(sid)
                elif ret.alias_info.is_write:
                    sid = self._id(t)
                    if sid is not None and sid not in writes:
                        writes.append(sid)
        dedup = lambda ids: list(dict.fromkeys(ids))
        # A view or another op that makes no data and writes none (detach, t, expand...) launches no kernel.
        makes_data = fresh_any or any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
        flops = op_flops(func, args, kwargs, list(outs)) if makes_data else 0
        nbytes = read_bytes + written_bytes if makes_data else 0
        self.ops.append((elapsed_us, "aten::" + str(func).split("aten.")[-1], dedup(reads), dedup(writes), flops,
                         nbytes))
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


class Encoder(nn.Module):
    """A BERT-style encoder: token and position embeddings, post-norm blocks with bidirectional attention,
    a masked-language-model head."""

    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.encoder(self.tok(idx) + self.pos(torch.arange(idx.shape[1]))))


class RecurrentLM(nn.Module):
    """A recurrent language model: embedding, a stacked LSTM, a linear decoder."""

    def __init__(self, vocab, d, hidden, layers):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, layers, batch_first=True)
        self.dec = nn.Linear(hidden, vocab)

    def forward(self, idx):
        return self.dec(self.lstm(self.tok(idx))[0])


class WideFC(nn.Module):
    """A CNN whose classifier holds most of its memory, as VGG's and AlexNet's do: four small conv blocks
    that halve the image each, then fully connected layers of `fc` units on the flattened 64x4x4 map."""

    def __init__(self, classes, fc):
        super().__init__()
        chans = [3, 32, 64, 64, 64]
        blocks = []
        for a, b in zip(chans, chans[1:]):
            blocks += [nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(4))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, fc), nn.ReLU(inplace=True),
                                        nn.Linear(fc, fc), nn.ReLU(inplace=True), nn.Linear(fc, classes))

    def forward(self, x):
        return self.classifier(self.features(x))


class UNet(nn.Module):
    """A U-Net: conv blocks that halve the image on the way down and double it on the way up, each block
    on the way up concatenating the map of the same size from the way down (skip connections: the
    first activations of the forward pass are read again at its end)."""

    def __init__(self, classes, base, depth):
        super().__init__()

        def block(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                                 nn.Conv2d(b, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True))

        chans = [base * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList(block(a, b) for a, b in zip([3] + chans[:-2], chans[:-1]))
        self.mid = block(chans[-2], chans[-1])
        self.up = nn.ModuleList(nn.ConvTranspose2d(2 * c, c, 2, stride=2) for c in reversed(chans[:-1]))
        self.dec = nn.ModuleList(block(2 * c, c) for c in reversed(chans[:-1]))
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for down in self.down:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.mid(x)
        for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), skip], 1))
        return self.head(x)


class Seq2Seq(nn.Module):
    """An encoder-decoder transformer (translation-style): the decoder's every block reads the encoder's
    output through cross-attention, so the encoder's last activation stays live across the decoder."""

    def __init__(self, vocab, seq, d, layers, heads):
        super().__init__()
        self.src, self.tgt, self.pos = nn.Embedding(vocab, d), nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.core = nn.Transformer(d, heads, layers, layers, 4 * d, dropout=0.0, batch_first=True)
        self.head = nn.Linear(d, vocab)

    def forward(self, src, tgt):
        pos = self.pos(torch.arange(src.shape[1]))
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        return self.head(self.core(self.src(src) + pos, self.tgt(tgt) + pos, tgt_mask=mask))


class Mixer(nn.Module):
    """An MLP-Mixer: patches embedded by a strided convolution, then blocks of two MLPs, one across the
    patches (on the transposed activation) and one across the channels; no attention, no convolution."""

    def __init__(self, classes, image, patch, d, layers):
        super().__init__()
        n = (image // patch) ** 2
        self.embed = nn.Conv2d(3, d, patch, stride=patch)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"ln1": nn.LayerNorm(d), "tok1": nn.Linear(n, 4 * n), "tok2": nn.Linear(4 * n, n),
                           "ln2": nn.LayerNorm(d), "ch1": nn.Linear(d, 4 * d), "ch2": nn.Linear(4 * d, d)})
            for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        for b in self.blocks:
            y = b["ln1"](x).transpose(1, 2)
            x = x + b["tok2"](F.gelu(b["tok1"](y))).transpose(1, 2)
            x = x + b["ch2"](F.gelu(b["ch1"](b["ln2"](x))))
        return self.head(self.ln(x).mean(dim=1))


def build(model, args):
    torch.manual_seed(0)
    if model in ("resnet18", "mobilenet_v2", "widefc", "densenet121", "convnext_tiny"):
        import torchvision
        net = WideFC(100, args.width) if model == "widefc" else getattr(torchvision.models, model)(num_classes=100)
        x = torch.randn(args.batch, 3, args.image, args.image)
        y = torch.randint(0, 100, (args.batch,))
        adamw = model == "convnext_tiny"
        opt = (torch.optim.AdamW(net.parameters(), lr=1e-4) if adamw
               else torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9))
        loss_fn = lambda: F.cross_entropy(net(x), y)
        meta = {"batch": args.batch, "image": args.image, "optimizer": "AdamW" if adamw else "SGD(momentum=0.9)"}
        if model == "widefc":
            meta["fc"] = args.width
        return net, opt, loss_fn, (x, y), meta
    if model in ("encoder", "lstm"):
        x = torch.randint(0, args.vocab, (args.batch, args.seq))
        if model == "encoder":
            net = Encoder(args.vocab, args.seq, args.width, args.layers, args.heads)
            y = torch.randint(0, args.vocab, (args.batch, args.seq))
            opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
            meta = {"batch": args.batch, "seq": args.seq, "vocab": args.vocab, "width": args.width,
                    "layers": args.layers, "heads": args.heads, "optimizer": "AdamW"}
        else:
            net = RecurrentLM(args.vocab, args.width, args.hidden, args.layers)
            y = torch.randint(0, args.vocab, (args.batch, args.seq))
            opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
            meta = {"batch": args.batch, "seq": args.seq, "vocab": args.vocab, "embedding": args.width,
                    "hidden": args.hidden, "layers": args.layers, "optimizer": "SGD(momentum=0.9)"}
        loss_fn = lambda: F.cross_entropy(net(x).flatten(0, 1), y.flatten())
        return net, opt, loss_fn, (x, y), meta
    if model in ("unet", "vit"):
        import torchvision
        if model == "unet":
            net = UNet(args.classes, args.width, args.layers)
            y = torch.randint(0, args.classes, (args.batch, args.image, args.image))
            meta = {"batch": args.batch, "image": args.image, "base_channels": args.width, "depth": args.layers,
                    "classes": args.classes, "optimizer": "SGD(momentum=0.9)"}
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        else:
            net = torchvision.models.VisionTransformer(image_size=args.image, patch_size=args.patch,
                                                       num_layers=args.layers, num_heads=args.heads,
                                                       hidden_dim=args.width, mlp_dim=4 * args.width,
                                                       num_classes=args.classes)
            y = torch.randint(0, args.classes, (args.batch,))
            meta = {"batch": args.batch, "image": args.image, "patch": args.patch, "width": args.width,
                    "layers": args.layers, "heads": args.heads, "classes": args.classes, "optimizer": "AdamW"}
            opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        x = torch.randn(args.batch, 3, args.image, args.image)
        loss_fn = lambda: F.cross_entropy(net(x), y)
        return net, opt, loss_fn, (x, y), meta
    if model == "seq2seq":
        net = Seq2Seq(args.vocab, args.seq, args.width, args.layers, args.heads)
        src = torch.randint(0, args.vocab, (args.batch, args.seq))
        tgt = torch.randint(0, args.vocab, (args.batch, args.seq))
        y = torch.randint(0, args.vocab, (args.batch, args.seq))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        loss_fn = lambda: F.cross_entropy(net(src, tgt).flatten(0, 1), y.flatten())
        meta = {"batch": args.batch, "seq": args.seq, "vocab": args.vocab, "width": args.width,
                "layers": args.layers, "heads": args.heads, "optimizer": "AdamW"}
        return net, opt, loss_fn, (src, tgt, y), meta
    if model == "mixer":
        net = Mixer(args.classes, args.image, args.patch, args.width, args.layers)
        x = torch.randn(args.batch, 3, args.image, args.image)
        y = torch.randint(0, args.classes, (args.batch,))
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        loss_fn = lambda: F.cross_entropy(net(x), y)
        meta = {"batch": args.batch, "image": args.image, "patch": args.patch, "width": args.width,
                "layers": args.layers, "classes": args.classes, "optimizer": "AdamW"}
        return net, opt, loss_fn, (x, y), meta
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
    models = ["resnet18", "gpt2", "mobilenet_v2", "widefc", "encoder", "lstm", "unet", "vit", "densenet121",
              "convnext_tiny", "seq2seq", "mixer"]
    p.add_argument("model", choices=models)
    p.add_argument("out", help="trace file to write (.gz: gzip-compressed)")
    p.add_argument("--batch", type=int, default=None,
                   help="batch size (resnet18, widefc, vit, densenet121, mixer: 16; mobilenet_v2, lstm, unet, "
                        "convnext_tiny: 8; gpt2, encoder, seq2seq: 4)")
    p.add_argument("--image", type=int, default=None,
                   help="resnet18, mobilenet_v2, unet: image side in pixels (128); widefc, vit, densenet121, "
                        "convnext_tiny, mixer: (64)")
    p.add_argument("--seq", type=int, default=None, help="gpt2, encoder: sequence length (128); seq2seq: 64; lstm: 32")
    p.add_argument("--vocab", type=int, default=None, help="gpt2, encoder, seq2seq, lstm: vocabulary size (8192)")
    p.add_argument("--width", type=int, default=None,
                   help="gpt2, encoder, seq2seq: embedding width (512); lstm: embedding (256); widefc: fully "
                        "connected units (4096); unet: channels of the first level (32); vit: hidden width "
                        "(384); mixer: channels (256)")
    p.add_argument("--hidden", type=int, default=512, help="lstm: hidden units")
    p.add_argument("--layers", type=int, default=None,
                   help="gpt2, vit: blocks (6); encoder: blocks (4); seq2seq: blocks of the encoder and of the "
                        "decoder (3); mixer: blocks (8); lstm: layers (2); unet: levels down (4)")
    p.add_argument("--heads", type=int, default=8, help="gpt2, encoder, seq2seq, vit: attention heads")
    p.add_argument("--patch", type=int, default=8, help="vit, mixer: patch side in pixels")
    p.add_argument("--classes", type=int, default=None, help="unet: classes per pixel (8); vit, mixer: classes (100)")
    args = p.parse_args()
    defaults = {"batch": {"gpt2": 4, "encoder": 4, "seq2seq": 4, "mobilenet_v2": 8, "lstm": 8, "unet": 8,
                          "convnext_tiny": 8}.get(args.model, 16),
                "seq": {"lstm": 32, "seq2seq": 64}.get(args.model, 128),
                "vocab": 8192,
                "width": {"widefc": 4096, "lstm": 256, "unet": 32, "vit": 384, "mixer": 256}.get(args.model, 512),
                "image": 64 if args.model in ("widefc", "vit", "densenet121", "convnext_tiny", "mixer") else 128,
                "layers": {"lstm": 2, "encoder": 4, "unet": 4, "seq2seq": 3, "mixer": 8}.get(args.model, 6),
                "classes": 8 if args.model == "unet" else 100}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
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

    lines = ["tvmm-trace 2", f"meta model {args.model}", f"meta torch {torch.__version__}",
             f"meta loss {loss.item():.6f}"]
    lines += [f"meta {k} {v}" for k, v in sorted(meta.items())]
    for i, (nbytes, kind, name) in enumerate(rec.storages):
        lines.append(f"storage {i} {nbytes} {kind} {name}")
    fmt = lambda ids: ",".join(map(str, ids)) if ids else "-"
    for us, name, r, w, flops, nbytes in rec.ops:
        lines.append(f"op {us:.3f} {name} {fmt(r)} {fmt(w)} flops={flops} bytes={nbytes}")
    text = "\n".join(lines) + "\n"
    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wt") as f:
        f.write(text)
    total = sum(s[0] for s in rec.storages)
    print(f"capture: {len(rec.ops)} ops, {len(rec.storages)} storages, {total / 2**20:.1f} MiB in all, "
          f"{sum(o[0] for o in rec.ops) / 1e3:.1f} ms of op time -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
