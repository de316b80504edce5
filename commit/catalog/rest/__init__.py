"""calving's client of the Iceberg REST catalog protocol: ``client.RestCatalog``
(calving's catalog interface), ``diff`` (a commit as typed requirements + updates,
encoded by ``calving.commit.spec.update_json``), ``idempotent`` (commits under an
``Idempotency-Key``), ``multi`` (multi-table transactions), ``transport`` (HTTP,
replies as typed errors) and ``auth`` (bearer tokens, OAuth2 client credentials).
The server, ``calving catalog serve``, is ``calving.ingest.serve``. Nothing here imports
pyspark.
"""
