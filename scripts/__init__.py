"""The project's command-line tools (scripts/servers, kube, docker, check-deploy, ...).

A package only so that their shared helpers import as ``scripts.lib`` from any working
directory, ahead of any other module of that name."""
