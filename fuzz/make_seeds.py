#!/usr/bin/env python3
"""Writes fuzz/corpus/records/seed-*: the fuzz input header (Input's fields as
arbitrary decodes them: little-endian ints, bool = byte & 1) then kernel-format records."""
import struct, os

IP, TID, TIME, READ, CALLCHAIN, ID, CPU, PERIOD, RAW, BRANCH, REGS_USER, STACK_USER, WEIGHT, AUX, IDENTIFIER = \
    1, 2, 4, 16, 32, 64, 128, 256, 1024, 2048, 4096, 8192, 16384, 1 << 20, 1 << 16

def header(st, rf, ru, ri, branch, all_, shift=0):
    return struct.pack("<IBQQBBB", st, rf, ru, ri, branch, all_, shift)

def rec(ty, misc, body):
    body += b"\0" * (-len(body) % 8)
    return struct.pack("<IHH", ty, misc, 8 + len(body)) + body

def trailer(st):
    t = b""
    if st & TID: t += struct.pack("<II", 100, 101)
    if st & TIME: t += struct.pack("<Q", 5000)
    if st & ID: t += struct.pack("<Q", 7)
    if st & CPU: t += struct.pack("<II", 1, 0)
    if st & IDENTIFIER: t += struct.pack("<Q", 7)
    return t

def name(s):
    s += b"\0"
    return s + b"\0" * (-len(s) % 8)

out = {}
st = IP | TID | TIME | CPU | PERIOD | CALLCHAIN
recs = b""
for depth in (0, 3, 8):
    recs += rec(9, 2, struct.pack("<QIIQIIQQ", 0x401000, 100, 101, 5000, 1, 0, 4000, depth)
                + b"".join(struct.pack("<Q", 0x401000 + i) for i in range(depth)))
recs += rec(3, 0x2000, struct.pack("<II", 100, 101) + name(b"bash") + trailer(st))
recs += rec(10, 0, struct.pack("<IIQQQIIQQII", 100, 101, 0x400000, 4096, 0, 8, 1, 1234, 0, 5, 2)
            + name(b"/usr/bin/bash") + trailer(st))
recs += rec(2, 0, struct.pack("<QQ", 7, 12) + trailer(st))
recs += rec(5, 0, struct.pack("<QQQ", 1, 7, 7) + trailer(st))
recs += rec(6, 0, struct.pack("<QQQ", 2, 7, 7) + trailer(st))
out["seed-common"] = header(st, 0, 0, 0, 0, 1) + recs

bid = bytes([3, 0, 0, 0]) + bytes([0xde, 0xad, 0xbe]) + b"\0" * 17
recs = rec(10, 0x4000, struct.pack("<IIQQQ", 1, 2, 0x1000, 0x2000, 0) + bid + struct.pack("<II", 5, 2)
           + name(b"/lib/x.so"))
recs += rec(14, 0x2000, b"")
recs += rec(99, 0, struct.pack("<QQ", 1, 2))
recs += rec(20, 0, struct.pack("<QHH", 0xffff0000, 2, 3) + b"\x90\x90\xcc\xcc\xcc")
out["seed-other"] = header(0, 0, 0, 0, 0, 0, 3) + recs

st = IDENTIFIER | IP | READ | CALLCHAIN | RAW | BRANCH | REGS_USER | STACK_USER | WEIGHT | AUX
rf = 8 | 4 | 16  # GROUP | ID | LOST
body = struct.pack("<QQ", 7, 0x1000)
body += struct.pack("<Q", 2) + struct.pack("<QQQ", 10, 7, 0) + struct.pack("<QQQ", 20, 8, 1)
body += struct.pack("<QQQ", 2, 0x1000, 0x2000)
body += struct.pack("<I", 12) + bytes(range(12))
body += struct.pack("<QQ", 1, 9) + struct.pack("<QQQ", 0xa, 0xb, 1) + struct.pack("<Q", 3)
body += struct.pack("<QQQ", 2, 11, 22)
body += struct.pack("<Q", 8) + b"stackstk" + struct.pack("<Q", 6)
body += struct.pack("<Q", 77)
body += struct.pack("<Q", 8) + b"auxdata!"
out["seed-rich"] = header(st, rf, 0b11, 0, 3, 1) + rec(9, 1, body)

d = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "records")
os.makedirs(d, exist_ok=True)
for k, v in out.items():
    open(os.path.join(d, k), "wb").write(v)
    print(k, len(v))
