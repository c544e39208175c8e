"""``odradek console``: a web console for operators (brokers, topics, messages, groups, lag).

It sees the cluster only through odradek's own client (never the broker's or storage's code):

* :mod:`~odradek.console.gateway` — what each page shows, gathered with Admin, GroupAdmin,
  Consumer and DescribeLogDirs, as plain dataclasses
* :mod:`~odradek.console.decode` — a record's key, value and headers as text, JSON or hex
* :mod:`~odradek.console.sampler` — end offsets and group lag sampled in memory for the charts
* :mod:`~odradek.console.app` — the Starlette application: routes, Jinja2 pages, error pages,
  the write actions (only with ``--allow-writes``) and their same-origin check
"""
