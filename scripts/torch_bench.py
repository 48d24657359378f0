#!/usr/bin/env python3
"""PyTorch side of scripts/gpu-check.sh.

Standard library plus torch; torch is optional. Every mode prints one JSON
object on stdout and exits 0 unless its arguments are wrong, so that the
shell script can record what happened instead of failing: a missing torch,
a missing GPU or a graph that ran out of time are results, not errors.

  torch_bench.py --probe
      {"torch": false, "reason": ...} without torch, else the versions and
      whether CUDA is usable.
  torch_bench.py --ceilings
      device-to-device copy bandwidth (GB/s) and a bf16 matmul rate
      (TFLOP/s): the ceilings the table's achieved rates are set against.
  torch_bench.py --graph NAME --seq N [--inputs DIR] [--time-cap S]
      a llama-style decoder layer (or its MLP / RMSNorm) at NAME's shapes,
      run in eager mode and with torch.compile: outputs compared first,
      then each timed, the whole graph capped at S seconds. With --inputs
      DIR (what "lumsearch bench --save DIR" wrote) the graph runs on
      lumsearch's own input and weights, DIR/inputs.safetensors, by
      lumsearch's names, and its outputs are compared with lumsearch's,
      DIR/outputs.safetensors, before anything is timed: the JSON says
      "inputs": "lumsearch", "max_rel_err_vs_lumsearch" (relative L2, the
      worse of eager and torch.compile), "lumsearch_tol" and
      "lumsearch_match". Where the files do not map onto the graph (other
      names, shapes or dtypes) it says why in "inputs_reason" and runs on
      its own seeded random inputs, "inputs": "random".
  torch_bench.py --self-test FILE
      standard library only (no torch): parses the safetensors FILE and
      prints its metadata and each tensor's name, dtype, shape, byte size,
      first values and sum, to show the parser reads lumsearch's files;
      {"ok": false, "error": ...} and exit status 1 when FILE is malformed.
"""

import argparse
import json
import math
import os
import struct
import sys
import time

# Shapes of the corpus graphs the PyTorch side can rebuild, by the model
# part of their lumsearch name. Llama-style layers only: the shapes are the
# configurations in lumsearch's corpus/configs (hidden, heads, kv heads,
# ffn, rms eps, rope theta, and where they apply the head size, llama3
# rope scaling and the sliding window).
MODELS = {
    "tiny-llama": dict(hidden=64, heads=4, kv_heads=2, ffn=128, eps=1e-5, rope_theta=10000.0),
    "llama-3-8b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, eps=1e-5, rope_theta=500000.0),
    "llama-3.2-1b": dict(hidden=2048, heads=32, kv_heads=8, ffn=8192, eps=1e-5, rope_theta=500000.0, head_dim=64,
                         rope_scaling=dict(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                           original_max_position_embeddings=8192)),
    "mistral-7b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, eps=1e-5, rope_theta=10000.0, window=4096),
}
PARTS = ("layer", "mlp", "rmsnorm")

# Relative L2 error PyTorch's outputs may have against lumsearch's, by
# dtype: two implementations round at different places, so a few of the
# dtype's roundings; a wrong layout or name mapping gives errors of order 1.
LUMSEARCH_TOL = {"f32": 1e-3, "f16": 1e-2, "bf16": 5e-2}


# --- safetensors, standard library only ----------------------------------
#
# A safetensors file is an 8-byte little-endian header length N, N bytes of
# UTF-8 JSON mapping each tensor's name to {"dtype", "shape",
# "data_offsets": [begin, end]} (byte offsets into the data that follows,
# end exclusive) plus an optional "__metadata__" object of strings, then
# the data: row-major, little-endian.

# Element size and struct format of each dtype the reader accepts (BF16 is
# decoded by hand: the upper half of an f32).
ST_DTYPES = {
    "F64": (8, "<d"), "F32": (4, "<f"), "F16": (2, "<e"), "BF16": (2, None),
    "I64": (8, "<q"), "I32": (4, "<i"), "I16": (2, "<h"), "I8": (1, "<b"),
    "U8": (1, "<B"), "BOOL": (1, "<?"),
}
# The torch dtype of each, by attribute name.
ST_TORCH = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}
ST_MAX_HEADER = 100 << 20  # the reference implementation's limit


class SafetensorsError(ValueError):
    """A file that is not a well-formed safetensors file."""


def read_safetensors(path, header_only=False):
    """Parses the safetensors file at path.

    Returns (tensors, metadata, data): tensors maps each name to a dict
    with "dtype", "shape" (a list) and "begin", "end" (offsets into data,
    the bytes after the header), in the header's order; metadata is the
    "__metadata__" object or {}; data is None with header_only, which
    reads the header alone (and checks it against the file's size).
    Raises SafetensorsError on a malformed file and OSError when it cannot
    be read."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = f.read(8)
        if len(first) < 8:
            raise SafetensorsError("%s: %d bytes, shorter than the 8-byte header length" % (path, len(first)))
        (n,) = struct.unpack("<Q", first)
        if n > ST_MAX_HEADER or 8 + n > size:
            raise SafetensorsError("%s: header length %d does not fit in the file's %d bytes" % (path, n, size))
        text = f.read(n)
        data = None if header_only else memoryview(f.read())
    data_len = size - 8 - n
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SafetensorsError("%s: header is not UTF-8 JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise SafetensorsError("%s: header is not a JSON object" % (path,))
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError("%s: __metadata__ is not an object of strings" % (path,))
    tensors = {}
    for name, e in header.items():
        where = "%s: tensor %r" % (path, name)
        if not isinstance(e, dict):
            raise SafetensorsError("%s: not an object" % where)
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in ST_DTYPES:
            raise SafetensorsError("%s: dtype %r (known: %s)" % (where, dtype, ", ".join(sorted(ST_DTYPES))))
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise SafetensorsError("%s: shape %r is not a list of sizes" % (where, shape))
        if (not isinstance(offs, list) or len(offs) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offs)
                or not 0 <= offs[0] <= offs[1] <= data_len):
            raise SafetensorsError("%s: data_offsets %r outside the %d data bytes" % (where, offs, data_len))
        count = 1
        for d in shape:
            count *= d
        if offs[1] - offs[0] != count * ST_DTYPES[dtype][0]:
            raise SafetensorsError("%s: %d bytes for %d %s elements" % (where, offs[1] - offs[0], count, dtype))
        tensors[name] = {"dtype": dtype, "shape": list(shape), "begin": offs[0], "end": offs[1]}
    return tensors, metadata, data


def decode_values(dtype, raw):
    """The elements of raw (little-endian dtype bytes) as Python numbers."""
    size, fmt = ST_DTYPES[dtype]
    if dtype == "BF16":
        return [struct.unpack("<f", b"\x00\x00" + bytes(raw[i:i + 2]))[0] for i in range(0, len(raw), 2)]
    return [v[0] for v in struct.iter_unpack(fmt, raw)] if len(raw) else []


def self_test(path):
    """Reads path with the standard library only: (JSON object, exit status)."""
    try:
        tensors, metadata, data = read_safetensors(path)
    except (OSError, SafetensorsError) as e:
        return {"ok": False, "file": path, "error": str(e)}, 1
    out = []
    for name in sorted(tensors):
        t = tensors[name]
        vals = decode_values(t["dtype"], data[t["begin"]:t["end"]])
        out.append({"name": name, "dtype": t["dtype"], "shape": t["shape"], "bytes": t["end"] - t["begin"],
                    "first": [float(v) for v in vals[:4]], "sum": math.fsum(float(v) for v in vals)})
    return {"ok": True, "file": path, "metadata": metadata, "tensors": out}, 0


def load_safetensors(torch, path, device):
    """The tensors of a safetensors file as torch tensors on device."""
    if sys.byteorder != "little":
        raise SafetensorsError("a big-endian host cannot use %s's little-endian data as it is" % (path,))
    tensors, metadata, data = read_safetensors(path)
    out = {}
    for name, t in tensors.items():
        dt = getattr(torch, ST_TORCH[t["dtype"]])
        if t["end"] == t["begin"]:
            v = torch.empty(t["shape"], dtype=dt)
        else:
            # A copy of the bytes: writable and aligned, as frombuffer wants.
            v = torch.frombuffer(bytearray(data[t["begin"]:t["end"]]), dtype=dt).reshape(t["shape"])
        out[name] = v.to(device)
    return out, metadata


def emit(obj):
    json.dump(obj, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    sys.stdout.flush()


def import_torch():
    """Returns (torch, None) or (None, reason)."""
    try:
        import torch  # noqa: PLC0415 - optional dependency, imported late on purpose
    except Exception as e:  # ImportError, or a broken install raising anything
        return None, "PyTorch missing: %s" % (e,)
    return torch, None


def probe():
    torch, reason = import_torch()
    if torch is None:
        return {"torch": False, "reason": reason, "python": sys.version.split()[0]}
    out = {
        "torch": True,
        "torch_version": torch.__version__,
        "python": sys.version.split()[0],
        "cuda_build": torch.version.cuda,
        "cuda_available": False,
    }
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"]:
            out["device"] = torch.cuda.get_device_name(0)
            out["capability"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
    except Exception as e:
        out["cuda_error"] = str(e)
    return out


def cuda_or_reason():
    torch, reason = import_torch()
    if torch is None:
        return None, reason
    try:
        if not torch.cuda.is_available():
            return None, "PyTorch has no usable CUDA device"
    except Exception as e:
        return None, "CUDA check failed: %s" % (e,)
    return torch, None


def time_cuda(torch, fn, deadline, min_iters=3, max_iters=50, target_s=1.0):
    """Median milliseconds per call of fn, timed with CUDA events.

    Warms up once, then runs until max_iters, target_s of measured time or
    the deadline, whichever comes first (at least one timed call)."""
    fn()
    torch.cuda.synchronize()
    times = []
    spent = 0.0
    while len(times) < max_iters:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        times.append(ms)
        spent += ms / 1e3
        if len(times) >= min_iters and (spent >= target_s or time.monotonic() >= deadline):
            break
        if time.monotonic() >= deadline:
            break
    times.sort()
    return times[len(times) // 2]


def ceilings(time_cap):
    torch, reason = cuda_or_reason()
    if torch is None:
        return {"ok": False, "reason": reason}
    deadline = time.monotonic() + time_cap
    out = {"ok": True, "device": torch.cuda.get_device_name(0)}
    try:
        # Copy bandwidth: 1 GiB device-to-device; a copy reads and writes
        # every byte, so bytes moved is twice the size.
        n = 1 << 30
        src = torch.empty(n, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        ms = time_cuda(torch, lambda: dst.copy_(src), deadline)
        out["copy_gbs"] = 2 * n / (ms / 1e3) / 1e9
        del src, dst
        # Library matmul rate: bf16 8192^3 through cuBLAS.
        m = 8192
        a = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
        ms = time_cuda(torch, lambda: torch.mm(a, b), deadline)
        out["matmul_bf16_tflops"] = 2 * m ** 3 / (ms / 1e3) / 1e12
        del a, b
        torch.cuda.empty_cache()
    except Exception as e:
        out["ok"] = False
        out["reason"] = "ceilings failed: %s" % (e,)
    return out


def graph_spec(part, cfg, seq):
    """lumsearch's leaves of a corpus graph and its output, by lumsearch's names.

    Returns (leaves, output): leaves maps each input and weight name to its
    shape as lumsearch declares it (corpus/registry.go, emit.go, model.go,
    attention.go): input hidden_states [1, seq, hidden] (batch 1), layer
    0's weights under Hugging Face's checkpoint names, nn.Linear weights
    [out, in] as F.linear takes them; output is the graph's output name."""
    h, nh, nkv, ffn = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    hd = cfg.get("head_dim", h // nh)
    pre = "model.layers.0"
    leaves = {"hidden_states": [1, seq, h]}
    mlp = {
        pre + ".mlp.gate_proj.weight": [ffn, h],
        pre + ".mlp.up_proj.weight": [ffn, h],
        pre + ".mlp.down_proj.weight": [h, ffn],
    }
    if part == "rmsnorm":
        leaves[pre + ".input_layernorm.weight"] = [h]
        return leaves, "output"
    if part == "mlp":
        leaves.update(mlp)
        return leaves, "output"
    leaves.update({
        pre + ".input_layernorm.weight": [h],
        pre + ".self_attn.q_proj.weight": [nh * hd, h],
        pre + ".self_attn.k_proj.weight": [nkv * hd, h],
        pre + ".self_attn.v_proj.weight": [nkv * hd, h],
        pre + ".self_attn.o_proj.weight": [h, nh * hd],
        pre + ".post_attention_layernorm.weight": [h],
    })
    leaves.update(mlp)
    return leaves, "hidden_states"


def random_leaves(torch, leaves, dtype):
    """Seeded random tensors for leaves (name -> shape) on the GPU: the
    input of order one, norm weights near one, linear weights scaled by
    1/sqrt(in)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    out = {}
    for name in sorted(leaves):
        shape = leaves[name]
        r = torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32)
        if name == "hidden_states":
            v = r
        elif name.endswith("layernorm.weight"):
            v = 1 + 0.1 * r
        else:
            v = r * shape[-1] ** -0.5
        out[name] = v.to(dtype)
    return out


def map_inputs(inputs_dir, leaves, out_name, dtype_name):
    """Checks, from the files' headers alone (standard library only), that
    what "lumsearch bench --save" wrote into inputs_dir maps onto the
    graph: inputs.safetensors holds exactly the graph's leaves (by
    lumsearch's names, at their shapes, in the dtype --dtype names) and
    outputs.safetensors its output. Raises ValueError (SafetensorsError is
    one) or OSError saying why not."""
    want_dtype = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype_name]
    fed, _, _ = read_safetensors(os.path.join(inputs_dir, "inputs.safetensors"), header_only=True)
    outs, _, _ = read_safetensors(os.path.join(inputs_dir, "outputs.safetensors"), header_only=True)
    missing = sorted(set(leaves) - set(fed))
    if missing:
        raise ValueError("lumsearch's inputs lack %s (a graph other than this one?)" % ", ".join(missing))
    extra = sorted(set(fed) - set(leaves))
    if extra:
        raise ValueError("lumsearch's inputs have names this graph does not: %s" % ", ".join(extra[:5]))
    for name, shape in sorted(leaves.items()):
        t = fed[name]
        if t["shape"] != shape:
            raise ValueError("lumsearch's %s is %s, this graph's %s" % (name, t["shape"], shape))
        if t["dtype"] != want_dtype:
            raise ValueError("lumsearch's %s is %s, not %s (--dtype %s)" % (name, t["dtype"], want_dtype, dtype_name))
    if out_name not in outs:
        raise ValueError("lumsearch's outputs lack %s" % out_name)
    if outs[out_name]["shape"] != leaves["hidden_states"]:
        raise ValueError("lumsearch's output %s is %s, not %s" % (out_name, outs[out_name]["shape"], leaves["hidden_states"]))


def lumsearch_leaves(torch, inputs_dir, out_name):
    """lumsearch's tensors (map_inputs has checked them) on the GPU:
    (tensors by name, lumsearch's output)."""
    fed, _ = load_safetensors(torch, os.path.join(inputs_dir, "inputs.safetensors"), "cuda")
    outs, _ = load_safetensors(torch, os.path.join(inputs_dir, "outputs.safetensors"), "cuda")
    return fed, outs[out_name]


def rel_l2(got, want):
    """sqrt(sum((got-want)^2) / sum(want^2)) over all elements, in float64."""
    g, w = got.double().flatten(), want.double().flatten()
    if not bool(g.isfinite().all()):
        return float("inf")
    den = w.pow(2).sum().item()
    num = (g - w).pow(2).sum().item()
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def inv_freq(torch, cfg, hd):
    """The rotary inverse frequencies, f32 [hd/2], as lumsearch's corpus
    computes them (corpus/attention.go invFreq, llama3InvFreq)."""
    theta = cfg.get("rope_theta", 10000.0)
    s = cfg.get("rope_scaling")
    if s is None:
        i = torch.arange(0, hd // 2, device="cuda", dtype=torch.float32)
        return 1.0 / (torch.tensor(theta, device="cuda", dtype=torch.float32) ** (i * 2 / hd))
    old = float(s["original_max_position_embeddings"])
    low_wave, high_wave = old / s["low_freq_factor"], old / s["high_freq_factor"]
    out = []
    for i in range(hd // 2):
        f = 1 / theta ** (2 * i / hd)
        wave = 2 * math.pi / f
        if wave < high_wave:
            pass
        elif wave > low_wave:
            f /= s["factor"]
        else:
            smooth = (old / wave - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
            f = (1 - smooth) * f / s["factor"] + smooth * f
        out.append(f)
    return torch.tensor(out, device="cuda", dtype=torch.float32)


def build(torch, part, cfg, seq, dtype, w):
    """Returns (fn, inputs, bytes, flops) for a llama-style part at cfg.

    w holds the graph's tensors by lumsearch's names (graph_spec); fn maps
    the input [seq, hidden] to the output [seq, hidden]. bytes counts
    weights plus activations in and out once, flops the matmuls only: the
    minimum any program moves and computes, which is what achieved GB/s
    and TFLOP/s are measured against."""
    F = torch.nn.functional
    h, nh, nkv, ffn, eps = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn"], cfg["eps"]
    hd = cfg.get("head_dim", h // nh)
    esz = torch.tensor([], dtype=dtype).element_size()
    pre = "model.layers.0"
    x = w["hidden_states"].reshape(seq, h)
    nw = w.get(pre + ".input_layernorm.weight")  # the MLP has none

    def rmsnorm(v, nweight):
        vf = v.float()
        return (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * nweight

    if part == "rmsnorm":
        return (lambda x: rmsnorm(x, nw)), (x,), 2 * seq * h * esz + h * esz, 0

    wg, wu, wd = w[pre + ".mlp.gate_proj.weight"], w[pre + ".mlp.up_proj.weight"], w[pre + ".mlp.down_proj.weight"]

    def mlp(v):
        return F.linear(F.silu(F.linear(v, wg)) * F.linear(v, wu), wd)

    mlp_bytes = 3 * h * ffn * esz
    mlp_flops = 2 * seq * 3 * h * ffn
    if part == "mlp":
        return mlp, (x,), mlp_bytes + 2 * seq * h * esz, mlp_flops

    att = pre + ".self_attn."
    wq, wk, wv, wo = w[att + "q_proj.weight"], w[att + "k_proj.weight"], w[att + "v_proj.weight"], w[att + "o_proj.weight"]
    nw2 = w[pre + ".post_attention_layernorm.weight"]
    pos = torch.arange(seq, device="cuda", dtype=torch.float32)
    ang = torch.outer(pos, inv_freq(torch, cfg, hd))
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)

    def rope(t):  # t: [heads, seq, hd], rotate-half form
        t1, t2 = t[..., : hd // 2], t[..., hd // 2:]
        return torch.cat((t1 * cos - t2 * sin, t1 * sin + t2 * cos), dim=-1)

    def layer(v):
        a = rmsnorm(v, nw)
        q = F.linear(a, wq).view(seq, nh, hd).transpose(0, 1)
        k = F.linear(a, wk).view(seq, nkv, hd).transpose(0, 1)
        vv = F.linear(a, wv).view(seq, nkv, hd).transpose(0, 1)
        q, k = rope(q), rope(k)
        # Grouped-query attention by repeating the kv heads: works on every
        # torch with scaled_dot_product_attention (enable_gqa needs 2.5+).
        k = k.repeat_interleave(nh // nkv, dim=0)
        vv = vv.repeat_interleave(nh // nkv, dim=0)
        o = F.scaled_dot_product_attention(q, k, vv, is_causal=True)
        v = v + F.linear(o.transpose(0, 1).reshape(seq, nh * hd), wo)
        return v + mlp(rmsnorm(v, nw2))

    attn_bytes = (2 * h * nh * hd + 2 * nkv * hd * h) * esz
    attn_flops = 2 * seq * (2 * h * nh * hd + 2 * nkv * hd * h) + 4 * seq * seq * nh * hd
    return layer, (x,), mlp_bytes + attn_bytes + 2 * seq * h * esz, mlp_flops + attn_flops


def check_lumsearch(res, which, got, want, tol):
    """Records got's relative L2 error against lumsearch's output want
    under "<which>_rel_err_vs_lumsearch", updates the worst and the
    verdict, and says whether it is within tol."""
    err = rel_l2(got, want)
    res[which + "_rel_err_vs_lumsearch"] = err
    res["max_rel_err_vs_lumsearch"] = max(res.get("max_rel_err_vs_lumsearch", 0.0), err)
    ok = err <= tol
    res["lumsearch_match"] = res.get("lumsearch_match", True) and ok
    if not ok:
        res["lumsearch_reason"] = "PyTorch %s's output differs from lumsearch's (relative L2 %.3g > %g)" % (which, err, tol)
    return ok


def run_graph(name, seq, time_cap, dtype_name, inputs_dir=None):
    res = {"graph": name, "seq": seq, "dtype": dtype_name, "inputs": "random"}
    if inputs_dir is not None:
        res["inputs_dir"] = inputs_dir
    model, _, part = name.partition(":")
    if model not in MODELS or part not in PARTS:
        res["reason"] = "no PyTorch equivalent of %s (known: %s with %s)" % (
            name, ", ".join(sorted(MODELS)), "/".join(PARTS))
        if inputs_dir is not None:
            res["inputs_reason"] = "lumsearch's inputs not used: no PyTorch equivalent of %s" % (name,)
        return res
    cfg = MODELS[model]
    if part == "layer" and seq > cfg.get("window", seq):
        res["reason"] = "seq %d exceeds %s's sliding window %d, which this PyTorch layer does not apply" % (seq, model, cfg["window"])
        return res
    leaves, out_name = graph_spec(part, cfg, seq)
    mapped = False
    if inputs_dir is not None:
        # Names, shapes and dtypes first, without torch: a mismatch is
        # reported even where PyTorch is missing.
        try:
            map_inputs(inputs_dir, leaves, out_name, dtype_name)
            mapped = True
        except (OSError, ValueError) as e:
            res["inputs_reason"] = "lumsearch's inputs not used, PyTorch runs on its own random inputs: %s" % (
                (str(e).splitlines() or [""])[0],)
        res["inputs_mapped"] = mapped
    torch, reason = cuda_or_reason()
    if torch is None:
        res["reason"] = reason
        return res
    deadline = time.monotonic() + time_cap
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype_name]
    tol = LUMSEARCH_TOL[dtype_name]
    try:
        with torch.no_grad():
            ls_want = None
            if mapped:
                try:
                    w, ls_want = lumsearch_leaves(torch, inputs_dir, out_name)
                    res["inputs"] = "lumsearch"
                    res["lumsearch_tol"] = tol
                except (OSError, ValueError) as e:  # SafetensorsError is a ValueError
                    res["inputs_reason"] = "lumsearch's inputs not used, PyTorch runs on its own random inputs: %s" % (
                        (str(e).splitlines() or [""])[0],)
            if ls_want is None:
                w = random_leaves(torch, leaves, dtype)
            fn, inputs, nbytes, flops = build(torch, part, cfg, seq, dtype, w)
            res["bytes"], res["flops"] = nbytes, flops
            want = fn(*inputs)
            # Numbers before times: eager against lumsearch's outputs.
            if ls_want is not None:
                check_lumsearch(res, "eager", want, ls_want, tol)
            res["eager_ms"] = time_cuda(torch, lambda: fn(*inputs), deadline)
            if time.monotonic() >= deadline:
                res["compile_reason"] = "time cap reached before torch.compile"
                return res
            try:
                cfn = torch.compile(fn)
                got = cfn(*inputs)  # compiles; can take most of the cap
                # Numbers before times: torch.compile must agree with eager.
                err = (got.float() - want.float()).abs().max().item()
                scale = want.float().abs().max().item() or 1.0
                res["compile_max_rel_err"] = err / scale
                ctol = 1e-4 if dtype == torch.float32 else 5e-2
                if ls_want is not None:
                    check_lumsearch(res, "compile", got, ls_want, tol)
                if not err / scale <= ctol:
                    res["compile_reason"] = "torch.compile disagrees with eager (rel err %.3g > %g)" % (err / scale, ctol)
                elif time.monotonic() >= deadline:
                    res["compile_reason"] = "time cap reached while compiling"
                else:
                    res["compile_ms"] = time_cuda(torch, lambda: cfn(*inputs), deadline)
            except Exception as e:
                res["compile_reason"] = "torch.compile failed: %s" % (str(e).splitlines() or [""])[0]
    except Exception as e:
        res["reason"] = "failed: %s" % (str(e).splitlines() or [""])[0]
    finally:
        try:
            torch.cuda.empty_cache()
        except Exception:
            pass
    return res


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--probe", action="store_true", help="report torch and CUDA availability")
    mode.add_argument("--ceilings", action="store_true", help="measure copy GB/s and bf16 matmul TFLOP/s")
    mode.add_argument("--graph", metavar="NAME", help="time a corpus graph, e.g. llama-3-8b:layer")
    mode.add_argument("--self-test", metavar="FILE", help="parse a safetensors FILE with the standard library only")
    p.add_argument("--seq", type=int, default=16, help="tokens per sequence (default 16)")
    p.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16")
    p.add_argument("--inputs", metavar="DIR", help="--graph: run on the tensors lumsearch bench --save wrote into DIR and compare with its outputs")
    p.add_argument("--time-cap", type=float, default=60.0, metavar="S", help="seconds for this step (default 60)")
    a = p.parse_args(argv)
    if a.inputs is not None and a.graph is None:
        p.error("--inputs goes with --graph")
    if a.probe:
        emit(probe())
    elif a.ceilings:
        emit(ceilings(a.time_cap))
    elif a.self_test is not None:
        out, code = self_test(a.self_test)
        emit(out)
        return code
    else:
        emit(run_graph(a.graph, a.seq, a.time_cap, a.dtype, a.inputs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
