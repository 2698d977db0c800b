"""Dashboard: where a fleet's accelerator time goes, per job and for the fleet."""
