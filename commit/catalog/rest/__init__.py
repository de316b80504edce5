"""The Iceberg REST catalog protocol over calving's SQL catalog (``calving catalog serve``).

``changes`` parses ``updateTable`` requirements and updates, ``apply`` applies them to
table metadata (pure), ``service`` answers the protocol's operations over a
``SqlCatalog``, ``transaction`` swaps several tables in one SQL transaction,
``server`` is the HTTP layer. Nothing here imports pyspark.
"""
