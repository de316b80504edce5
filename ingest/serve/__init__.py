"""``calving catalog serve``: the Iceberg REST catalog protocol over calving's SQL catalog,
fit to face a network.

* ``app``: the ASGI application (Starlette): authentication from the headers before a
  body byte is read, bodies read with a size cap and a timeout, JSON checks, routing,
  errors in the protocol's error model with a request id;
* ``protocol`` / ``server``: uvicorn with header and body timeouts and a bounded number
  of connections; ``RestCatalogServer`` runs it (in a thread for tests);
* ``tokens``: OAuth2 client credentials (form body or HTTP Basic), throttled failures;
* ``idempotency``: ``Idempotency-Key`` answers kept for their lifetime;
* ``service``, ``transaction``, ``apply``, ``documents``: the protocol's operations over a
  ``SqlCatalog``, with every name and location confined (``calving.commit.catalog
  .identifiers``, ``.locations``);
* ``errors``: calving's typed errors as HTTP statuses and Iceberg error types.

Only ``calving.commit`` is imported from here (never the rest of ``calving.ingest``).
"""
