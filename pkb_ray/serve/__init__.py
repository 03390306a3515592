"""The reward service, ``pkb-ray serve``: the sweep's evaluation path behind HTTP, for RL trainers.

- :mod:`.engine`: the evaluation path kept warm (gangs, compile actors, the verdict cache, the
  results folder), with no HTTP in it;
- :mod:`.answers`: a verdict as the service answers it (reward, feedback, interval);
- :mod:`.reward`: the configurable reward function;
- :mod:`.app`: the HTTP API (FastAPI) and its Ray Serve deployment; :mod:`.main`: the command;
- :mod:`.client`: the Python client (sync and async); :mod:`.adapters`: trainers' reward hooks.

Imports point one way: the client and adapters import nothing of pkb_ray but each other (a trainer
installs them without Ray's weight); the engine imports the pipeline's stages, never the reverse.

May import: spec, results, generate, pipeline, problem.
"""
