"""RiverCore: the reasoning loop and its values, plain Python (docs/engine.md).

Two litellm defaults are changed for whoever imports the core (River's settings say
the same), each still overridable from the environment:

- litellm downloads its model price map when first imported unless told not to; the
  core uses the copy litellm ships with, so importing the core never reaches the network;
- OpenAI-compatible models are called through litellm's own HTTP handler rather than
  the OpenAI SDK, whose request transform walks every message and tool schema of every
  call: measured on River's scripted runs, litellm's CPU per call halves (9.5 → 5.1 ms,
  docs/benchmarks.md). ``EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER=false`` brings the
  SDK path back."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "true")
