"""The dedup stage hands a page's outlinks to the frontier in one message per partition."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Sequence

from common.messages import Discovered, Message, ParsedPage, Topic
from common.ports import Delivery, Handler
from common.settings import Settings
from dedup.service import DedupStage


class RecordingBus:
    """Just enough of the Bus port: fixed partitions by CRC-32, publishes recorded."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.sent: list[tuple[Topic, str, Message]] = []

    def partition_of(self, topic: Topic, key: str) -> int:
        return zlib.crc32(key.encode()) % self.partitions

    async def publish(self, topic: Topic, key: str, message: Message) -> None:
        self.sent.append((topic, key, message))

    async def consume(self, group: str, topics: Sequence[Topic], handler: Handler, *,
                      concurrency: int = 1, on_assign: object = None) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        return None


def page_with_links(links: list[str]) -> ParsedPage:
    return ParsedPage(url="http://a.test/", host="a.test", depth=2, priority=1, status=200,
                      fetched_at=1.0, content_hash="x", simhash=None, links=links)


async def discovered_after(bus: RecordingBus, links: list[str]) -> list[tuple[str, Discovered]]:
    stage = DedupStage(Settings(), bus, store=None)  # type: ignore[arg-type]
    await stage.handle(Delivery(topic=Topic.PARSED, key="a.test",
                                message=page_with_links(links)))
    return [(key, msg) for topic, key, msg in bus.sent
            if topic is Topic.DISCOVERED and isinstance(msg, Discovered)]


LINKS = [f"http://h{i % 9}.test/p{i}" for i in range(40)] + ["http://a.test/next"]


async def test_one_partition_gives_one_message_per_page() -> None:
    sent = await discovered_after(RecordingBus(partitions=1), LINKS)
    assert len(sent) == 1
    key, msg = sent[0]
    assert key == msg.host == "h0.test"  # the first link's host keys the message
    assert [link.url for link in msg.links] == LINKS
    assert {link.depth for link in msg.links} == {3}
    assert {link.source for link in msg.links} == {"http://a.test/"}


async def test_links_are_grouped_by_the_partition_of_their_host() -> None:
    bus = RecordingBus(partitions=4)
    sent = await discovered_after(bus, LINKS)
    hosts = {url.split("/")[2] for url in LINKS}
    partitions = {bus.partition_of(Topic.DISCOVERED, h) for h in hosts}
    assert 1 < len(sent) == len(partitions) < len(hosts)
    for key, msg in sent:
        assert key == msg.host
        for link in msg.links:
            host = link.url.split("/")[2]
            assert bus.partition_of(Topic.DISCOVERED, host) == bus.partition_of(
                Topic.DISCOVERED, key)
    assert sorted(link.url for _, msg in sent for link in msg.links) == sorted(LINKS)


async def test_unparsable_links_are_dropped() -> None:
    sent = await discovered_after(RecordingBus(partitions=1), ["not a url", "http://b.test/"])
    assert [link.url for _, msg in sent for link in msg.links] == ["http://b.test/"]


class FailingBus(RecordingBus):
    async def publish(self, topic: Topic, key: str, message: Message) -> None:
        raise OSError("broker refused")


def page_of(url: str, links: list[str]) -> ParsedPage:
    host = url.split("/")[2]
    return ParsedPage(url=url, host=host, depth=1, priority=1, status=200, fetched_at=1.0,
                      content_hash="x", simhash=None, links=links)


async def test_pages_handled_together_share_one_message_per_partition() -> None:
    bus = RecordingBus(partitions=4)
    stage = DedupStage(Settings(), bus, store=None,  # type: ignore[arg-type]
                       link_linger=0.05)
    pages = [page_of(f"http://src{i}.test/", [f"http://h{j}.test/from{i}" for j in range(9)])
             for i in range(20)]
    await asyncio.gather(*(stage.handle(Delivery(topic=Topic.PARSED, key=p.host, message=p))
                           for p in pages))
    sent = [(key, msg) for topic, key, msg in bus.sent
            if topic is Topic.DISCOVERED and isinstance(msg, Discovered)]
    partitions = {bus.partition_of(Topic.DISCOVERED, f"h{j}.test") for j in range(9)}
    assert len(sent) == len(partitions)  # not one per page and partition: 20x fewer
    got = sorted(link.url for _, msg in sent for link in msg.links)
    assert got == sorted(url for p in pages for url in p.links)
    for key, msg in sent:
        for link in msg.links:
            assert bus.partition_of(Topic.DISCOVERED, link.url.split("/")[2]) == \
                bus.partition_of(Topic.DISCOVERED, key)
    # each page's links went out before its verdict
    statuses = [i for i, (topic, _, _) in enumerate(bus.sent) if topic is Topic.STATUS]
    last_links = max(i for i, (topic, _, _) in enumerate(bus.sent)
                     if topic is Topic.DISCOVERED)
    assert len(statuses) == 20 and min(statuses) > last_links


async def test_a_failed_batch_fails_every_page_in_it() -> None:
    stage = DedupStage(Settings(), FailingBus(partitions=1), store=None,  # type: ignore[arg-type]
                       link_linger=0.01)
    pages = [page_of(f"http://src{i}.test/", [f"http://h.test/{i}"]) for i in range(3)]
    results = await asyncio.gather(
        *(stage.handle(Delivery(topic=Topic.PARSED, key=p.host, message=p)) for p in pages),
        return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results), results  # each is handled again
