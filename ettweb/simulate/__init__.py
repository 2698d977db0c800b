"""A simulated fleet: months of schema-v1 events with staged optimization rollouts.

``fleet`` draws it (pure Python), ``store`` writes it through the import path and removes it
again, ``manage.py simulate_fleet`` is the command line.
"""
