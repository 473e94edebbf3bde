#!/usr/bin/env python3
"""Independent reference checksums for the model fixtures (test oracle).

Pure Python 3.11, standard library only.  Written from the format
specifications (GGUF v3, ggml block formats as used by dequantize_row_*,
safetensors), deliberately without looking at this repository's C++ code, so
that it can serve as an oracle for the C++ readers.

For every tensor of every fixture model file

    <fixtures>/*/model-*.gguf
    <fixtures>/*/hf/model.safetensors

it decodes all n elements to float (every decoded value is a float32 value;
quantised types are dequantised exactly as ggml does it, in float32
arithmetic) and computes, in float64, in storage order,

    sum  = x_0 + x_1 + ... + x_{n-1}                    (left to right)
    wsum = x_0*w_0 + x_1*w_1 + ...,  w_i = (i % 1021) + 1 (left to right)

Both are plain sequential float64 accumulations starting from 0.0 (what a
straightforward `double s = 0; for (...) s += x[i];` loop produces).  Each
product x_i*w_i is exact in float64 (24-bit mantissa times a <=10-bit
integer), so the only roundings are those of the running sums.

Output (TSV, header line first):

    file  tensor  dtype  shape  n  sum  wsum

* file: path relative to the fixtures directory, e.g. qwen3moe/model-q8_0.gguf
* rows sorted by file, then by the tensor's position in the file's data
  (GGUF: by data offset; safetensors: by data_offsets[0]).
* dtype: f32 f16 bf16 f8_e4m3 q8_0 q5_0 q4_k q5_k q6_k i8 u8 (...)
* shape: row-major, comma separated.  GGUF ne lists are reversed (ne0 is the
  fastest varying dimension), safetensors shapes are as given.  A 0-d tensor
  has an empty shape and n = 1.
* sum, wsum: Python repr() of the float64 (shortest round-trip form).

Usage:
    python3 tools/fixture_checksums.py [--fixtures DIR] [--out FILE]
    python3 tools/fixture_checksums.py --check [--fixtures DIR] [--out FILE]

--check does not write anything: it recomputes every checksum and compares it
with the existing TSV, then runs a series of internal consistency checks
(structure, tensor counts, fast vs literal dequantisers, bf16 vs f32 GGUF,
quantised vs f32 GGUF error bounds, GGUF vs HF safetensors value multisets,
FP8 block scales) and prints what it found.  Exit status 1 if any assertion
fails.
"""

from __future__ import annotations

import argparse
import array
import functools
import glob
import itertools
import json
import math
import operator
import os
import struct
import sys
import time

# ---------------------------------------------------------------------------
# float helpers
# ---------------------------------------------------------------------------

_F32 = struct.Struct("<f")


def f32(x: float) -> float:
    """Round a Python float (binary64) to the nearest binary32 value."""
    return _F32.unpack(_F32.pack(x))[0]


def round_f32_list(values: list) -> list:
    """Bulk f32(): array('f') stores each element as a C float (round to
    nearest even), tolist() converts back exactly."""
    return array.array("f", values).tolist()


def _le_f32_array(raw) -> array.array:
    a = array.array("f")
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a


# Nibble / bit extraction tables for bytes.translate (run at C speed).
LO4 = bytes(b & 0x0F for b in range(256))
HI4 = bytes(b >> 4 for b in range(256))
# ((b >> k) & 1) << 4 for k in 0..7
BIT_TO_16 = [bytes(((b >> k) & 1) << 4 for b in range(256)) for k in range(8)]
# ((b >> 2k) & 3) << 4 for k in 0..3
TWO_BITS_TO_HI = [bytes(((b >> (2 * k)) & 3) << 4 for b in range(256)) for k in range(4)]


def bytes_or(a: bytes, b: bytes) -> bytes:
    """Byte-wise OR of two equal-length byte strings (via big ints)."""
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


# ---------------------------------------------------------------------------
# FP8 E4M3 (OCP "e4m3fn"): s eeee mmm, bias 7, subnormals at e=0, no inf,
# 0x7F / 0xFF are NaN.
# ---------------------------------------------------------------------------

def _e4m3_value(b: int) -> float:
    sign = -1.0 if b & 0x80 else 1.0
    e = (b >> 3) & 0x0F
    m = b & 0x07
    if e == 0x0F and m == 0x07:
        return math.nan
    if e == 0:
        return sign * m * 2.0 ** -9          # (m/8) * 2^(1-7)
    return sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3_LUT = [_e4m3_value(b) for b in range(256)]


# ---------------------------------------------------------------------------
# ggml block formats
# ---------------------------------------------------------------------------

# ggml type id -> (name, elements per block, bytes per block)
GGML_TYPES = {
    0: ("f32", 1, 4),
    1: ("f16", 1, 2),
    30: ("bf16", 1, 2),
    8: ("q8_0", 32, 34),
    6: ("q5_0", 32, 22),
    12: ("q4_k", 256, 144),
    13: ("q5_k", 256, 176),
    14: ("q6_k", 256, 210),
}
# Names of the other ggml types, only to report them if ever met.
GGML_OTHER_NAMES = {
    2: "q4_0", 3: "q4_1", 7: "q5_1", 9: "q8_1", 10: "q2_k", 11: "q3_k",
    15: "q8_k", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s",
    20: "iq4_nl", 21: "iq3_s", 22: "iq2_s", 23: "iq4_xs", 24: "i8",
    25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m", 34: "tq1_0",
    35: "tq2_0", 39: "mxfp4",
}


def get_scale_min_k4(j: int, s: bytes):
    """6-bit scale and min number j (0..7) from the 12 packed bytes of a
    Q4_K / Q5_K super-block.
    bytes 0..3: low 6 bits of scales 0..3, top 2 bits = bits 4..5 of scale 4..7
    bytes 4..7: low 6 bits of mins 0..3,   top 2 bits = bits 4..5 of min 4..7
    bytes 8..11: low nibble = bits 0..3 of scale 4..7, high nibble = of min 4..7
    """
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4)
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
    return sc, mn


# ---- fast dequantisers: whole tensor -> list of floats ----------------------

def dq_f32(raw, n):
    return _le_f32_array(raw).tolist()


def dq_f16(raw, n):
    return list(struct.unpack("<%de" % n, raw))


def dq_bf16(raw, n):
    raw = bytes(raw)
    wide = bytearray(4 * n)          # little-endian f32: low 2 bytes zero
    wide[2::4] = raw[0::2]
    wide[3::4] = raw[1::2]
    return _le_f32_array(wide).tolist()


def dq_q8_0(raw, n):
    out = []
    ext = out.extend
    for blk in struct.iter_unpack("<e32b", raw):
        d = blk[0]
        ext([q * d for q in blk[1:]])              # y = x*d (f32)
    return round_f32_list(out)


def dq_q5_0(raw, n):
    out = []
    ext = out.extend
    for d, qh, qs in struct.iter_unpack("<e4s16s", raw):
        # 5th bit of element j (0..31) is bit j of the little-endian u32 qh
        h = int.from_bytes(qh, "little")
        hb = bytes(((h >> j) & 1) << 4 for j in range(32))
        q = bytes_or(qs.translate(LO4) + qs.translate(HI4), hb)
        ext([(v - 16) * d for v in q])
    return round_f32_list(out)


def dq_q4_k(raw, n):
    out = []
    ext = out.extend
    for d, dmin, scales, qs in struct.iter_unpack("<ee12s128s", raw):
        lo = qs.translate(LO4)
        hi = qs.translate(HI4)
        for j in range(4):
            sc, m = get_scale_min_k4(2 * j, scales)
            d1 = f32(d * sc); m1 = f32(dmin * m)
            sc, m = get_scale_min_k4(2 * j + 1, scales)
            d2 = f32(d * sc); m2 = f32(dmin * m)
            # d1*q is exact in f32 (<=21 significant bits); the subtraction is
            # a single op on two f32 values, so computing it in f64 and
            # rounding once to f32 gives the f32 result (53 >= 2*24+2).
            ext([d1 * q - m1 for q in lo[32 * j:32 * j + 32]])
            ext([d2 * q - m2 for q in hi[32 * j:32 * j + 32]])
    return round_f32_list(out)


def dq_q5_k(raw, n):
    out = []
    ext = out.extend
    for d, dmin, scales, qh, qs in struct.iter_unpack("<ee12s32s128s", raw):
        for j in range(4):
            ql = qs[32 * j:32 * j + 32]
            q_lo = bytes_or(ql.translate(LO4), qh.translate(BIT_TO_16[2 * j]))
            q_hi = bytes_or(ql.translate(HI4), qh.translate(BIT_TO_16[2 * j + 1]))
            sc, m = get_scale_min_k4(2 * j, scales)
            d1 = f32(d * sc); m1 = f32(dmin * m)
            sc, m = get_scale_min_k4(2 * j + 1, scales)
            d2 = f32(d * sc); m2 = f32(dmin * m)
            ext([d1 * q - m1 for q in q_lo])
            ext([d2 * q - m2 for q in q_hi])
    return round_f32_list(out)


def dq_q6_k(raw, n):
    out = []
    ext = out.extend
    for ql, qh, scales, d in struct.iter_unpack("<128s64s16se", raw):
        sc = struct.unpack("16b", scales)
        for h in range(2):
            a = ql[64 * h:64 * h + 32]
            b = ql[64 * h + 32:64 * h + 64]
            hh = qh[32 * h:32 * h + 32]
            low = a.translate(LO4) + b.translate(LO4) + a.translate(HI4) + b.translate(HI4)
            high = b"".join(hh.translate(TWO_BITS_TO_HI[k]) for k in range(4))
            q = bytes_or(low, high)
            # element 128h + 16g' uses scale sc[8h + g'] (g' = 0..7)
            for g in range(8):
                s = f32(d * sc[8 * h + g])
                ext([s * (v - 32) for v in q[16 * g:16 * g + 16]])
    return round_f32_list(out)


FAST_DEQUANT = {
    "f32": dq_f32, "f16": dq_f16, "bf16": dq_bf16, "q8_0": dq_q8_0,
    "q5_0": dq_q5_0, "q4_k": dq_q4_k, "q5_k": dq_q5_k, "q6_k": dq_q6_k,
}


# ---- literal (slow) per-block dequantisers, f32() after every float op -----
# A direct transcription of the block layouts; used by --check to validate
# the fast paths above bit for bit.

def _fp16(b: bytes, off: int) -> float:
    return struct.unpack_from("<e", b, off)[0]


def ref_block_q8_0(b: bytes) -> list:
    d = _fp16(b, 0)
    return [f32(struct.unpack_from("b", b, 2 + j)[0] * d) for j in range(32)]


def ref_block_q5_0(b: bytes) -> list:
    d = _fp16(b, 0)
    qh = struct.unpack_from("<I", b, 2)[0]
    qs = b[6:22]
    y = [0.0] * 32
    for j in range(16):
        xh0 = ((qh >> j) << 4) & 0x10
        xh1 = (qh >> (j + 12)) & 0x10
        x0 = ((qs[j] & 0x0F) | xh0) - 16
        x1 = ((qs[j] >> 4) | xh1) - 16
        y[j] = f32(x0 * d)
        y[j + 16] = f32(x1 * d)
    return y


def ref_block_q4_k(b: bytes) -> list:
    d = _fp16(b, 0)
    dmin = _fp16(b, 2)
    scales = b[4:16]
    q = b[16:144]
    y = []
    qo = 0
    is_ = 0
    for _ in range(4):
        sc, m = get_scale_min_k4(is_, scales)
        d1 = f32(d * sc); m1 = f32(dmin * m)
        sc, m = get_scale_min_k4(is_ + 1, scales)
        d2 = f32(d * sc); m2 = f32(dmin * m)
        for l in range(32):
            y.append(f32(f32(d1 * (q[qo + l] & 0x0F)) - m1))
        for l in range(32):
            y.append(f32(f32(d2 * (q[qo + l] >> 4)) - m2))
        qo += 32
        is_ += 2
    return y


def ref_block_q5_k(b: bytes) -> list:
    d = _fp16(b, 0)
    dmin = _fp16(b, 2)
    scales = b[4:16]
    qh = b[16:48]
    ql = b[48:176]
    y = []
    qo = 0
    is_ = 0
    u1, u2 = 1, 2
    for _ in range(4):
        sc, m = get_scale_min_k4(is_, scales)
        d1 = f32(d * sc); m1 = f32(dmin * m)
        sc, m = get_scale_min_k4(is_ + 1, scales)
        d2 = f32(d * sc); m2 = f32(dmin * m)
        for l in range(32):
            q = (ql[qo + l] & 0x0F) + (16 if qh[l] & u1 else 0)
            y.append(f32(f32(d1 * q) - m1))
        for l in range(32):
            q = (ql[qo + l] >> 4) + (16 if qh[l] & u2 else 0)
            y.append(f32(f32(d2 * q) - m2))
        qo += 32
        is_ += 2
        u1 <<= 2
        u2 <<= 2
    return y


def ref_block_q6_k(b: bytes) -> list:
    ql = b[0:128]
    qh = b[128:192]
    sc = struct.unpack_from("16b", b, 192)
    d = _fp16(b, 208)
    y = [0.0] * 256
    for half in range(2):
        lo, ho, so, yo = 64 * half, 32 * half, 8 * half, 128 * half
        for l in range(32):
            is_ = l // 16
            q1 = ((ql[lo + l] & 0xF) | (((qh[ho + l] >> 0) & 3) << 4)) - 32
            q2 = ((ql[lo + l + 32] & 0xF) | (((qh[ho + l] >> 2) & 3) << 4)) - 32
            q3 = ((ql[lo + l] >> 4) | (((qh[ho + l] >> 4) & 3) << 4)) - 32
            q4 = ((ql[lo + l + 32] >> 4) | (((qh[ho + l] >> 6) & 3) << 4)) - 32
            y[yo + l] = f32(f32(d * sc[so + is_]) * q1)
            y[yo + l + 32] = f32(f32(d * sc[so + is_ + 2]) * q2)
            y[yo + l + 64] = f32(f32(d * sc[so + is_ + 4]) * q3)
            y[yo + l + 96] = f32(f32(d * sc[so + is_ + 6]) * q4)
    return y


REF_BLOCK = {
    "q8_0": ref_block_q8_0, "q5_0": ref_block_q5_0, "q4_k": ref_block_q4_k,
    "q5_k": ref_block_q5_k, "q6_k": ref_block_q6_k,
}

# ---------------------------------------------------------------------------
# GGUF
# ---------------------------------------------------------------------------

GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
               7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
GGUF_TYPE_NAMES = {0: "u8", 1: "i8", 2: "u16", 3: "i16", 4: "u32", 5: "i32",
                   6: "f32", 7: "bool", 8: "string", 9: "array", 10: "u64",
                   11: "i64", 12: "f64"}


class FormatError(Exception):
    pass


class _Cursor:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        st = struct.Struct(fmt)
        if self.pos + st.size > len(self.data):
            raise FormatError("unexpected end of file at %d" % self.pos)
        v = st.unpack_from(self.data, self.pos)[0]
        self.pos += st.size
        return v

    def string(self) -> str:
        n = self.take("<Q")
        if self.pos + n > len(self.data):
            raise FormatError("string runs past end of file at %d" % self.pos)
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return bytes(s).decode("utf-8")

    def value(self, vtype: int):
        if vtype in GGUF_SCALAR:
            return self.take(GGUF_SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype = self.take("<I")
            count = self.take("<Q")
            if etype == 9:
                return ("array", etype, [self.value(9) for _ in range(count)])
            return ("array", etype, [self.value(etype) for _ in range(count)])
        raise FormatError("unknown GGUF value type %d at %d" % (vtype, self.pos))


def parse_gguf(data: bytes) -> dict:
    cur = _Cursor(data)
    magic = bytes(data[0:4])
    if magic != b"GGUF":
        raise FormatError("bad magic %r" % magic)
    cur.pos = 4
    version = cur.take("<I")
    if version != 3:
        raise FormatError("unsupported GGUF version %d" % version)
    n_tensors = cur.take("<Q")
    n_kv = cur.take("<Q")
    kv = {}
    kv_types = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.take("<I")
        if key in kv:
            raise FormatError("duplicate key %s" % key)
        kv[key] = cur.value(vtype)
        kv_types[key] = vtype
    alignment = 32
    if "general.alignment" in kv:
        alignment = kv["general.alignment"]
        if kv_types["general.alignment"] != 4 or alignment == 0 or alignment % 8:
            raise FormatError("bad general.alignment %r" % (alignment,))
    infos = []
    names = set()
    for idx in range(n_tensors):
        name = cur.string()
        if name in names:
            raise FormatError("duplicate tensor name %s" % name)
        names.add(name)
        n_dims = cur.take("<I")
        ne = [cur.take("<Q") for _ in range(n_dims)]
        gtype = cur.take("<I")
        offset = cur.take("<Q")
        infos.append({"index": idx, "name": name, "ne": ne, "ggml_type": gtype,
                      "offset": offset})
    header_end = cur.pos
    data_start = (header_end + alignment - 1) // alignment * alignment
    for t in infos:
        if t["ggml_type"] not in GGML_TYPES:
            raise FormatError("tensor %s: unsupported ggml type %d (%s)" % (
                t["name"], t["ggml_type"], GGML_OTHER_NAMES.get(t["ggml_type"], "?")))
        tname, bs, ts = GGML_TYPES[t["ggml_type"]]
        n = 1
        for x in t["ne"]:
            n *= x
        if t["ne"] and t["ne"][0] % bs:
            raise FormatError("tensor %s: ne0=%d not a multiple of block %d" % (
                t["name"], t["ne"][0], bs))
        t["dtype"] = tname
        t["n"] = n
        t["nbytes"] = n // bs * ts
        t["shape"] = list(reversed(t["ne"]))
        if t["offset"] % alignment:
            raise FormatError("tensor %s: offset %d not aligned to %d" % (
                t["name"], t["offset"], alignment))
        t["abs_offset"] = data_start + t["offset"]
        if t["abs_offset"] + t["nbytes"] > len(data):
            raise FormatError("tensor %s runs past end of file" % t["name"])
    storage = sorted(infos, key=lambda t: (t["offset"], t["index"]))
    for a, b in zip(storage, storage[1:]):
        if a["offset"] + a["nbytes"] > b["offset"]:
            raise FormatError("tensors %s and %s overlap" % (a["name"], b["name"]))
    data_end = max((t["abs_offset"] + t["nbytes"] for t in infos), default=data_start)
    return {"version": version, "n_tensors": n_tensors, "n_kv": n_kv, "kv": kv,
            "kv_types": kv_types, "alignment": alignment, "header_end": header_end,
            "data_start": data_start, "data_end": data_end, "file_size": len(data),
            "infos": infos, "storage": storage}


# ---------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------

ST_DTYPES = {  # name -> (output dtype, bytes per element)
    "F32": ("f32", 4), "F16": ("f16", 2), "BF16": ("bf16", 2),
    "F8_E4M3": ("f8_e4m3", 1), "I8": ("i8", 1), "U8": ("u8", 1),
}


def dq_f8_e4m3(raw, n):
    lut = E4M3_LUT
    return [lut[b] for b in bytes(raw)]


def dq_i8(raw, n):
    return [float(v) for v in struct.unpack("%db" % n, raw)]


def dq_u8(raw, n):
    return [float(v) for v in bytes(raw)]


FAST_DEQUANT.update({"f8_e4m3": dq_f8_e4m3, "i8": dq_i8, "u8": dq_u8})


def parse_safetensors(data: bytes) -> dict:
    if len(data) < 8:
        raise FormatError("file too short")
    hlen = struct.unpack_from("<Q", data, 0)[0]
    if 8 + hlen > len(data):
        raise FormatError("header length %d past end of file" % hlen)
    header_bytes = bytes(data[8:8 + hlen])
    header = json.loads(header_bytes.decode("utf-8"))
    base = 8 + hlen
    meta = header.pop("__metadata__", None)
    infos = []
    for idx, (name, d) in enumerate(header.items()):
        if d["dtype"] not in ST_DTYPES:
            raise FormatError("tensor %s: unsupported dtype %s" % (name, d["dtype"]))
        dtype, esize = ST_DTYPES[d["dtype"]]
        shape = list(d["shape"])
        n = 1
        for x in shape:
            n *= x
        begin, end = d["data_offsets"]
        if end - begin != n * esize:
            raise FormatError("tensor %s: %d bytes for %d x %d" % (name, end - begin, n, esize))
        if base + end > len(data):
            raise FormatError("tensor %s runs past end of file" % name)
        infos.append({"index": idx, "name": name, "dtype": dtype, "st_dtype": d["dtype"],
                      "shape": shape, "n": n, "begin": begin, "end": end,
                      "abs_offset": base + begin, "nbytes": end - begin})
    storage = sorted(infos, key=lambda t: (t["begin"], t["index"]))
    gaps = []
    prev_end = 0
    for t in storage:
        if t["begin"] < prev_end:
            raise FormatError("tensor %s overlaps its predecessor" % t["name"])
        if t["begin"] != prev_end:
            gaps.append((t["name"], prev_end, t["begin"]))
        prev_end = t["end"]
    return {"header_len": hlen, "header_pad": len(header_bytes) - len(header_bytes.rstrip(b" ")),
            "metadata": meta, "data_start": base, "data_end": base + prev_end,
            "file_size": len(data), "infos": infos, "storage": storage, "gaps": gaps}


# ---------------------------------------------------------------------------
# model files
# ---------------------------------------------------------------------------

def list_model_files(fixtures: str) -> list:
    paths = glob.glob(os.path.join(fixtures, "*", "model-*.gguf"))
    paths += glob.glob(os.path.join(fixtures, "*", "hf", "model.safetensors"))
    rel = sorted(os.path.relpath(p, fixtures).replace(os.sep, "/") for p in paths)
    return rel


def read_file(fixtures: str, rel: str) -> bytes:
    with open(os.path.join(fixtures, rel), "rb") as f:
        return f.read()


def parse_model(data: bytes, rel: str) -> dict:
    if rel.endswith(".gguf"):
        p = parse_gguf(data)
        p["kind"] = "gguf"
    else:
        p = parse_safetensors(data)
        p["kind"] = "safetensors"
    return p


def iter_tensors(fixtures: str, rel: str, parsed=None, data=None):
    """Yield (info, values) in storage order."""
    if data is None:
        data = read_file(fixtures, rel)
    if parsed is None:
        parsed = parse_model(data, rel)
    mv = memoryview(data)
    for t in parsed["storage"]:
        raw = mv[t["abs_offset"]:t["abs_offset"] + t["nbytes"]]
        vals = FAST_DEQUANT[t["dtype"]](raw, t["n"])
        if len(vals) != t["n"]:
            raise FormatError("%s %s: decoded %d values, expected %d" % (
                rel, t["name"], len(vals), t["n"]))
        yield t, vals


_WEIGHTS = [float(k) for k in range(1, 1022)]


def checksums(vals: list):
    s = functools.reduce(operator.add, vals, 0.0)
    w = functools.reduce(operator.add, map(operator.mul, vals, itertools.cycle(_WEIGHTS)), 0.0)
    return s, w


def tsv_row(rel: str, t: dict, s: float, w: float) -> str:
    return "\t".join([rel, t["name"], t["dtype"], ",".join(str(x) for x in t["shape"]),
                      str(t["n"]), repr(s), repr(w)])


TSV_HEADER = "file\ttensor\tdtype\tshape\tn\tsum\twsum"


def compute_all(fixtures: str, verbose=True) -> list:
    rows = []
    for rel in list_model_files(fixtures):
        t0 = time.time()
        data = read_file(fixtures, rel)
        parsed = parse_model(data, rel)
        cnt = 0
        for t, vals in iter_tensors(fixtures, rel, parsed, data):
            s, w = checksums(vals)
            rows.append(tsv_row(rel, t, s, w))
            cnt += 1
        if verbose:
            print("%-40s %4d tensors  %6.1fs" % (rel, cnt, time.time() - t0),
                  file=sys.stderr, flush=True)
    return rows


# ---------------------------------------------------------------------------
# --check
# ---------------------------------------------------------------------------

class Checker:
    def __init__(self):
        self.failures = 0
        self.passes = 0

    def ok(self, cond: bool, msg: str):
        if cond:
            self.passes += 1
            print("  PASS  " + msg)
        else:
            self.failures += 1
            print("  FAIL  " + msg)
        return cond

    @staticmethod
    def info(msg: str):
        print("  info  " + msg)


def _describe_kv(v):
    if isinstance(v, tuple) and v and v[0] == "array":
        return "array<%s>[%d]" % (GGUF_TYPE_NAMES.get(v[1], v[1]), len(v[2]))
    if isinstance(v, str) and len(v) > 60:
        return repr(v[:57] + "...")
    return repr(v)


def _rms_rel_err(a: list, b: list) -> float:
    num = math.fsum((x - y) * (x - y) for x, y in zip(a, b))
    den = math.fsum(y * y for y in b)
    return math.sqrt(num / den) if den else (0.0 if num == 0 else math.inf)


def _multiset_key(vals: list):
    return (len(vals), math.fsum(vals), math.fsum(v * v for v in vals))


def _is_bf16_exact(vals: list) -> bool:
    a = array.array("f", vals)
    if sys.byteorder != "little":
        a.byteswap()
    raw = a.tobytes()
    return not any(raw[0::4]) and not any(raw[1::4])


def run_check(fixtures: str, out: str) -> int:
    ck = Checker()
    files = list_model_files(fixtures)
    print("== files (%d)" % len(files))
    for f in files:
        print("  " + f)

    # ---- 1. structure + headers -------------------------------------------
    print("\n== 1. headers and layout")
    parsed_all = {}
    for rel in files:
        data = read_file(fixtures, rel)
        p = parse_model(data, rel)
        parsed_all[rel] = p
        if p["kind"] == "gguf":
            types = {}
            for t in p["infos"]:
                types[t["dtype"]] = types.get(t["dtype"], 0) + 1
            in_order = [t["index"] for t in p["storage"]] == list(range(len(p["infos"])))
            print("%s: GGUF v%d, %d tensors, %d KV, alignment %d, data %d..%d of %d bytes" % (
                rel, p["version"], p["n_tensors"], p["n_kv"], p["alignment"],
                p["data_start"], p["data_end"], p["file_size"]))
            ck.info("types: " + ", ".join("%s x%d" % kv for kv in sorted(types.items())))
            ck.info("file_type=%r quantization_version=%r architecture=%r" % (
                p["kv"].get("general.file_type"), p["kv"].get("general.quantization_version"),
                p["kv"].get("general.architecture")))
            ck.ok(len(p["infos"]) == p["n_tensors"], "tensor infos parsed = header tensor_count (%d)" % p["n_tensors"])
            ck.ok(p["data_end"] <= p["file_size"], "all tensor data inside file")
            ck.info("tensor info order %s data order; %d bytes after last tensor" % (
                "==" if in_order else "!=", p["file_size"] - p["data_end"]))
            # data section fully accounted for (only alignment padding between tensors)
            pad = 0
            prev = 0
            for t in p["storage"]:
                pad += t["offset"] - prev
                prev = t["offset"] + t["nbytes"]
            ck.ok(pad < p["alignment"] * max(1, len(p["storage"])),
                  "only alignment padding between tensors (%d bytes total)" % pad)
        else:
            types = {}
            for t in p["infos"]:
                types[t["st_dtype"]] = types.get(t["st_dtype"], 0) + 1
            in_order = [t["index"] for t in p["storage"]] == list(range(len(p["infos"])))
            print("%s: safetensors, header %d bytes, %d tensors, data %d..%d of %d bytes" % (
                rel, p["header_len"], len(p["infos"]), p["data_start"], p["data_end"], p["file_size"]))
            ck.info("dtypes: " + ", ".join("%s x%d" % kv for kv in sorted(types.items())))
            ck.info("__metadata__ = %r" % (p["metadata"],))
            ck.info("header key order %s data order" % ("==" if in_order else "!="))
            ck.ok(not p["gaps"], "tensor data contiguous from offset 0 (gaps: %r)" % (p["gaps"][:3],))
            ck.ok(p["data_end"] == p["file_size"], "data ends exactly at end of file")
            ck.ok(p["header_len"] % 8 == 0, "header length %d is a multiple of 8" % p["header_len"])

    # ---- 2. TSV consistency ------------------------------------------------
    print("\n== 2. TSV %s" % out)
    if not os.path.exists(out):
        ck.ok(False, "TSV exists")
        tsv_rows = None
    else:
        with open(out, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        ck.ok(lines[0] == TSV_HEADER, "TSV header line")
        tsv_rows = lines[1:]
        per_file = {}
        for ln in tsv_rows:
            per_file[ln.split("\t", 1)[0]] = per_file.get(ln.split("\t", 1)[0], 0) + 1
        for rel in files:
            p = parsed_all[rel]
            ck.ok(per_file.get(rel, 0) == len(p["infos"]),
                  "%s: %d TSV lines, %d tensors in header" % (rel, per_file.get(rel, 0), len(p["infos"])))
        ck.ok(set(per_file) == set(files), "TSV mentions exactly the fixture files")
        ck.ok(len(tsv_rows) == sum(len(p["infos"]) for p in parsed_all.values()),
              "TSV has %d data lines" % len(tsv_rows))

    # ---- 3. fast vs literal dequantisers, recompute checksums -------------
    print("\n== 3. recompute checksums; fast vs literal dequantisers on sample blocks")
    fresh = []
    ref_blocks_checked = {}
    ref_mismatch = {}
    nan_counts = {}
    for rel in files:
        data = read_file(fixtures, rel)
        p = parsed_all[rel]
        for t, vals in iter_tensors(fixtures, rel, p, data):
            s, w = checksums(vals)
            fresh.append(tsv_row(rel, t, s, w))
            nn = sum(1 for v in vals if v != v)
            if nn:
                nan_counts[(rel, t["name"])] = nn
            if t["dtype"] in REF_BLOCK:
                _, bs, ts = GGML_TYPES[t["ggml_type"]]
                nblocks = t["n"] // bs
                sample = sorted(set(list(range(min(4, nblocks))) +
                                    list(range(max(0, nblocks - 2), nblocks)) +
                                    [nblocks // 2]))
                for bi in sample:
                    off = t["abs_offset"] + bi * ts
                    ref = REF_BLOCK[t["dtype"]](bytes(data[off:off + ts]))
                    got = vals[bi * bs:(bi + 1) * bs]
                    key = t["dtype"]
                    ref_blocks_checked[key] = ref_blocks_checked.get(key, 0) + 1
                    if struct.pack("<%df" % bs, *ref) != struct.pack("<%df" % bs, *got):
                        ref_mismatch[key] = ref_mismatch.get(key, 0) + 1
    for key in sorted(ref_blocks_checked):
        ck.ok(key not in ref_mismatch, "%s: fast == literal dequantiser on %d sampled blocks (%d mismatches)" % (
            key, ref_blocks_checked[key], ref_mismatch.get(key, 0)))
    if tsv_rows is not None:
        diff = [(a, b) for a, b in zip(tsv_rows, fresh) if a != b]
        ck.ok(len(tsv_rows) == len(fresh) and not diff,
              "TSV reproduced exactly by a fresh run (%d differing lines)" % len(diff))
    ck.ok(not nan_counts, "no NaN values decoded (%r)" % (sorted(nan_counts.items())[:5],))

    # ---- 4. per-folder cross-file checks ------------------------------------
    print("\n== 4. cross-file checks per folder")
    folders = sorted({rel.split("/")[0] for rel in files})
    rows_by_file = {}
    for ln in fresh:
        parts = ln.split("\t")
        rows_by_file.setdefault(parts[0], {})[parts[1]] = parts
    bounds = {"q8_0": 0.01, "q6_k": 0.03, "q5_k": 0.06, "q5_0": 0.08, "q4_k": 0.12}
    for folder in folders:
        f32_rel = folder + "/model-f32.gguf"
        if f32_rel not in parsed_all:
            continue
        print("-- %s" % folder)
        ref = {t["name"]: (t, v) for t, v in iter_tensors(fixtures, f32_rel, parsed_all[f32_rel])}
        n_bf16 = sum(1 for t, v in ref.values() if _is_bf16_exact(v))
        ck.ok(n_bf16 == len(ref), "%s: %d/%d tensors hold only bf16-representable values" % (
            f32_rel, n_bf16, len(ref)))
        for rel in files:
            if not rel.startswith(folder + "/model-") or rel == f32_rel:
                continue
            p = parsed_all[rel]
            names_q = {t["name"] for t in p["infos"]}
            ck.ok(names_q == set(ref), "%s: same tensor names as f32 (%d)" % (rel, len(names_q)))
            worst = {}
            same_type_equal = True
            shapes_equal = True
            sums_equal_bf16 = True
            for t, v in iter_tensors(fixtures, rel, p):
                if t["name"] not in ref:
                    continue
                rt, rv = ref[t["name"]]
                if rt["shape"] != t["shape"]:
                    shapes_equal = False
                if t["dtype"] in ("f32", "bf16", "f16"):
                    if v != rv:
                        same_type_equal = False
                    if t["dtype"] == "bf16":
                        a = rows_by_file[rel][t["name"]]
                        b = rows_by_file[f32_rel][t["name"]]
                        if a[5] != b[5] or a[6] != b[6]:
                            sums_equal_bf16 = False
                else:
                    e = _rms_rel_err(v, rv)
                    if e > worst.get(t["dtype"], (-1.0, ""))[0]:
                        worst[t["dtype"]] = (e, t["name"])
            ck.ok(shapes_equal, "%s: shapes equal to f32 GGUF" % rel)
            ck.ok(same_type_equal, "%s: unquantised (f32/f16/bf16) tensors element-wise identical to f32 GGUF" % rel)
            if "bf16" in rel:
                ck.ok(sums_equal_bf16, "%s: sum and wsum of every bf16 tensor == those of the f32 GGUF" % rel)
            for dt, (e, nm) in sorted(worst.items()):
                ck.ok(e < bounds[dt], "%s: %s worst relative RMS error vs f32 = %.4g (%s), bound %g" % (
                    rel, dt, e, nm, bounds[dt]))

        # GGUF f32 vs HF safetensors: multiset of values per tensor (order-free,
        # so it holds through llama's q/k row permutation); expert tensors of
        # the HF file are concatenated per (layer, projection) in expert order.
        st_rel = folder + "/hf/model.safetensors"
        if st_rel in parsed_all:
            hf_keys = {}
            hf_vals = {}
            groups = {}
            for t, v in iter_tensors(fixtures, st_rel, parsed_all[st_rel]):
                hf_keys[_multiset_key(v)] = t["name"]
                hf_vals[t["name"]] = v
                parts = t["name"].split(".")
                if "experts" in parts:
                    i = parts.index("experts")
                    if i + 1 < len(parts) and parts[i + 1].isdigit():
                        gk = ".".join(parts[:i + 1] + ["*"] + parts[i + 2:])
                        groups.setdefault(gk, []).append((int(parts[i + 1]), v))
            for gk, lst in groups.items():
                lst.sort(key=lambda x: x[0])
                cat = [x for _, v in lst for x in v]
                hf_keys[_multiset_key(cat)] = gk
                hf_vals[gk] = cat
            matched = {}
            unmatched = []
            for name, (t, v) in ref.items():
                k = _multiset_key(v)
                if k in hf_keys:
                    matched[name] = hf_keys[k]
                else:
                    unmatched.append(name)
            # DeepSeek: GGUF splits kv_b_proj into attn_k_b and attn_v_b.
            paired = []
            for name in list(unmatched):
                if name.endswith(".attn_k_b.weight"):
                    vname = name.replace(".attn_k_b.", ".attn_v_b.")
                    if vname in unmatched:
                        k = _multiset_key(ref[name][1] + ref[vname][1])
                        if k in hf_keys:
                            paired.append("%s+%s=%s" % (name, vname.split(".")[2], hf_keys[k]))
                            unmatched.remove(name)
                            unmatched.remove(vname)
            ck.info("%s vs %s: %d/%d GGUF tensors have an HF tensor (or expert stack) with the same "
                    "value multiset" % (f32_rel, st_rel, len(ref) - len(unmatched), len(ref)))
            if paired:
                ck.info("  via k_b+v_b = kv_b_proj: " + ", ".join(paired))
            if unmatched:
                ck.info("  without a match: " + ", ".join(sorted(unmatched)))
            # Same values in the same order => identical sum and wsum rows.
            same_seq = [n for n, h in matched.items() if ref[n][1] == hf_vals[h]]
            reordered = sorted(set(matched) - set(same_seq))
            ck.info("  %d of those in identical element order (their TSV sum/wsum rows agree "
                    "exactly); reordered: %s" % (len(same_seq), ", ".join(reordered) or "none"))
            for n in same_seq:
                h = matched[n]
                a = rows_by_file[f32_rel][n]
                if "*" not in h:
                    b = rows_by_file[st_rel][h]
                    if a[5:7] != b[5:7]:
                        ck.ok(False, "TSV sums of %s and %s agree" % (n, h))
            del hf_vals
        del ref

    # ---- 5. FP8 layout ---------------------------------------------------
    fp8 = [rel for rel in files if any(t["dtype"] == "f8_e4m3" for t in parsed_all[rel]["infos"])]
    for rel in fp8:
        print("-- %s (fp8)" % rel)
        p = parsed_all[rel]
        by_name = {t["name"]: t for t in p["infos"]}
        bad = []
        nfp8 = 0
        for t in p["infos"]:
            if t["dtype"] != "f8_e4m3":
                continue
            nfp8 += 1
            s = by_name.get(t["name"] + "_scale_inv")
            if s is None or s["dtype"] != "f32" or len(t["shape"]) != 2:
                bad.append(t["name"])
                continue
            r, c = t["shape"]
            if s["shape"] != [(r + 127) // 128, (c + 127) // 128]:
                bad.append(t["name"])
        ck.ok(not bad, "%s: every F8_E4M3 weight (%d) has an F32 <name>_scale_inv of shape "
              "[ceil(r/128), ceil(c/128)] (bad: %r)" % (rel, nfp8, bad[:5]))
        # Compare the block-dequantised fp8 weights with the bf16 folder of the
        # same architecture, if any (information only: the weights need not
        # be the same draw).
        other = rel.split("/")[0].replace("-fp8", "") + "/hf/model.safetensors"
        if other in parsed_all and other != rel:
            vals = {t["name"]: (t, v) for t, v in iter_tensors(fixtures, rel, p)}
            other_vals = {t["name"]: v for t, v in iter_tensors(fixtures, other, parsed_all[other])}
            errs = []
            for name, (t, v) in vals.items():
                if t["dtype"] != "f8_e4m3" or name not in other_vals:
                    continue
                st, sv = vals[name + "_scale_inv"]
                r, c = t["shape"]
                nbc = st["shape"][1]
                deq = [v[i * c + j] * sv[(i // 128) * nbc + j // 128] for i in range(r) for j in range(c)]
                errs.append((_rms_rel_err(deq, other_vals[name]), name))
            if errs:
                errs.sort()
                ck.info("dequantised FP8 (x weight_scale_inv) vs %s: relative RMS error min %.4g, "
                        "max %.4g over %d weights" % (other, errs[0][0], errs[-1][0], len(errs)))
            nonfp8_equal = sum(1 for name, (t, v) in vals.items()
                               if t["dtype"] != "f8_e4m3" and not name.endswith("_scale_inv")
                               and other_vals.get(name) == v)
            nonfp8 = sum(1 for name, (t, v) in vals.items()
                         if t["dtype"] != "f8_e4m3" and not name.endswith("_scale_inv"))
            ck.info("non-FP8 tensors identical to %s: %d/%d" % (other, nonfp8_equal, nonfp8))

    print("\n== %d passed, %d failed" % (ck.passes, ck.failures))
    return 1 if ck.failures else 0


# ---------------------------------------------------------------------------

def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", default="/work/shared/fixtures")
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "fixture_checksums.tsv"))
    ap.add_argument("--check", action="store_true", help="verify instead of writing")
    args = ap.parse_args(argv)
    out = os.path.normpath(args.out)
    t0 = time.time()
    if args.check:
        rc = run_check(args.fixtures, out)
        print("check took %.1fs" % (time.time() - t0))
        return rc
    rows = compute_all(args.fixtures)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(TSV_HEADER + "\n")
        for r in rows:
            f.write(r + "\n")
    os.replace(tmp, out)
    print("wrote %s: %d tensors in %.1fs" % (out, len(rows), time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
