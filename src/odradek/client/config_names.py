"""The names of the Java clients' settings, to tell a typo from a setting odradek ignores.

A client properties file (the CLI's ``--command-config``) may hold any of Kafka's client
settings: a file written for kafka-topics.sh or the console tools often carries
``client.id``, ``request.timeout.ms`` or producer settings next to the security keys. Kafka's
clients log each key they did not use (AbstractConfig.logUnused: "The configuration 'X' was
supplied but isn't a known config." until Kafka 3.1, one line listing them all since). To
say whether an unused key is a typo or a real Kafka setting that has no effect here, the
caller checks it against :data:`KAFKA_CLIENT_SETTINGS`: the names defined by Kafka's
CommonClientConfigs, SaslConfigs, SslConfigs, AdminClientConfig, ProducerConfig and
ConsumerConfig (Kafka 3.9). The keys odradek's own client reads are
:data:`odradek.client.security.SECURITY_KEYS`.
"""

from __future__ import annotations

_COMMON = """
bootstrap.servers bootstrap.controllers client.dns.lookup client.id client.rack
connections.max.idle.ms default.api.timeout.ms enable.metrics.push metadata.max.age.ms
metadata.recovery.strategy metric.reporters metrics.num.samples metrics.recording.level
metrics.sample.window.ms auto.include.jmx.reporter receive.buffer.bytes send.buffer.bytes
reconnect.backoff.max.ms reconnect.backoff.ms request.timeout.ms retries retry.backoff.max.ms
retry.backoff.ms security.protocol security.providers socket.connection.setup.timeout.max.ms
socket.connection.setup.timeout.ms
"""

_SASL = """
sasl.mechanism sasl.jaas.config sasl.client.callback.handler.class
sasl.login.callback.handler.class sasl.login.class sasl.login.connect.timeout.ms
sasl.login.read.timeout.ms sasl.login.refresh.buffer.seconds
sasl.login.refresh.min.period.seconds sasl.login.refresh.window.factor
sasl.login.refresh.window.jitter sasl.login.retry.backoff.max.ms sasl.login.retry.backoff.ms
sasl.kerberos.kinit.cmd sasl.kerberos.min.time.before.relogin sasl.kerberos.service.name
sasl.kerberos.ticket.renew.jitter sasl.kerberos.ticket.renew.window.factor
sasl.oauthbearer.clock.skew.seconds sasl.oauthbearer.expected.audience
sasl.oauthbearer.expected.issuer sasl.oauthbearer.header.urlencode
sasl.oauthbearer.jwks.endpoint.refresh.ms sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms
sasl.oauthbearer.jwks.endpoint.retry.backoff.ms sasl.oauthbearer.jwks.endpoint.url
sasl.oauthbearer.scope.claim.name sasl.oauthbearer.sub.claim.name
sasl.oauthbearer.token.endpoint.url
"""

_SSL = """
ssl.cipher.suites ssl.enabled.protocols ssl.endpoint.identification.algorithm
ssl.engine.factory.class ssl.key.password ssl.keymanager.algorithm
ssl.keystore.certificate.chain ssl.keystore.key ssl.keystore.location ssl.keystore.password
ssl.keystore.type ssl.protocol ssl.provider ssl.secure.random.implementation
ssl.trustmanager.algorithm ssl.truststore.certificates ssl.truststore.location
ssl.truststore.password ssl.truststore.type
"""

_PRODUCER = """
acks batch.size buffer.memory compression.type compression.gzip.level compression.lz4.level
compression.zstd.level delivery.timeout.ms enable.idempotence interceptor.classes
key.serializer value.serializer linger.ms max.block.ms max.in.flight.requests.per.connection
max.request.size metadata.max.idle.ms partitioner.adaptive.partitioning.enable
partitioner.availability.timeout.ms partitioner.class partitioner.ignore.keys
transaction.timeout.ms transactional.id
"""

_CONSUMER = """
allow.auto.create.topics auto.commit.interval.ms auto.offset.reset check.crcs
enable.auto.commit exclude.internal.topics fetch.max.bytes fetch.max.wait.ms fetch.min.bytes
group.id group.instance.id group.protocol group.remote.assignor heartbeat.interval.ms
isolation.level key.deserializer value.deserializer max.partition.fetch.bytes
max.poll.interval.ms max.poll.records partition.assignment.strategy rebalance.timeout.ms
session.timeout.ms
"""

KAFKA_CLIENT_SETTINGS: frozenset[str] = frozenset(
    (_COMMON + _SASL + _SSL + _PRODUCER + _CONSUMER).split()
)
