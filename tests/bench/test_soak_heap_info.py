"""The soak's reading of ``jcmd PID GC.heap_info`` (recorded output of Java 17's G1)."""

from __future__ import annotations

from tests.bench import soak

RECORDED = """6098:
 garbage-first heap   total 423936K, used 177787K [0x00000000c0000000, 0x0000000100000000)
  region size 1024K, 11 young (11264K), 3 survivors (3072K)
 Metaspace       used 145079K, committed 146240K, reserved 1179648K
  class space    used 17116K, committed 17664K, reserved 1048576K
"""


def test_heap_info_is_read() -> None:
    assert soak.parse_heap_info(RECORDED) == soak.JvmHeap(
        heap_used=177787 * 1024, heap_committed=423936 * 1024, metaspace=146240 * 1024
    )


def test_output_not_understood_is_none() -> None:
    assert soak.parse_heap_info("6098:\nAttachNotSupportedException\n") is None
    assert soak.parse_heap_info(RECORDED.replace("Metaspace", "Meta")) is None
