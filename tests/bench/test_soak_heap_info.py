"""The soak's reading of ``jcmd PID GC.heap_info``: recorded output of Java 17 with G1
(the default), the serial collector (what the CI's drivers run with) and the parallel
one."""

from __future__ import annotations

from tests.bench import soak

G1 = """6098:
 garbage-first heap   total 423936K, used 177787K [0x00000000c0000000, 0x0000000100000000)
  region size 1024K, 11 young (11264K), 3 survivors (3072K)
 Metaspace       used 145079K, committed 146240K, reserved 1179648K
  class space    used 17116K, committed 17664K, reserved 1048576K
"""

SERIAL = """29231:
 def new generation   total 116160K, used 22725K [0x0000000687400000, 0x000000068f200000, 0x0000000704d50000)
  eden space 103296K,  22% used [0x0000000687400000, 0x0000000688a31730, 0x000000068d8e0000)
  from space 12864K,   0% used [0x000000068d8e0000, 0x000000068d8e0000, 0x000000068e570000)
  to   space 12864K,   0% used [0x000000068e570000, 0x000000068e570000, 0x000000068f200000)
 tenured generation   total 258048K, used 0K [0x0000000704d50000, 0x0000000714950000, 0x0000000800000000)
   the space 258048K,   0% used [0x0000000704d50000, 0x0000000704d50000, 0x0000000704d50200, 0x0000000714950000)
 Metaspace       used 8212K, committed 8448K, reserved 1114112K
  class space    used 1061K, committed 1152K, reserved 1048576K
"""

PARALLEL = """29233:
 PSYoungGen      total 113152K, used 19456K [0x0000000782700000, 0x000000078a500000, 0x0000000800000000)
  eden space 97280K, 20% used [0x0000000782700000,0x0000000783a00248,0x0000000788600000)
  from space 15872K, 0% used [0x0000000789580000,0x0000000789580000,0x000000078a500000)
  to   space 15872K, 0% used [0x0000000788600000,0x0000000788600000,0x0000000789580000)
 ParOldGen       total 258048K, used 0K [0x0000000687400000, 0x0000000697000000, 0x0000000782700000)
  object space 258048K, 0% used [0x0000000687400000,0x0000000687400000,0x0000000697000000)
 Metaspace       used 8934K, committed 9088K, reserved 1114112K
  class space    used 1062K, committed 1152K, reserved 1048576K
"""

K = 1024


def test_g1_heap_info_is_read() -> None:
    assert soak.parse_heap_info(G1) == soak.JvmHeap(
        heap_used=177787 * K, heap_committed=423936 * K, metaspace=146240 * K
    )


def test_generational_heaps_sum_their_generations() -> None:
    assert soak.parse_heap_info(SERIAL) == soak.JvmHeap(
        heap_used=(22725 + 0) * K, heap_committed=(116160 + 258048) * K, metaspace=8448 * K
    )
    assert soak.parse_heap_info(PARALLEL) == soak.JvmHeap(
        heap_used=19456 * K, heap_committed=(113152 + 258048) * K, metaspace=9088 * K
    )


def test_output_not_understood_is_none() -> None:
    assert soak.parse_heap_info("6098:\nAttachNotSupportedException\n") is None
    assert soak.parse_heap_info(G1.replace("Metaspace", "Meta")) is None
