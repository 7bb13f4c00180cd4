"""Replayers: rebuild a captured stream with any worker count."""
