#!/usr/bin/env python3
"""Write a GGUF of hkv's 27B shape (builtin:27b) with random weights, for llama.cpp's llama-bench.

The architecture is llama.cpp's `qwen35` (Qwen3.5 dense: Gated DeltaNet layers and gated full-attention
layers, full attention every 4th layer). Matmul weights are written as pre-quantized blocks straight from
a pool of random bytes (no float quantization, so ~15 GB take seconds): Q4_0 everywhere by default
(`--quant q4_0`, like `llama-quantize --pure`), or a Q4_K_M-like mix (`--quant q4_k_m`). Norms, conv1d,
A and dt_bias are F32, as llama.cpp's converter leaves them. The vocabulary is a "none" tokenizer with
`qwen35.vocab_size` set: llama-bench feeds random token ids, so only the vocabulary's size matters.

Needs numpy and gguf-py (the `gguf-py/` folder of a llama.cpp source tree: --gguf-py DIR, or on sys.path).

  python3 make_gguf.py --out /dev/shm/hkv27b-q4_0.gguf --gguf-py /tmp/llama.cpp/gguf-py
  python3 make_gguf.py --tiny --out /tmp/tiny.gguf --gguf-py ...     # 4 layers, small dims, same layout
"""
import argparse
import math
import os
import sys
import time


def shape_27b():
    # reference/synthetic.cpp builtin_spec("27b"); /work/shared/model-facts.md
    return dict(vocab=248320, hidden=5120, ffn=17408, layers=64, interval=4, heads=24, kv_heads=4,
                head_dim=256, lin_k_heads=16, lin_v_heads=48, lin_k_dim=128, lin_v_dim=128, conv=4,
                rope_theta=1e7, partial_rotary=0.25, eps=1e-6, ctx=262144)


def shape_tiny():
    # same layout, small: every matmul input a multiple of 256 so that the K-quants fit too
    return dict(vocab=1024, hidden=256, ffn=512, layers=4, interval=4, heads=2, kv_heads=1,
                head_dim=256, lin_k_heads=2, lin_v_heads=4, lin_k_dim=64, lin_v_dim=64, conv=4,
                rope_theta=1e7, partial_rotary=0.25, eps=1e-6, ctx=262144)


def use_more_bits(i, n):
    # llama.cpp src/llama-quant.cpp
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gguf-py", default=None, help="llama.cpp's gguf-py folder")
    ap.add_argument("--tiny", action="store_true", help="4 layers (3 DeltaNet + 1 attention), small dims")
    ap.add_argument("--quant", choices=["q4_0", "q4_k_m"], default="q4_0")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    if a.gguf_py:
        sys.path.insert(0, a.gguf_py)
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as QT

    s = shape_tiny() if a.tiny else shape_27b()
    E, F, L, V = s["hidden"], s["ffn"], s["layers"], s["vocab"]
    H, KVH, HD = s["heads"], s["kv_heads"], s["head_dim"]
    NK, NV, DK, DV = s["lin_k_heads"], s["lin_v_heads"], s["lin_k_dim"], s["lin_v_dim"]
    assert DK == DV, "llama.cpp's qwen35 takes one ssm.state_size for both DeltaNet head dims"
    key_dim, value_dim = NK * DK, NV * DV
    conv_dim = 2 * key_dim + value_dim
    n_rot = int(HD * s["partial_rotary"])
    is_full = [(i + 1) % s["interval"] == 0 for i in range(L)]

    arch = "qwen35"
    w = gguf.GGUFWriter(a.out, arch)
    w.add_name("hkv-27b-random" if not a.tiny else "hkv-tiny-random")
    w.add_context_length(s["ctx"])
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KVH)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(s["rope_theta"])
    w.add_rope_dimension_sections([11, 11, 10, 0])  # the converter's default; text positions make it plain RoPE
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_ssm_conv_kernel(s["conv"])
    w.add_ssm_state_size(DK)
    w.add_ssm_group_count(NK)
    w.add_ssm_time_step_rank(NV)
    w.add_ssm_inner_size(value_dim)
    w.add_full_attention_interval(s["interval"])
    w.add_vocab_size(V)
    w.add_tokenizer_model("none")
    ftype = gguf.LlamaFileType.MOSTLY_Q4_0 if a.quant == "q4_0" else gguf.LlamaFileType.MOSTLY_Q4_K_M
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    # ---- the tensor list: (name, ggml ne = [n_in, n_out] or [n], kind, qtype) in llama.cpp's order ----
    tensors = []

    def mat(name, n_in, n_out, qt):
        tensors.append((name, (n_in, n_out), "mat", qt))

    def vec(name, shape, kind):
        tensors.append((name, shape, kind, QT.F32))

    q40 = a.quant == "q4_0"
    base = QT.Q4_0 if q40 else QT.Q4_K
    n_attn_v = sum(is_full)
    i_attn_v = 0
    mat("token_embd.weight", E, V, base)
    vec("output_norm.weight", (E,), "ones")
    mat("output.weight", E, V, base if q40 else QT.Q6_K)
    for il in range(L):
        p = f"blk.{il}."
        vec(p + "attn_norm.weight", (E,), "ones")
        vec(p + "post_attention_norm.weight", (E,), "ones")
        if is_full[il]:
            mat(p + "attn_q.weight", E, HD * H * 2, base)  # query and its gate, per head
            mat(p + "attn_k.weight", E, HD * KVH, base)
            vq = base if q40 or not use_more_bits(i_attn_v, n_attn_v) else QT.Q6_K
            i_attn_v += 1
            mat(p + "attn_v.weight", E, HD * KVH, vq)
            mat(p + "attn_output.weight", HD * H, E, base)
            vec(p + "attn_q_norm.weight", (HD,), "ones")
            vec(p + "attn_k_norm.weight", (HD,), "ones")
        else:
            mat(p + "attn_qkv.weight", E, conv_dim, base if q40 else QT.Q5_K)
            mat(p + "attn_gate.weight", E, value_dim, base)
            vec(p + "ssm_conv1d.weight", (s["conv"], conv_dim), "conv")
            vec(p + "ssm_dt.bias", (NV,), "dt")
            vec(p + "ssm_a", (NV,), "a")
            mat(p + "ssm_beta.weight", E, NV, base)
            mat(p + "ssm_alpha.weight", E, NV, base)
            vec(p + "ssm_norm.weight", (DV,), "ones")
            mat(p + "ssm_out.weight", value_dim, E, base)
        mat(p + "ffn_gate.weight", E, F, base)
        fd = base if q40 or not use_more_bits(il, L) else QT.Q6_K
        mat(p + "ffn_down.weight", F, E, fd)
        mat(p + "ffn_up.weight", E, F, base)

    rng = np.random.default_rng(a.seed)

    def f32(kind, shape):
        n = int(np.prod(shape))
        if kind == "ones":
            x = np.ones(n, np.float32)
        elif kind == "conv":
            x = rng.normal(0.0, 0.5, n).astype(np.float32)
        elif kind == "dt":
            x = rng.normal(0.0, 0.5, n).astype(np.float32)
        elif kind == "a":  # -exp(A_log), as the converter stores it
            x = (-np.exp(rng.uniform(0.0, 2.5, n))).astype(np.float32)
        else:
            raise ValueError(kind)
        return x.reshape(tuple(reversed(shape)))  # numpy order is ggml's reversed

    # pools of random whole blocks, one per (type, input width), with the block scales set so that a
    # row's dot product with a unit-RMS input is O(1); a tensor is the pool repeated from a random block
    POOL_BYTES = 8 << 20
    pools = {}

    def pool(qt, n_in):
        key = (qt, n_in)
        if key in pools:
            return pools[key]
        blk, tsz = gguf.GGML_QUANT_SIZES[qt]
        nb = POOL_BYTES // tsz
        b = rng.integers(0, 256, size=(nb, tsz), dtype=np.uint8)
        sd = 1.0 / math.sqrt(n_in)  # the weights' target std
        f16 = lambda v: np.array([v], np.float16).view(np.uint8)  # noqa: E731
        if qt == QT.Q4_0:      # d, qs[16]: w = d (q - 8), std(q - 8) = 4.6
            b[:, 0:2] = f16(sd / 4.6)
        elif qt in (QT.Q4_K, QT.Q5_K):  # d, dmin, scales[12], ...: w = d sc q - dmin m, 6-bit sc, m
            b[:, 0:2] = f16(sd / (32 * 4.6 * (2 if qt == QT.Q5_K else 1)))
            b[:, 2:4] = f16(sd / (32 * 8.0))
        elif qt == QT.Q6_K:    # ql[128], qh[64], scales[16] int8, d: w = d sc (q - 32)
            b[:, 192:208] = rng.integers(16, 64, size=(nb, 16), dtype=np.uint8)
            b[:, 208:210] = f16(sd / (40 * 18.5))
        else:
            raise ValueError(qt)
        pools[key] = b.reshape(-1)
        return pools[key]

    plan = []
    for name, ne, kind, qt in tensors:
        if kind == "mat":
            n_in, n_out = ne
            blk, tsz = gguf.GGML_QUANT_SIZES[qt]
            assert n_in % blk == 0, (name, n_in, qt)
            row = n_in // blk * tsz
            nbytes = row * n_out
            w.add_tensor_info(name, (n_out, row), np.dtype(np.uint8), nbytes, raw_dtype=qt)
            plan.append((name, qt, n_in, nbytes, None))
        else:
            x = f32(kind, ne)
            w.add_tensor_info(name, x.shape, x.dtype, x.nbytes)
            plan.append((name, qt, None, x.nbytes, x))

    t0 = time.time()
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    total = 0
    for name, qt, n_in, nbytes, x in plan:
        if x is not None:
            x.tofile(fout)
        else:
            p = pool(qt, n_in)
            tsz = gguf.GGML_QUANT_SIZES[qt][1]
            off = int(rng.integers(0, len(p) // tsz)) * tsz
            left = nbytes
            mv = memoryview(p)
            while left > 0:
                n = min(left, len(p) - off)
                fout.write(mv[off:off + n])
                left -= n
                off = 0
        w.write_padding(fout, nbytes)
        total += nbytes
    w.close()
    dt = time.time() - t0
    nparams = sum((ne[0] * ne[1] if k == "mat" else int(np.prod(ne))) for _, ne, k, _ in tensors)
    print(f"make_gguf: {a.out}: arch {arch}, {'tiny' if a.tiny else '27B'} shape, {a.quant}, {len(tensors)} tensors, "
          f"{nparams / 1e9:.3f} B parameters, {os.path.getsize(a.out) / 1e9:.2f} GB, written in {dt:.1f} s")


if __name__ == "__main__":
    main()
