"""Federation core: query/reply protocol, in-process runtime, secure-aggregation shim.

No Flower imports: the Flower apps in ``server/`` and ``clients/`` drive the
same strategies and client handlers over a Flower ``Grid``.
"""
