"""Peak live activation memory, computed by hand on tiny graphs with a view and an in-place op:
workloads.analysis.peak_live_bytes and simulator.report.memory.peak_activation_bytes (which the
memory report uses) must both give the hand-computed peak."""

from __future__ import annotations

from simulator.report.memory import peak_activation_bytes
from workloads.analysis import peak_live_bytes
from workloads.ir import GraphBuilder, OpGraph


def _view_and_in_place() -> OpGraph:
    b = GraphBuilder("view_inplace", "fp32")  # 4 bytes per element
    x = b.input("x", (4, 8))  # 32 elements = 128 B
    cache = b.input("cache", (1, 1, 16, 8))  # 128 elements = 512 B
    a = b.op("elementwise", [x], name="a", op="relu")  # op0: a, 128 B
    av = b.op("reshape", [a], name="av", shape=(1, 1, 4, 8))  # op1: a view of a (no new bytes)
    c = b.op("kv_append", [cache, av], name="c")  # op2: c is cache updated in place (no new bytes)
    b.op("elementwise", [c], name="y", op="relu")  # op3: y (1,1,20,8) = 160 elements = 640 B, an output
    b.op("elementwise", [av], name="z", op="relu")  # op4: z 128 B, an output
    return b.build()


def test_a_view_and_an_in_place_op_by_hand() -> None:
    g = _view_and_in_place()
    assert [t.nbytes for op in g for t in op.outputs] == [128, 128, 640, 640, 128]
    # Live ranges (op indices), a view or in-place output extending its base:
    #   x     [0, 0]  128   graph input, read by op0
    #   a     [0, 4]  128   read by op1; its view av is read by op2 and op4
    #   cache [0, 3]  512   graph input; its in-place update c is read by op3
    #   y     [3, 4]  640   graph output: live to the end
    #   z     [4, 4]  128
    # Bytes live at each op:
    #   op0: x + a + cache        = 128 + 128 + 512 =   768
    #   op1: a + cache            =       128 + 512 =   640
    #   op2: a + cache            =                     640
    #   op3: a + cache + y        = 128 + 512 + 640 = 1,280   <- the peak
    #   op4: a + y + z            = 128 + 640 + 128 =   896
    # (Counting av as its own buffer would give 1,408; c as its own buffer 1,920; a view that did not
    # extend a's life 1,152.)
    assert peak_live_bytes(g) == 1280
    assert peak_activation_bytes(g) == 1280


def test_a_view_that_is_a_graph_output_keeps_its_base_to_the_end() -> None:
    b = GraphBuilder("view_out", "fp32")
    x = b.input("x", (4, 8))  # 128 B
    a = b.op("elementwise", [x], name="a", op="relu")  # op0: 128 B
    b.op("reshape", [a], name="v", shape=(32,))  # op1: a view of a, a graph output (never read)
    h = b.op("elementwise", [x], name="h", op="relu")  # op2: 128 B
    b.op("elementwise", [h], name="d", op="relu")  # op3: 128 B, an output
    g = b.build()
    # x [0, 2], a [0, 3] (its view is an output), h [2, 3], d [3, 3]
    #   op0: x + a = 256; op1: 256; op2: x + a + h = 384; op3: a + h + d = 384  -> peak 384
    # (a freed after op1 would give 256.)
    assert peak_live_bytes(g) == 384
    assert peak_activation_bytes(g) == 384
