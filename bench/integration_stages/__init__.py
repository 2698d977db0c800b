"""The stages of ``python -m bench.integrations``: one module per adapter it measures."""
