"""``calving run`` uses Spark's FileSystem-based checkpoint manager unless one is
configured (the FileContext default forks ``chmod`` per checkpoint file here)."""

from __future__ import annotations

import pytest

from calving.ingest.pipeline import (
    CHECKPOINT_MANAGER,
    CHECKPOINT_MANAGER_KEY,
    use_fast_checkpoint_manager,
)

pytestmark = pytest.mark.integration


def test_set_when_unset_and_kept_when_configured(spark):
    before = spark.conf.get(CHECKPOINT_MANAGER_KEY, None)
    try:
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)
        assert use_fast_checkpoint_manager(spark) is True  # the class exists in this Spark
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == CHECKPOINT_MANAGER
        mine = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"
        spark.conf.set(CHECKPOINT_MANAGER_KEY, mine)
        assert use_fast_checkpoint_manager(spark) is False
        assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == mine
    finally:
        spark.conf.set(CHECKPOINT_MANAGER_KEY, before or CHECKPOINT_MANAGER)
