#!/usr/bin/env python3
"""The PyTorch peer: what PyTorch does on the same card, for the engine's two memory-bound parts.

On one CUDA device it measures
  (a) F.scaled_dot_product_attention for one decode query (batch 1, 24 query heads, 4 KV heads, head_dim
      256: the 27B attention layout, GQA through enable_gqa=True) over a bf16 KV cache at each depth;
  (b) torch.matmul of a [rows, cols] bf16 weight with a [cols] bf16 vector for every matrix shape of the
      27B model (read from reference/synthetic.cpp's builtin "27b" config and laid out as cuda/engine.cu's
      Engine(SyntheticSpec) lays them out), and their sum over one token's layers;
  (c) F.scaled_dot_product_attention with is_causal=True over a whole prompt of T tokens (the same layout),
      the peer of the fast prefill's attention (`hkv bench-prefill --attention-only`), in TFLOP/s: 4·D flops
      a visible (query head, key) pair;
and a device-to-device copy of a large tensor, whose bandwidth (bytes read plus bytes written, over time) is
the ceiling every row is put against. Each row: median microseconds per call, the bytes the call must read
(its cache or weight once, plus its small inputs), GB/s = those bytes over the time, and that as % of the
copy bandwidth.

Timing (/work/.library/device/METHOD.md): random inputs (never zeros); warm-up first; each measurement
replays a CUDA graph holding `inner` calls between two CUDA events (eager launches when capture fails,
marked in the table), many times, and the median per-call time is reported; inputs smaller than
--rotate-mb are rotated over several copies so that repeated calls do not read from the 60 MB L2.

    python3 scripts/peer_torch.py [--json PATH] [--depths 1024,8192,...] [--quick] [--cpu]

--cpu (or no CUDA device) runs tiny sizes on the CPU as a smoke test of the script itself: its numbers
mean nothing. Exit code 0 when every measurement ran, 1 when one failed (its error is in the table/JSON).
"""

import argparse
import datetime
import json
import math
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the 27B shapes, from reference/synthetic.cpp ------------------------------------------------------


def read_27b_config(path):
    """The fields `c.NAME = VALUE;` of builtin_spec's "27b" branch in reference/synthetic.cpp."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r'name == "27b"[^{]*\{(.*?)\n  \}', text, re.S)
    if not m:
        raise RuntimeError(f'{path}: the builtin "27b" branch was not found')
    cfg = {k: int(v) for k, v in re.findall(r"\bc\.(\w+)\s*=\s*(\d+)\s*;", m.group(1))}
    iv = re.search(r"interval_layers\(c,\s*(\d+)\)", m.group(1))
    need = ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "linear_num_key_heads", "linear_num_value_heads",
            "linear_key_head_dim", "linear_value_head_dim"]
    missing = [k for k in need if k not in cfg]
    if missing or not iv:
        raise RuntimeError(f'{path}: the "27b" branch lacks {missing or ["interval_layers"]}')
    cfg = {k: cfg[k] for k in need}  # (the nested "27b-mlx4" branch's quantization fields are not the bf16 model's)
    cfg["full_attention_interval"] = int(iv.group(1))
    return cfg


def matvec_shapes(c):
    """(name, rows, cols, count per token) for every weight matrix of one decode token, as the engine has them."""
    E, I, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H, KV, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    nk, nv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
    L, every = c["num_hidden_layers"], c["full_attention_interval"]
    n_full = L // every  # interval_layers: every `every`-th layer is full attention
    n_lin = L - n_full
    conv_dim = 2 * nk * dk + nv * dv
    return [
        ("attn.q_proj (q+gate)", H * 2 * D, E, n_full),
        ("attn.k_proj", KV * D, E, n_full),
        ("attn.v_proj", KV * D, E, n_full),
        ("attn.o_proj", E, H * D, n_full),
        ("deltanet.in_proj_qkv", conv_dim, E, n_lin),
        ("deltanet.in_proj_z", nv * dv, E, n_lin),
        ("deltanet.in_proj_b", nv, E, n_lin),
        ("deltanet.in_proj_a", nv, E, n_lin),
        ("deltanet.out_proj", E, nv * dv, n_lin),
        ("mlp.gate_proj", I, E, L),
        ("mlp.up_proj", I, E, L),
        ("mlp.down_proj", E, I, L),
        ("lm_head", V, E, 1),
    ]


# ---- timing ----------------------------------------------------------------------------------------------


class Timer:
    """Median seconds per call of fn(i) for i in range(inner), on CUDA (graph replay between events) or CPU."""

    def __init__(self, torch, device, min_time, max_reps):
        self.torch, self.device = torch, device
        self.min_time, self.max_reps = min_time, max_reps

    def __call__(self, fn, inner, graph=True):
        torch = self.torch
        if self.device.type != "cuda":
            for i in range(inner):
                fn(i)
            samples = []
            t_end = time.perf_counter() + self.min_time
            while len(samples) < 5 or (time.perf_counter() < t_end and len(samples) < self.max_reps):
                t = time.perf_counter()
                for i in range(inner):
                    fn(i)
                samples.append((time.perf_counter() - t) / inner)
            return statistics.median(samples), "cpu", len(samples) * inner

        def run_all():
            for i in range(inner):
                fn(i)

        # warm-up on a side stream (module load, workspace and handle creation), as graph capture wants
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                run_all()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        mode = "graph"
        try:
            if not graph:
                raise RuntimeError("eager asked for")
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                run_all()
            replay = g.replay
            replay()
            torch.cuda.synchronize()
        except Exception:  # some kernels cannot be captured: time eager launches instead
            mode = "eager"
            replay = run_all
            torch.cuda.synchronize()
        # one replay, to size the number of repetitions
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        replay()
        e.record()
        torch.cuda.synchronize()
        one = max(s.elapsed_time(e) * 1e-3, 1e-6)
        reps = int(min(self.max_reps, max(20, math.ceil(self.min_time / one))))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
        for a, b in events:
            a.record()
            replay()
            b.record()
        torch.cuda.synchronize()
        samples = [a.elapsed_time(b) * 1e-3 / inner for a, b in events]
        return statistics.median(samples), mode, reps * inner


def copies_for(nbytes, rotate_bytes):
    """How many copies of an input of nbytes to rotate over so that one pass reads at least rotate_bytes."""
    return max(1, math.ceil(rotate_bytes / max(nbytes, 1)))


# ---- the measurements ------------------------------------------------------------------------------------


def measure_copy(torch, device, timer, nbytes):
    n = nbytes // 2
    src = torch.randn(n, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    # Both ways, the faster kept: captured in a graph, the copy is a memcpy node that the driver may give to a
    # copy engine (seen on the H200, 2026-11-29: 2.72 TB/s, against 4.2 TB/s for hkv's cudaMemcpyAsync).
    runs = [timer(lambda i: dst.copy_(src), 1, graph=g) for g in (True, False)]
    t, mode, calls = min(runs)
    if not torch.equal(dst, src):
        raise RuntimeError("the copy did not copy")
    moved = 2 * n * 2  # read + written
    return {"bytes_read": n * 2, "bytes_moved": moved, "us": t * 1e6, "GBps": moved / t / 1e9, "mode": mode,
            "calls": calls}


def attention_reference(torch, q, k, v):
    """fp32 attention of one query per head over all keys, query head h on KV head h // (H / KV)."""
    H, KV = q.shape[1], k.shape[1]
    kk = k.float().repeat_interleave(H // KV, dim=1)
    vv = v.float().repeat_interleave(H // KV, dim=1)
    s = (q.float() @ kk.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s, dim=-1) @ vv


def measure_attention(torch, F, device, timer, depths, heads, kv_heads, head_dim, rotate_bytes, copy_GBps,
                      backends):
    rows = []
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        SDPBackend = sdpa_kernel = None
    for depth in depths:
        cache_bytes = 2 * depth * kv_heads * head_dim * 2  # K and V, bf16
        n = copies_for(cache_bytes, rotate_bytes)
        gen = torch.Generator(device=device)
        gen.manual_seed(1000 + depth)
        ks = [torch.randn(1, kv_heads, depth, head_dim, dtype=torch.bfloat16, device=device, generator=gen)
              for _ in range(n)]
        vs = [torch.randn(1, kv_heads, depth, head_dim, dtype=torch.bfloat16, device=device, generator=gen)
              for _ in range(n)]
        qs = [torch.randn(1, heads, 1, head_dim, dtype=torch.bfloat16, device=device, generator=gen) for _ in range(n)]
        for backend in backends:
            row = {"kind": "attention", "depth": depth, "backend": backend, "copies": n,
                   "bytes_read": cache_bytes + 2 * heads * head_dim * 2}  # + q read and out written
            try:
                ctx = None
                if backend != "auto":
                    if sdpa_kernel is None:
                        raise RuntimeError("torch.nn.attention.sdpa_kernel is not available")
                    ctx = sdpa_kernel([getattr(SDPBackend, backend)])
                if ctx is not None:
                    ctx.__enter__()
                try:
                    call = lambda i: F.scaled_dot_product_attention(qs[i], ks[i], vs[i], enable_gqa=True)
                    out = call(0)
                    if depth <= 8192:  # correct first: against fp32 on the same inputs
                        ref = attention_reference(torch, qs[0], ks[0], vs[0])
                        rel = ((out.float() - ref).norm() / ref.norm()).item()
                        row["rel_err_vs_fp32"] = rel
                        if not (rel < 1e-2):
                            raise RuntimeError(f"relative error {rel:.3g} against fp32: not the attention intended")
                    t, mode, calls = timer(call, n)
                finally:
                    if ctx is not None:
                        ctx.__exit__(None, None, None)
                row.update({"us": t * 1e6, "GBps": row["bytes_read"] / t / 1e9, "mode": mode, "calls": calls})
                row["pct_copy"] = 100.0 * row["GBps"] / copy_GBps
            except Exception as e:  # a backend that does not take this case: recorded, not fatal
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
            rows.append(row)
        ks = vs = qs = call = None  # free this depth's cache before the next
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def causal_reference(torch, q, k, v):
    """fp32 causal attention of every query row, query head h on KV head h // (H / KV)."""
    H, KV, T = q.shape[1], k.shape[1], q.shape[2]
    kk = k.float().repeat_interleave(H // KV, dim=1)
    vv = v.float().repeat_interleave(H // KV, dim=1)
    s = (q.float() @ kk.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ vv


def measure_prefill_attention(torch, F, device, timer, lengths, heads, kv_heads, head_dim):
    rows = []
    for T in lengths:
        row = {"kind": "prefill_attention", "tokens": T, "backend": "auto",
               "flops": 4.0 * head_dim * heads * T * (T + 1) / 2}
        try:
            gen = torch.Generator(device=device)
            gen.manual_seed(2000 + T)
            q = torch.randn(1, heads, T, head_dim, dtype=torch.bfloat16, device=device, generator=gen)
            k = torch.randn(1, kv_heads, T, head_dim, dtype=torch.bfloat16, device=device, generator=gen)
            v = torch.randn(1, kv_heads, T, head_dim, dtype=torch.bfloat16, device=device, generator=gen)
            call = lambda i: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            out = call(0)
            if T <= 2048:  # correct first: against fp32 on the same inputs
                ref = causal_reference(torch, q, k, v)
                rel = ((out.float() - ref).norm() / ref.norm()).item()
                row["rel_err_vs_fp32"] = rel
                if not (rel < 1e-2):
                    raise RuntimeError(f"relative error {rel:.3g} against fp32: not the attention intended")
            out = None
            t, mode, calls = timer(call, 1, graph=False)  # (tens of ms a call: launches do not matter)
            row.update({"us": t * 1e6, "TFLOPs": row["flops"] / t / 1e12, "mode": mode, "calls": calls})
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        rows.append(row)
        q = k = v = call = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def measure_matvec(torch, device, timer, shapes, rotate_bytes, copy_GBps):
    rows = []
    for name, r, c, per_token in shapes:
        wbytes = r * c * 2
        n = copies_for(wbytes, rotate_bytes)
        row = {"kind": "matvec", "name": name, "rows": r, "cols": c, "per_token": per_token, "copies": n,
               "bytes_read": wbytes + c * 2 + r * 2}  # weight and x read, y written
        try:
            gen = torch.Generator(device=device)
            gen.manual_seed(r * 7 + c)
            ws = [torch.randn(r, c, dtype=torch.bfloat16, device=device, generator=gen) for _ in range(n)]
            xs = [torch.randn(c, dtype=torch.bfloat16, device=device, generator=gen) for _ in range(n)]
            call = lambda i: torch.matmul(ws[i], xs[i])
            y = call(0)
            ref = ws[0].float() @ xs[0].float()
            rel = ((y.float() - ref).norm() / ref.norm()).item()
            row["rel_err_vs_fp32"] = rel
            if not (rel < 1e-2):
                raise RuntimeError(f"relative error {rel:.3g} against fp32")
            del ref, y
            t, mode, calls = timer(call, n)
            row.update({"us": t * 1e6, "GBps": row["bytes_read"] / t / 1e9, "mode": mode, "calls": calls})
            row["pct_copy"] = 100.0 * row["GBps"] / copy_GBps
            ws = xs = call = None
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
        if device.type == "cuda":
            torch.cuda.empty_cache()
        rows.append(row)
    return rows


# ---- output ----------------------------------------------------------------------------------------------


def fmt_bytes(b):
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b} B"


def table(result):
    out = []
    cp = result["copy"]
    out.append(f"== peer_torch table: {result['device']}, torch {result['torch']}, {result['date']}")
    out.append(f"copy (device to device, {fmt_bytes(cp['bytes_read'])}): {cp['us']:.1f} us, "
               f"{cp['GBps']:.0f} GB/s counting read + written ({cp['mode']})")
    hdr = f"{'what':<34} {'shape':>16} {'read':>10} {'median us':>10} {'GB/s':>8} {'% copy':>7}  mode"
    out.append(hdr)
    def row(what, shape, r):
        head = f"{what:<34} {shape:>16} {fmt_bytes(r['bytes_read']):>10}"
        if "error" in r:
            return f"{head}  not run: {r['error']}"
        return f"{head} {r['us']:>10.2f} {r['GBps']:>8.0f} {r['pct_copy']:>6.1f}%  {r['mode']}"

    for r in result["attention"]:
        out.append(row(f"sdpa decode ({r['backend']})", f"depth {r['depth']}", r))
    for r in result["matvec"]:
        out.append(row("matvec " + r["name"], f"{r['rows']}x{r['cols']}", r))
    for r in result.get("prefill_attention", []):
        head = f"{'sdpa causal prefill (auto)':<34} {'T ' + str(r['tokens']):>16} {'':>10}"
        out.append(f"{head}  not run: {r['error']}" if "error" in r else
                   f"{head} {r['us']:>10.1f} {r['TFLOPs']:>7.1f} TFLOP/s  {r['mode']}")
    tok = result.get("token_weights_bf16")
    if tok:
        out.append(f"{'27B bf16 weights, one token (sum)':<34} {tok['matrices']:>7} matrices {fmt_bytes(tok['bytes_read']):>10} "
                   f"{tok['us']:>10.1f} {tok['GBps']:>8.0f} {tok['pct_copy']:>6.1f}%")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the results here (schema hkv-peer-torch-1)")
    ap.add_argument("--depths", default="1024,8192,32768,131072,262144", help="KV cache depths")
    ap.add_argument("--prefill-tokens", default="4096,32768,65536",
                    help="prompt lengths of the causal prefill attention (empty: none)")
    ap.add_argument("--backends", default="auto,FLASH_ATTENTION,EFFICIENT_ATTENTION,CUDNN_ATTENTION",
                    help="SDPA backends to time (auto: PyTorch's choice); one that refuses the case is listed")
    ap.add_argument("--copy-mb", type=int, default=2048, help="size of the copied tensor, MB")
    ap.add_argument("--rotate-mb", type=int, default=256,
                    help="rotate smaller inputs over copies totalling at least this much (several times the L2)")
    ap.add_argument("--min-time", type=float, default=0.25, help="seconds of timed repetitions per row, at least")
    ap.add_argument("--max-reps", type=int, default=2000)
    ap.add_argument("--model-source", default=os.path.join(ROOT, "reference", "synthetic.cpp"))
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and only the auto backend")
    ap.add_argument("--cpu", action="store_true", help="smoke test on the CPU with tiny sizes (numbers mean nothing)")
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    cpu = args.cpu or not torch.cuda.is_available()
    device = torch.device("cpu" if cpu else "cuda")
    cfg = read_27b_config(args.model_source)
    depths = [int(d) for d in args.depths.split(",") if d]
    plens = [int(t) for t in args.prefill_tokens.split(",") if t]
    backends = [b for b in args.backends.split(",") if b]
    shapes = matvec_shapes(cfg)
    heads, kv_heads, head_dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    if args.quick:
        args.min_time, backends = 0.05, ["auto"]
    rotate = args.rotate_mb << 20
    copy_bytes = args.copy_mb << 20
    if cpu:  # the smoke test: same code, tiny sizes
        print("peer_torch: no CUDA device (or --cpu): a smoke test on the CPU with tiny sizes; the numbers mean nothing")
        depths = [d // 256 for d in depths[:2]]
        plens = [min(t, 256) for t in plens[:1]]
        shapes = [(n, max(1, r // 64), max(1, c // 64), k) for n, r, c, k in shapes]
        backends, rotate, copy_bytes, args.min_time = ["auto"], 1 << 20, 8 << 20, 0.02
    timer = Timer(torch, device, args.min_time, args.max_reps)

    name = torch.cuda.get_device_name(0) if not cpu else "cpu"
    result = {
        "schema": "hkv-peer-torch-1",
        "command": " ".join([os.path.basename(sys.executable), "scripts/peer_torch.py"] + sys.argv[1:]),
        "device": name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "smoke_test_cpu": cpu,
        "model": {"source": os.path.relpath(args.model_source, ROOT), "config_27b": cfg},
        "method": "median of CUDA-event-timed graph replays (eager where capture fails) after warm-up; random "
                  "bf16 inputs; inputs under --rotate-mb rotated over copies; GB/s = bytes read / time; "
                  "% copy = that / the copy's (read + written) bandwidth",
    }
    result["copy"] = measure_copy(torch, device, timer, copy_bytes)
    copy_GBps = result["copy"]["GBps"]
    print(f"copy: {result['copy']['GBps']:.0f} GB/s", flush=True)
    result["attention"] = measure_attention(torch, F, device, timer, depths, heads, kv_heads, head_dim, rotate,
                                            copy_GBps, backends)
    for r in result["attention"]:
        print(f"attention depth {r['depth']} {r['backend']}: " +
              (r["error"] if "error" in r else f"{r['us']:.2f} us, {r['GBps']:.0f} GB/s"), flush=True)
    result["prefill_attention"] = measure_prefill_attention(torch, F, device, timer, plens, heads, kv_heads, head_dim)
    for r in result["prefill_attention"]:
        print(f"prefill attention T {r['tokens']}: " +
              (r["error"] if "error" in r else f"{r['us'] / 1e3:.2f} ms, {r['TFLOPs']:.1f} TFLOP/s"), flush=True)
    result["matvec"] = measure_matvec(torch, device, timer, shapes, rotate, copy_GBps)
    for r in result["matvec"]:
        print(f"matvec {r['name']} {r['rows']}x{r['cols']}: " +
              (r["error"] if "error" in r else f"{r['us']:.2f} us, {r['GBps']:.0f} GB/s"), flush=True)
    ok_mv = [r for r in result["matvec"] if "error" not in r]
    if len(ok_mv) == len(result["matvec"]):
        us = sum(r["us"] * r["per_token"] for r in ok_mv)
        b = sum(r["bytes_read"] * r["per_token"] for r in ok_mv)
        result["token_weights_bf16"] = {
            "matrices": sum(r["per_token"] for r in ok_mv), "bytes_read": b, "us": us, "GBps": b / (us * 1e-6) / 1e9,
            "pct_copy": 100.0 * b / (us * 1e-6) / 1e9 / copy_GBps,
            "note": "sum of the per-matrix medians times their count in one decode token (embedding row excluded)"}
    text = table(result)
    print(text)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.json)
    # auto must always run; an explicit backend that refuses the case is information, not a failure
    failed = [r for r in result["attention"] if "error" in r and r["backend"] == "auto"] + \
             [r for r in result["matvec"] if "error" in r] + \
             [r for r in result["prefill_attention"] if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
