"""Capture: TorchDynamo hands thunder FX graphs; this package imports them into core traces."""
