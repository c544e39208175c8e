"""One module per family of Kafka APIs; each handler is ``async (server, ctx, request)``.

Handlers read kio request entities with ``getattr`` (fields differ per version) and
answer with dicts fitted to the requested version by
:func:`odradek.protocol.build.build_response`.
"""
