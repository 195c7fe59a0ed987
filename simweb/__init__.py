"""The simulated web: a deterministic, hostile little internet on loopback for the
crawler's tests, demos and benchmarks.

- :mod:`simweb.model`: scenarios as data (dataclasses, JSON).
- :mod:`simweb.scenarios`: ``seed()``, ``features()``, ``generated(...)``.
- :mod:`simweb.site`: what is answered (pure, no sockets).
- :mod:`simweb.server`: :class:`SimWeb`, the HTTP server on one loopback port for all
  virtual hosts, and its background-thread handle.
- :mod:`simweb.dns`: the loopback DNS responder for the scenario's names.
- :mod:`simweb.log`: the request log with politeness helpers.
- :mod:`simweb.expected`: what a correct crawler fetches.
"""

from simweb.dns import DnsResponder
from simweb.expected import Expectation, canonical, expected_crawl, expected_urls
from simweb.log import RequestLog, RequestRecord
from simweb.model import (
    Host,
    Page,
    Robots,
    Scenario,
    ScenarioError,
    Trap,
    dump_scenario,
    load_scenario,
    scenario_from_json,
)
from simweb.server import SimWeb, SimWebThread, StaticResolver
from simweb.site import Reply, SimRequest, Site

__all__ = [
    "DnsResponder",
    "Expectation",
    "Host",
    "Page",
    "Reply",
    "RequestLog",
    "RequestRecord",
    "Robots",
    "Scenario",
    "ScenarioError",
    "SimRequest",
    "SimWeb",
    "SimWebThread",
    "Site",
    "StaticResolver",
    "Trap",
    "canonical",
    "dump_scenario",
    "expected_crawl",
    "expected_urls",
    "load_scenario",
    "scenario_from_json",
]
