"""Cross-check helper for formats/numpy tests (run by python_test.go).

gen DIR    writes .npy/.npz files with the real NumPy and DIR/manifest.json:
           file -> key -> {dtype, shape, fortran, sha256 of the C-order
           little-endian bytes}; key "" for .npy files.
check FILE reads FILE (JSON list of [snapd_file, reference_file, canonical])
           and loads each snapd-written file with np.load(allow_pickle=False):
           same keys, dtypes, shapes and values as the reference; when
           canonical, np.save/np.savez of the loaded arrays must give the
           same bytes as snapd wrote.
"""
import hashlib
import io
import json
import os
import sys
import warnings

import numpy as np

warnings.simplefilter("ignore")

DTYPES = ["f8", "f4", "f2", "i8", "i4", "i2", "i1", "u8", "u4", "u2", "u1", "b1"]


def values(dt, shape):
    n = int(np.prod(shape)) if len(shape) else 1
    if dt.kind == "b":
        a = (np.arange(n) % 3 == 1)
    elif dt.kind == "c":
        a = (np.arange(n) - n / 2) * 0.75 + 1j * (np.arange(n) * 0.5 - 1)
        if n > 3:
            a[1] = complex(np.inf, 2)
            a[2] = complex(-0.0, np.nan)
    elif dt.kind == "f":
        a = (np.arange(n) - n / 2) * 0.75
        if n > 3:
            a[1] = np.inf
            a[2] = -0.0
    else:
        a = np.arange(n) * 37 + 3
        if dt.kind == "i":
            a = a - n * 10
    return a.astype(dt).reshape(shape)


def c_le_bytes(a):
    b = np.ascontiguousarray(a)
    if b.dtype.byteorder == ">":
        b = b.astype(b.dtype.newbyteorder("<"))
    return b.tobytes()


def describe(a):
    return {
        "dtype": a.dtype.str,
        "shape": list(a.shape),
        "fortran": bool(a.flags.f_contiguous and not a.flags.c_contiguous),
        "sha256": hashlib.sha256(c_le_bytes(a)).hexdigest(),
    }


def gen(d):
    manifest = {}

    def save(name, a, version=None):
        with open(os.path.join(d, name), "wb") as f:
            np.lib.format.write_array(f, a, version=version)
        manifest[name] = {"": describe(a)}

    for code in DTYPES:
        for order in "<>":
            if code in ("i1", "u1", "b1") and order == ">":
                continue
            dt = np.dtype(order + code)
            a = values(dt, (3, 4, 5))
            save("%s%s_c.npy" % ({"<": "le", ">": "be"}[order], code), a)
            save("%s%s_f.npy" % ({"<": "le", ">": "be"}[order], code), np.asfortranarray(a))
    # complex: both byte orders in C order, little-endian in Fortran order
    # (snapd refuses big-endian complex in Fortran order)
    for code in ("c8", "c16"):
        for order in "<>":
            a = values(np.dtype(order + code), (3, 4, 5))
            save("%s%s_c.npy" % ({"<": "le", ">": "be"}[order], code), a)
        save("le%s_f.npy" % code, np.asfortranarray(values(np.dtype("<" + code), (3, 4, 5))))
    a = values(np.dtype("<f4"), (2, 3))
    save("v2.npy", a, (2, 0))
    save("v3.npy", a, (3, 0))
    save("v2_fortran_be.npy", np.asfortranarray(values(np.dtype(">i4"), (4, 3, 2))), (2, 0))
    save("scalar.npy", values(np.dtype("<f8"), ()))
    save("zero_size.npy", values(np.dtype("<i2"), (0, 3)))
    save("zero_size_f.npy", np.asfortranarray(values(np.dtype("<i2"), (3, 0, 2))))
    save("big_dim.npy", values(np.dtype("|u1"), (1, 200)))

    arrs = {
        "zeta": values(np.dtype("<f4"), (4, 5)),
        "alpha": np.asfortranarray(values(np.dtype(">i8"), (3, 2))),
        "layer 1/w\u00fc": values(np.dtype("|b1"), (7,)),
        "mid.scalar": values(np.dtype("<u2"), ()),
    }
    for name, fn in [("savez.npz", np.savez), ("savez_compressed.npz", np.savez_compressed)]:
        p = os.path.join(d, name)
        fn(p, *[values(np.dtype("<f8"), (2, 2))], **arrs)
        with np.load(p, allow_pickle=False) as z:
            manifest[name] = {k: describe(z[k]) for k in z.files}
    # zip64 records at small sizes: Python's limit lowered to 100 bytes
    # (the Go test writes with the same limit, see codecFor)
    import zipfile
    saved = zipfile.ZIP64_LIMIT
    zipfile.ZIP64_LIMIT = 100
    try:
        for name, fn in [("savez_zip64.npz", np.savez), ("savez_compressed_zip64.npz", np.savez_compressed)]:
            p = os.path.join(d, name)
            fn(p, *[values(np.dtype("<f8"), (2, 2))], **arrs)
    finally:
        zipfile.ZIP64_LIMIT = saved
    for name in ["savez_zip64.npz", "savez_compressed_zip64.npz"]:
        with np.load(os.path.join(d, name), allow_pickle=False) as z:
            manifest[name] = {k: describe(z[k]) for k in z.files}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)


def load_all(p):
    if p.endswith(".npz"):
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}, z.files
    return {"": np.load(p, allow_pickle=False)}, [""]


def check(pairs_file):
    with open(pairs_file) as f:
        pairs = json.load(f)
    for ours, ref, canonical in pairs:
        a, order = load_all(ours)
        b, _ = load_all(ref)
        if sorted(a) != sorted(b):
            raise SystemExit("%s: keys %r, want %r" % (ours, sorted(a), sorted(b)))
        for k in a:
            x, y = a[k], b[k]
            if x.dtype.newbyteorder("=") != y.dtype.newbyteorder("=") or x.shape != y.shape:
                raise SystemExit("%s[%r]: %s %s, want %s %s" % (ours, k, x.dtype, x.shape, y.dtype, y.shape))
            if c_le_bytes(x) != c_le_bytes(y):
                raise SystemExit("%s[%r]: values differ" % (ours, k))
        if canonical:
            buf = io.BytesIO()
            if ours.endswith(".npz"):
                np.savez(buf, **{k: a[k] for k in order})
                # zip timestamps are the clock's: compare the arrays' .npy bytes
                import zipfile
                zo = zipfile.ZipFile(ours)
                zr = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
                for n in zr.namelist():
                    if zo.read(n) != zr.read(n):
                        raise SystemExit("%s: member %s differs from np.savez's" % (ours, n))
            else:
                np.save(buf, a[""])
                with open(ours, "rb") as f:
                    if f.read() != buf.getvalue():
                        raise SystemExit("%s: bytes differ from np.save's" % ours)
    print("checked %d files" % len(pairs))


if __name__ == "__main__":
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
    else:
        check(sys.argv[2])
