"""Reads Kineto / Chrome trace JSON (``.json``, ``.json.gz``) into an ``EventBatch``: the file reader, its
streaming cutter, the native scanner and its Python twin, the schema, and the column builders.
"""
