"""Adapters behind the ports of :mod:`common.ports`.

Embedded mode: :class:`~common.adapters.memory_bus.MemoryBus` (in-process topics) and
:class:`~common.adapters.sqlite_store.SqliteStateStore` (one SQLite file). Each adapter
lives in its own module so that importing one never pulls in another's dependencies
(the cluster adapters need the Kafka and Cassandra clients).
"""
