"""Sans-I/O Kafka protocol on top of kio (Aiven's types generated from Kafka's schemas).

* ``framing``: int32 size-prefixed frames, bounded by ``socket.request.max.bytes``;
* ``headers``: request header v1/v2 and response header v0/v1, by hand;
* ``codec``: decode requests / encode responses (and the reverse for odradek's client),
  the ApiVersions UNSUPPORTED_VERSION fallback;
* ``versions``: the one table of advertised API versions, ``advertised()``, ``is_flexible``;
* ``errors`` / ``error_responses``: Kafka error codes, ``DecodeError``, and a well-formed
  error response for any request;
* ``fetch_encoder``: the Fetch response with record data left in files for sendfile;
* ``lenient``: a reader that skips unknown tagged fields when kio refuses them;
* ``build``: kio entities of any version from plain dicts.
"""
