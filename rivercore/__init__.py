"""RiverCore: the reasoning loop and its values, plain Python (docs/engine.md).

litellm downloads its model price map when first imported unless told not to; the
core uses the copy litellm ships with, whoever imports it (River's settings say the
same), so importing the core never reaches the network."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
