"""The controller of a ZooKeeper-coordinated cluster, shaped like Kafka's KafkaController.

One broker at a time is controller (elected through ``/controller``, see
:mod:`odradek.cluster.zk.election`). It keeps the cluster's partition state in a
:class:`~odradek.cluster.controller.context.ControllerContext`, changes it through the
partition and replica state machines (every write a compare-and-set fenced by the
controller epoch) and tells brokers with LeaderAndIsr, UpdateMetadata and StopReplica.
"""

from odradek.cluster.controller.controller import Controller
from odradek.cluster.controller.leadership import ControlledShutdownResult, ElectionResult

__all__ = ["ControlledShutdownResult", "Controller", "ElectionResult"]
