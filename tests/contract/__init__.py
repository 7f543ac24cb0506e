"""Wire-format contract tests, run against the engine twin and a real vLLM alike."""
