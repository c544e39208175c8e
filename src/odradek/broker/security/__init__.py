"""Encrypted and authenticated listeners: TLS (``tls``), SASL (``sasl``, ``scram``,
``jaas``), principals (``principal``) and the per-listener settings (``settings``)."""
