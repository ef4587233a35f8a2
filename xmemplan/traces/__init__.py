"""Trace readers: each turns one format into the canonical request table (`schema`)."""
