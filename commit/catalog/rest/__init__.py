"""The Iceberg REST catalog protocol: served over calving's SQL catalog
(``calving catalog serve``), and spoken by calving's ``RestCatalog`` client.

Server: ``changes`` parses ``updateTable`` requirements and updates, ``apply`` applies
them to table metadata (pure), ``documents`` writes and reads metadata files,
``service`` answers the protocol's operations over a ``SqlCatalog``, ``transaction``
swaps several tables in one SQL transaction, ``server`` is the HTTP layer.
Client: ``client.RestCatalog`` (calving's catalog interface), ``diff`` (a commit as
requirements + updates), ``transport`` (HTTP, replies as typed errors).
Nothing here imports pyspark.
"""
