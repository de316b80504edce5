"""Table maintenance jobs: what keeps a streamed table fast to read (column statistics
today; compaction, snapshot expiry with file cleanup, orphan removal and manifest rewrite
are issue 11's remaining work)."""
