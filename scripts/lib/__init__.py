"""Helpers the Python behind scripts/servers, scripts/kube, scripts/docker and
scripts/check-deploy share, so each of them does these things one way:

- :mod:`scripts.lib.proc`: PID files, processes started in the background with their
  output in a log, stopping only a process whose command line carries the starter's
  marker, resident memory, the tail of a log;
- :mod:`scripts.lib.cli`: settings read from the environment, messages and timed steps;
- :mod:`scripts.lib.build`: Go modules (download, source copy, build environment) and
  Maven dependency jars, each fetched once into a cache folder;
- :mod:`scripts.lib.probes`: readiness checks of Kafka and Cassandra as clients use them.

A script finds this package by putting the repository's root first on ``sys.path``
(it is ``Path(__file__).resolve().parents[2]`` from ``scripts/<name>.d/<name>.py``).
"""
