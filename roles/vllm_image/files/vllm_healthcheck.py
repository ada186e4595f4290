"""Docker HEALTHCHECK for the vLLM server: GET /health on 127.0.0.1 (standard library only).

Port from FLEET_HEALTH_PORT (default 8000): the deploy role sets it to the port it passes to `vllm serve`.
Exit 0 when /health answers 200, 1 otherwise (vLLM answers 503 once the engine is dead).
"""

import os
import sys
import urllib.request

port = os.environ.get("FLEET_HEALTH_PORT", "8000")
host = os.environ.get("FLEET_HEALTH_HOST", "127.0.0.1")
try:
    with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=4) as response:
        sys.exit(0 if response.status == 200 else 1)
except Exception as exc:  # any failure means unhealthy
    print(f"unhealthy: {exc}", file=sys.stderr)
    sys.exit(1)
