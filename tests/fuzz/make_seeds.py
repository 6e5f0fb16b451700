#!/usr/bin/env python3
"""Writes the committed seed corpora under tests/fuzz/corpus/ (run once; the output is committed).

Each seed is small: a valid input that reaches deep into its reader, and a few broken ones that each
stop at a different check. Standard library only.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def bf16(x):
    return struct.pack("<f", x)[2:]


def safetensors(tensors, metadata=None, header_override=None, pad=True):
    """tensors: list of (name, dtype, shape, bytes). Returns the file bytes."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if header_override:
        header_override(header)
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def tiny_model_tensors():
    """A complete HF Qwen3_5ForCausalLM checkpoint for fuzz_safetensors.cpp's kTinyConfig, BF16."""
    H, I, V = 8, 8, 4
    nk, nv, dk, dv, K = 1, 1, 4, 4, 2
    heads, kv, hd = 2, 1, 4
    conv = 2 * nk * dk + nv * dv
    ts = []
    n = [0]

    def t(name, shape):
        count = 1
        for s in shape:
            count *= s
        vals = b"".join(bf16(((n[0] + i) % 7 - 3) / 8.0) for i in range(count))
        n[0] += 1
        ts.append((name, "BF16", list(shape), vals))

    t("model.embed_tokens.weight", [V, H])
    p = "model.layers.0."
    t(p + "input_layernorm.weight", [H])
    t(p + "post_attention_layernorm.weight", [H])
    t(p + "linear_attn.in_proj_qkv.weight", [conv, H])
    t(p + "linear_attn.in_proj_z.weight", [nv * dv, H])
    t(p + "linear_attn.in_proj_b.weight", [nv, H])
    t(p + "linear_attn.in_proj_a.weight", [nv, H])
    t(p + "linear_attn.conv1d.weight", [conv, 1, K])
    t(p + "linear_attn.A_log", [nv])
    t(p + "linear_attn.dt_bias", [nv])
    t(p + "linear_attn.norm.weight", [dv])
    t(p + "linear_attn.out_proj.weight", [H, nv * dv])
    t(p + "mlp.gate_proj.weight", [I, H])
    t(p + "mlp.up_proj.weight", [I, H])
    t(p + "mlp.down_proj.weight", [H, I])
    p = "model.layers.1."
    t(p + "input_layernorm.weight", [H])
    t(p + "post_attention_layernorm.weight", [H])
    t(p + "self_attn.q_proj.weight", [heads * hd * 2, H])
    t(p + "self_attn.k_proj.weight", [kv * hd, H])
    t(p + "self_attn.v_proj.weight", [kv * hd, H])
    t(p + "self_attn.o_proj.weight", [H, heads * hd])
    t(p + "self_attn.q_norm.weight", [hd])
    t(p + "self_attn.k_norm.weight", [hd])
    t(p + "mlp.gate_proj.weight", [I, H])
    t(p + "mlp.up_proj.weight", [I, H])
    t(p + "mlp.down_proj.weight", [H, I])
    t("model.norm.weight", [H])
    t("lm_head.weight", [V, H])
    return ts


def safetensors_seeds():
    tiny = tiny_model_tensors()
    put("safetensors", "valid_tiny_model", safetensors(tiny, metadata={"format": "pt"}))
    small = [("a", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
             ("b", "BF16", [3], bf16(1) + bf16(-2) + bf16(0.5)),
             ("c", "F16", [1], struct.pack("<e", 1.5)),
             ("d", "F64", [1], struct.pack("<d", 2.0)),
             ("e", "U32", [2], struct.pack("<2I", 7, 8)),
             ("f", "I8", [0], b""),
             ("g", "F8_E4M3", [2], b"\x38\x40")]
    put("safetensors", "valid_dtypes", safetensors(small))
    put("safetensors", "valid_empty_header", safetensors([]))
    put("safetensors", "valid_unpadded", safetensors(small[:2], pad=False))
    put("safetensors", "valid_mlx_parts", safetensors([
        ("model.embed_tokens.weight", "U32", [4, 1], struct.pack("<4I", 1, 2, 3, 4)),
        ("model.embed_tokens.scales", "BF16", [4, 1], bf16(1) * 4),
        ("model.embed_tokens.biases", "BF16", [4, 1], bf16(0) * 4)]))
    put("safetensors", "nan_weight", safetensors([("model.embed_tokens.weight", "BF16", [4, 8],
                                                   bf16(1) * 5 + b"\xc0\x7f" + bf16(1) * 26)]))
    full = safetensors(small)
    put("safetensors", "truncated", full[: len(full) - 5])
    put("safetensors", "short", b"\x10\x00\x00")
    put("safetensors", "header_past_end", struct.pack("<Q", 1 << 20) + b"{}")
    put("safetensors", "header_over_100mb", struct.pack("<Q", 100_000_001) + b"{}")

    def overlap(h):
        h["b"]["data_offsets"] = [10, 16]

    put("safetensors", "overlapping", safetensors(small, header_override=overlap))

    def out_of_range(h):
        h["a"]["data_offsets"] = [1 << 40, (1 << 40) + 16]

    put("safetensors", "offsets_out_of_range", safetensors(small, header_override=out_of_range))

    def bad_dtype(h):
        h["a"]["dtype"] = "Q4"

    put("safetensors", "bad_dtype", safetensors(small, header_override=bad_dtype))

    def bad_shape(h):
        h["a"]["shape"] = [3, 2]

    put("safetensors", "bad_shape", safetensors(small, header_override=bad_shape))

    def huge_shape(h):
        h["a"]["shape"] = [1 << 62, 1 << 62]

    put("safetensors", "huge_shape", safetensors(small, header_override=huge_shape))
    put("safetensors", "not_json", struct.pack("<Q", 8) + b"{\"a\":[1,")
    put("safetensors", "not_object", struct.pack("<Q", 8) + b"[1,2,3] ")


def config_seeds():
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    for name in ["causal_bf16_gqa4", "cond_bf16_hd256_v3k", "mlx_q4_hd256"]:
        with open(os.path.join(root, "fixtures", "hf", name, "config.json"), "rb") as f:
            put("config", name + ".json", f.read())
    base = {"model_type": "qwen3_5_text", "vocab_size": 4, "hidden_size": 8, "intermediate_size": 8,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
            "partial_rotary_factor": 0.5, "linear_num_key_heads": 1, "linear_num_value_heads": 1,
            "linear_key_head_dim": 4, "linear_value_head_dim": 4, "linear_conv_kernel_dim": 2,
            "full_attention_interval": 2, "max_position_embeddings": 16}
    put("config", "tiny_interval.json", json.dumps(base))
    put("config", "tiny_rope_scaling.json",
        json.dumps(dict(base, rope_scaling={"type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5})))
    put("config", "bad_type.json", json.dumps(dict(base, hidden_size="8")))
    put("config", "bad_gqa.json", json.dumps(dict(base, num_key_value_heads=3)))
    put("config", "bad_rotary.json", json.dumps(dict(base, partial_rotary_factor=0.3)))
    put("config", "missing_vocab.json", json.dumps({k: v for k, v in base.items() if k != "vocab_size"}))
    put("config", "not_object.json", "[1, 2]")
    put("config", "synthetic_spec.json",
        json.dumps({"synthetic": {"config": base, "seed": 7, "weights": "bf16", "outlier_channels": 1,
                                  "outlier_gain": 4.0, "sharpness_log2": 1}}))
    put("config", "synthetic_builtin.json", json.dumps({"synthetic": {"builtin": "tiny", "seed": 3}}))
    put("config", "synthetic_bad_seed.json", json.dumps({"synthetic": {"builtin": "tiny", "seed": "x"}}))


def token_seeds():
    put("tokens", "valid.json", "[1, 2, 3, 319, 0]")
    put("tokens", "valid_spaces.json", " [ 5 ,\n 6 ] ")
    put("tokens", "empty_array.json", "[]")
    put("tokens", "empty_file", "")
    put("tokens", "negative.json", "[1, -2]")
    put("tokens", "float.json", "[1, 2.5]")
    put("tokens", "too_large.json", "[4294967296, 320]")
    put("tokens", "not_array.json", "{\"tokens\": [1]}")
    put("tokens", "valid.u32", struct.pack("<4I", 1, 2, 300, 248319))
    put("tokens", "u32_odd_size", struct.pack("<2I", 1, 2) + b"\x01")
    put("tokens", "u32_high_bit", struct.pack("<2I", 1, 0x80000000))


def fixture_seeds():
    root = os.path.normpath(os.path.join(HERE, "..", ".."))
    gate = os.path.join(root, "fixtures", "tiny-gate.json")
    if os.path.exists(gate):
        with open(gate, "rb") as f:
            put("fixture", "tiny-gate.json", f.read())
    # names the token file fuzz_fixture.cpp writes next to the fixture (xxh64 of its 12 bytes)
    good = {"name": "fuzz", "description": "seed", "model": "builtin:tiny",
            "tokens": {"path": "tokens.u32", "xxh64": "4f02edd0e00372bd"},
            "depths": [2, 8], "rows": 4, "formats": ["fp8", "q4h"],
            "passphrase": {"plant": [1, 2], "ask": "ab", "answer": [65]},
            "bars": {"kl_mean": 0.01, "kl_max": 0.1}, "golden": {"bf16": "0123456789abcdef"}}
    put("fixture", "valid_local_tokens.json", json.dumps(good))
    put("fixture", "hash_mismatch.json", json.dumps(dict(good, tokens={"path": "tokens.u32", "xxh64": "0" * 16})))
    put("fixture", "bad_format.json", json.dumps(dict(good, formats=["q5"])))
    put("fixture", "bad_depths.json", json.dumps(dict(good, depths=[1, "x"])))
    put("fixture", "bad_passphrase.json", json.dumps(dict(good, passphrase={"plant": [], "ask": [-1]})))
    put("fixture", "bad_bars.json", json.dumps(dict(good, bars={"kl_mean": "x"})))
    put("fixture", "missing_tokens.json", json.dumps({k: v for k, v in good.items() if k != "tokens"}))
    put("fixture", "not_object.json", "[]")


if __name__ == "__main__":
    safetensors_seeds()
    config_seeds()
    token_seeds()
    fixture_seeds()
