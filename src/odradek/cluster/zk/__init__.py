"""ZooKeeper access for an odradek cluster, in Kafka's ZooKeeper layout and formats.

``paths`` names every znode, ``codecs`` reads and writes their JSON exactly as Kafka
3.x does, ``client.ZkClient`` is the typed store over kazoo (versioned writes, session
expiry callbacks), ``election.ControllerElector`` elects the controller.
"""
