#!/usr/bin/env python3
"""Writes the hand-made seed inputs of fuzz/corpus/ (BTF and netlink): small, valid examples
of what the parsers read, so the fuzzer starts inside the format instead of at its magic.
The record corpus is a real `ppscope record` file; args seeds are plain text.
Run from anywhere: python3 fuzz/make_seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    path = os.path.join(HERE, "corpus", target, name)
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- BTF
class Btf:
    INT, PTR, STRUCT, UNION, ENUM, TYPEDEF, CONST, FUNC, FUNC_PROTO = 1, 2, 4, 5, 6, 8, 10, 12, 13

    def __init__(self):
        self.strings = b"\0"
        self.types = b""
        self.count = 0

    def s(self, name):
        if not name:
            return 0
        off = len(self.strings)
        self.strings += name.encode() + b"\0"
        return off

    def add(self, name, kind, vlen, size_or_type, tail=b""):
        self.types += struct.pack("<III", self.s(name), (kind << 24) | vlen, size_or_type) + tail
        self.count += 1
        return self.count

    def int(self, name, size):
        return self.add(name, self.INT, 0, size, struct.pack("<I", (1 << 24) | size * 8))

    def struct(self, name, size, members, kind=STRUCT):
        tail = b"".join(struct.pack("<III", self.s(n), t, bits) for n, t, bits in members)
        return self.add(name, kind, len(members), size, tail)

    def bytes(self):
        hdr = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(self.types),
                          len(self.types), len(self.strings))
        return hdr + self.types + self.strings


def page_pool_btf():
    b = Btf()
    i = b.int("int", 4)                                                     # 1
    alloc = b.struct("", 8, [("count", i, 0), ("cache", i, 32)])           # 2
    params = b.struct("page_pool_params", 12,
                      [("pool_size", i, 0), ("queue_idx", i, 32), ("order", i, 64)])  # 3
    hold = b.struct("", 4, [("pages_state_hold_cnt", i, 0)])                # 4
    b.struct("page_pool", 64, [("p", params, 0), ("alloc", alloc, 128), ("", hold, 256)])  # 5
    b.add("skb_drop_reason", Btf.ENUM, 2, 4,
          struct.pack("<IiIi", b.s("SKB_CONSUMED"), 1, b.s("SKB_DROP_REASON_NOT_SPECIFIED"), 2))  # 6
    u32 = b.add("u32", Btf.TYPEDEF, 0, i)                                   # 7
    cu32 = b.add("", Btf.CONST, 0, u32)                                     # 8
    proto = b.add("", Btf.FUNC_PROTO, 4, i,
                  b"".join(struct.pack("<II", 0, t) for t in (i, cu32, i, i)))  # 9
    b.add("page_pool_put_unrefed_netmem", Btf.FUNC, 0, proto)               # 10
    ptr = b.add("", Btf.PTR, 0, 5)                                          # 11
    pp = b.struct("", 8, [("pp", ptr, 0)], kind=Btf.UNION)                  # 12
    b.struct("page", 64, [("flags", i, 0), ("", pp, 64)])                   # 13
    return b.bytes()


def self_nested_btf():
    """A struct whose anonymous member is itself (or a typedef of itself)."""
    b = Btf()
    i = b.int("int", 4)                                                     # 1
    b.struct("page_pool", 8, [("", 3, 0), ("x", i, 0)])                     # 2 -> typedef 3
    b.add("pp_t", Btf.TYPEDEF, 0, 2)                                        # 3
    return b.bytes()


put("btf", "page_pool.btf", page_pool_btf())
put("btf", "self_nested.btf", self_nested_btf())

# ---------------------------------------------------------------- netlink (host order: LE)
def attr(kind, value):
    v = struct.pack("<HH", 4 + len(value), kind) + value
    return v + b"\0" * (-len(v) % 4)


def a32(k, x):
    return attr(k, struct.pack("<I", x))


def a64(k, x):
    return attr(k, struct.pack("<Q", x))


def nest(k, parts):
    return attr(k | 0x8000, b"".join(parts))


def nlmsg(ty, flags, payload, seq=1):
    return struct.pack("<IHHII", 16 + len(payload), ty, flags, seq, 4242) + payload


def genl(ty, flags, cmd, attrs):
    return nlmsg(ty, flags, bytes([cmd, 1, 0, 0]) + b"".join(attrs))


MULTI, FAM = 2, 0x1D
DONE = nlmsg(3, MULTI, struct.pack("<i", 0))
pools = genl(FAM, MULTI, 5, [a32(1, 7), a32(2, 12), a32(3, 8195), a32(4, 256), a64(5, 1 << 40)]) \
    + genl(FAM, MULTI, 5, [a64(1, 3), a32(4, 5), a32(6, 1234), a32(7, 9), nest(8, [])]) + DONE
put("netlink", "page_pool_dump", pools)
stats = genl(FAM, MULTI, 9, [nest(1, [a32(1, 7), a32(2, 12)])]
             + [a64(k, 1000 + k) for k in range(8, 19)]) + DONE
put("netlink", "page_pool_stats_dump", stats)
family = genl(0x10, 0, 3, [attr(1, struct.pack("<H", FAM)) , a32(3, 1),
                            nest(6, [nest(1, [a32(1, 5), a32(2, 0x0e)]), nest(2, [a32(1, 9)])])])
put("netlink", "family_reply", family)
err = nlmsg(2, 0x200, struct.pack("<i", -95) + struct.pack("<IHHII", 20, FAM, 5, 1, 0)
            + attr(1, b"page pool stats not supported\0"))
put("netlink", "error_with_ext_ack", err)

# ---------------------------------------------------------------- args
for i, s in enumerate(["5", "5s", "500ms", "2m", "1.5", "1h 30m", "127.0.0.1:9464", "[::1]:9464"]):
    put("args", f"seed{i}", s.encode())
