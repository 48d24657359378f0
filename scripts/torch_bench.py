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
  torch_bench.py --graph NAME --seq N [--time-cap S]
      a llama-style decoder layer (or its MLP / RMSNorm) at NAME's shapes,
      run in eager mode and with torch.compile: outputs compared first,
      then each timed, the whole graph capped at S seconds.
"""

import argparse
import json
import sys
import time

# Shapes of the corpus graphs the PyTorch side can rebuild, by the model
# part of their lumsearch name. Llama-style layers only: the shapes are the
# published configurations (hidden, heads, kv heads, ffn, rms eps).
MODELS = {
    "llama-3-8b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, eps=1e-5),
    "llama-3.2-1b": dict(hidden=2048, heads=32, kv_heads=8, ffn=8192, eps=1e-5),
    "mistral-7b": dict(hidden=4096, heads=32, kv_heads=8, ffn=14336, eps=1e-5),
}
PARTS = ("layer", "mlp", "rmsnorm")


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


def build(torch, part, cfg, seq, dtype):
    """Returns (fn, inputs, bytes, flops) for a llama-style part at cfg.

    Weights are random (seeded); bytes counts weights plus activations in
    and out once, flops the matmuls only: the minimum any program moves and
    computes, which is what achieved GB/s and TFLOP/s are measured against."""
    F = torch.nn.functional
    g = torch.Generator(device="cuda").manual_seed(0)
    h, nh, nkv, ffn, eps = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn"], cfg["eps"]
    hd = h // nh
    esz = torch.tensor([], dtype=dtype).element_size()

    def rnd(*shape, scale=None):
        s = scale if scale is not None else shape[-1] ** -0.5
        return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32) * s).to(dtype)

    x = rnd(seq, h, scale=1.0)
    nw = (1 + 0.1 * torch.randn(h, generator=g, device="cuda")).to(dtype)

    def rmsnorm(v, w):
        vf = v.float()
        return (vf * torch.rsqrt(vf.pow(2).mean(-1, keepdim=True) + eps)).to(dtype) * w

    if part == "rmsnorm":
        return (lambda x: rmsnorm(x, nw)), (x,), 2 * seq * h * esz + h * esz, 0

    wg, wu, wd = rnd(ffn, h), rnd(ffn, h), rnd(h, ffn)

    def mlp(v):
        return F.linear(F.silu(F.linear(v, wg)) * F.linear(v, wu), wd)

    mlp_bytes = 3 * h * ffn * esz
    mlp_flops = 2 * seq * 3 * h * ffn
    if part == "mlp":
        return mlp, (x,), mlp_bytes + 2 * seq * h * esz, mlp_flops

    wq, wk, wv, wo = rnd(h, h), rnd(nkv * hd, h), rnd(nkv * hd, h), rnd(h, h)
    nw2 = nw.clone()
    pos = torch.arange(seq, device="cuda", dtype=torch.float32)
    inv = 500000.0 ** (-torch.arange(0, hd, 2, device="cuda", dtype=torch.float32) / hd)
    ang = torch.outer(pos, inv)
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
        v = v + F.linear(o.transpose(0, 1).reshape(seq, h), wo)
        return v + mlp(rmsnorm(v, nw2))

    attn_bytes = (2 * h * h + 2 * nkv * hd * h) * esz
    attn_flops = 2 * seq * (2 * h * h + 2 * nkv * hd * h) + 4 * seq * seq * h
    return layer, (x,), mlp_bytes + attn_bytes + 2 * seq * h * esz, mlp_flops + attn_flops


def run_graph(name, seq, time_cap, dtype_name):
    res = {"graph": name, "seq": seq, "dtype": dtype_name}
    model, _, part = name.partition(":")
    if model not in MODELS or part not in PARTS:
        res["reason"] = "no PyTorch equivalent of %s (known: %s with %s)" % (
            name, ", ".join(sorted(MODELS)), "/".join(PARTS))
        return res
    torch, reason = cuda_or_reason()
    if torch is None:
        res["reason"] = reason
        return res
    deadline = time.monotonic() + time_cap
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype_name]
    try:
        with torch.no_grad():
            fn, inputs, nbytes, flops = build(torch, part, MODELS[model], seq, dtype)
            res["bytes"], res["flops"] = nbytes, flops
            want = fn(*inputs)
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
                tol = 1e-4 if dtype == torch.float32 else 5e-2
                if not err / scale <= tol:
                    res["compile_reason"] = "torch.compile disagrees with eager (rel err %.3g > %g)" % (err / scale, tol)
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
    p.add_argument("--seq", type=int, default=16, help="tokens per sequence (default 16)")
    p.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16")
    p.add_argument("--time-cap", type=float, default=60.0, metavar="S", help="seconds for this step (default 60)")
    a = p.parse_args(argv)
    if a.probe:
        emit(probe())
    elif a.ceilings:
        emit(ceilings(a.time_cap))
    else:
        emit(run_graph(a.graph, a.seq, a.time_cap, a.dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
