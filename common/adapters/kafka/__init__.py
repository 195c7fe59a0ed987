"""The cluster-mode :class:`~common.ports.Bus`: Apache Kafka through confluent-kafka.

How it behaves:

- **Topics.** Every :class:`~common.messages.Topic` is the Kafka topic
  ``{topic_prefix}.{topic}`` (``crawl.discovered``). :meth:`KafkaBus.start` (called by
  the first ``publish`` or ``consume`` when not called before) checks that the brokers
  answer within ``start_timeout`` seconds and creates every topic, the dead-letter
  topic included, with ``partitions`` partitions and ``replication_factor`` replicas;
  a topic that exists already is fine when it has at least that many partitions.
- **Partitions.** The producer picks the partition itself with the consistent-hash ring
  :class:`common.ring.HostRing` and passes it explicitly, so every producer agrees and
  topics are co-partitioned; :meth:`KafkaBus.partition_of` says the same. The key is the
  host, the value the message encoded with :func:`common.messages.encode`.
- **Publishing.** ``publish`` returns when the broker has acknowledged the message
  (``acks=all``, idempotent producer); it raises :class:`KafkaBusError` when delivery
  fails or times out (``delivery_timeout``), :class:`KafkaPublishRejectedError` (a
  subclass) when the error is one that sending the same message again cannot cure. A
  dedicated thread serves the producer's delivery reports; the event loop never blocks
  on the client.
- **Consuming.** ``consume`` joins the consumer group ``{group_prefix}-{group}`` (range
  assignment, so co-partitioned topics give a consumer the same partition numbers). A
  thread polls Kafka and hands messages to the event loop, where ``concurrency``
  workers run the handler. Messages of one (topic, partition, key) run one at a time in
  order; different keys run concurrently. Past ``prefetch`` messages waiting or in
  progress, the thread stops reading until half of them are done (after a second, it
  pauses its partitions so that it keeps serving rebalances meanwhile).
- **At-least-once.** Offsets are committed (periodically, on revocation and on stop) only
  up to the first message of each partition not yet fully handled (see
  :class:`~common.adapters.offset_tracker.OffsetTracker`): a crash redelivers what was
  not done, never loses it. Handlers must be idempotent.
- **Retries and dead letters.** A handler that raises is called again with the same
  message (``Delivery.attempt`` counts up, exponential back-off from ``retry_backoff``
  up to ``max_retry_backoff``) before the next message of its key. After
  ``max_delivery_attempts`` failures a :class:`~common.messages.DeadLetter` with the
  error goes to the dead-letter topic (same key) and the message counts as handled.
  Bytes that do not decode as the topic's message type (numbers out of range included)
  are dead-lettered at once. A dead letter carries the original bytes compactly and
  bounded (:func:`common.messages.dead_letter`), so it fits in Kafka's default message
  limit however the bytes escape in JSON. Publishing a dead letter is retried (with
  back-off, until the partition is revoked) while the error may pass; an error that
  will not (:data:`PERMANENT_PUBLISH_ERRORS`, e.g. a broker whose message limit is
  lower still) is not: the letter is sent once more without its payload (size, digest
  and error only), and if that is refused too it is logged, counted
  (``crawler_bus_dead_letters_dropped_total``) and dropped, and the consumer moves on.
  A dead letter that itself fails is dropped (logged), never re-lettered.
- **Rebalances.** ``on_assign`` is awaited with the partition numbers this consumer owns
  whenever they change: after every assignment, before any message of it is handled,
  and after a revocation, before the partitions go to another consumer. On revocation
  the bus stops handing out messages of the revoked partitions, waits up to
  ``revoke_timeout`` seconds for handlers in progress on them, awaits ``on_assign``
  with what is left (with Kafka's eager rebalancing: nothing, until the new
  assignment), and commits what is done. So a partition, and each host on it, has one
  owner at a time as long as handlers and ``on_assign`` finish within
  ``revoke_timeout``. Partitions lost without a revocation (a missed session timeout)
  are dropped the same way, but nothing is committed for them (they may already
  belong to another consumer).
- **Stopping.** :meth:`KafkaBus.stop` ends every ``consume`` promptly: handlers in
  progress are cancelled (their messages stay uncommitted and are redelivered), done
  work is committed, consumers leave their groups, the producer is flushed and closed.
  ``consume`` after ``stop`` returns at once; ``publish`` after ``stop`` raises.
- **Metrics.** With ``metrics`` (a :class:`~common.metrics.BusMetrics`), the bus counts
  per topic the messages published (when the broker acknowledged them), the messages
  handed to a handler (once per delivery, not per retry; a message redelivered after a
  rebalance or a restart counts again), every handler call that raised and every
  message sent to the dead-letter topic. Consumer lag comes from librdkafka's
  statistics (``statistics.interval.ms`` = ``lag_interval``): for each partition the
  consumer owns, the end of the log minus the group's committed offset, summed per
  topic (and over every ``consume`` of the process that reads the topic). A partition
  the group never committed counts from the low watermark, since consuming starts
  there (``auto.offset.reset=earliest``). Offsets are committed only up to what
  handlers finished, so the lag counts messages waiting or in progress; it is as fresh
  as the last statistics (and the high watermark of a paused partition is not
  refreshed until it resumes).

The parts, one module each:

- :mod:`~common.adapters.kafka.bus`: :class:`KafkaBus`, the front;
- :mod:`~common.adapters.kafka.consumer`: one ``consume`` call (polling thread, lanes,
  workers, offsets and commits, rebalances);
- :mod:`~common.adapters.kafka.producer`: the producer and its delivery-report thread;
- :mod:`~common.adapters.kafka.admin`: creating and checking the topics, deleting them;
- :mod:`~common.adapters.kafka.client`: the errors and what the clients share;
- :mod:`~common.adapters.kafka.lag`: consumer lag from librdkafka's statistics.
"""

from common.adapters.kafka.bus import KafkaBus
from common.adapters.kafka.client import (
    PERMANENT_PUBLISH_ERRORS,
    KafkaBusError,
    KafkaPublishRejectedError,
)
from common.adapters.kafka.lag import consumer_lag

__all__ = ["PERMANENT_PUBLISH_ERRORS", "KafkaBus", "KafkaBusError", "KafkaPublishRejectedError",
           "consumer_lag"]
