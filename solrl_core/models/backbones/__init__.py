"""Backbone adapters: one per model family, one training loop for all."""
