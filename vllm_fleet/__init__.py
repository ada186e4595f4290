"""vllm-fleet: the console side of the planner (the core lives in plugins/plugin_utils/planner)."""
